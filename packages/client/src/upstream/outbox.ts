import {
  MAX_WANTED_IDS,
  DEFAULT_LIMITS,
  FILLER_CONTENT,
  FILLER_KEY,
  isFiller,
  MAX_KEPT_CLOCK_ENTRIES,
  SteadError,
  composeClock,
  toHex,
  encodeEnvelope,
  sealEnvelope,
  unitTagPrefix,
  type AnyOp,
  type Clock,
  type CommitResult,
  type Crypto,
  type Envelope,
  type ErrorReason,
  type LWWRegister,
  type ORSet,
  type ObjectUpdate,
  type SafeGroup,
  type RelayMessage,
  type HostClock,
} from '@stead/core'
import type { DraftPlaces } from '../space/draft-ids.ts'
import { compileBatch, deferred, type DraftBatch, type DraftItem, type Deferred } from '../space/drafts.ts'
import { RejectedError } from '../errors.ts'
import type { ClientRecords, ForwardedRequest, StoredRequest } from './persist.ts'
import type { RelaySessions, SessionMember } from '../transport/sessions.ts'
import type { StorageChange } from '../storage/types.ts'
import type { PendingUpdate, SettledUpdate } from '../space/space.ts'
import type { Identity, RelayLink } from '../transport/transport.ts'
import type { SafeResult } from '../types.ts'
import type { SpacePort } from '../space/space-port.ts'

/** What the leader tab tells the other tabs of a space (see tabs.ts); nothing when tabs do not share the client. */
export interface SpaceNews {
  /**
   * An envelope was signed and stored (or the batch cancelled out:
   * undefined), carrying these requests of other tabs; `places` says where
   * its drafts went (other tabs' drafts among them: their views name them).
   */
  sealed(frame: Uint8Array | undefined, requests: readonly ForwardedRequest[], places?: DraftPlaces): void
  /** A verified envelope to show prospectively (received, or one of ours back in play after a gap). */
  received(frame: Uint8Array): void
  /** An attested commit was applied and stored. */
  committed(round: number, frames: readonly Uint8Array[]): void
  /** f+1 relays refused one of this client's envelopes for good (an envelope with the same seq may follow in `sealed`). */
  refused(idHex: string, reason: ErrorReason, detail: string): void
  /** A forwarded request could not be stored: it never happened. */
  failed(requests: readonly ForwardedRequest[], err: SteadError): void
  /** Envelopes were added, sent, accepted or decided. */
  outboxChanged(): void
  /** The replica was replaced by one started from a verified snapshot: followers rebuild theirs from the leader's. */
  rebased(): void
  /** Whether other tabs follow this space (they replay every commit, so it is not paced). */
  followed?(): boolean
}

export const NO_NEWS: SpaceNews = { sealed() {}, received() {}, committed() {}, refused() {}, failed() {}, outboxChanged() {}, rebased() {} }

/** One signed envelope of this client, from storage until it is decided. */
interface Outgoing {
  readonly env: Envelope
  readonly frame: Uint8Array
  /** Safe groups in this envelope and the audit unit each one is. */
  readonly safe: Array<{ readonly unit: number; readonly waiter: Deferred<SafeResult> }>
  /** Regular items, kept to name them if the envelope is refused. */
  readonly regular: readonly DraftItem[]
  /** Audit units before the first safe group: the regular operations after compaction. */
  readonly regularUnits: number
  /** Relays it was sent to, in order. */
  readonly sentTo: number[]
  lastSentAt: number
  accepted: boolean
  /** Relays that refused it on its merits, by proven index: final only once f+1 did (see `finalRefusal`). */
  readonly refusals: Map<number, { reason: ErrorReason; detail: string }>
  /** f+1 relays refused it for good: it is replaced by an envelope of the same sequence number (see `replace`). */
  final: { reason: ErrorReason; detail: string } | undefined
  /** Its replacement is being signed and stored. */
  replacing: boolean
  /** It only fills the sequence number of a refused envelope (see FILLER): the app never made it. */
  readonly filler: boolean
}

/** How an envelope of this client ended: the audit's decision, or every relay's refusal. */
export type OwnDecision = CommitResult['decisions'][number] | { kind: 'refused'; reason: ErrorReason; detail: string }

interface OutboxOptions {
  space: SpacePort
  records: ClientRecords
  crypto: Crypto
  identity: Identity
  sessions: RelaySessions
  member: SessionMember
  resubmitAfterMs: number
  clock: HostClock
  news: SpaceNews
  seq: number
  last: { base: number; clock: Clock }
}

