/**
 * One set of rights of a Bounded Counter (Balegas et al., SRDS 2015), in
 * the lower-bound orientation: the rights are the distance to one bound,
 * a gain adds to it and a spend consumes it.
 *
 * R[i][i] counts gains by i, R[i][j] rights i gave to j, U[i] spends by i.
 * Replica i's rights are R[i][i] + Σ R[j][i] − Σ R[i][j] − U[i], and the
 * distance to the bound is the sum of all rights. Every row and U entry only
 * grows through its own replica, so merge is an element-wise max.
 *
 * A counter with one bound has one escrow; with both, two that every change
 * moves in opposite directions (a decrement spends rights to decrement and
 * gains rights to increment).
 */
export class Escrow implements EscrowView {
  private readonly R = new Map<string, Map<string, number>>()
  private readonly U = new Map<string, number>()
  /** Each replica's latest ask for rights (see {@link Ask}): one per replica, so the state stays bounded. */
  private readonly asks = new Map<string, Ask>()
  /** Derived from R and U, kept in step for O(1) checks. */
  private readonly rights = new Map<string, number>()
  /** Σ R[i][i] − Σ U[i] over replicas other than the pool, plus `folded`: gains less spends. */
  private netGain = 0
  /** Gains less spends of replicas retired (see retire): their cells are gone, not what they did to the value. */
  private folded = 0

  /** An escrow whose {@link POOL} holds `initial` rights (not a gain: it stays out of `net`). */
  constructor(initial: number) {
    if (initial > 0) this.setCell(POOL, POOL, initial)
    this.rights.set(POOL, initial)
  }

  /** Gains less spends so far: how far the value moved away from this escrow's bound. */
  get net(): number {
    return this.netGain
  }

  /** The rights `replica` holds. */
  rightsOf(replica: string): number {
    return this.rights.get(replica) ?? 0
  }

  /** The rights `from` gave `to` so far (R[from][to]): what an ask names, so each ask is answered once. */
  given(from: string, to: string): number {
    return this.cell(from, to)
  }

  /** What `replica` spent so far. */
  spent(replica: string): number {
    return this.U.get(replica) ?? 0
  }

  /** Every replica's rights, the pool's included, in no particular order. */
  holders(): IterableIterator<[string, number]> {
    return this.rights.entries()
  }

  /** The latest ask of `replica`, if any. */
  askOf(replica: string): Ask | undefined {
    return this.asks.get(replica)
  }

  /** Every replica's latest ask, by replica. */
  allAsks(): IterableIterator<[string, Ask]> {
    return this.asks.entries()
  }

  /** Records `ask` as `me`'s latest (undo: `undo` true takes it back if it is still the latest). */
  setAsk(me: string, ask: Ask, undo = false): void {
    const had = this.asks.get(me)
    if (undo) {
      if (had && had.no === ask.no) this.asks.delete(me)
    } else if (!had || compareAsks(ask, had) > 0) this.asks.set(me, ask)
  }

  /**
   * Takes `replica` out of the escrow for good (a device that left): its
   * rights go to the pool, and its cells go, so the matrix holds only
   * replicas still around. Rights between it and another replica become the
   * pool's (what it gave `j` net of what `j` gave it, as if the pool had);
   * its gains less spends stay in the value. Ordered (a safe update): a
   * merge does not join states on either side of a retirement.
   */
  retire(replica: string): void {
    if (replica === POOL) return
    const gained = this.cell(replica, replica) - (this.U.get(replica) ?? 0)
    // Everyone it gave to or got from: rows that name it, and the columns of its own row.
    const others = new Set([...this.R.keys(), ...(this.R.get(replica)?.keys() ?? [])])
    others.delete(replica)
    for (const other of others) {
      const net = this.cell(replica, other) - this.cell(other, replica)
      this.R.get(other)?.delete(replica)
      if (other === POOL) continue
      if (net > 0) this.setCell(POOL, other, this.cell(POOL, other) + net)
      else if (net < 0) this.setCell(other, POOL, this.cell(other, POOL) - net)
    }
    this.R.delete(replica)
    this.U.delete(replica)
    this.asks.delete(replica)
    // The pool takes the replica's rights: what the removed cells gave it, plus its own gains less spends.
    if (gained !== 0) this.setCell(POOL, POOL, this.cell(POOL, POOL) + gained)
    this.folded += gained
    this.recompute()
  }

  /** Adds `n` (negative: takes back) to the gains of `me`. */
  gain(me: string, n: number): void {
    this.setCell(me, me, this.cell(me, me) + n)
    this.addRights(me, n)
    this.netGain += n
  }

  /** Adds `n` (negative: takes back) to the spends of `me`. */
  spend(me: string, n: number): void {
    this.U.set(me, (this.U.get(me) ?? 0) + n)
    this.addRights(me, -n)
    this.netGain -= n
  }

  /** Moves `n` (negative: back) of the rights of `from` to `to`. */
  move(from: string, to: string, n: number): void {
    this.setCell(from, to, this.cell(from, to) + n)
    this.addRights(from, -n)
    this.addRights(to, n)
  }

