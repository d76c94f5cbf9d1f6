import type { Block } from './messages.ts'
import { assert, type Ref } from './dag.ts'

/** Key of a reference only the GC round can meet: never fetched, never arrives. */
const GC_ONLY = 'gc:'
const gcOnly = (digestHex: string, round: number): string => `${GC_ONLY}${round}:${digestHex}`

interface Waiting {
  readonly from: number
  readonly block: Block
  /** Missing ancestor digest (or gcOnly key) → its round (so the GC can release what waits on old ones). */
  readonly missing: Map<string, number>
}

/**
 * Blocks whose ancestors have not all arrived: parked until they do (or
 * until the missing ones fall below the GC round and stop mattering), with
 * the digests to fetch. Bounded per sending relay, so one relay's flood
 * cannot crowd out the others' blocks.
 */
export class Synchronizer {
  private readonly waiting = new Map<string, Waiting>()
  /** missing digest → digests of the parked blocks waiting for it */
  private readonly waitingOn = new Map<string, Set<string>>()
  private readonly bySender = new Map<number, number>()
  /** Digests asked for since the last tick: asked once per tick. */
  private readonly requested = new Set<string>()
  /** Per peer, the digests fetched from it and not answered with `unknown` yet. */
  private readonly askedOf = new Map<number, Set<string>>()
  private readonly perSender: number

  constructor(n: number, maxParked: number) {
    this.perSender = Math.max(1, Math.ceil(maxParked / n))
  }

  get size(): number {
    return this.waiting.size
  }

  /** For checkInvariants: the parked blocks, and how many each sending relay has parked (its share of the bound). */
  *parked(): IterableIterator<Block> {
    for (const w of this.waiting.values()) yield w.block
  }

  get parkedBySender(): ReadonlyMap<number, number> {
    return this.bySender
  }

  /** Parked blocks one sending relay may have at most. */
  get perSenderLimit(): number {
    return this.perSender
  }

  isParked(digestHex: string): boolean {
    return this.waiting.has(digestHex)
  }

  /** The parked block of `author` with the highest round, if any (its signature was checked before it was parked). */
  latestOf(author: number): Block | null {
    let latest: Block | null = null
    for (const { block } of this.waiting.values()) {
      if (block.header.author === author && (!latest || block.header.round > latest.header.round)) latest = block
    }
    return latest
  }

  /**
   * Parks `block` until `missing` are met. Returns the digests worth asking
   * `from` for now (fetchable, not parked themselves, not asked this tick),
   * or 'full' when the sender already has its share of parked blocks. A
   * reference that is not fetchable (a refused block, a held block under
   * another slot, genesis above round 0) can only be met by the GC round
   * passing it (see collect).
   */
  park(from: number, block: Block, missing: ReadonlyArray<{ readonly ref: Ref; readonly fetch: boolean }>): string[] | 'full' {
    if (this.waiting.has(block.digestHex)) return []
    const mine = (this.bySender.get(from) ?? 0) + 1
    if (mine > this.perSender) return 'full'
    this.bySender.set(from, mine)
    const keyed = missing.map(({ ref, fetch }) => ({ key: fetch ? ref.digestHex : gcOnly(ref.digestHex, ref.round), round: ref.round, fetch }))
    this.waiting.set(block.digestHex, { from, block, missing: new Map(keyed.map((m) => [m.key, m.round])) })
    const fetch: string[] = []
    for (const m of keyed) {
      let waiters = this.waitingOn.get(m.key)
      if (!waiters) this.waitingOn.set(m.key, (waiters = new Set()))
      waiters.add(block.digestHex)
      if (m.fetch && !this.waiting.has(m.key) && !this.requested.has(m.key)) {
        this.requested.add(m.key)
        fetch.push(m.key)
      }
    }
    return fetch
  }

  /** `digestHex` is now in the DAG (or settled): the parked blocks that waited only for it, to accept. */
  arrived(digestHex: string): Array<{ from: number; block: Block }> {
    const waiters = this.waitingOn.get(digestHex)
    this.waitingOn.delete(digestHex)
    const ready: Array<{ from: number; block: Block }> = []
    for (const key of waiters ?? []) {
      const w = this.waiting.get(key)
      if (!w || !w.missing.delete(digestHex) || w.missing.size > 0) continue
      this.unpark(key, w.from)
      ready.push({ from: w.from, block: w.block })
    }
    return ready
  }

  /**
   * `digestHex` was refused: it will never arrive. The parked blocks waiting
   * for it stay parked, without asking for it again, until the GC round
   * passes its round (see collect).
   */
  unfetchable(digestHex: string): void {
    const waiters = this.waitingOn.get(digestHex)
    this.waitingOn.delete(digestHex)
    for (const key of waiters ?? []) {
      const w = this.waiting.get(key)
      const round = w?.missing.get(digestHex)
      if (!w || round === undefined) continue
      w.missing.delete(digestHex)
      const dead = gcOnly(digestHex, round)
      w.missing.set(dead, round)
      let set = this.waitingOn.get(dead)
      if (!set) this.waitingOn.set(dead, (set = new Set()))
      set.add(key)
    }
  }