/**
 * This client's envelopes of one space, from signing to decision: signs a
 * draft batch with the next sequence number and its causal context, stores
 * it, sends it to a home relay and on to others while it waits, and
 * resolves its safe groups when the stable order decides it.
 */
export class Outbox {
  private readonly outgoing = new Map<string, Outgoing>()
  /** Submit ids in flight → envelope id, and the relay it went to. */
  private readonly submits = new Map<number, { idHex: string; relay: number }>()
  /** This client's envelopes refused for good and replaced: one a relay or peer still passes on is not shown again. */
  private readonly refusedIds = new Set<string>()
  private seq: number
  /** The clock of this author's last envelope: the next one's follows from it. */
  private last: { base: number; clock: Clock }
  /**
   * Other authors' envelopes received and not yet cited, that no other
   * received envelope follows: the next envelope's deps (the heads of the
   * space's Merkle-DAG as this client saw it), by id.
   */
  private readonly heads = new Map<string, Envelope>()
  /**
   * Other authors' envelopes this client cited and that are not in the
   * stable history yet. It sends them to the relays too if they linger:
   * whoever applied an envelope can submit it, so an author that went away
   * cannot leave the clocks that cite it unverifiable for good.
   */
  private readonly carried = new Map<string, { env: Envelope; sentAt: number; tries: number }>()

  private readonly o: OutboxOptions
  constructor(o: OutboxOptions) {
    this.o = o
    this.seq = o.seq
    this.last = o.last
  }

  /**
   * Puts back envelopes signed before a restart (or by the tab that led
   * before); `waiters` are safe groups a tab still awaits, by envelope id.
   */
  restore(outbox: ReadonlyArray<{ env: Envelope; frame: Uint8Array }>, waiters: ReadonlyMap<string, ReadonlyArray<Deferred<SafeResult>>> = new Map()): void {
    for (const { env, frame } of outbox) this.add(env, frame, waiters.get(env.idHex) ?? [])
  }

  /**
   * The stored envelope that carried a forwarded request (decided or not:
   * one sent again after a change of leader is not queued twice), with its
   * frame while it is undecided.
   */
  carrying(request: string): { request: StoredRequest; frame: Uint8Array | undefined } | undefined {
    const r = this.o.records.request(request)
    return r && { request: r, frame: this.outgoing.get(r.envelope)?.frame }
  }

  /**
   * A verified envelope of another author arrived: the next one this
   * client signs follows it causally. It becomes a head; the heads it
   * follows are let go only when it is cited (see `nextClock`), because
   * until this client can cite it, they carry what it had seen.
   */
  heard(env: Envelope): void {
    if (env.authorId === this.o.space.authorId || this.heads.has(env.idHex)) return
    // Bounded like everything: past the limit the oldest heads go uncited (their clocks stay unclaimed).
    if (this.heads.size >= MAX_HEADS) this.heads.delete(this.heads.keys().next().value as string)
    this.heads.set(env.idHex, env)
  }

  /**
   * The deps and clock of the next envelope. A head is cited when this
   * client can account for its clock (`citable`) and no other citable head
   * follows it (cites it, or is a later envelope of its author); at most
   * maxDeps, oldest first, the rest wait for the next envelope. A head the
   * stable history holds goes once the base covers all it claims; until
   * then it is still cited, or what it claims would be lost.
   */
  private nextClock(): { base: number; clock: Clock; cited: Envelope[] } {
    const { replica } = this.o.space
    const committed = (a: string): number => replica.nextSeq(a) - 1
    const reached = this.reachedSeqs()
    const citable: Envelope[] = []
    for (const [id, h] of this.heads) {
      const live = replica.isPending(id) || (replica.hasCommitted(id) && claimsBeyond(h, committed))
      if (!live) this.heads.delete(id)
      else if (this.citable(h, replica.stableIndex, reached)) citable.push(h)
    }
    const followed = new Set<string>()
    const latest = new Map<string, number>()
    for (const h of citable) {
      for (const d of h.deps) followed.add(toHex(d))
      latest.set(h.authorId, Math.max(latest.get(h.authorId) ?? 0, h.seq))
    }
    const cited = citable.filter((h) => !followed.has(h.idHex) && h.seq === latest.get(h.authorId)).slice(0, DEFAULT_LIMITS.maxDeps)
    const { base, clock } = composeClock(this.o.space.authorId, this.last, cited, replica.stableIndex, committed)
    return { base, clock, cited }
  }

