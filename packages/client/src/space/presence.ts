import { MAX_PRESENCE_STATE_BYTES, MAX_PRESENCE_TTL_MS, MIN_PRESENCE_TTL_MS, SteadError, encode, validateRegisterValue, type HostClock, type HostTimer, type PresenceBody, type RegisterValue } from '@stead/core'
import { ClosedError } from '../errors.ts'
import { Listeners } from '../listeners.ts'

/** Another client present in a space, as `space.presence.others` lists it. */
export interface PresencePeer {
  /** Its author id (as `client.authorId` on that client; the key it signs with proves it). */
  readonly author: string
  /** The state it shows (what its app passed to `presence.set`). */
  readonly state: RegisterValue
  /** When its presence was last heard (this client's clock, ms since the epoch). */
  readonly lastSeen: number
}

/** What changed in a space's presence, as `presence.subscribe` tells it. */
export interface PresenceChange {
  /** Authors that came (or came back). */
  readonly added: readonly string[]
  /** Authors whose state changed. */
  readonly updated: readonly string[]
  /** Authors that left, or whose presence expired. */
  readonly removed: readonly string[]
  /** Whether this client's own state changed. */
  readonly local: boolean
}

/** Another client's presence as tabs share it (see Presence.shared). */
export interface SharedPresence {
  readonly author: string
  readonly state: RegisterValue
  readonly seq: number
  readonly lastSeen: number
  /** How long it is kept from now without news. */
  readonly leftMs: number
}

/** How long others keep a client's presence without hearing it again, unless `presenceTtlMs` says otherwise. */
export const DEFAULT_PRESENCE_TTL_MS = 30_000
/** Fewest ms between two presence messages of one space: a cursor dragged fast is sent at this pace, its latest position last. */
const PUBLISH_GAP_MS = 40

interface Heard {
  state: RegisterValue
  seq: number
  lastSeen: number
  expires: number
  /** The state's signature (hex): another copy of it, from another relay, needs no check. */
  sig: string
  /** The relays that brought this state: a leave signed ahead takes its relay out, and the author goes with the last. */
  readonly sources: Set<string>
}

/** Most others a space keeps (as many as a relay does): past it, a newcomer is not listed until one goes. */
const MAX_OTHERS = 512
/** Most departed authors whose last seq a space remembers, so that a replay of an older state does not bring them back. */
const MAX_GONE = 4096

/**
 * Who is in a space now and what they show (a name, a colour, a cursor),
 * as Yjs's awareness: ephemeral, never ordered or stored. `set` publishes
 * this client's state, signed with its key, to the relays, which pass it at
 * once to the space's other clients; it is renewed at half its time to live
 * while the space is open and withdrawn when it closes (or, if the client
 * vanishes, by the leave it signed ahead, which the relays send for it).
 * Others' states are kept until they leave or go quiet for their time to
 * live. A relay can drop presence but not forge it; a replayed older state
 * loses to the newer one.
 *
 * One state per client (author): tabs that share a client share it.
 */
export class Presence {
  /** What is shown: the latest state a tab of this client set that it has not withdrawn (see `setFor`). */
  private own: RegisterValue | null = null
  /** Each tab's state (this tab's is '', the following tabs' by tab id), the latest set last. */
  private readonly tabs = new Map<string, RegisterValue>()
  private seq = 0
  private readonly heard = new Map<string, Heard>()
  /** Authors that left or went quiet: the seq they were at, and until when it is kept. */
  private readonly gone = new Map<string, { seq: number; until: number }>()
  private readonly listeners: Listeners<PresenceChange>
  private timer: HostTimer | undefined
  private lastSent = Number.NEGATIVE_INFINITY
  private due = false
  private closed = false

  private readonly o: { space: string; clock: HostClock; ttlMs: number; out: (body: PresenceBody) => void; listenerFailed: (err: unknown) => void }
  /** @internal Use `space.presence`. */
  constructor(o: { space: string; clock: HostClock; ttlMs?: number; out: (body: PresenceBody) => void; listenerFailed: (err: unknown) => void }) {
    const ttlMs = o.ttlMs ?? DEFAULT_PRESENCE_TTL_MS
    if (!Number.isSafeInteger(ttlMs) || ttlMs < MIN_PRESENCE_TTL_MS || ttlMs > MAX_PRESENCE_TTL_MS) {
      throw new SteadError('malformed', `presenceTtlMs must be an integer from ${MIN_PRESENCE_TTL_MS} to ${MAX_PRESENCE_TTL_MS}, got ${String(ttlMs)}`)
    }
    this.o = { ...o, ttlMs }
    this.listeners = new Listeners<PresenceChange>(o.listenerFailed)
  }

  /** This client's state as others see it (null: not shown); in a tab that shares its client, the latest any of its tabs set. */
  get state(): RegisterValue | null {
    return this.own
  }

