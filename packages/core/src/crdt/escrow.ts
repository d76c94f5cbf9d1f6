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
export class Escrow {
  private readonly R = new Map<string, Map<string, number>>()
  private readonly U = new Map<string, number>()
  /** Derived from R and U, kept in step for O(1) checks. */
  private readonly rights = new Map<string, number>()
  /** Σ R[i][i] − Σ U[i] over replicas other than the pool: gains less spends. */
  private netGain = 0

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
    this.recompute()
  }

  /** An independent copy. */
  copy(): Escrow {
    const c = new Escrow(0)
    c.load(this.snapshot())
    return c
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
    return { R, U }
  }

  /** Replaces the state with a `snapshot()` (trusted input). */
  load(snap: EscrowSnapshot): void {
    this.R.clear()
    this.U.clear()
    for (const [from, to, n] of snap.R) this.setCell(from, to, n)
    for (const [replica, n] of snap.U) this.U.set(replica, n)
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
    this.netGain = 0
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

/** An escrow's canonical form (see Escrow.snapshot). */
export interface EscrowSnapshot {
  /** The rights matrix: gains on the diagonal, transfers and claims elsewhere. */
  R: Array<[string, string, number]>
  /** Spends per replica. */
  U: Array<[string, number]>
}

/**
 * The replica that holds the initial rights. Nobody signs as '*': rights
 * leave it only through `claim`, which the SDK sends as a safe update so the
 * stable order decides which claims fit.
 */
export const POOL = '*'