  /** Lets go of the heads that `cited` (just signed into an envelope) cover: them, what they cite, their authors' earlier ones. */
  private covered(cited: readonly Envelope[]): void {
    const latest = new Map<string, number>()
    for (const h of cited) {
      this.heads.delete(h.idHex)
      for (const d of h.deps) this.heads.delete(toHex(d))
      latest.set(h.authorId, Math.max(latest.get(h.authorId) ?? 0, h.seq))
    }
    for (const [id, h] of this.heads) if (h.seq < (latest.get(h.authorId) ?? 0)) this.heads.delete(id)
  }

  /**
   * For each author, the highest seq up to which this client holds every
   * envelope: committed, then pending without a gap. What a head may claim
   * of an author (see `citable`); a made-up seq far ahead is never reached.
   */
  private reachedSeqs(): (authorId: string) => number {
    const { replica } = this.o.space
    const known = new Map<string, number>()
    return (a) => {
      let n = known.get(a)
      if (n === undefined) {
        n = a === this.o.space.authorId ? this.seq : replica.nextSeq(a) - 1
        if (a !== this.o.space.authorId) while (replica.hasPending(a, n + 1)) n++
        known.set(a, n)
      }
      return n
    }
  }

  /**
   * Whether a head's clock claims only what this client holds itself
   * (its author's seqs up to it, and every listed entry: see
   * `reachedSeqs`), from a base it has reached, listing no more authors
   * than the audit keeps a record of (MAX_KEPT_CLOCK_ENTRIES: a larger one
   * would leave ours unverifiable). Its clock becomes part of ours for good (the update rule
   * carries every claim on), so a far-future base or seq, made-up authors
   * or an oversized clock from a Byzantine writer must not get in: such a
   * head waits, and is cited once this client holds what it claims (or
   * never).
   */
  private citable(h: Envelope, stableIndex: number, reached: (a: string) => number): boolean {
    if (h.base > stableIndex || h.clock.size > MAX_KEPT_CLOCK_ENTRIES || h.seq > reached(h.authorId)) return false
    for (const [a, n] of h.clock) if (n > reached(a)) return false
    return true
  }

  /** Sends the cited envelopes of other authors that are still not in the stable history (see `carried`). */
  private carryOn(now: number): void {
    const { replica } = this.o.space
    for (const [id, c] of this.carried) {
      if (!replica.isPending(id)) {
        this.carried.delete(id)
        continue
      }
      if (now - c.sentAt < this.o.resubmitAfterMs) continue
      // Each try goes to the next relay (one that drops it cannot stop it); past two rounds of them, let it be.
      const links = fromHome(this.o.space.space, this.o.sessions.cluster?.relays.length ?? 1, this.o.sessions.links.filter((l) => l.ready && l.relay !== undefined))
      if (links.length === 0) return
      if (c.tries >= 2 * links.length) {
        this.carried.delete(id)
        continue
      }
      // Its answer names a submit this outbox does not track: `answer` ignores it.
      this.o.sessions.submit(this.o.member, links[c.tries % links.length] as RelayLink, encodeEnvelope(c.env))
      c.sentAt = now
      c.tries++
    }
  }

  /**
   * A relay needs these envelopes to judge the clock of one of ours that
   * cites them (they came from peers, or their authors' relays did not
   * pass them on): it gets those this client holds undecided. Submitted
   * like carried ones, so their answers are ignored.
   */
  supply(link: RelayLink, ids: readonly Uint8Array[]): void {
    const { replica } = this.o.space
    for (const id of ids.slice(0, MAX_WANTED_IDS)) {
      const env = replica.pendingEnvelope(toHex(id))
      if (env) this.o.sessions.submit(this.o.member, link, encodeEnvelope(env))
    }
  }

  has(idHex: string): boolean {
    return this.outgoing.has(idHex)
  }

  /** Whether this is one of this client's envelopes that f+1 relays refused for good (and another took its sequence number). */
  refused(idHex: string): boolean {
    return this.refusedIds.has(idHex)
  }

  pendingUpdates(): PendingUpdate[] {
    return this.entries().map(({ accepted: _accepted, ...p }) => p)
  }

  allAccepted(): boolean {
    return [...this.outgoing.values()].every((o) => o.accepted)
  }

  get size(): number {
    return this.outgoing.size
  }

