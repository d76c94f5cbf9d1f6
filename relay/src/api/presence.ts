import { MAX_PRESENCE_STATE_BYTES, SteadError, decodePresence, encodeRelayMessage, type PresenceBody, type Signed } from '@stead/core'
import { Bucket, type Rate } from '../runtime/bucket.ts'

/** Limits of a relay's {@link PresenceRoom}; see DEFAULT_PRESENCE_LIMITS and relay/README.md, "Presence". */
export interface PresenceLimits {
  /** Largest signed presence body a client may publish (its state and a few bytes of framing). */
  readonly maxBodyBytes: number
  /** Authors present in one space at once: past it, a newcomer's presence is refused with `rate-limited`. */
  readonly perSpace: number
  /** What one session may publish in one space: presence messages and their bytes per second, and the bursts allowed. */
  readonly publish: Rate
  /** Spaces one session may be present in (beyond those it follows, which its subscriptions bound). */
  readonly spacesPerSession: number
  /** What one session is sent of others' presence per second, and at once: the rest is dropped (presence is renewed anyway). */
  readonly deliverBytesPerSecond: number
  readonly deliverBurstBytes: number
}

export const DEFAULT_PRESENCE_LIMITS: PresenceLimits = {
  maxBodyBytes: MAX_PRESENCE_STATE_BYTES + 256,
  perSpace: 512,
  // A cursor that follows typing publishes a few times a second; a burst covers a drag.
  publish: { perSecond: 30, burst: 60, bytesPerSecond: 64 * 1024, burstBytes: 256 * 1024 },
  spacesPerSession: 64,
  deliverBytesPerSecond: 512 * 1024,
  deliverBurstBytes: 2 * 1024 * 1024,
}

/** A session as the room sees it: where others' presence is delivered. */
export interface PresenceWatcher {
  /** Sends an encoded `presence` relay message; false if dropped, not queued (a session that is behind). */
  deliverPresence(frame: Uint8Array): boolean
}

/** One author's latest presence in a space, as its session published it. */
interface Present {
  readonly seq: number
  /** The `presence` relay message as every watcher gets it, encoded once. */
  readonly frame: Uint8Array
  /** The author's leave signed ahead, encoded the same way: sent for it when its session goes. */
  readonly leave: Uint8Array | undefined
  readonly expires: number
  readonly bytes: number
}

interface Room<S> {
  /** Sessions that follow the space or published in it: who hears its presence. */
  readonly watchers: Set<S>
  readonly present: Map<S, Present>
}

/**
 * What a relay knows of who is present in each space: the latest signed
 * presence of each session that published one, held in memory only (a
 * restart forgets it, as it should: presence is renewed by its authors),
 * and passed at once to the space's other sessions. A session hears the
 * present ones when it starts watching a space (subscribe or first
 * publish), and their leave when their session closes or unwatches.
 *
 * Checks at the door: the body decodes and names the space, its signature
 * is the session's key's, the leave signed ahead is a real leave of the
 * same author with the next seq, the session stays within its publish
 * rate, the space within its count of authors, and the room within its
 * share of the relay's memory (`reclaim` drops the states that expire
 * first: their authors renew them).
 */
export class PresenceRoom<S extends PresenceWatcher> {
  private readonly rooms = new Map<string, Room<S>>()
  private readonly publishBudgets = new WeakMap<S, Map<string, Bucket>>()
  private readonly deliverBudgets = new WeakMap<S, Bucket>()
  /** The spaces each session watches (see closed). */
  private readonly watching = new WeakMap<S, Set<string>>()
  /** Bytes of stored presence frames (states and their leaves). */
  held = 0
  /** Presence messages not delivered for their recipient's byte budget (for tests and metrics). */
  dropped = 0

