import type { Envelope, HostClock, HostTimer } from '@stead/core'
import type { PeerSource } from '../peers/peers.ts'

/** How many envelopes refused for a bad clock are remembered. */
const MAX_BAD_CLOCKS = 4096

/** An envelope held back until its deps are here. */
export interface Held {
  readonly env: Envelope
  readonly frame: Uint8Array
  /** The peer it came from, when a peer sent it (not a relay). */
  readonly source?: PeerSource | undefined
}

interface Entry extends Held {
  readonly missing: Set<string>
  readonly since: number
}

/**
 * Causal delivery of other authors' envelopes (Merkle-CRDTs, Chrono): an
 * envelope is shown only after the envelopes it names as deps. One whose
 * deps are not here yet waits, at most `maxWaitMs` (a dep may never come:
 * its author may be Byzantine, or it may only arrive inside a commit) and
 * at most `maxHeld` at once, oldest let go first. Pure bookkeeping: the
 * caller says what arrived and when, and applies what comes out.
 */
export class CausalBuffer {
  private readonly held = new Map<string, Entry>()
  /** dep id → ids of the held envelopes waiting for it. */
  private readonly waiters = new Map<string, Set<string>>()
  private readonly maxWaitMs: number
  private readonly maxHeld: number
  /** Envelopes from peers refused for a bad clock (the latest MAX_BAD_CLOCKS): not asked for or checked again. */
  private readonly badClocks = new Set<string>()
  /** Fires when the earliest wait runs out (one at a time). */
  private expiry: HostTimer | undefined

  constructor(maxWaitMs = 1000, maxHeld = 1024) {
    this.maxWaitMs = maxWaitMs
    this.maxHeld = maxHeld
  }

  /** Calls `expire` once the earliest wait runs out, unless a call is already due (see `expired`). */
  armExpiry(clock: HostClock, expire: () => void): void {
    const deadline = this.nextDeadline()
    if (this.expiry || deadline === undefined) return
    this.expiry = clock.setTimer(Math.max(0, deadline - clock.now()), () => {
      this.expiry = undefined
      expire()
    })
  }

  /** Cancels the expiry call armed, if any. */
  disarm(): void {
    this.expiry?.cancel()
    this.expiry = undefined
  }

  get size(): number {
    return this.held.size
  }

  /** Remembers that a peer's envelope was refused for its clock. */
  refuseClock(idHex: string): void {
    this.badClocks.add(idHex)
    if (this.badClocks.size > MAX_BAD_CLOCKS) this.badClocks.delete(this.badClocks.values().next().value as string)
  }

  /** Whether an envelope was refused for its clock (lately). */
  badClock(idHex: string): boolean {
    return this.badClocks.has(idHex)
  }

  has(idHex: string): boolean {
    return this.held.has(idHex)
  }

  /** Holds `env` until every id in `missing` arrived; returns what had to be let go to make room. */
  hold(env: Envelope, frame: Uint8Array, missing: readonly string[], now: number, source?: PeerSource): Held[] {
    const out: Held[] = []
    if (this.held.size >= this.maxHeld) out.push(this.release(this.held.keys().next().value as string))
    this.held.set(env.idHex, { env, frame, source, missing: new Set(missing), since: now })
    for (const d of missing) {
      let w = this.waiters.get(d)
      if (!w) this.waiters.set(d, (w = new Set()))
      w.add(env.idHex)
    }
    return out
  }

  /** `idHex` was applied (received or committed): the envelopes that waited only for it. */
  arrived(idHex: string): Held[] {
    const w = this.waiters.get(idHex)
    if (!w) return []
    this.waiters.delete(idHex)
    const out: Held[] = []
    for (const id of w) {
      const e = this.held.get(id)
      if (!e) continue
      e.missing.delete(idHex)
      if (e.missing.size === 0) out.push(this.release(id))
    }
    return out
  }

  /** The stable index reached `index`: the envelopes that waited only for a base up to it (see `baseKey`). */
  reachedBase(index: number): Held[] {
    const out: Held[] = []
    for (const key of [...this.waiters.keys()]) if (key.startsWith('@') && Number(key.slice(1)) <= index) out.push(...this.arrived(key))
    return out
  }

  /** The envelope ids held envelopes wait for (not their bases). */
  awaited(): string[] {
    return [...this.waiters.keys()].filter((key) => !key.startsWith('@'))
  }

  /** Forgets a held envelope (it was decided: the commit applied what it had to). */
  drop(idHex: string): void {
    if (this.held.has(idHex)) this.release(idHex)
  }

  /** The envelopes that waited `maxWaitMs` or more: shown without their missing deps. */
  expired(now: number): Held[] {
    const out: Held[] = []
    for (const [id, e] of this.held) if (now - e.since >= this.maxWaitMs) out.push(this.release(id))
    return out
  }

  /** When the oldest held envelope's wait runs out; undefined when none is held. */
  nextDeadline(): number | undefined {
    let first: number | undefined
    for (const e of this.held.values()) first = first === undefined ? e.since : Math.min(first, e.since)
    return first === undefined ? undefined : first + this.maxWaitMs
  }

  private release(id: string): Held {
    const e = this.held.get(id) as Entry
    this.held.delete(id)
    for (const d of e.missing) {
      const w = this.waiters.get(d)
      w?.delete(id)
      if (w?.size === 0) this.waiters.delete(d)
    }
    return { env: e.env, frame: e.frame, source: e.source }
  }
}

/** What an envelope whose base is ahead of the replica's stable index waits for, beside its deps. */
export function baseKey(base: number): string {
  return `@${base}`
}