  /** The pending updates with whether a relay accepted each (what other tabs mirror). */
  entries(): Array<PendingUpdate & { accepted: boolean }> {
    return [...this.outgoing.values()].map((o) => ({ id: o.env.idHex, keys: keysOf(o), safe: o.safe.length, regular: o.filler ? 0 : o.regularUnits, sent: o.sentTo.length > 0, accepted: o.accepted }))
  }

  /** Signs one draft batch into an envelope, persists it, then shows it as received and sends it. */
  async seal(batch: DraftBatch): Promise<void> {
    const { space, crypto, records } = this.o
    const compiled = compileBatch(batch, (key, e) => (space.replica.prospective(key) as ORSet | undefined)?.tagsOf?.(e) ?? [], space.draftIds)
    const { updates, safe } = this.o.sessions.clockMeasured ? capRegisterStamps(compiled, this.o.sessions.now(), (key) => (space.replica.prospective(key) as LWWRegister | undefined)?.timestamp() ?? 0) : compiled
    if (updates.length === 0 && safe.length === 0) {
      // Everything cancelled out (e.g. +1 then -1): nothing to sign, nothing to lose.
      space.batchSigned(batch, undefined)
      if (batch.requests.length) this.o.news.sealed(undefined, batch.requests)
      return
    }
    const seq = this.seq + 1
    const { base, clock, cited } = this.nextClock()
    const deps = cited.map((h) => h.id)
    let env: Envelope
    let frame: Uint8Array
    try {
      env = await sealEnvelope(crypto, this.o.identity, { space: space.space, seq, base, clock, deps, updates, safe })
      frame = encodeEnvelope(env)
      await records.storage.write([...records.outboxPut(seq, frame, env.idHex, batch.requests), records.author({ seq, base, clock, authorId: space.authorId }), ...records.names(seq, unitTagPrefix(env.id), compiled.places)])
    } catch (err) {
      space.batchFailed(batch, err)
      if (batch.requests.length) this.o.news.failed(batch.requests, err instanceof SteadError ? err : new SteadError('malformed', String(err)))
      return
    }
    space.storageWorks()
    space.draftIds.signedAs(compiled.places, unitTagPrefix(env.id))
    this.seq = seq
    this.last = { base, clock }
    this.covered(cited)
    for (const h of cited) if (this.o.space.replica.isPending(h.idHex)) this.carried.set(h.idHex, { env: h, sentAt: this.o.clock.now(), tries: 0 })
    while (this.carried.size > MAX_HEADS) this.carried.delete(this.carried.keys().next().value as string)
    // In the outbox before the drafts let go of it: `pending` never dips.
    this.add(
      env,
      frame,
      batch.safe.map((g) => g.waiter),
    )
    space.batchSigned(batch, env)
    this.o.news.sealed(frame, batch.requests, compiled.places)
    this.send(env.idHex)
  }

  private add(env: Envelope, frame: Uint8Array, waiters: ReadonlyArray<Deferred<SafeResult>>): void {
    const regularUnits = regularUnitsOf(env)
    const filler = isFiller(env)
    this.outgoing.set(env.idHex, {
      env,
      frame,
      safe: env.safe.map((_, i) => ({ unit: regularUnits + i, waiter: waiters[i] ?? deferred<SafeResult>() })),
      regular: filler ? [] : env.updates.flatMap((u) => u.ops.map((op) => ({ key: u.key, decl: u.decl, intent: op }))),
      regularUnits,
      sentTo: [],
      lastSentAt: 0,
      accepted: false,
      refusals: new Map(),
      final: undefined,
      replacing: false,
      filler,
    })
    this.o.news.outboxChanged()
  }

  // ---------------------------------------------------------------- sending

  /** Sends an envelope to the next ready relay it was not yet sent to (or any ready one). */
  private send(idHex: string): void {
    const o = this.outgoing.get(idHex)
    const { sessions, member } = this.o
    // One refused for good is not sent again: its replacement is.
    if (!o || o.final) return
    const ready = sessions.links.filter((l) => l.ready && l.relay !== undefined)
    if (ready.length === 0) return
    // A space has a home relay (spread over the cluster by space name) and clients walk on from
    // it: an author's envelopes usually reach one block stream in sequence order (instead of
    // waiting in the audit for predecessors that went through other relays), and the space's
    // other clients, which take their frames from the same relay, see them one hop away.
    const byDistance = fromHome(this.o.space.space, sessions.cluster?.relays.length ?? 1, ready)
    // Relays that refused it are asked last: the next one may be correct where they lied.
    const unrefused = byDistance.filter((l) => !o.refusals.has(l.relay as number))
    const pool = unrefused.length > 0 ? unrefused : byDistance
    const fresh = pool.filter((l) => !o.sentTo.includes(l.relay as number))
    const pick = (fresh[0] ?? pool[o.sentTo.length % pool.length]) as RelayLink
    const id = sessions.submit(member, pick, o.frame)
    if (id === undefined) return
    this.submits.set(id, { idHex, relay: pick.relay as number })
    if (this.submits.size > 50_000) this.submits.delete(this.submits.keys().next().value as number)
    if (o.sentTo.length === 0) this.o.news.outboxChanged()
    o.sentTo.push(pick.relay as number)
    o.lastSentAt = this.o.clock.now()
  }

