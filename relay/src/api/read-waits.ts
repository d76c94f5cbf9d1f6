import type { ClientMessage } from '@stead/core'
import type { Subscriber } from '../runtime/client-news.ts'

/** How a session asked to follow a space: every update, or paced at a freshness bound. */
type SubscribeMessage = Extract<ClientMessage, { type: 'subscribe' | 'pace' }>

/** A session that asked to follow a space it may not read yet. */
export interface ReadWaiter {
  /** Whether the space's policy lets this session read `space` now. */
  mayRead(space: string): boolean
  /** Follows the space as `message` asked, now that it may. */
  subscribe(message: SubscribeMessage): void
}

/** Spaces one session waits on at most; past it the oldest wait is dropped (the client asks again on its next session). */
const MAX_WAITS_PER_SESSION = 64

/**
 * Subscriptions a space's policy refused (`unreadable`), kept so that the
 * session is served as soon as a policy change lets it read: a user
 * invited or granted a role sees the space without asking again, and
 * without polling. One news subscription per space whatever the number of
 * waiting sessions; each is checked again after every commit of the space.
 * Memory only, bounded per session; a session's waits end with it.
 */
export class ReadWaits<S extends ReadWaiter> {
  private readonly bySpace = new Map<string, { readonly waiting: Map<S, SubscribeMessage>; readonly stop: () => void }>()
  private readonly bySession = new Map<S, Set<string>>()
  private readonly listen: (space: string, sub: Subscriber) => () => void

  /** `listen` subscribes to a space's news until the returned function is called. */
  constructor(listen: (space: string, sub: Subscriber) => () => void) {
    this.listen = listen
  }

  /** `session` waits to follow `message.space` once it may read it. */
  wait(session: S, message: SubscribeMessage): void {
    let spaces = this.bySession.get(session)
    if (!spaces) this.bySession.set(session, (spaces = new Set()))
    if (!spaces.has(message.space) && spaces.size >= MAX_WAITS_PER_SESSION) this.cancel(session, spaces.values().next().value as string)
    spaces.add(message.space)
    let entry = this.bySpace.get(message.space)
    if (!entry) {
      const space = message.space
      const waiting = new Map<S, SubscribeMessage>()
      entry = { waiting, stop: this.listen(space, { envelope: () => undefined, votes: () => undefined, committed: () => this.recheck(space) }) }
      this.bySpace.set(space, entry)
    }
    entry.waiting.set(session, message)
  }

  /** `session` no longer waits on `space` (it unsubscribed, or follows it now). */
  cancel(session: S, space: string): void {
    const spaces = this.bySession.get(session)
    spaces?.delete(space)
    if (spaces?.size === 0) this.bySession.delete(session)
    const entry = this.bySpace.get(space)
    if (!entry?.waiting.delete(session) || entry.waiting.size > 0) return
    entry.stop()
    this.bySpace.delete(space)
  }

  /** `session` closed: every wait of its ends. */
  forget(session: S): void {
    for (const space of [...(this.bySession.get(session) ?? [])]) this.cancel(session, space)
  }

  private recheck(space: string): void {
    const entry = this.bySpace.get(space)
    if (!entry) return
    for (const [session, message] of [...entry.waiting]) {
      if (!session.mayRead(space)) continue
      this.cancel(session, space)
      session.subscribe(message)
    }
  }
}
