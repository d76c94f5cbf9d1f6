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
 *
 * A missing digest is asked for on at most `maxAsks` ticks (the caller asks
 * a different peer each tick), then given up: a Byzantine relay can name
 * ancestors that do not exist, and an idle cluster would otherwise ask for
 * them forever. A given-up block stays parked; it goes in if its ancestor
 * arrives after all, and is dropped once the GC round passes it. A new
 * block waiting for the same digest makes it worth asking for again, and a
 * relay that has work and is stuck asks for the given-up ones too (each
 * time it acts on being stuck, with its backoff): messages lost while it
 * was cut off must not leave it waiting for good.
 */
export class Synchronizer {
  private readonly waiting = new Map<string, Waiting>()
  /** missing digest → digests of the parked blocks waiting for it */
  private readonly waitingOn = new Map<string, Set<string>>()
  private readonly bySender = new Map<number, number>()
  /** Digests asked for since the last tick: asked once per tick. */
  private readonly requested = new Set<string>()
  /** missing digest → ticks it was asked for since a block last started waiting for it */
  private readonly asks = new Map<string, number>()
  private readonly perSender: number
  private readonly maxAsks: number

  constructor(n: number, maxParked: number, maxAsks = 2 * Math.max(1, n - 1)) {
    this.perSender = Math.max(1, Math.ceil(maxParked / n))
    this.maxAsks = maxAsks
  }

  get size(): number {
    return this.waiting.size
  }

  /** Whether some missing digest is still worth asking for (a reason to keep a sync timer). */
  get fetching(): boolean {
    for (const d of this.waitingOn.keys()) if (!this.waiting.has(d) && (this.asks.get(d) ?? 0) < this.maxAsks) return true
    return false
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
      this.asks.set(m.digestHex, 0)
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
    this.asks.delete(digestHex)
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
    this.asks.delete(digestHex)
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
      if (waiters.size === 0) {
        this.waitingOn.delete(d)
        this.asks.delete(d)
      }
    }
    return ready
  }

  /**
   * Missing digests nobody is parked on as a block and not yet given up
   * (with `retry`, given-up ones too): what to ask for again this tick
   * (bounded). Each one returned counts as one ask.
   */
  frontier(limit: number, retry = false): string[] {
    const out: string[] = []
    for (const d of this.waitingOn.keys()) {
      if (out.length >= limit) break
      const asked = this.asks.get(d) ?? 0
      if (this.waiting.has(d) || (asked >= this.maxAsks && !retry)) continue
      this.asks.set(d, asked + 1)
      out.push(d)
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