  /**
   * The committee changed: relay indexes name other relays now. What was
   * sent and refused by index starts over (two relays of different epochs
   * must not add up to f+1 refusals), and every undecided envelope goes to
   * the new relays; one the old epoch ordered is decided once (the relays'
   * dedupe crosses the boundary).
   */
  committeeChanged(): void {
    this.submits.clear()
    for (const o of this.outgoing.values()) {
      if (o.final) continue
      o.sentTo.length = 0
      o.refusals.clear()
      o.accepted = false
    }
  }

  /** Periodic: envelopes never sent, or sent long enough ago without a decision, go to another relay. */
  resubmit(): void {
    const now = this.o.clock.now()
    this.carryOn(now)
    const readyRelays = new Set(this.o.sessions.links.filter((l) => l.ready).map((l) => l.relay))
    for (const [idHex, o] of this.outgoing) {
      if (o.final) {
        // Refused for good: not sent again; its replacement is (tried again here if it could not be made yet).
        if (!o.replacing) void this.replace(o)
        continue
      }
      const lastRelay = o.sentTo[o.sentTo.length - 1]
      const lost = lastRelay === undefined || (!o.accepted && !readyRelays.has(lastRelay))
      if (lost || now - o.lastSentAt >= this.o.resubmitAfterMs) this.send(idHex)
    }
  }

  /** A relay's answer (on `link`) to one of this outbox's submits. */
  answer(m: Extract<RelayMessage, { type: 'accepted' | 'error' }>, link: RelayLink): void {
    if (m.id === null) return
    const sent = this.submits.get(m.id)
    this.submits.delete(m.id)
    const o = sent === undefined ? undefined : this.outgoing.get(sent.idHex)
    // Only the relay it went to answers for it.
    if (!o || !sent || o.final || link.provenRelay !== sent.relay) return
    if (m.type === 'accepted') {
      if (!o.accepted) {
        o.accepted = true
        this.o.space.observeAccepted(this.o.clock.now() - o.lastSentAt)
        this.o.news.outboxChanged()
        this.o.space.progress()
      }
      return
    }
    // Busy relays and lost races are worth another try (the periodic resubmit does it).
    if (m.reason === 'rate-limited' || m.reason === 'unauthenticated') return
    if (m.reason === 'conflict') {
      // Final only once this client's own replica holds the slot decided for another envelope.
      if (this.o.space.replica.decided(o.env) !== null) void this.settle(o.env.idHex, { kind: 'refused', reason: m.reason, detail: m.detail })
      return
    }
    // A refusal on the envelope's own merits. One relay's word is not final: it may be one of the
    // f that lie (G7). Noted, and the envelope goes on to the next relay; f+1 of them is final.
    if (link.faulty) return
    o.refusals.set(sent.relay, { reason: m.reason, detail: m.detail })
    o.final = finalRefusal(o.refusals, this.faultyRelays())
    if (!o.final) return this.send(o.env.idHex)
    void this.replace(o)
  }

  /** f: how many relays may lie. */
  private faultyRelays(): number {
    const { sessions } = this.o
    return sessions.cluster?.f ?? Math.floor((sessions.links.length - 1) / 3)
  }

