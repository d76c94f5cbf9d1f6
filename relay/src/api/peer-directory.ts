import { MAX_PEERS_PER_MESSAGE, SteadError } from '@stead/core'
import { Bucket } from '../runtime/bucket.ts'

/** Most addresses in the answer to an announcement. */
const REPLY_ADDRS = Math.min(128, MAX_PEERS_PER_MESSAGE)
/** What a `peers` message costs beyond its addresses (type, space, framing), for the byte budget. */
const MESSAGE_OVERHEAD = 64

/** Limits of a {@link PeerDirectory}; see DEFAULT_PEER_DIRECTORY_LIMITS and relay/README.md, "Security model". */
export interface PeerDirectoryLimits {
  /** Announcers a space keeps at once. */
  readonly perSpace: number
  /** Of those, how many one client key may hold (its sessions on this relay). */
  readonly perKey: number
  /** Of those, how many one remote address may hold (an IPv6 one by its /64). */
  readonly perAddress: number
  /** An announcement whose session neither renews it nor pings for this long is forgotten. */
  readonly ttlMs: number
  /** Bytes of peer addresses a session is sent per second, and at once: what is over is not sent (they are hints). */
  readonly bytesPerSecond: number
  readonly burstBytes: number
}

export const DEFAULT_PEER_DIRECTORY_LIMITS: PeerDirectoryLimits = {
  perSpace: 64,
  perKey: 4,
  perAddress: 16,
  ttlMs: 10 * 60_000,
  bytesPerSecond: 16 * 1024,
  burstBytes: 64 * 1024,
}

/** Who announced: its client key and remote address (the shares are counted by these). */
export interface Announcer {
  readonly key: string
  readonly address: string
}

interface Entry<S> {
  readonly session: S
  readonly who: Announcer
  readonly addrs: readonly string[]
  expires: number
}

/**
 * Where the clients of each space can be reached for peer-to-peer sync:
 * what they announced over their sessions. A client that announces hears
 * where the space's other announcing clients are, and they hear of it, so
 * clients find each other through any relay they share. Only sessions that
 * follow a space may announce for it (the caller checks).
 *
 * A space keeps at most `perSpace` announcers, of which one key holds at
 * most `perKey` and one address `perAddress` (past it: `rate-limited`);
 * when a space is full, the address holding the most entries gives up one
 * (see evict), so a flood pushes out its own entries, not honest ones.
 * Entries expire `ttlMs` after their session last announced or pinged
 * (a session's close withdraws them at once). What the relay
 * tells each session about peers is held to a byte rate: a flood of
 * announcements cannot flood the space's other clients.
 */
export class PeerDirectory<S extends object> {
  private readonly spaces = new Map<string, Map<S, Entry<S>>>()
  private readonly limits: PeerDirectoryLimits
  private readonly tell: (to: S, space: string, addrs: string[]) => void
  private readonly now: () => number
  /** The byte budget of what each session is told (dropped with the session). */
  private readonly budgets = new WeakMap<S, Bucket>()
  /** The spaces each session announced for (see renew). */
  private readonly announced = new WeakMap<S, Set<string>>()
  /** `peers` messages not sent for the recipient's byte budget (for tests and metrics). */
  dropped = 0

  constructor(limits: Partial<PeerDirectoryLimits>, tell: (to: S, space: string, addrs: string[]) => void, now: () => number = Date.now) {
    this.limits = { ...DEFAULT_PEER_DIRECTORY_LIMITS, ...limits }
    this.tell = tell
    this.now = now
  }

