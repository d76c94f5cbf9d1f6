import { MAX_CLIENT_VOTES, encodeRelayMessage } from '@stead/core'

/** Something listening to a space's news: a client session (api/sessions.ts). */
export interface Subscriber {
  /** An envelope of the space a client just sent, not ordered yet (prospective feed; may be skipped by a busy subscriber). */
  envelope(space: string, frame: Uint8Array, idHex: string): void
  /** New attested commits of the space are in the store: read them from the feed. */
  committed(space: string): void
  /** This relay's clock votes on envelopes of the space, durable: an encoded relay message `votes` (may be skipped by a busy subscriber, or one that did not ask). */
  votes(space: string, frame: Uint8Array): void
}

/** Envelopes whose submit time is kept for the commit latency histogram, at most. */
const MAX_TIMED = 100_000

/**
 * Who hears what a relay learns, once it may be said: each space's
 * subscribers (envelopes at once, commits once they are durable), whoever
 * waits for an envelope's decision or for a space's next durable
 * attestation, and when clients submitted what is still undecided.
 */
export class ClientNews {
  private readonly subscribers = new Map<string, Set<Subscriber>>()
  /** Who waits for which envelope to be decided: each decision calls only its own watchers. */
  private readonly decisionWatchers = new Map<string, Set<(idHex: string) => void>>()
  /** Called after each write with the spaces whose attestations it made durable, and with null when the relay stops. */
  private readonly attestedListeners = new Set<(spaces: ReadonlySet<string> | null) => void>()
  /** When clients submitted envelopes still undecided. */
  private readonly submittedAt = new Map<string, number>()

  /** `sub` hears `space`'s news until the returned function is called. */
  subscribe(space: string, sub: Subscriber): () => void {
    let set = this.subscribers.get(space)
    if (!set) this.subscribers.set(space, (set = new Set()))
    set.add(sub)
    return () => {
      const subs = this.subscribers.get(space)
      subs?.delete(sub)
      if (subs?.size === 0) this.subscribers.delete(space)
    }
  }

  /** A client envelope not ordered yet: every subscriber of its space gets it now (prospective state needs no order). */
  envelope(space: string, frame: Uint8Array, idHex: string): void {
    for (const sub of this.subscribers.get(space) ?? []) sub.envelope(space, frame, idHex)
  }

  /** This relay cast clock votes on envelopes of `space`, durable: its subscribers that take votes get them, encoded once for all. */
  votes(space: string, votes: ReadonlyArray<readonly [Uint8Array, number, Uint8Array]>): void {
    const subs = this.subscribers.get(space)
    if (!subs?.size) return
    for (let i = 0; i < votes.length; i += MAX_CLIENT_VOTES) {
      const frame = encodeRelayMessage({ type: 'votes', space, votes: votes.slice(i, i + MAX_CLIENT_VOTES) })
      for (const sub of subs) sub.votes(space, frame)
    }
  }

  /** Attestations of `spaces` are durable: subscribers read on, and those waiting for one look. */
  attested(spaces: ReadonlySet<string>): void {
    for (const space of spaces) for (const sub of this.subscribers.get(space) ?? []) sub.committed(space)
    if (spaces.size) for (const listener of [...this.attestedListeners]) listener(spaces)
  }

  /** `listener` hears each durable write's spaces, and null once the relay stops, until the returned function is called. */
  onAttested(listener: (spaces: ReadonlySet<string> | null) => void): () => void {
    this.attestedListeners.add(listener)
    return () => void this.attestedListeners.delete(listener)
  }

  /** `done` is called once envelope `idHex` is decided, unless the returned function is called first. */
  watchDecision(idHex: string, done: (idHex: string) => void): () => void {
    let watchers = this.decisionWatchers.get(idHex)
    if (!watchers) this.decisionWatchers.set(idHex, (watchers = new Set()))
    watchers.add(done)
    return () => {
      const w = this.decisionWatchers.get(idHex)
      if (!w?.delete(done) || w.size > 0) return
      this.decisionWatchers.delete(idHex)
    }
  }

  /** A client submitted envelope `idHex` at `now` (for its latency, within a bound). */
  submitted(idHex: string, now: number): void {
    if (this.submittedAt.size < MAX_TIMED) this.submittedAt.set(idHex, now)
  }

  /** Envelope `idHex` was decided at `now`: its watchers are called; how long since a client submitted it, if known. */
  decided(idHex: string, now: number): number | undefined {
    const watchers = this.decisionWatchers.get(idHex)
    if (watchers) {
      this.decisionWatchers.delete(idHex)
      for (const done of watchers) done(idHex)
    }
    const t = this.submittedAt.get(idHex)
    if (t === undefined) return undefined
    this.submittedAt.delete(idHex)
    return now - t
  }

  /** The relay stops: whoever waits for an attestation hears null. */
  stopped(): void {
    for (const listener of [...this.attestedListeners]) listener(null)
  }
}