  private readonly limits: PresenceLimits
  private readonly now: () => number
  private readonly verify: (key: Uint8Array, bytes: Uint8Array, sig: Uint8Array) => boolean
  private readonly roomFor: () => boolean
  private readonly counted: (result: 'taken' | 'passed' | 'dropped') => void
  constructor(
    limits: Partial<PresenceLimits>,
    o: {
      now: () => number
      verify: (key: Uint8Array, bytes: Uint8Array, sig: Uint8Array) => boolean
      /** Whether the relay's memory budget takes `held` growing (false: refuse with `rate-limited`). */
      admits: (bytes: number) => boolean
      /** Counts a presence message taken from a session, passed on to one, or not passed on (for metrics). */
      counted?: (result: 'taken' | 'passed' | 'dropped') => void
    },
  ) {
    this.limits = { ...DEFAULT_PRESENCE_LIMITS, ...limits }
    this.now = o.now
    this.verify = o.verify
    this.roomFor = () => o.admits(this.limits.maxBodyBytes * 2)
    this.counted = o.counted ?? (() => undefined)
  }

  /** `session` follows `space` now: it hears the presence there (the present ones at once). */
  watch(space: string, session: S): void {
    const room = this.room(space)
    if (room.watchers.has(session)) return
    this.join(room, space, session)
    this.expire(room)
    for (const [s, p] of room.present) if (s !== session) this.deliver(session, p.frame)
  }

  /** `session` no longer follows `space`: its own presence there goes, and the others hear its leave. */
  unwatch(space: string, session: S): void {
    const room = this.rooms.get(space)
    if (!room) return
    room.watchers.delete(session)
    this.watching.get(session)?.delete(space)
    const mine = room.present.get(session)
    if (mine) {
      this.forget(room, session, mine)
      if (mine.leave) for (const w of room.watchers) this.deliver(w, mine.leave)
    }
    if (room.watchers.size === 0 && room.present.size === 0) this.rooms.delete(space)
  }

  /** `session` closed: it leaves every space it watched (see unwatch). */
  closed(session: S): void {
    for (const space of [...(this.watching.get(session) ?? [])]) this.unwatch(space, session)
    this.watching.delete(session)
  }

  /**
   * `session`, authenticated as `author`, publishes its presence in
   * `space` (it may read the space: the caller checked). Passed at once to
   * the space's other watchers; kept for newcomers until it expires.
   *
   * @throws SteadError `malformed` or `too-large` for a body that is not a presence of this space within the limits, `bad-signature` for one the session's key did not sign, `rate-limited` past the session's publish rate, the space's count of authors or the relay's memory.
   */
  publish(space: string, session: S, author: Uint8Array, signed: Signed, leave: Signed | undefined): void {
    const size = signed.bytes.length + (leave?.bytes.length ?? 0)
    // Per space: a client with several editors open publishes in each.
    let budgets = this.publishBudgets.get(session)
    if (!budgets) this.publishBudgets.set(session, (budgets = new Map()))
    let budget = budgets.get(space)
    if (!budget) {
      if (budgets.size >= this.limits.spacesPerSession) budgets.delete(budgets.keys().next().value as string)
      budgets.set(space, (budget = new Bucket(this.limits.publish, this.now)))
    }
    if (budget.wait(size) > 0) throw new SteadError('rate-limited', `presence of this session past ${this.limits.publish.perSecond} messages or ${this.limits.publish.bytesPerSecond} bytes per second; publish less often`)
    budget.take(size)
    const body = this.checked(space, author, signed, 'presence')
    if (body.ahead) throw new SteadError('malformed', 'a leave signed ahead goes with a state, as its `leave`')
    if (body.state === null) {
      // An explicit leave: passed on like a state, then forgotten.
      this.pass(space, session, author, signed, body, undefined, true)
      return
    }
    let leaveBody: PresenceBody | undefined
    if (leave) {
      leaveBody = this.checked(space, author, leave, 'leave')
      if (!leaveBody.ahead || leaveBody.seq !== body.seq + 1) throw new SteadError('malformed', `a leave signed ahead must be marked so, carry no state and seq ${body.seq + 1}`)
    }
    this.pass(space, session, author, signed, body, leave, false)
  }

  /** Drops stored states, those expiring first, until `bytes` are freed (the relay's memory budget asks). */
  reclaim(bytes: number): void {
    const all: Array<{ room: Room<S>; session: S; p: Present }> = []
    for (const room of this.rooms.values()) for (const [session, p] of room.present) all.push({ room, session, p })
    all.sort((a, b) => a.p.expires - b.p.expires)
    let freed = 0
    for (const { room, session, p } of all) {
      if (freed >= bytes) break
      this.forget(room, session, p)
      freed += p.bytes
    }
    for (const [space, room] of this.rooms) if (room.watchers.size === 0 && room.present.size === 0) this.rooms.delete(space)
  }