  /**
   * `session` (announced by `who`) can be reached at `addrs` for `space`
   * (none: it withdraws). Throws `rate-limited` past the key's or the
   * address's share of the space.
   */
  announce(space: string, session: S, who: Announcer, addrs: readonly string[]): void {
    if (addrs.length === 0) return this.withdraw(space, session)
    const now = this.now()
    let known = this.spaces.get(space)
    if (!known) this.spaces.set(space, (known = new Map()))
    this.expire(known, now)
    const had = known.get(session)
    const same = had !== undefined && had.addrs.length === addrs.length && had.addrs.every((a, i) => a === addrs[i])
    if (!had) {
      let byKey = 0
      let byAddress = 0
      for (const e of known.values()) {
        if (e.who.key === who.key) byKey++
        if (e.who.address === who.address) byAddress++
      }
      if (byKey >= this.limits.perKey) throw new SteadError('rate-limited', `key ${who.key} already announces ${byKey} sessions for space ${space}, the most one key may`)
      if (byAddress >= this.limits.perAddress) throw new SteadError('rate-limited', `${byAddress} clients from ${who.address} already announce for space ${space}, the most one address may`)
      if (known.size >= this.limits.perSpace) this.evict(known)
    }
    known.delete(session)
    known.set(session, { session, who, addrs: [...addrs], expires: now + this.limits.ttlMs })
    let spaces = this.announced.get(session)
    if (!spaces) this.announced.set(session, (spaces = new Set()))
    spaces.add(space)
    const others: Array<readonly string[]> = []
    for (const [s, e] of known) {
      if (s === session) continue
      // A renewal that changes nothing is not news to the others.
      if (!same) this.send(s, space, [...addrs])
      others.push(e.addrs)
    }
    // The reply is small however many addresses the others hold: each other announcer's first address, then
    // their second, and so on, newest first, so announcers with many addresses cannot crowd the others out.
    const reply: string[] = []
    others.reverse()
    for (let i = 0; reply.length < REPLY_ADDRS && others.some((a) => a.length > i); i++) {
      for (const a of others) if (i < a.length && reply.length < REPLY_ADDRS) reply.push(a[i] as string)
    }
    if (reply.length) this.send(session, space, reply)
  }

  /** `session` is still there (it pinged): its announcements do not expire yet. */
  renew(session: S): void {
    const spaces = this.announced.get(session)
    if (!spaces) return
    const expires = this.now() + this.limits.ttlMs
    for (const space of spaces) {
      const e = this.spaces.get(space)?.get(session)
      if (e) e.expires = expires
      else spaces.delete(space)
    }
  }

  /** `session` no longer takes part in `space` (it unsubscribed or withdrew). */
  withdraw(space: string, session: S): void {
    const known = this.spaces.get(space)
    this.announced.get(session)?.delete(space)
    if (!known?.delete(session)) return
    if (known.size === 0) this.spaces.delete(space)
  }

  /** How many announcers a space has (for tests and metrics). */
  size(space: string): number {
    const known = this.spaces.get(space)
    if (!known) return 0
    this.expire(known, this.now())
    return known.size
  }

  /**
   * The space is full: the address holding the most entries gives up its
   * oldest; among addresses holding as many, the one that came last (so
   * when every address holds one, the newest announcer goes, and clients
   * already known stay known however many addresses a flood comes from).
   */
  private evict(known: Map<S, Entry<S>>): void {
    const held = new Map<string, number>()
    let top: string | undefined
    for (const e of known.values()) {
      const n = (held.get(e.who.address) ?? 0) + 1
      held.set(e.who.address, n)
      if (top === undefined || n >= (held.get(top) ?? 0)) top = e.who.address
    }
    for (const [s, e] of known) {
      if (e.who.address !== top) continue
      known.delete(s)
      return
    }
  }

  private expire(known: Map<S, Entry<S>>, now: number): void {
    for (const [s, e] of known) if (e.expires <= now) known.delete(s)
  }

  /** Tells `to` about `addrs` within its byte budget; what does not fit is dropped. */
  private send(to: S, space: string, addrs: string[]): void {
    let budget = this.budgets.get(to)
    if (!budget) {
      budget = new Bucket({ perSecond: Number.MAX_SAFE_INTEGER, burst: Number.MAX_SAFE_INTEGER, bytesPerSecond: this.limits.bytesPerSecond, burstBytes: this.limits.burstBytes }, this.now)
      this.budgets.set(to, budget)
    }
    let bytes = MESSAGE_OVERHEAD + space.length
    for (const a of addrs) bytes += a.length + 2
    if (budget.wait(bytes) > 0 || bytes > this.limits.burstBytes) {
      this.dropped++
      return
    }
    budget.take(bytes)
    this.tell(to, space, addrs)
  }
}