  /** The other clients present in the space, in the order they came. */
  get others(): PresencePeer[] {
    // A read never tells listeners anything (it may run in a render): the timer drops what expired, and says so.
    const now = this.o.clock.now()
    return [...this.heard].flatMap(([author, h]) => (h.expires > now ? [{ author, state: h.state, lastSeen: h.lastSeen }] : []))
  }

  /**
   * Shows `state` to the space's other clients (null withdraws it): a name,
   * a colour, a cursor, anything JSON-like the app puts in, at most 4 KiB
   * encoded. Sent at once (a burst at most every 40 ms, the latest state
   * last) and renewed while the space is open.
   *
   * @throws SteadError `malformed` for a value a register could not hold (see `space.register`), `too-large` past 4 KiB; {@link ClosedError} after the space closed.
   */
  set(state: RegisterValue | null): void {
    this.setFor('', state)
  }

  /**
   * @internal Sets the state tab `tab` shows ('' for this one; the leading
   * tab takes its followers' this way): the client shows the latest one a
   * tab set and has not withdrawn, so a tab that closes takes only its own
   * state away.
   */
  setFor(tab: string, state: RegisterValue | null): void {
    if (this.closed) throw new ClosedError(`space ${this.o.space}`)
    if (state !== null) {
      const problem = validateRegisterValue(state)
      if (problem) throw new SteadError('malformed', `presence state: ${problem}`)
      const size = encode(state).length
      if (size > MAX_PRESENCE_STATE_BYTES) throw new SteadError('too-large', `a presence state of ${size} bytes, more than ${MAX_PRESENCE_STATE_BYTES}; keep presence small (a name, a colour, a cursor) and put the rest in the space's objects`)
    }
    this.tabs.delete(tab)
    if (state !== null) this.tabs.set(tab, state)
    const shown = [...this.tabs.values()].at(-1) ?? null
    if (shown === this.own) return
    this.own = shown
    this.due = true
    this.schedule()
    this.listeners.emit(() => ({ added: [], updated: [], removed: [], local: true }))
  }

  /**
   * Changes some fields of this client's state (an object), keeping the
   * others, as Yjs's `setLocalStateField`: `update({ cursor })` as the
   * cursor moves, once `set({ name, colour })` showed who this is.
   *
   * @throws SteadError as `set`.
   */
  update(fields: Readonly<Record<string, RegisterValue>>): void {
    const mine = this.tabs.get('') ?? null
    const base = mine !== null && typeof mine === 'object' && !Array.isArray(mine) && !(mine instanceof Uint8Array) ? mine : {}
    this.set({ ...base, ...fields })
  }

  /**
   * Calls `listener` with what changed whenever someone comes, changes
   * their state, leaves or goes quiet, and when this client's own state
   * changes. Returns the function that stops it.
   */
  subscribe(listener: (change: PresenceChange) => void): () => void {
    return this.listeners.add(listener)
  }

  /**
   * @internal A presence body of `author` (not this client) arrived from
   * `source` (a relay, or '' for a peer), its signature `sig` (hex)
   * checked, except for a copy of the state held or a leave signed ahead,
   * which only ever take their own relay out (see `isNews`).
   */
  heardFrom(author: string, body: PresenceBody, source: string, sig: string): void {
    if (this.closed || body.space !== this.o.space) return
    const had = this.heard.get(author)
    const now = this.o.clock.now()
    if (body.ahead) {
      // The author's session with that relay closed: it goes once no relay that brought its state still has it.
      if (!had || body.seq !== had.seq + 1) return
      had.sources.delete(source)
      if (had.sources.size === 0) this.drop(author, had.seq + 1, now)
      return
    }
    if (had && body.state !== null && body.seq === had.seq && sig === had.sig) {
      if (source !== '') had.sources.add(source)
      return
    }
    if ((had && body.seq <= had.seq) || body.seq <= this.goneAt(author, now)) return
    if (body.state === null) {
      if (had) this.drop(author, body.seq, now)
      return
    }
    if (!had && this.heard.size >= MAX_OTHERS) return
    this.gone.delete(author)
    this.heard.set(author, { state: body.state, seq: body.seq, lastSeen: now, expires: now + body.ttlMs, sig, sources: new Set(source === '' ? [] : [source]) })
    this.listeners.emit(() => (had ? { added: [], updated: [author], removed: [], local: false } : { added: [author], updated: [], removed: [], local: false }))
    this.schedule()
  }

  /**
   * @internal Whether a body of `author` would change anything: a newer
   * seq, a copy of the held state (same signature) from another relay, or
   * a leave signed ahead of the held state. Asked before its signature is
   * checked; only a newer seq needs the check (a copy is the same bytes, a
   * leave signed ahead takes out only the relay that sends it).
   */
  isNews(author: string, body: PresenceBody, sig: string): 'check' | 'as-is' | false {
    if (this.closed) return false
    const had = this.heard.get(author)
    if (body.ahead) return had && body.seq === had.seq + 1 ? 'as-is' : false
    if (had && body.state !== null && body.seq === had.seq && sig === had.sig) return 'as-is'
    return body.seq > (had?.seq ?? -1) && body.seq > this.goneAt(author, this.o.clock.now()) ? 'check' : false
  }