  /**
   * An envelope f+1 relays refused for good. Its sequence number must still
   * be taken, or every later envelope of this author would wait behind the
   * gap it leaves (and be dropped as `gap`, and sent again, for good). So it
   * is signed again with the same sequence number, clock and deps (the
   * author's chain goes on unchanged; deps are only hints everywhere, see
   * judgeClock): with its register stamps brought back to the relays' time
   * when a relay said `clock-ahead` (the data survives; the app is warned),
   * otherwise as a FILLER that changes nothing (and the app is told the
   * update was refused). The replacement replaces it in storage in one
   * write, so a restart sends the replacement, never the refused one. Two
   * envelopes for one (author, seq) are a conflict: should a relay have
   * taken the refused one, the audit keeps whichever comes first (G4).
   */
  private async replace(o: Outgoing): Promise<void> {
    const final = o.final
    const { space, crypto, records } = this.o
    const old = o.env
    if (!final || o.replacing || this.outgoing.get(old.idHex) !== o) return
    if (o.filler) {
      // Nothing of the app's to keep, and nothing smaller to fill the slot with.
      space.emitError(new SteadError(final.reason, `the relays refused envelope ${old.seq}, which only filled the sequence number of a refused one: ${final.detail}`))
      return this.settle(old.idHex, { kind: 'refused', ...final })
    }
    let content: { updates: readonly ObjectUpdate[]; safe: readonly SafeGroup[] } | undefined
    if ([...o.refusals.values()].some((r) => r.reason === 'clock-ahead')) {
      // Only the relays' time corrects the stamps: until a relay's clock was measured, wait (resubmit tries again).
      if (!this.o.sessions.clockMeasured) return
      const relaysNow = this.o.sessions.now()
      const seen = (key: string): number => Math.min(relaysNow, (space.replica.prospective(key) as LWWRegister | undefined)?.timestamp() ?? 0)
      const capped = capRegisterStamps(old, relaysNow, seen, 0)
      if (stampsChanged(old, capped)) content = capped
    }
    const filler = content === undefined
    o.replacing = true
    let env: Envelope
    let frame: Uint8Array
    let requests: ForwardedRequest[]
    try {
      env = await sealEnvelope(crypto, this.o.identity, { space: space.space, seq: old.seq, base: old.base, clock: old.clock, deps: old.deps, ...(content ?? FILLER) })
      frame = encodeEnvelope(env)
      if (this.outgoing.get(old.idHex) !== o) return
      // Requests of other tabs go with their updates; a filler carries none of them.
      requests = filler ? [] : records.requestsOf(old.idHex)
      await records.storage.write([records.outboxDelete(old.seq, old.idHex), ...records.outboxPut(old.seq, frame, env.idHex, requests)])
    } catch (err) {
      // Tried again at the next resubmit.
      o.replacing = false
      if (err instanceof SteadError) space.emitError(err)
      else space.storageFailed(err)
      return
    }
    space.storageWorks()
    if (this.outgoing.get(old.idHex) !== o) {
      // Decided while the replacement was stored: it must not be sent, now or after a restart.
      await records.storage.write([records.outboxDelete(old.seq, env.idHex)]).catch((err) => space.storageFailed(err))
      return
    }
    this.outgoing.delete(old.idHex)
    this.refusedIds.add(old.idHex)
    if (this.refusedIds.size > MAX_REFUSED_IDS) this.refusedIds.delete(this.refusedIds.values().next().value as string)
    // No commit will ever undo it prospectively: undone here (so its slot is free for the replacement, not a twin).
    space.notify(space.replica.discard(old.idHex))
    this.o.news.refused(old.idHex, final.reason, final.detail)
    if (filler) this.report(o, { kind: 'refused', ...final })
    else {
      space.emitError(
        new SteadError(
          'clock-skew',
          `the relays refused envelope ${old.seq} as clock-ahead (${final.detail}): its register writes were stamped again at the relays' time and sent again; they may now lose to writes made meanwhile`,
        ),
      )
    }
    this.add(env, frame, filler ? [] : o.safe.map((s) => s.waiter))
    space.notify(space.replica.receive(env).changed)
    this.o.news.sealed(frame, requests)
    this.send(env.idHex)
    space.progress()
  }

  // ---------------------------------------------------------------- decisions

  /** The storage changes a commit's decision of one of our envelopes needs (written with the commit). */
  decidedChanges(d: CommitResult['decisions'][number]): StorageChange[] {
    const o = this.outgoing.get(d.env.idHex)
    if (!o || (d.kind === 'dropped' && d.reason === 'gap')) return []
    return [this.o.records.outboxDelete(o.env.seq, o.env.idHex)]
  }

