import type { Block } from './messages.ts'
import type { Ref } from './dag.ts'

interface Waiting {
  readonly from: number
  readonly block: Block
  /** Missing ancestor digest → its round (so the GC can release what waits on old ones). */
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
  private readonly perSender: number

  constructor(n: number, maxParked: number) {
    this.perSender = Math.max(1, Math.ceil(maxParked / n))
  }

  get size(): number {
    return this.waiting.size
  }

  isParked(digestHex: string): boolean {
    return this.waiting.has(digestHex)
  }

  /**
   * Parks `block` until `missing` arrive. Returns the digests worth asking
   * `from` for now (not parked themselves, not asked this tick), or 'full'
   * when the sender already has its share of parked blocks.
   */
  park(from: number, block: Block, missing: readonly Ref[]): string[] | 'full' {
    if (this.waiting.has(block.digestHex)) return []
    const mine = (this.bySender.get(from) ?? 0) + 1
    if (mine > this.perSender) return 'full'
    this.bySender.set(from, mine)
    this.waiting.set(block.digestHex, { from, block, missing: new Map(missing.map((m) => [m.digestHex, m.round])) })
    const fetch: string[] = []
    for (const m of missing) {
      let waiters = this.waitingOn.get(m.digestHex)
      if (!waiters) this.waitingOn.set(m.digestHex, (waiters = new Set()))
      waiters.add(block.digestHex)
      if (!this.waiting.has(m.digestHex) && !this.requested.has(m.digestHex)) {
        this.requested.add(m.digestHex)
        fetch.push(m.digestHex)
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
   * `digestHex` was refused: the parked blocks waiting for it can never be
   * accepted. Returns them (unparked); the caller refuses them in turn.
   */
  refused(digestHex: string): Block[] {
    const waiters = this.waitingOn.get(digestHex)
    this.waitingOn.delete(digestHex)
    const gone: Block[] = []
    for (const key of waiters ?? []) {
      const w = this.waiting.get(key)
      if (!w) continue
      this.unpark(key, w.from)
      gone.push(w.block)
    }
    return gone
  }

  /**
   * `author` says it holds no block `digestHex`, and keeps blocks from
   * round `keptFrom` on: its own parked blocks that name that digest at or
   * above `keptFrom` cannot be complete now (a correct relay keeps every
   * ancestor of its blocks; see RelayStore.write), and are dropped, with
   * the parked blocks that wait on them, unless one of those is another
   * relay's: that relay vouches for the chain (a correct relay only builds
   * on blocks it holds whole), so it stays and its ancestors are fetched
   * from others. Dropped, not refused: the word of one relay is not
   * something every correct relay hears, so nothing is decided on it; a
   * block dropped here that turns up again is taken like any other.
   * Returns the dropped blocks.
   */
  disowned(digestHex: string, author: number, keptFrom: number): Block[] {
    const dropped: Block[] = []
    for (const key of [...(this.waitingOn.get(digestHex) ?? [])]) {
      const w = this.waiting.get(key)
      const round = w?.missing.get(digestHex)
      if (!w || round === undefined || w.block.header.author !== author || round < keptFrom) continue
      const chain = this.waitersOf(key)
      if (chain.some((k) => this.waiting.get(k)?.block.header.author !== author)) continue
      for (const k of chain) {
        const x = this.waiting.get(k)
        if (!x) continue
        this.unpark(k, x.from)
        dropped.push(x.block)
      }
    }
    if (dropped.length) {
      for (const [d, waiters] of this.waitingOn) {
        for (const k of waiters) if (!this.waiting.has(k)) waiters.delete(k)
        if (waiters.size === 0) this.waitingOn.delete(d)
      }
    }
    return dropped
  }

  /** The parked block `key` and every parked block waiting on it, directly or not. */
  private waitersOf(key: string): string[] {
    const seen = new Set([key])
    const todo = [key]
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
    for (const [d, waiters] of this.waitingOn) {
      for (const key of waiters) if (!this.waiting.has(key)) waiters.delete(key)
      if (waiters.size === 0) this.waitingOn.delete(d)
    }
    return ready
  }

  /** Missing digests nobody is parked on as a block: what to ask for again (bounded). */
  frontier(limit: number): string[] {
    const out: string[] = []
    for (const d of this.waitingOn.keys()) {
      if (out.length >= limit) break
      if (!this.waiting.has(d)) out.push(d)
    }
    return out
  }

  /** A new tick: everything may be asked for again (requests and answers can be lost). */
  tick(): void {
    this.requested.clear()
  }

  private unpark(key: string, from: number): void {
    this.waiting.delete(key)
    const left = (this.bySender.get(from) ?? 1) - 1
    if (left > 0) this.bySender.set(from, left)
    else this.bySender.delete(from)
  }
}