  /** The seq an author that went is remembered at (-1: none, or forgotten). */
  private goneAt(author: string, now: number): number {
    const g = this.gone.get(author)
    if (g && g.until <= now) this.gone.delete(author)
    return g && g.until > now ? g.seq : -1
  }

  /** `author` left (or went quiet) at `seq`: not listed any more, and no older state brings it back for a while. */
  private drop(author: string, seq: number, now: number): void {
    this.heard.delete(author)
    this.gone.delete(author)
    this.gone.set(author, { seq, until: now + MAX_PRESENCE_TTL_MS })
    if (this.gone.size > MAX_GONE) this.gone.delete(this.gone.keys().next().value as string)
    this.listeners.emit(() => ({ added: [], updated: [], removed: [author], local: false }))
  }

  /** @internal Others as the leading tab posts them to the tabs that follow it: each with its seq and how long it has left. */
  shared(): SharedPresence[] {
    const now = this.o.clock.now()
    return [...this.heard].flatMap(([author, h]) => (h.expires > now ? [{ author, state: h.state, seq: h.seq, lastSeen: h.lastSeen, leftMs: h.expires - now }] : []))
  }

  /** @internal In a tab that follows: the others are what the leading tab says (see `shared`). */
  mirror(peers: readonly SharedPresence[]): void {
    if (this.closed) return
    const now = this.o.clock.now()
    const added: string[] = []
    const updated: string[] = []
    const removed = [...this.heard.keys()].filter((a) => !peers.some((p) => p.author === a))
    for (const a of removed) this.heard.delete(a)
    for (const p of peers) {
      const had = this.heard.get(p.author)
      if (had && had.seq >= p.seq) continue
      ;(had ? updated : added).push(p.author)
      this.heard.set(p.author, { state: p.state, seq: p.seq, lastSeen: p.lastSeen, expires: now + p.leftMs, sig: '', sources: new Set() })
    }
    if (added.length || updated.length || removed.length) this.listeners.emit(() => ({ added, updated, removed, local: false }))
    this.schedule()
  }

  /** @internal Publishes the state again under a new seq (a relay session went down: that relay sends this client's leave). */
  republish(): void {
    if (this.closed || this.own === null) return
    this.due = true
    this.schedule()
  }

  /** @internal The space closes: withdraw this client's state, forget everyone's. */
  close(): void {
    if (this.closed) return
    if (this.own !== null) this.send(null)
    this.closed = true
    this.timer?.cancel()
    this.timer = undefined
    const removed = [...this.heard.keys()]
    this.heard.clear()
    if (removed.length) this.listeners.emit(() => ({ added: [], updated: [], removed, local: false }))
  }

  /** Runs when something is due: a publish (held to PUBLISH_GAP_MS apart), a renewal, an expiry. */
  private schedule(): void {
    if (this.closed) return
    const now = this.o.clock.now()
    if (this.due && now - this.lastSent >= PUBLISH_GAP_MS) {
      this.due = false
      this.send(this.own)
    }
    this.expire()
    let next = Number.POSITIVE_INFINITY
    if (this.due) next = this.lastSent + PUBLISH_GAP_MS
    else if (this.own !== null) next = this.lastSent + this.o.ttlMs / 2
    for (const h of this.heard.values()) next = Math.min(next, h.expires)
    this.timer?.cancel()
    this.timer = undefined
    if (next === Number.POSITIVE_INFINITY) return
    this.timer = this.o.clock.setTimer(Math.max(0, next - now), () => {
      this.timer = undefined
      // A renewal that fell due publishes the same state under a new seq.
      if (this.own !== null && this.o.clock.now() - this.lastSent >= this.o.ttlMs / 2) this.due = true
      this.schedule()
    })
    this.timer.unref?.()
  }

  private send(state: RegisterValue | null): void {
    const now = this.o.clock.now()
    this.lastSent = now
    // Above the last one (whose leave, signed ahead, took seq + 1), and from the clock: a client that
    // restarts still supersedes what it showed before.
    this.seq = Math.max(this.seq + 2, Math.floor(now))
    this.o.out({ space: this.o.space, seq: this.seq, ttlMs: this.o.ttlMs, state })
  }

  private expire(): void {
    const now = this.o.clock.now()
    const removed: string[] = []
    for (const [author, h] of this.heard) {
      if (h.expires > now) continue
      this.heard.delete(author)
      this.gone.set(author, { seq: h.seq, until: now + MAX_PRESENCE_TTL_MS })
      removed.push(author)
    }
    if (removed.length) this.listeners.emit(() => ({ added: [], updated: [], removed, local: false }))
  }
}