  /** Resolves what waited on one of this client's envelopes once it is decided or refused. */
  async settle(idHex: string, d: OwnDecision): Promise<void> {
    const o = this.outgoing.get(idHex)
    const { space } = this.o
    if (!o) return
    if (d.kind === 'dropped' && d.reason === 'gap') {
      // Refused for good meanwhile: its replacement takes its place (see `replace`).
      if (o.final) return
      // An earlier envelope of ours was late. This one's slot is still open, so it stays
      // ours: show it again and keep sending it (relays forget ordered ids 50 rounds after
      // they last ordered them, and the 64-round gap wait runs from the last ordering of
      // any copy, so the same bytes are ordered anew).
      space.notify(space.replica.receive(o.env).changed)
      this.o.news.received(o.frame)
      o.sentTo.length = 0
      o.accepted = false
      this.o.news.outboxChanged()
      this.send(o.env.idHex)
      return
    }
    this.outgoing.delete(idHex)
    this.o.news.outboxChanged()
    if (d.kind === 'refused') {
      // Refused outright: no commit will ever undo it prospectively, so undo it here.
      space.notify(space.replica.discard(o.env.idHex))
      this.o.news.refused(idHex, d.reason, d.detail)
    }
    this.report(o, d)
    if (d.kind !== 'committed') await this.o.records.storage.write([this.o.records.outboxDelete(o.env.seq, o.env.idHex)]).catch((err) => space.storageFailed(err))
    space.progress()
  }

  /** Tells the safe groups, the app and the settled listeners how an envelope ended (a filler's end is nobody's business). */
  private report(o: Outgoing, d: OwnDecision): void {
    const { space } = this.o
    const outcome = outcomeOf(o.env, o.regularUnits, d)
    if (!outcome || o.filler) return
    outcome.safe.forEach((r, i) => o.safe[i]?.waiter.resolve(r))
    if (outcome.error && o.regular.length) space.emitError(new RejectedError(outcome.error.reason, outcome.error.message, o.regular.map((r) => r.key)))
    space.emitSettled({ id: o.env.idHex, keys: keysOf(o), safe: outcome.safe, ...(outcome.index !== undefined ? { index: outcome.index } : {}) })
  }

  /** The space closes: its promises end here (the envelopes stay stored and are sent again by the next client). */
  close(err: SteadError): void {
    for (const o of this.outgoing.values()) for (const s of o.safe) s.waiter.reject(err)
  }
}

/**
 * What one decision means for an envelope of this client: one result per
 * safe group, the error its regular updates met, the index it took.
 * Undefined when there is nothing to report (a duplicate, a gap: it stays
 * pending). Shared by the leader's outbox and the other tabs (tabs.ts).
 */
export function outcomeOf(env: Envelope, regularUnits: number, d: OwnDecision): Pick<SettledUpdate, 'safe' | 'index'> & { error?: { reason: ErrorReason; message: string } } | undefined {
  if (d.kind === 'dropped' && (d.reason === 'gap' || d.reason === 'duplicate')) return undefined
  if (d.kind === 'committed') {
    const safe = env.safe.map((_, i): SafeResult => {
      const u = d.units[regularUnits + i]
      return u && u.status === 'rejected' ? { status: 'rejected', reason: u.reason, detail: u.detail } : { status: 'committed', index: d.index }
    })
    const refused = d.units.filter((u): u is Extract<typeof u, { status: 'rejected' }> => u.unit < regularUnits && u.status === 'rejected')
    const first = refused[0]
    return { safe, index: d.index, ...(first ? { error: { reason: first.reason, message: `${refused.length} regular updates of envelope ${env.seq} were rejected by the audit: ${first.detail}` } } : {}) }
  }
  const reason: ErrorReason = d.kind === 'superseded' ? 'conflict' : d.reason
  const detail = d.kind === 'superseded' ? `another envelope took sequence number ${env.seq}` : d.detail
  return { safe: env.safe.map((): SafeResult => ({ status: 'rejected', reason, detail })), error: { reason, message: `envelope ${env.seq} will never commit: ${detail}` } }
}

function keysOf(o: Outgoing): string[] {
  return o.filler ? [] : envelopeKeys(o.env)
}

/**
 * Whether relays' refusals of one envelope on its merits (`refusals`, by
 * relay index) are final, and what to report: final once f+1 distinct
 * relays refused it, so at least one of them is correct (fewer may all be
 * liars censoring it, G7; with f = 0, the one relay's refusal is final).
 * The reason is the one most of them gave (the first given on a tie); the
 * detail is each relay's own, or just it when one relay refused.
 * Undefined while it is not final.
 */