  /** Fetches of these digests went to `peer`: an `unknown` answer from it counts for them (see disowned). */
  asked(peer: number, digests: readonly string[]): void {
    let set = this.askedOf.get(peer)
    if (!set) this.askedOf.set(peer, (set = new Set()))
    for (const d of digests) set.add(d)
    // Bounded like what is parked: asks whose digests are no longer missing are forgotten.
    if (set.size > 4 * this.waitingOn.size + 1000) for (const d of set) if (!this.waitingOn.has(d)) set.delete(d)
  }

  /**
   * `author`, asked for block `digestHex`, says it holds none, and keeps
   * blocks from round `keptFrom` on: its own parked blocks that name that
   * digest at or above `keptFrom` cannot be complete now (a correct relay
   * keeps every ancestor of its blocks; see RelayStore.write), and are
   * dropped with the parked blocks waiting on them, unless one of those is
   * another relay's: that relay vouches for the chain (a correct relay only
   * builds on blocks it holds whole), so it stays and its ancestors are
   * fetched from others. Dropped, not refused: one relay's word is not
   * something every correct relay hears, so nothing is decided on it; a
   * dropped block that turns up again is taken like any other. An answer
   * to nothing asked is ignored. Returns the dropped blocks.
   */
  disowned(digestHex: string, author: number, keptFrom: number): Block[] {
    if (!this.askedOf.get(author)?.delete(digestHex)) return []
    // The author's own blocks naming the digest at a round it keeps (two Byzantine relays may
    // name the same missing digest: each one's word counts for its own blocks only).
    const direct = [...(this.waitingOn.get(digestHex) ?? [])].filter((k) => {
      const w = this.waiting.get(k)
      const round = w?.missing.get(digestHex)
      return w !== undefined && round !== undefined && w.block.header.author === author && round >= keptFrom
    })
    if (direct.length === 0) return []
    const own = (keys: readonly string[]) => keys.every((k) => this.waiting.get(k)?.block.header.author === author)
    // Usually all of it is the author's: one walk. Otherwise each of its blocks on its own.
    const all = this.waitersOf(direct)
    const chains = own(all) ? [all] : direct.map((k) => this.waitersOf([k])).filter(own)
    const dropped: Block[] = []
    for (const chain of chains) {
      for (const k of chain) {
        const w = this.waiting.get(k)
        if (!w) continue
        this.unpark(k, w.from)
        dropped.push(w.block)
      }
    }
    // What waited on the dropped blocks is dropped with them; what they waited on may now wait for nobody.
    if (dropped.length) this.forgetUnparked()
    return dropped
  }

  /** Forgets waiters that are no longer parked, and missing digests nobody waits for any more. */
  private forgetUnparked(): void {
    for (const [d, waiters] of this.waitingOn) {
      for (const key of waiters) if (!this.waiting.has(key)) waiters.delete(key)
      if (waiters.size === 0) this.waitingOn.delete(d)
    }
  }

  /** The parked blocks `keys` and every parked block waiting on them, directly or not. */
  private waitersOf(keys: readonly string[]): string[] {
    const seen = new Set(keys)
    const todo = [...keys]
    while (todo.length) {
      for (const w of this.waitingOn.get(todo.pop() as string) ?? []) {
        if (seen.has(w) || !this.waiting.has(w)) continue
        seen.add(w)
        todo.push(w)
      }
    }
    return [...seen]
  }

  /**
   * The GC round moved: parked blocks at or below it are dropped, and
   * missing ancestors at or below it are given up (a block needs only the
   * ancestors above the GC round). Returns the blocks that no longer wait.
   */
  collect(gcRound: number): Array<{ from: number; block: Block }> {
    const ready: Array<{ from: number; block: Block }> = []
    for (const [key, w] of this.waiting) {
      if (w.block.header.round <= gcRound) {
        this.unpark(key, w.from)
        continue
      }
      for (const [d, round] of w.missing) if (round <= gcRound) w.missing.delete(d)
      if (w.missing.size === 0) {
        this.unpark(key, w.from)
        ready.push({ from: w.from, block: w.block })
      }
    }
    this.forgetUnparked()
    return ready
  }

  /** Missing digests nobody is parked on as a block: what to ask for again (bounded). */
  frontier(limit: number): string[] {
    const out: string[] = []
    for (const d of this.waitingOn.keys()) {
      if (out.length >= limit) break
      if (!this.waiting.has(d) && !d.startsWith(GC_ONLY)) out.push(d)
    }
    return out
  }

  /** A new tick: everything may be asked for again (requests and answers can be lost). */
  tick(): void {
    this.requested.clear()
  }

  private unpark(key: string, from: number): void {
    assert(this.waiting.delete(key), `block ${key.slice(0, 8)} unparked without being parked`)
    assert(this.bySender.has(from), `relay ${from} had no parked block to unpark`)
    const left = (this.bySender.get(from) ?? 1) - 1
    if (left > 0) this.bySender.set(from, left)
    else this.bySender.delete(from)
  }
}
