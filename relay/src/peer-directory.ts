import { MAX_PEERS_PER_MESSAGE } from '@stead/core'

/** Most addresses in the answer to an announcement. */
const REPLY_ADDRS = Math.min(128, MAX_PEERS_PER_MESSAGE)

/**
 * Where the clients of each space can be reached for peer-to-peer sync:
 * what they announced over their sessions. A client that announces hears
 * where the space's other announcing clients are, and they hear of it, so
 * clients find each other through any relay they share. Only sessions that
 * follow a space may announce for it (the caller checks), and each space
 * keeps its latest `maxPerSpace` announcers, so the directory stays within
 * sessions × subscriptions × that.
 */
export class PeerDirectory<S> {
  private readonly spaces = new Map<string, Map<S, readonly string[]>>()
  private readonly maxPerSpace: number
  private readonly tell: (to: S, space: string, addrs: string[]) => void

  constructor(maxPerSpace: number, tell: (to: S, space: string, addrs: string[]) => void) {
    this.maxPerSpace = maxPerSpace
    this.tell = tell
  }

  /** `session` can be reached at `addrs` for `space` (none: it withdraws). */
  announce(space: string, session: S, addrs: readonly string[]): void {
    if (addrs.length === 0) return this.withdraw(space, session)
    let known = this.spaces.get(space)
    if (!known) this.spaces.set(space, (known = new Map()))
    known.delete(session)
    // The longest-known announcer makes room: a client that is still there announces again when it reconnects.
    if (known.size >= this.maxPerSpace) known.delete(known.keys().next().value as S)
    known.set(session, addrs)
    const others: string[] = []
    for (const [s, a] of known) {
      if (s === session) continue
      this.tell(s, space, [...addrs])
      others.push(...a)
    }
    // The newest announcers: a reply stays small however often a client announces.
    if (others.length) this.tell(session, space, others.slice(-REPLY_ADDRS))
  }

  /** `session` no longer takes part in `space` (it unsubscribed or withdrew). */
  withdraw(space: string, session: S): void {
    const known = this.spaces.get(space)
    if (!known?.delete(session)) return
    if (known.size === 0) this.spaces.delete(space)
  }

  /** How many announcers a space has (for tests and metrics). */
  size(space: string): number {
    return this.spaces.get(space)?.size ?? 0
  }
}