export function finalRefusal(refusals: ReadonlyMap<number, { reason: ErrorReason; detail: string }>, f: number): { reason: ErrorReason; detail: string } | undefined {
  if (refusals.size <= f) return undefined
  const counts = new Map<ErrorReason, number>()
  for (const r of refusals.values()) counts.set(r.reason, (counts.get(r.reason) ?? 0) + 1)
  let reason = refusals.values().next().value?.reason as ErrorReason
  for (const [r, n] of counts) if (n > (counts.get(reason) ?? 0)) reason = r
  if (refusals.size === 1) return { reason, detail: refusals.values().next().value?.detail as string }
  // Relays' details usually start with their reason already (a SteadError's message).
  const said = (r: { reason: ErrorReason; detail: string }): string => (r.detail.startsWith(`${r.reason}:`) ? r.detail : `${r.reason}: ${r.detail}`)
  return { reason, detail: `refused by ${refusals.size} relays: ${[...refusals].map(([relay, r]) => `relay ${relay}: ${said(r)}`).join('; ')}` }
}

export { FILLER_KEY }
const FILLER = FILLER_CONTENT

/** Whether capping changed any stamp (capRegisterStamps keeps the ops it leaves alone). */
function stampsChanged(a: { updates: readonly ObjectUpdate[]; safe: readonly SafeGroup[] }, b: { updates: readonly ObjectUpdate[]; safe: readonly SafeGroup[] }): boolean {
  return a.updates.some((u, i) => u.ops.some((op, j) => op !== b.updates[i]?.ops[j])) || a.safe.some((g, i) => g.updates.some((u, j) => u.op !== b.safe[i]?.updates[j]?.op))
}

/** Refused ids remembered so that a relay or peer passing one on does not show it again. */
const MAX_REFUSED_IDS = 1024

/** Audit units before an envelope's first safe group: its regular operations (compacted). */
export function regularUnitsOf(env: Envelope): number {
  return env.updates.reduce((n, u) => n + u.ops.length, 0)
}

/** The keys an envelope touches. */
export function envelopeKeys(env: Envelope): string[] {
  return [...new Set([...env.updates.map((u) => u.key), ...env.safe.flatMap((g) => g.updates.map((u) => u.key))])]
}

/**
 * Relay links in a space's order of preference: its home relay (spread over
 * the cluster by space name), then the ones after it. Links must know their
 * relay index.
 */
export function fromHome(space: string, n: number, links: readonly RelayLink[]): RelayLink[] {
  let h = 0
  for (let i = 0; i < space.length; i++) h = (h * 31 + space.charCodeAt(i)) >>> 0
  const home = h % n
  return [...links].sort((a, b) => (((a.relay as number) - home + n) % n) - (((b.relay as number) - home + n) % n))
}

/**
 * Register stamps this far past the relays' time are capped when sealed:
 * well inside what relays accept (MAX_CLOCK_AHEAD_MS, five minutes), far
 * above what honest clocks disagree by.
 */
const STAMP_SLACK_MS = 60_000

/**
 * A batch with every register write stamped more than STAMP_SLACK_MS past
 * `relaysNow` (the relays' time as measured) brought back to it, yet still
 * later than the register's latest write here (`seen`): drafts stamped by
 * the device clock alone (another tab, or before the relays answered) on a
 * device whose clock runs fast would otherwise win every concurrent write,
 * or be refused by the relays as `clock-ahead`.
 */
export function capRegisterStamps(batch: { updates: readonly ObjectUpdate[]; safe: readonly SafeGroup[] }, relaysNow: number, seen: (key: string) => number, slackMs = STAMP_SLACK_MS): { updates: ObjectUpdate[]; safe: SafeGroup[] } {
  const cap = (key: string, op: AnyOp): AnyOp => {
    if (!Array.isArray(op) || op[0] !== 's' || typeof op[2] !== 'number' || op[2] <= relaysNow + slackMs) return op
    return ['s', op[1], Math.max(Math.round(relaysNow), seen(key) + 1)] as AnyOp
  }
  return {
    updates: batch.updates.map((u) => (u.decl.type === 'register' ? { ...u, ops: u.ops.map((op) => cap(u.key, op)) } : u)),
    safe: batch.safe.map((g) => ({ ...g, updates: g.updates.map((u) => (u.decl.type === 'register' ? { ...u, op: cap(u.key, u.op) } : u)) })),
  }
}

/** Heads kept for the next envelope; more concurrent writers than this go partly uncited. */
const MAX_HEADS = 4 * DEFAULT_LIMITS.maxDeps


/** Whether a committed envelope still claims something the stable history up to now does not hold. */
function claimsBeyond(h: Envelope, committed: (a: string) => number): boolean {
  if (h.seq > committed(h.authorId)) return true
  for (const [a, n] of h.clock) if (n > committed(a)) return true
  return false
}