  /** How many authors are present in a space (for tests and metrics). */
  size(space: string): number {
    const room = this.rooms.get(space)
    if (!room) return 0
    this.expire(room)
    return room.present.size
  }

  private checked(space: string, author: Uint8Array, signed: Signed, what: string): PresenceBody {
    if (signed.bytes.length > this.limits.maxBodyBytes) throw new SteadError('too-large', `a ${what} of ${signed.bytes.length} bytes, more than ${this.limits.maxBodyBytes}; keep presence small (a name, a colour, a cursor)`)
    const body = decodePresence(signed.bytes, this.limits.maxBodyBytes)
    if (body.space !== space) throw new SteadError('malformed', `a ${what} signed for space ${body.space}, sent for ${space}`)
    if (!this.verify(author, signed.bytes, signed.sig)) throw new SteadError('bad-signature', `the ${what}'s signature is not this session's key's`)
    return body
  }

  private pass(space: string, session: S, author: Uint8Array, signed: Signed, body: PresenceBody, leave: Signed | undefined, left: boolean): void {
    const room = this.room(space)
    this.expire(room)
    const had = room.present.get(session)
    // An older state than the one held (sent late by the same session) changes nothing.
    if (had && body.seq <= had.seq) return
    if (!room.watchers.has(session) && (this.watching.get(session)?.size ?? 0) >= this.limits.spacesPerSession) {
      throw new SteadError('rate-limited', `this session is present in ${this.limits.spacesPerSession} spaces, the most a session may be`)
    }
    this.join(room, space, session)
    const frame = encodeRelayMessage({ type: 'presence', space, author, signed })
    if (had) this.forget(room, session, had)
    if (!left) {
      if (room.present.size >= this.limits.perSpace) throw new SteadError('rate-limited', `${room.present.size} authors are present in space ${space}, the most this relay keeps`)
      if (!this.roomFor()) throw new SteadError('rate-limited', 'this relay holds all the presence its memory budget allows; retry later')
      const leaveFrame = leave && encodeRelayMessage({ type: 'presence', space, author, signed: leave })
      const p: Present = { seq: body.seq, frame, leave: leaveFrame, expires: this.now() + body.ttlMs, bytes: frame.length + (leaveFrame?.length ?? 0) }
      room.present.set(session, p)
      this.held += p.bytes
    }
    this.counted('taken')
    for (const w of room.watchers) if (w !== session) this.deliver(w, frame)
  }

  private join(room: Room<S>, space: string, session: S): void {
    room.watchers.add(session)
    let spaces = this.watching.get(session)
    if (!spaces) this.watching.set(session, (spaces = new Set()))
    spaces.add(space)
  }

  private forget(room: Room<S>, session: S, p: Present): void {
    if (room.present.get(session) !== p) return
    room.present.delete(session)
    this.held -= p.bytes
  }

  private expire(room: Room<S>): void {
    const now = this.now()
    for (const [s, p] of room.present) if (p.expires <= now) this.forget(room, s, p)
  }

  private room(space: string): Room<S> {
    let room = this.rooms.get(space)
    if (!room) this.rooms.set(space, (room = { watchers: new Set(), present: new Map() }))
    return room
  }

  /** Sends `frame` to `to` within its byte budget; what does not fit is dropped. */
  private deliver(to: S, frame: Uint8Array): void {
    let budget = this.deliverBudgets.get(to)
    if (!budget) {
      budget = new Bucket({ perSecond: Number.MAX_SAFE_INTEGER, burst: Number.MAX_SAFE_INTEGER, bytesPerSecond: this.limits.deliverBytesPerSecond, burstBytes: this.limits.deliverBurstBytes }, this.now)
      this.deliverBudgets.set(to, budget)
    }
    if (budget.wait(frame.length) > 0) {
      this.dropped++
      this.counted('dropped')
      return
    }
    budget.take(frame.length)
    this.counted(to.deliverPresence(frame) ? 'passed' : 'dropped')
  }
}