  /** Element-wise max with `other`. */
  merge(other: Escrow): void {
    for (const [from, row] of other.R) for (const [to, n] of row) if (n > this.cell(from, to)) this.setCell(from, to, n)
    for (const [replica, n] of other.U) if (n > (this.U.get(replica) ?? 0)) this.U.set(replica, n)
    for (const [replica, ask] of other.asks) this.setAsk(replica, ask)
    this.recompute()
  }

  /** No replica holds negative rights. */
  holds(): boolean {
    for (const n of this.rights.values()) if (n < 0) return false
    return true
  }

  /** { R: [from, to, n][], U: [replica, n][] } sorted: equal escrows give equal snapshots. */
  snapshot(): EscrowSnapshot {
    const R: Array<[string, string, number]> = []
    for (const [from, row] of this.R) for (const [to, n] of row) R.push([from, to, n])
    R.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0))
    const U = [...this.U.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    // Asks and retirements only when there are some, so other states keep the form (and hash) they had before either existed.
    const Q = [...this.asks.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([replica, q]): [string, number, string, number, number] => [replica, q.no, q.from, q.seen, q.n])
    return { R, U, ...(Q.length > 0 ? { Q } : {}), ...(this.folded !== 0 ? { F: this.folded } : {}) }
  }

  /** Replaces the state with a `snapshot()` (trusted input). */
  load(snap: EscrowSnapshot): void {
    this.R.clear()
    this.U.clear()
    for (const [from, to, n] of snap.R) this.setCell(from, to, n)
    for (const [replica, n] of snap.U) this.U.set(replica, n)
    this.asks.clear()
    for (const [replica, no, from, seen, n] of snap.Q ?? []) this.asks.set(replica, { no, from, seen, n })
    this.folded = snap.F ?? 0
    this.recompute()
  }

  private cell(from: string, to: string): number {
    return this.R.get(from)?.get(to) ?? 0
  }

  private setCell(from: string, to: string, n: number): void {
    let row = this.R.get(from)
    if (!row) {
      row = new Map()
      this.R.set(from, row)
    }
    row.set(to, n)
  }

  private addRights(replica: string, n: number): void {
    this.rights.set(replica, (this.rights.get(replica) ?? 0) + n)
  }

  private recompute(): void {
    this.rights.clear()
    this.netGain = this.folded
    for (const [from, row] of this.R) {
      for (const [to, n] of row) {
        if (from === to) {
          this.addRights(from, n)
          // The pool's diagonal is its initial rights, not a gain.
          if (from !== POOL) this.netGain += n
        } else {
          this.addRights(from, -n)
          this.addRights(to, n)
        }
      }
    }
    for (const [replica, n] of this.U) {
      this.addRights(replica, -n)
      this.netGain -= n
    }
  }
}

/** What a client reads of one kind of rights to move them: holdings, what each gave another, asks. */
export interface EscrowView {
  /** The rights `replica` holds. */
  rightsOf(replica: string): number
  /** The rights `from` gave `to` so far. */
  given(from: string, to: string): number
  /** What `replica` spent so far. */
  spent(replica: string): number
  /** Every replica's rights, the pool's included. */
  holders(): IterableIterator<[string, number]>
  /** The latest ask of `replica`. */
  askOf(replica: string): Ask | undefined
  /** Every replica's latest ask. */
  allAsks(): IterableIterator<[string, Ask]>
}

/** An escrow's canonical form (see Escrow.snapshot). */
export interface EscrowSnapshot {
  /** The rights matrix: gains on the diagonal, transfers and claims elsewhere. */
  R: Array<[string, string, number]>
  /** Spends per replica. */
  U: Array<[string, number]>
  /** Asks for rights, [replica, no, from, seen, n], when there are any. */
  Q?: Array<[string, number, string, number, number]>
  /** Gains less spends of retired replicas, when not 0. */
  F?: number
}

/**
 * A replica's ask for rights from another (the paper's transfer request,
 * §IV-D): `n` rights from `from`, which had given the asker `seen` so far.
 * A grant answers it only while `from` has given exactly `seen`, so an ask
 * replayed, or seen through several relays, is answered once.
 */
export interface Ask {
  /** Grows with each ask of the same replica: the latest wins. */
  readonly no: number
  /** The replica asked. */
  readonly from: string
  /** R[from][asker] when it asked. */
  readonly seen: number
  /** How many rights it asked for. */
  readonly n: number
}

/** Orders two asks of one replica: by `no`, then by content, so that merges agree on one. */
function compareAsks(a: Ask, b: Ask): number {
  if (a.no !== b.no) return a.no - b.no
  if (a.from !== b.from) return a.from < b.from ? -1 : 1
  return a.seen !== b.seen ? a.seen - b.seen : a.n - b.n
}

/**
 * The replica that holds the initial rights. Nobody signs as '*': rights
 * leave it only through `claim`, which the SDK sends as a safe update so the
 * stable order decides which claims fit.
 */
export const POOL = '*'
