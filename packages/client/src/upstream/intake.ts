import {
  ReliableReplica,
  SteadError,
  asSigned,
  attestedDecision,
  auditStateHash,
  decodeAuditState,
  encodeAuditState,
  type AuditState,
  bytesEqual,
  decode,
  decodeAttestation,
  encode,
  openEnvelope,
  toHex,
  type CommitResult,
  type Crypto,
  type Envelope,
  type RelayMessage,
  type HostClock,
  type HostTimer,
} from '@stead/core'
import type { VerifiedCatchUp, VerifiedSnapshot } from './bootstrap.ts'
import { TrustError } from '../errors.ts'
import { envelopeKeys, fromHome, type Outbox, type SpaceNews } from './outbox.ts'
import type { ClientRecords, CommitRecord } from './persist.ts'
import { CommitQuorum, type ChainPosition, type CommitCandidate } from './quorum.ts'
import type { RelaySessions } from '../transport/sessions.ts'
import type { RelayLink } from '../transport/transport.ts'
import type { ClockProofs } from './proofs.ts'
import { ReceivedInbox } from './inbox.ts'
import { UnreadableRelays } from './unreadable.ts'
import type { StorageChange } from '../storage/types.ts'
import { CausalBuffer, baseKey, type Held } from './causal-buffer.ts'
import { CertifiedCommits, checkCertificate } from './peer-catch-up.ts'
import { openBatch, openTrusted } from './trusted.ts'
import type { AttestedCommit, AttestedState, Certified } from '../peers/peer-messages.ts'
import type { PeerHub, PeerSource } from '../peers/peers.ts'
import type { SpacePort } from '../space/space-port.ts'
import { Pacing, certifyDelta, type Freshness } from './pacing.ts'

interface IntakeOptions {
  space: SpacePort
  records: ClientRecords
  crypto: Crypto
  sessions: RelaySessions
  outbox: Outbox
  /** Where the clock certificates of applied commits go. */
  proofs: ClockProofs
  checkpointEvery: number
  news: SpaceNews
  clock: HostClock
  /** How long a commit f+1 relays attested may wait for the frame source's envelopes before another relay becomes the source. */
  resubmitAfterMs: number
  /** A snapshot of the space that f+1 relays vouch for, from relays in this order of preference; undefined if there is none. */
  bootstrap: (relays: ReadonlyArray<{ relay: number | undefined; url: string }>) => Promise<VerifiedSnapshot | undefined>
  /**
   * What changed since the space's stable index, as a delta whose result
   * f+1 relays vouch for (each object as ops or state, BENDY), from relays
   * in this order of preference; undefined if none could serve one.
   */
  catchUp: (relays: ReadonlyArray<{ relay: number | undefined; url: string }>) => Promise<VerifiedCatchUp | undefined>
  /** Options of the space's replica (a snapshot starts a new one). */
  replicaOptions: { space: string; historyLimit?: number }
  /** The stable index of a head f+1 relays signed (a paced space checks its source's progress against it). */
  quorumIndex: (timeoutMs: number) => Promise<number>
  /** The client's peers, when it syncs peer to peer: what peers send is passed on to the others. */
  peers: PeerHub | undefined
  /** The certificate of the commit the stored stable state is at, if it had one: what peers that are behind are handed with the state. */
  certified: Certified | undefined
  /** The space was subscribed to on `link` (the relay now takes announcements for it). */
  subscribed(link: RelayLink): void
}

/**
 * What a space hears from the relays: envelopes (verified, shown
 * prospectively, kept until decided) and commits (believed at f+1 matching
 * attestations, replayed through the local audit, checked against what the
 * relays attested, stored, and used to settle the outbox's envelopes).
 *
 * Envelope frames come from one relay, the source (the space's home relay
 * when it is up, where the space's clients also send their envelopes); the
 * others send attestations only, so each update is downloaded once. A source that sends frames the attested batch does not
 * bind is faulty; one that leaves an attested commit without its frames
 * for resubmitAfterMs is passed over for the next relay.
 */
export class RelayIntake {
  private quorum: CommitQuorum | undefined
  /** The relay this space takes envelope frames from. */
  private source: number | undefined
  /** Since when an attested commit has waited for the source's frames (undefined: nothing waits). */
  private starvedSince: number | undefined
  /** Compact attestations that match no attestation the source sent (yet): relay → round → signature. */
  private readonly unmatched = new Map<number, Map<number, Uint8Array>>()
  /** The attestation bytes of the latest applied rounds: a relay's attestation that comes after its round was applied is checked against them. */
  private readonly applied = new Map<number, Uint8Array>()
  /**
   * This client's decided envelopes whose outcomes wait for 2f+1 relays to
   * attest their commit (see confirm), oldest first. Then at least f+1
   * correct relays applied it, and every quorum read that starts later sees
   * it (the client README's "Quorum reads" has the argument).
   */
  private readonly awaitingAcks: Array<{ round: number; fromIndex: number; decisions: Array<CommitResult['decisions'][number]> }> = []
  /** Per relay, the latest round of this space it attested with the bytes this client applied: it applied every commit up to there. */
  private readonly attestedUpTo = new Map<number, number>()
  private settling: Promise<void> = Promise.resolve()
  private readonly verifying = new Set<string>()
  /** Received envelopes, stored in batches so a restart shows them again. */
  private readonly inbox: ReceivedInbox
  /** Other authors' envelopes waiting for their deps before they show. */
  private readonly causal = new CausalBuffer()
  /** The latest applied commits with their relays' signatures: what a peer that is behind gets. */
  private readonly certified = new CertifiedCommits()
  /** The commit run in progress (close awaits it), and whether another pass is due once it ends. */
  private applying: { run: Promise<void>; again: boolean } | undefined
  private closed = false
  /**
   * A space opened with nothing stored first asks for a verified snapshot;
   * so does one whose position the relays no longer keep commits for
   * (`pruned`). Commits are followed once that settles.
   */
  private bootstrap: 'due' | 'running' | 'settled'
  /**
   * Whether a session was up since the last moment none was (`online`).
   * A space with a stable state that comes back to the relays (opened from
   * storage, or after every session was lost) first catches up by delta
   * (`catch-up-due` until it starts): the objects that changed a lot come
   * as their state, not as every commit it missed. Commits are followed
   * from where that leaves it.
   */
  private relays: 'offline' | 'catch-up-due' | 'online' = 'offline'
  /** Set while the relays keep no commits from our position: the stable index their feeds start from, and when to try again. */
  private pruned: { from: number; retryAt: number; problem?: string } | undefined
  /** Relays that said this client may not read the space: not followed (no frames, no resubscribing) except once per new session, in case the policy changed meanwhile. */
  private readonly unreadable: UnreadableRelays
  /** Whether the space follows deltas at a freshness bound (BENDY's live stream) instead of every envelope and commit. */
  private readonly pacing = new Pacing()

  private readonly o: IntakeOptions
  constructor(o: IntakeOptions) {
    this.o = o
    const { space } = o
    this.inbox = new ReceivedInbox({ records: o.records, clock: o.clock, pending: (idHex) => space.replica.isPending(idHex), storageWorks: () => space.storageWorks(), storageFailed: (err) => space.storageFailed(err) })
    this.unreadable = new UnreadableRelays(space, () => o.sessions.cluster?.f ?? 0)
    const { position } = o.space
    this.bootstrap = position.stableIndex === 0 && position.lastRound === 0 ? 'due' : 'settled'
    if (o.certified && position.lastRound > 0) {
      const a = decodeAttestation(o.certified.attestation)
      if (a.round === position.lastRound && a.toIndex === position.stableIndex) this.certified.jumped(o.certified)
    }
  }

  /** A relay session is ready: follow the space there from its stable index (with frames if it is, or should now be, the source). */
  ready(link: RelayLink): void {
    this.quorum ??= new CommitQuorum(this.o.sessions.cluster?.f ?? 0)
    // The first session up since there was none (or since opening): the space may be far behind.
    if (this.relays === 'offline') this.relays = this.o.space.position.stableIndex > 0 ? 'catch-up-due' : 'online'
    if (this.bootstrap === 'due' && !this.pruned) this.startBootstrap()
    else if (this.bootstrap === 'settled' && this.relays === 'catch-up-due') this.startCatchUp()
    if (this.bootstrap !== 'settled') return
    // A relay that said the space is unreadable is asked once more on each new session (the policy may have changed), never as the source.
    if (this.unreadable.has(link)) return this.follow(link)
    const preferred = this.byPreference().filter((l) => l.relay === link.relay || l.relay === this.source)[0]
    const current = this.source === undefined ? undefined : this.o.sessions.linkTo(this.source)
    if (!current?.ready || preferred === link) this.setSource(link)
    else this.follow(link)
  }

  /**
   * Instead of replaying a space's whole history, a client that holds
   * nothing of it starts from the latest snapshot f+1 relays vouch for,
   * then follows commits from there. Without one (a new space, relays that
   * disagree or do not answer) it replays from the start.
   */
  private startBootstrap(): void {
    this.getAhead(
      () => this.o.bootstrap(this.everyRelay()).then((snapshot) => (snapshot && !this.closed ? this.exclusive(() => this.adopt(snapshot)) : undefined)),
      'a verified snapshot could not be adopted',
      () => {
        if (!this.pruned) return true
        // Commits brought the space to where the relays keep them after all: follow them from here.
        if (this.o.space.position.stableIndex >= this.pruned.from) {
          this.clearPruned()
          return true
        }
        // The relays keep no commits from here and no snapshot could be verified: nothing to follow yet.
        this.bootstrap = 'due'
        this.pruned.retryAt = this.o.clock.now() + this.o.resubmitAfterMs
        this.pruned.problem = `the relays keep commits of ${this.o.space.space} only from stable index ${this.pruned.from} on, and no snapshot f+1 relays vouch for could be had yet; retrying`
        this.o.space.setProblem(this.pruned.problem)
        return false
      },
    )
  }

  /** The relays' pruning is behind the space now: its problem (if it is still the one shown) goes with it. */
  private clearPruned(): void {
    if (this.pruned?.problem !== undefined && this.o.space.status.problem === this.pruned.problem) this.o.space.setProblem(undefined)
    this.pruned = undefined
  }

  /** Catches up by a verified delta (see `relays`), then follows commits from where it leaves the space, or from where it was. */
  private startCatchUp(): void {
    this.relays = 'online'
    this.getAhead(
      async () => {
        // Commits wait while it runs: a relay that answers slowly, or never, may hold them up this long, no more.
        let timer: HostTimer | undefined
        const late = new Promise<undefined>((resolve) => (timer = this.o.clock.setTimer(CATCH_UP_TIMEOUT_MS, () => resolve(undefined))))
        const found = await Promise.race([this.o.catchUp(this.everyRelay()), late]).finally(() => timer?.cancel())
        if (found && !this.closed) await this.exclusive(() => this.adoptDelta(found))
      },
      'a verified delta could not be applied',
      () => true,
    )
  }

  /**
   * Runs one way of getting ahead of the commits (a snapshot or a delta)
   * while nothing is followed; then, if `follow` says so, follows commits
   * from wherever the space now is.
   */
  private getAhead(step: () => Promise<void>, failure: string, follow: () => boolean): void {
    this.bootstrap = 'running'
    void step()
      .catch((err: unknown) => this.o.space.emitError(err instanceof SteadError ? err : new SteadError('malformed', `${failure}: ${String(err)}`)))
      .finally(() => {
        if (this.closed || !follow()) return
        this.bootstrap = 'settled'
        for (const link of this.byPreference()) this.ready(link)
      })
  }

  /** Applies a verified delta to the space's replica, keeps what is pending on top, and stores it. */
  /** Applies a verified delta (see the class comment); whether the space now stands where it ends. */
  private async adoptDelta(found: VerifiedCatchUp, save = true): Promise<boolean> {
    const { space, outbox } = this.o
    const { attestation: a, delta } = found
    if (space.position.stableIndex !== delta.fromIndex || delta.toIndex < delta.fromIndex) return false
    // Where it already stands (a quiet space's heartbeat); a delta that leaves the index as it is may still end at a later commit (one that only parked envelopes).
    if (a.round <= space.position.lastRound) return delta.toIndex === delta.fromIndex
    // Only the commits say how this client's own envelopes fared (a safe update's outcome): if the
    // delta would decide one of them, the commits are followed instead.
    const decidesOwn = space.replica.pendingEnvelopes().some((env) => outbox.has(env.idHex) && (delta.authors.get(env.authorId)?.seq ?? 0) >= env.seq)
    if (decidesOwn) return false
    const decided = space.replica.applyDelta((b) => this.o.crypto.sha256(b), delta, a.round)
    // Only what the delta changed shows anew: its objects, and those of the pending envelopes it decided.
    const changed = new Set([...delta.objects.keys(), ...decided.flatMap(envelopeKeys)])
    await this.jumped(space.replica, { stableIndex: a.toIndex, lastRound: a.round }, decided, changed, save, found.vouched)
    return true
  }

  /**
   * The stable state jumped to `position` past commits it never applied (a
   * snapshot or a delta), `replica` now holding it: the space shows it; the
   * skipped rounds' compact attestations can no longer be matched (they are
   * no dissent); what waited for envelopes the jump decided, or for its
   * stable index, shows; and the replica is stored, those envelopes' inbox
   * records forgotten.
   */
  private async jumped(replica: ReliableReplica, position: { stableIndex: number; lastRound: number }, decided: readonly Envelope[], changed?: ReadonlySet<string>, save = true, certificate?: Certified): Promise<void> {
    const { space, records } = this.o
    space.adopt(replica, position, changed)
    this.certified.jumped(certificate)
    this.quorum?.prune(position)
    for (const rounds of this.unmatched.values()) for (const r of [...rounds.keys()]) if (r <= position.lastRound) rounds.delete(r)
    this.starvedSince = undefined
    for (const env of decided) {
      this.causal.drop(env.idHex)
      for (const h of this.causal.arrived(env.idHex)) this.deliver(h)
    }
    // Deps that committed inside the jump without ever arriving here are in the stable state now.
    for (const dep of this.causal.awaited()) if (this.o.space.replica.hasCommitted(dep)) for (const h of this.causal.arrived(dep)) this.deliver(h)
    for (const h of this.causal.reachedBase(position.stableIndex)) this.deliver(h)
    const forgotten = decided.filter((env) => !this.o.outbox.has(env.idHex)).map((env) => records.inboxDelete(env.idHex))
    // Unsaved (a paced delta between checkpoints): storage keeps the last checkpoint, from which a restart catches up.
    this.pacing.stored(save, this.o.clock.now())
    try {
      await records.storage.write(save ? [...records.checkpoint(replica.checkpoint(), position), records.certified(certificate), ...forgotten] : forgotten)
      space.storageWorks()
    } catch (err) {
      space.storageFailed(err)
    }
    this.o.news.rebased()
  }

  /**
   * The relay keeps this space's commits only from stable index `from` on,
   * past our position: start again from a verified snapshot.
   */
  prunedAt(from: number): void {
    if (this.closed || from <= this.o.space.position.stableIndex || this.bootstrap === 'running') return
    this.pruned = { from, retryAt: 0 }
    this.startBootstrap()
  }

  /**
   * `link`'s relay says this client may not read the space (its policy
   * does not name it, or no longer does): it is no longer followed, and
   * another relay becomes the frame source. Once f+1 relays said it (one of
   * them is correct), the app hears it: an `unauthorized` error through the
   * space's onError, and the space's status shows the problem until a relay
   * serves the space again.
   */
  unreadableAt(link: RelayLink, detail: string): void {
    if (this.closed || link.relay === undefined) return
    this.unreadable.add(link, detail)
    if (link.relay === this.source) {
      this.source = undefined
      const next = this.byPreference()[0]
      if (next) this.setSource(next)
    }
  }

  /** Makes a verified snapshot the space's stable state, keeps what is pending on top, and stores it. */
  private async adopt(snapshot: VerifiedSnapshot, fromPeer?: Certified): Promise<void> {
    const { space, outbox } = this.o
    const a = snapshot.attestation
    // A fresh space takes any snapshot; one the relays pruned past takes one ahead of it (nothing is followed meanwhile);
    // one that a peer answered with a snapshot, a snapshot ahead of it that decides none of its own envelopes (see snapshotFromPeer).
    const fresh = space.position.stableIndex === 0 && space.position.lastRound === 0
    if (!fresh && !fromPeer && (!this.pruned || a.toIndex < this.pruned.from)) return
    const replica = ReliableReplica.fromAuditState(this.o.replicaOptions, snapshot.state, a.round)
    const decidedOwn: Envelope[] = []
    const decided: Envelope[] = []
    for (const env of space.replica.pendingEnvelopes()) {
      const own = outbox.has(env.idHex)
      if (replica.decided(env)) {
        // One of this client's envelopes decided inside the snapshot: its outcome is only in the
        // commits. A fresh space replays them instead; past the retention window they are gone.
        if (own && (fresh || fromPeer)) return
        if (own) decidedOwn.push(env)
        decided.push(env)
        continue
      }
      replica.receive(env, own ? {} : { expires: true })
    }
    this.clearPruned()
    for (const env of decidedOwn) {
      await outbox.settle(env.idHex, { kind: 'refused', reason: 'pruned', detail: `envelope ${env.seq} was decided while this client was away longer than the relays keep commits; its effect, if it committed, is in the stable state` })
    }
    await this.jumped(replica, { stableIndex: a.toIndex, lastRound: a.round }, decided, undefined, true, fromPeer ?? snapshot.vouched)
  }

  /** Sessions came or went: once none is up, the next one to come up starts with a catch-up. */
  /**
   * The committee changed: relay indexes name other relays, and f may
   * differ. Attestations counted by index start over (a quorum is made with
   * the new f at the next session), and so does the source; commits are
   * followed from the stable index on the new sessions.
   */
  committeeChanged(): void {
    this.quorum = undefined
    this.source = undefined
    this.starvedSince = undefined
    this.unmatched.clear()
    this.attestedUpTo.clear()
    this.unreadable.forgetAll()
    // Outcomes of ours waiting for acknowledgements of a commit before the boundary have them now.
    if (this.awaitingAcks.length) void this.settleConfirmed().catch((err: unknown) => this.o.space.storageFailed(err))
  }

  sessionsChanged(): void {
    // A catch-up still due stays due.
    if (this.byPreference().length === 0 && this.relays === 'online') this.relays = 'offline'
  }

  /** Periodic: a source that went away, or left an attested commit without frames too long, is passed over. */
  tick(): void {
    if (this.pruned && this.bootstrap === 'due' && (this.o.clock.now() >= this.pruned.retryAt || this.o.space.position.stableIndex >= this.pruned.from)) this.startBootstrap()
    if (this.closed || !this.quorum || this.bootstrap !== 'settled') return
    this.repace()
    const current = this.source === undefined ? undefined : this.o.sessions.linkTo(this.source)
    if (!current?.ready || current.faulty) {
      const best = this.byPreference()[0]
      if (best) this.setSource(best)
      return
    }
    // Paced: a source that sends no delta, not even the heartbeat of a quiet space, is passed over.
    if (this.pacing.on) {
      const now = this.o.clock.now()
      // Silent (or a relay that does not know `pace`): every update from the others for a while, then another source.
      if (this.pacing.silent(now, this.o.resubmitAfterMs)) {
        this.nextSource()
        this.pacing.coolDown(now)
        this.repace()
      }
      else if (this.pacing.progressCheckDue(now)) void this.checkPacedProgress()
      return
    }
    if (this.starvedSince === undefined || this.o.clock.now() - this.starvedSince < this.o.resubmitAfterMs) return
    this.nextSource()
  }

  /** The next relay in the space's order of preference becomes the source. */
  private nextSource(): void {
    const links = this.byPreference()
    const at = links.findIndex((l) => l.relay === this.source)
    const next = links[(at + 1) % links.length]
    if (next && next.relay !== this.source) this.setSource(next)
    this.starvedSince = this.o.clock.now()
    this.pacing.heard(this.o.clock.now())
  }

  /**
   * How late others' updates may reach this client (BENDY's live stream),
   * or undefined for every envelope as it comes: see Pacing for when the
   * space is actually paced.
   */
  setFreshness(freshness: Freshness | undefined): void {
    const was = this.pacing.freshness
    this.pacing.set(freshness)
    const source = this.source === undefined ? undefined : this.o.sessions.linkTo(this.source)
    // Already paced at another bound or mode: the source is told the new one.
    if (this.pacing.on && freshness && (freshness.ms !== was?.ms || freshness.mode !== was?.mode) && source?.ready) this.follow(source)
    this.repace()
  }

  /** Paces the space's subscriptions, or stops, as Pacing says now (the outbox, tabs and catch-ups change it). */
  repace(): void {
    if (this.closed || this.bootstrap !== 'settled' || !this.quorum) return
    const now = this.o.clock.now()
    const busy = this.o.outbox.size > 0 || this.awaitingAcks.length > 0 || this.pruned !== undefined || this.o.news.followed?.() === true
    const due = this.pacing.due(now, busy)
    if (due === this.pacing.on) return
    this.pacing.switched(due, now)
    // Compact attestations heard while paced match no commit this client will see.
    this.unmatched.clear()
    this.starvedSince = undefined
    for (const link of this.byPreference()) this.follow(link)
  }

  /** Passes over a paced source that held the space below a head f+1 relays reported a check ago (see Pacing.progressCheckDue). */
  private async checkPacedProgress(): Promise<void> {
    const before = this.pacing.reported
    const head = await this.o.quorumIndex(this.o.resubmitAfterMs).catch(() => 0)
    if (this.closed || !this.pacing.on) return
    const at = this.o.space.position.stableIndex
    // Not marked faulty: a correct relay far behind the others (restarted, catching up) looks the same.
    if (before !== undefined && at < before) this.nextSource()
    this.pacing.reported = head > at ? head : undefined
  }

  /** The source cannot pace the space from here: follow commits for a while. */
  unpaced(link: RelayLink): void {
    if (this.closed || !this.pacing.on || link.relay !== this.source) return
    this.pacing.coolDown(this.o.clock.now())
    this.repace()
  }

  /**
   * A paced delta from the source: believed once f+1 relays signed its
   * attestation and it leads to the attested state (see certifyDelta),
   * applied like a catch-up, then acknowledged (the relay times its
   * deliveries by it). One that starts elsewhere (the space moved by a
   * commit meanwhile) has the source pace again from here.
   */
  private onDelta(link: RelayLink, m: Extract<RelayMessage, { type: 'delta' }>): Promise<void> {
    return this.pacing.inTurn(async () => {
      const cluster = this.o.sessions.cluster
      if (this.closed || !this.pacing.on || link.relay !== this.source || !cluster) return
      const { space } = this.o
      const checked = await certifyDelta(this.o.crypto, cluster, space.replica, m)
      if (this.closed || !this.pacing.on || link.relay !== this.source) return
      if (checked === 'stale') {
        if (this.pacing.pacedFrom !== space.position.stableIndex) this.follow(link)
        return
      }
      if ('faulty' in checked) return link.markFaulty(checked.faulty)
      this.pacing.heard(this.o.clock.now())
      // Not applied (it would decide an update of ours: the commits say how that fared): the source stands
      // past this client now, and its next delta, stale, has it pace again from here.
      const now = this.o.clock.now()
      if (!(await this.adoptDelta(checked, this.pacing.saveDue(now)))) this.pacing.pacedFrom = undefined
      else link.send({ type: 'applied', space: space.space, index: checked.attestation.toIndex })
      // A quiet space's heartbeat writes what the last deltas left unsaved, once it is due.
      if (this.pacing.unsaved && this.pacing.saveDue(this.o.clock.now())) await this.saveCheckpoint()
    }).catch((err: unknown) => this.o.space.storageFailed(err))
  }

  /** Every relay not known faulty, to ask over HTTP (not only those whose session is up yet): the preferred ones first. */
  private everyRelay(): Array<{ relay: number | undefined; url: string }> {
    const known = this.byPreference()
    return [...known, ...this.o.sessions.links.filter((l) => !known.includes(l) && !l.faulty)].map((l) => ({ relay: l.provenRelay, url: l.url }))
  }

  /** Ready, trusted links that may serve the space (none that said it is unreadable), in the space's order of preference. */
  private byPreference(): RelayLink[] {
    const { sessions, space } = this.o
    return fromHome(space.space, sessions.cluster?.relays.length ?? 1, sessions.links.filter((l) => l.ready && !l.faulty && l.relay !== undefined && !this.unreadable.has(l)))
  }

  /** Makes `link` the frame source: it is subscribed with frames from the stable index; the previous source goes to attestations only. */
  private setSource(link: RelayLink): void {
    const previous = this.source === undefined ? undefined : this.o.sessions.linkTo(this.source)
    this.source = link.relay
    if (previous && previous !== link && previous.ready) this.follow(previous)
    this.follow(link)
  }

  private follow(link: RelayLink): void {
    if (this.pacing.on) return this.followPaced(link)
    const frames = link.relay === this.source
    // A relay that attests only is followed from the oldest commit an outcome of ours still waits on, so
    // a session that comes up after that commit was applied still attests it (compact attestations are cheap).
    const waiting = frames ? undefined : this.awaitingAcks[0]?.fromIndex
    const fromIndex = Math.min(this.o.space.position.stableIndex, waiting ?? Number.MAX_SAFE_INTEGER)
    // Every relay's own clock votes, from its feed: validator certificates come together here as envelopes stream in.
    link.send({ type: 'subscribe', space: this.o.space.space, fromIndex, frames, ...(frames ? { refs: true } : {}), votes: true })
    this.o.subscribed(link)
  }

  /** Paced, the source sends deltas from the stable index, and the other relays nothing. */
  private followPaced(link: RelayLink): void {
    const { space, position } = this.o.space
    if (link.relay !== this.source) {
      link.send({ type: 'unsubscribe', space })
      return
    }
    const { ms, mode } = this.pacing.freshness as Freshness
    this.pacing.pacedFrom = position.stableIndex
    link.send({ type: 'pace', space, fromIndex: position.stableIndex, freshnessMs: ms, ...(mode && mode !== 'adaptive' ? { mode } : {}) })
    this.o.subscribed(link)
  }

  message(link: RelayLink, m: Extract<RelayMessage, { type: 'envelope' | 'commit' | 'attest' | 'delta' }>): void {
    if (this.closed || m.space !== this.o.space.space) return
    this.unreadable.remove(link)
    if (m.type === 'envelope') void this.onEnvelope(link, m.envelope)
    else if (m.type === 'delta') void this.onDelta(link, m)
    else if (m.type === 'attest') void this.onAttest(link, m.round, m.sig)
    else void this.onCommit(link, m)
  }

  /**
   * An envelope frame from a peer (peers.ts): checked like a relay's, and
   * its clock judged against what this client holds before it shows. The
   * deps it names that are not here are asked of that peer.
   */
  fromPeer(frame: Uint8Array, source: PeerSource): void {
    if (!this.closed) void this.onEnvelope(source, frame, source)
  }

  private async onEnvelope(from: { markFaulty(why: string): void }, frame: Uint8Array, peer?: PeerSource): Promise<void> {
    const { space, crypto, outbox } = this.o
    let signed
    try {
      signed = asSigned(decode(frame))
    } catch (err) {
      return from.markFaulty(`sent an undecodable envelope: ${(err as Error).message}`)
    }
    const idHex = toHex(crypto.sha256(signed.bytes))
    // One of ours that f+1 relays refused and another envelope replaced (a relay that took it may still pass it on): never shown again.
    if (outbox.has(idHex) || outbox.refused(idHex) || space.replica.isPending(idHex) || this.verifying.has(idHex) || this.causal.has(idHex)) return
    // A peer replaying what is decided or refused costs no signature check.
    if (peer && (this.causal.badClock(idHex) || space.replica.hasCommitted(idHex))) return
    this.verifying.add(idHex)
    let env: Envelope
    try {
      env = await openEnvelope(crypto, signed)
    } catch {
      // A forged envelope: the relay that certified and sent it is lying (or passed on a client's garbage).
      return from.markFaulty('sent an envelope that does not verify')
    } finally {
      this.verifying.delete(idHex)
    }
    if (this.closed) return
    if (env.space !== space.space) return peer?.markFaulty(`sent an envelope of space ${env.space} as one of ${space.space}`)
    // Shown only after what it follows: its deps, and the stable history up to its base (what its
    // clock counts as seen), wait here if they have not arrived. So this client never shows what it
    // could not yet cite in its own next envelope.
    const deps = env.deps.map(toHex).filter((d) => !this.isHere(d))
    const missing = env.base > space.replica.stableIndex ? [...deps, baseKey(env.base)] : deps
    if (missing.length === 0) return this.deliver({ env, frame, source: peer })
    if (peer && deps.length > 0) this.o.peers?.want(space.space, peer.peer, deps)
    for (const h of this.causal.hold(env, frame, missing, this.o.clock.now(), peer)) this.deliver(h)
    this.armCausalTimer()
  }

  /**
   * What a peer at `at` lacks of the attested chain, within about
   * `maxBytes`: the commits that follow it, or, when it is before the
   * commits this space keeps, the space's state with the certificate of the
   * commit it is at. Undefined when the peer lacks nothing this space can
   * prove.
   */
  catchUpFor(at: ChainPosition, maxBytes: number, withState: boolean): { commits: AttestedCommit[] } | { snapshot: AttestedState } | undefined {
    if (this.closed) return undefined
    const after = this.certified.after(at, maxBytes)
    if (after !== 'gap') return after.length > 0 ? { commits: after } : undefined
    const latest = this.certified.latest
    if (!latest || !withState) return undefined
    // Too large for one peer message: the peer waits for the relays.
    const state = this.certified.state(this.o.space.position.lastRound, maxBytes, () => encodeAuditState(this.o.space.replica.auditState()))
    return state && { snapshot: { ...latest, state } }
  }

  /**
   * Attested commits a peer sent: each believed on the signatures of f+1
   * relays it carries and its frames checked against the attested batch,
   * then applied as the relays' own are (the local audit replayed and
   * checked against the attestation). A peer that sends a bad signature or
   * frames the batch does not bind is faulty. Resolves once they are
   * applied.
   */
  async commitsFromPeer(commits: readonly AttestedCommit[], source: PeerSource): Promise<void> {
    const cluster = this.o.sessions.cluster
    // A snapshot is being fetched: commits from before it would race it. A paced space follows deltas, not commits.
    if (!cluster || this.closed || this.bootstrap === 'running' || this.pacing.on) return
    const quorum = (this.quorum ??= new CommitQuorum(cluster.f))
    // Only a run that follows this space's position, as an honest peer sends it: a Byzantine one cannot fill the
    // quorum's per-relay room with genuine later commits while it withholds the next one.
    let at: ChainPosition = this.o.space.position
    for (const c of commits) {
      let a
      try {
        a = decodeAttestation(c.attestation)
      } catch (err) {
        return source.markFaulty(`sent a malformed attestation: ${(err as Error).message}`)
      }
      // Applied already: nothing to check (a replay costs no signature check).
      if (CommitQuorum.stale(a, at)) continue
      if (a.prevRound !== at.lastRound || a.fromIndex !== at.stableIndex) break
      const cert = await checkCertificate(this.o.crypto, cluster, this.o.space.space, c.attestation, c.signatures)
      if ('problem' in cert) return source.markFaulty(cert.problem)
      if (!openBatch(this.o.crypto, cert.attestation, c.frames)) return source.markFaulty(`sent frames for round ${cert.attestation.round} that the attested batch does not bind`)
      at = { stableIndex: a.toIndex, lastRound: a.round }
      let first = true
      for (const [relay, sig] of cert.signatures) {
        quorum.offer(relay, cert.attestation, cert.bytes, sig, first ? c.frames : [])
        first = false
      }
    }
    this.applyCommits()
    await this.applying?.run
  }

  /**
   * A space's state a peer sent in answer to this space's `sync` (it keeps
   * no commits from where this space stands): believed on the signatures
   * of f+1 relays over the attestation whose state hash it must have, and
   * adopted if it is ahead and this space holds nothing yet or follows no
   * relay (a relay that is up brings the commits instead). A peer that
   * sends a state that does not hash to what the relays attested is faulty.
   */
  async snapshotFromPeer(s: AttestedState, source: PeerSource): Promise<void> {
    const cluster = this.o.sessions.cluster
    const { space, crypto } = this.o
    if (!cluster || this.closed || this.bootstrap === 'running') return
    const fresh = space.position.stableIndex === 0 && space.position.lastRound === 0
    if (!fresh && this.byPreference().length > 0) return
    // A state refused before (it decides one of this client's own envelopes) costs no second check.
    if (this.certified.refused !== undefined && bytesEqual(s.attestation, this.certified.refused)) return
    const cert = await checkCertificate(crypto, cluster, space.space, s.attestation, s.signatures)
    if ('problem' in cert) return source.markFaulty(cert.problem)
    const a = cert.attestation
    if (a.round <= space.position.lastRound || a.toIndex < space.position.stableIndex) return
    let state: AuditState<Envelope>
    try {
      state = decodeAuditState(s.state, (signed) => openTrusted(crypto, signed), MAX_PEER_STATE_BYTES)
    } catch (err) {
      return source.markFaulty(`sent a malformed state: ${(err as Error).message}`)
    }
    if (state.space !== space.space || state.index !== a.toIndex || !bytesEqual(auditStateHash((b) => crypto.sha256(b), state), a.stateHash)) {
      return source.markFaulty(`sent a state of ${space.space} at index ${state.index} that does not hash to what f+1 relays attested for round ${a.round}`)
    }
    await this.exclusive(async () => {
      // Checking took a while: the space may have moved, started a snapshot of its own, or reached a relay meanwhile.
      const now = space.position
      if (this.closed || (this.bootstrap as string) === 'running' || a.round <= now.lastRound) return
      if ((now.stableIndex > 0 || now.lastRound > 0) && this.byPreference().length > 0) return
      await this.adopt({ attestation: a, state, bytes: s.state.length }, { attestation: s.attestation, signatures: [...cert.signatures] })
      if (space.position.lastRound < a.round) this.certified.refused = s.attestation
    })
    // A space that waited for a snapshot follows the relays it reaches from where this one leaves it.
    if (this.bootstrap === 'due' && space.position.lastRound >= a.round) {
      this.bootstrap = 'settled'
      for (const link of this.byPreference()) this.ready(link)
    }
  }

  /**
   * Runs `step` (a jump of the stable state: a snapshot or a delta) while no
   * commit is applied, and applies none until it ends: a commit applied
   * between a jump's checks and its end would be lost, or stored behind it.
   */
  private async exclusive(step: () => Promise<unknown>): Promise<void> {
    while (this.applying) await this.applying.run
    // Closed meanwhile: close() waits for what runs, and nothing new starts.
    if (this.closed) return
    const applying = { run: Promise.resolve(), again: false }
    this.applying = applying
    try {
      const result = step()
      applying.run = result.then(
        () => undefined,
        () => undefined,
      )
      await result
    } finally {
      this.applying = undefined
      if (applying.again && !this.closed) this.applyCommits()
    }
  }

  /** Whether this space applies commits one by one (a paced one follows the relays' deltas instead). */
  followsCommits(): boolean {
    return !this.pacing.on
  }

  /** Whether an envelope is here, being checked, or waiting for its deps. */
  knows(idHex: string): boolean {
    return this.isHere(idHex) || this.verifying.has(idHex) || this.causal.has(idHex) || this.causal.badClock(idHex)
  }

  /** Whether an envelope is applied here: pending, ours, or committed (or ours refused for good: nothing waits for it). */
  private isHere(idHex: string): boolean {
    const { space, outbox } = this.o
    return space.replica.isPending(idHex) || outbox.has(idHex) || outbox.refused(idHex) || space.replica.hasCommitted(idHex)
  }

  /**
   * Shows a verified envelope of another author, then whatever waited only
   * for it. One a peer sent shows only if its clock holds up against what
   * this client holds (relays judged theirs at the door), and is passed on
   * to the other peers.
   */
  private deliver(h: Held): void {
    const { space, outbox } = this.o
    const { env, frame, source } = h
    if (source && !space.replica.decided(env)) {
      const verdict = space.replica.judgeReceived(env)
      if (verdict && !verdict.ok) {
        // Not shown. Its author lies; a peer passing it on may only have lacked what shows it.
        this.causal.refuseClock(env.idHex)
        if (source.key && bytesEqual(source.key, env.author)) source.markFaulty(`sent its own ${env.authorId}:${env.seq} with a bad clock: ${verdict.detail}`)
        return
      }
    }
    // Not ordered yet, and a few such envelopes never will be: reversed if they stay undecided too long.
    const r = space.replica.receive(env, { expires: true })
    if (!(r.status === 'duplicate' && r.changed.size === 0)) {
      outbox.heard(env)
      this.o.news.received(frame)
      this.inbox.add(env.idHex, frame)
      space.notify(r.changed)
      if (source) this.o.peers?.relay(space.space, env.idHex, source.peer)
    }
    for (const next of this.causal.arrived(env.idHex)) this.deliver(next)
  }

  /** Lets go, when its wait runs out, of an envelope whose deps never came (they may only arrive inside a commit, or never). */
  private armCausalTimer(): void {
    if (this.closed) return
    this.causal.armExpiry(this.o.clock, () => {
      for (const h of this.causal.expired(this.o.clock.now())) this.deliver(h)
      this.armCausalTimer()
    })
  }

  private async onCommit(link: RelayLink, m: Extract<RelayMessage, { type: 'commit' }>): Promise<void> {
    const relay = link.relay
    const { space, sessions } = this.o
    const cluster = sessions.cluster
    if (relay === undefined || !cluster || !this.quorum) return
    let attestation
    try {
      attestation = decodeAttestation(m.attestation.bytes)
    } catch (err) {
      return link.markFaulty(`sent a malformed attestation: ${(err as Error).message}`)
    }
    if (attestation.space !== space.space) return link.markFaulty(`attested space ${attestation.space} on a ${space.space} subscription`)
    const key = this.keyOf(relay)
    // After a check that awaits, the committee may have changed: relay indexes then name other relays.
    const quorum = this.quorum
    if (CommitQuorum.stale(attestation, space.position)) {
      // Late: a commit already applied. Signed bytes other than the ones f+1 relays attested are a lie;
      // the same bytes count towards the 2f+1 that an outcome of ours may wait for.
      const settled = this.applied.get(attestation.round)
      if (!settled || !key) return
      const same = bytesEqual(settled, m.attestation.bytes)
      if (same && !this.awaits(relay, attestation.round)) return
      if (!(await this.o.crypto.verify(key, m.attestation.bytes, m.attestation.sig)) || this.quorum !== quorum) return
      if (same) this.confirm(relay, attestation.round)
      else this.dissented(relay, attestation.round)
      return
    }
    if (!key || !(await this.o.crypto.verify(key, m.attestation.bytes, m.attestation.sig))) {
      // A round of an earlier epoch: the relay may have signed it with the key it had then (a rotation).
      if (this.beforeEpoch(attestation.round)) return
      return link.markFaulty('sent an attestation its key did not sign')
    }
    if (this.closed || this.quorum !== quorum) return
    quorum.offer(relay, attestation, m.attestation.bytes, m.attestation.sig, m.envelopes)
    // Compact attestations that came first are checked against these bytes now.
    for (const [other, rounds] of this.unmatched) {
      const sig = rounds.get(attestation.round)
      if (sig && (await this.matchSignature(other, attestation.round, sig))) rounds.delete(attestation.round)
    }
    this.applyCommits()
  }

  /**
   * A relay's signature alone (it sends no frames to this client): it counts
   * for the attestation whose bytes it signs, which the frame source sent in
   * full. One that matches nothing yet waits for the source (and a source
   * whose attestation never matches is passed over, like one that sends no
   * frames).
   */
  private async onAttest(link: RelayLink, round: number, sig: Uint8Array): Promise<void> {
    const relay = link.relay
    // Paced, no commit is followed: a compact attestation still on its way matches nothing this client will see.
    const quorum = this.quorum
    if (relay === undefined || !quorum || this.pacing.on) return
    if (await this.matchSignature(relay, round, sig)) return this.applyCommits()
    if (this.quorum !== quorum) return
    // Late, for a commit applied already: checked against what was applied.
    if (round <= this.o.space.position.lastRound) return this.checkLate(relay, round, sig)
    let rounds = this.unmatched.get(relay)
    if (!rounds) this.unmatched.set(relay, (rounds = new Map()))
    if (rounds.has(round) || rounds.size >= MAX_UNMATCHED_PER_RELAY) return
    rounds.set(round, sig)
    this.starvedSince ??= this.o.clock.now()
  }

  /**
   * Correct relays attest exactly the commits of the chain, with the bytes
   * f+1 of them sign: a compact attestation still unmatched once the chain
   * settled its round (checked once more against the settled bytes: it may
   * have come while the commit was being believed), or passed over it, signs
   * something else.
   */
  private async settleUnmatched(settled: CommitCandidate): Promise<void> {
    const { round } = settled.attestation
    for (const [relay, rounds] of this.unmatched) {
      for (const [r, sig] of rounds) {
        if (r > round) continue
        rounds.delete(r)
        const key = this.keyOf(relay)
        if (r === round && key && (await this.o.crypto.verify(key, settled.bytes, sig))) {
          this.confirm(relay, r)
          continue
        }
        this.dissented(relay, r)
      }
    }
  }

  /** A compact attestation for a round already applied: it must sign the bytes that were (if they are still known). */
  private async checkLate(relay: number, round: number, sig: Uint8Array): Promise<void> {
    const settled = this.applied.get(round)
    const key = this.keyOf(relay)
    if (!settled || !key) return
    if (await this.o.crypto.verify(key, settled, sig)) this.confirm(relay, round)
    else this.dissented(relay, round)
  }

  /** Whether `relay`'s attestation of `round` would confirm an outcome that still waits. */
  private awaits(relay: number, round: number): boolean {
    const oldest = this.awaitingAcks[0]
    return oldest !== undefined && round >= oldest.round && round > (this.attestedUpTo.get(relay) ?? 0)
  }

  /**
   * `relay` attested `round` with the bytes applied here. A relay attests a
   * space's commits in chain order, so it applied every earlier one too.
   */
  private confirm(relay: number, round: number): void {
    if (this.attested(relay, round) && this.awaitingAcks.length) void this.settleConfirmed().catch((err: unknown) => this.o.space.storageFailed(err))
  }

  /** Records that `relay` attested up to `round`; whether that is news. */
  private attested(relay: number, round: number): boolean {
    if (round <= (this.attestedUpTo.get(relay) ?? 0)) return false
    this.attestedUpTo.set(relay, round)
    return true
  }

  /** Resolves, oldest first, the outcomes of ours whose commits 2f+1 relays attested (one pass at a time). */
  private settleConfirmed(): Promise<void> {
    this.settling = this.settling.then(
      () => this.settleNow(),
      () => this.settleNow(),
    )
    return this.settling
  }

  private async settleNow(): Promise<void> {
    const needed = 2 * (this.o.sessions.cluster?.f ?? 0) + 1
    let next
    let settled = false
    while ((next = this.awaitingAcks[0])) {
      let acks = 0
      for (const upTo of this.attestedUpTo.values()) if (upTo >= next.round) acks++
      // A commit of an earlier epoch is in the state the current one started from, which 2f+1 of the
      // committee before signed in the epoch certificate, and which every relay of this one holds.
      if (acks < needed && !this.beforeEpoch(next.round)) break
      this.awaitingAcks.shift()
      for (const d of next.decisions) await this.o.outbox.settle(d.env.idHex, d)
      settled = true
    }
    if (settled) this.o.space.emitStatus()
  }

  /** `relay` signed other bytes for `round` than the attestation f+1 relays agreed on. */
  private dissented(relay: number, round: number): void {
    if (this.beforeEpoch(round)) return
    this.o.sessions.linkTo(relay)?.markFaulty(`attested round ${round} differently from f+1 other relays (its signature does not match their attestation)`)
  }

  /**
   * Whether `round` was attested by an earlier epoch's committee: a relay
   * whose key was rotated since serves it with the old key's signature,
   * which is not counted, and not a lie either.
   */
  private beforeEpoch(round: number): boolean {
    return round <= (this.o.sessions.cluster?.startRound ?? 0)
  }

  private keyOf(relay: number): Uint8Array | undefined {
    return this.o.sessions.cluster?.relays[relay]?.publicKey
  }

  /** Offers `relay`'s signature for the attestation of `round` whose bytes it signs, if one is known. */
  private async matchSignature(relay: number, round: number, sig: Uint8Array): Promise<boolean> {
    const key = this.keyOf(relay)
    const quorum = this.quorum
    if (!key || !quorum) return false
    for (const c of quorum.candidates(round)) {
      if (!(await this.o.crypto.verify(key, c.bytes, sig))) continue
      // The committee changed meanwhile: this index names another relay now.
      if (this.quorum !== quorum) return false
      quorum.offer(relay, c.attestation, c.bytes, sig, [])
      return true
    }
    return false
  }

  /** Applies every commit whose turn it is, one at a time. */
  private applyCommits(): void {
    if (this.applying) {
      this.applying.again = true
      return
    }
    const applying = { run: Promise.resolve(), again: false }
    this.applying = applying
    applying.run = (async () => {
      do {
        applying.again = false
        let next: CommitCandidate | undefined
        while (!this.closed && this.quorum && (next = this.quorum.next(this.o.space.position))) {
          if (!(await this.applyCommit(next))) break
        }
      } while (applying.again && !this.closed)
    })()
      .catch((err: unknown) => this.o.space.storageFailed(err))
      .finally(() => {
        this.applying = undefined
        // Asked for between the last pass and here: nothing else would run it.
        if (applying.again && !this.closed) this.applyCommits()
      })
  }

  private async applyCommit(c: CommitCandidate): Promise<boolean> {
    const { space, records, outbox } = this.o
    const a = c.attestation
    let envs: Envelope[] | undefined
    let frames: readonly Uint8Array[] = []
    // A relay's frames that are not the attested batch may be another's.
    for (const list of c.frames.values()) {
      envs = openBatch(this.o.crypto, a, list)
      if (envs) {
        frames = list
        break
      }
    }
    if (!envs) {
      // Correct relays send exactly the frames their attestation binds: other frames from the source are a lie.
      const source = this.source === undefined ? undefined : c.frames.get(this.source)
      if (source?.length) {
        this.o.sessions.linkTo(this.source as number)?.markFaulty(`sent frames for round ${a.round} that the attested batch does not bind`)
        const next = this.byPreference()[0]
        if (next) this.setSource(next)
      }
      this.starvedSince ??= this.o.clock.now()
      return false
    }
    this.starvedSince = undefined
    const result = space.replica.commit(envs, a.round)
    space.decided(result.decisions)
    const position = { stableIndex: result.stableIndex, lastRound: a.round }
    const mismatch = this.checkAgainst(result, c)
    if (mismatch) {
      // f+1 relays (one of them correct) attested a result this replica's audit did not reach.
      const err = new TrustError(`commit at round ${a.round}: ${mismatch}`)
      space.setProblem(err.message)
      space.emitError(err)
      // Its state is not what the relays attest: nothing of it is handed to peers as theirs.
      this.certified.jumped(undefined)
    } else {
      this.o.proofs.add(result.decisions, c.bytes, c.signatures)
      this.certified.add(a, { attestation: c.bytes, signatures: [...c.signatures], frames }, MAX_PEER_COMMIT_BYTES)
    }
    const certified = this.certified.latest
    space.advance(position)
    // Decided envelopes no longer wait for anything, and nothing need wait for them.
    for (const d of result.decisions) {
      this.causal.drop(d.env.idHex)
      for (const h of this.causal.arrived(d.env.idHex)) this.deliver(h)
    }
    for (const h of this.causal.reachedBase(result.stableIndex)) this.deliver(h)
    this.applied.set(a.round, c.bytes)
    for (const round of this.applied.keys()) {
      if (this.applied.size <= RECENT_APPLIED) break
      this.applied.delete(round)
    }
    const quorum = this.quorum as CommitQuorum
    for (const relay of quorum.dissenters(c)) this.o.sessions.linkTo(relay)?.markFaulty(`attested round ${a.round} differently from f+1 other relays`)
    quorum.prune(position)
    await this.settleUnmatched(c)

    const record: CommitRecord = { round: a.round, attestation: c.bytes, frames }
    const changes: StorageChange[] = [...records.commit(record, position), records.certified(mismatch ? undefined : certified)]
    // Every so often the stored commits collapse into one checkpoint, so opening stays O(state).
    const since = records.sinceCheckpoint
    // A checkpoint behind an unsaved paced delta is no base for this commit: the state is written whole instead.
    if (since.envelopes >= this.o.checkpointEvery || since.commits >= 1000 || this.pacing.unsaved) {
      changes.push(...records.checkpoint(space.replica.checkpoint(), position))
      this.pacing.stored(true, this.o.clock.now())
    }
    const own: Array<CommitResult['decisions'][number]> = []
    for (const d of result.decisions) {
      if (outbox.has(d.env.idHex)) {
        own.push(d)
        changes.push(...outbox.decidedChanges(d))
      } else changes.push(records.inboxDelete(d.env.idHex))
    }
    try {
      await records.storage.write(changes)
      space.storageWorks()
    } catch (err) {
      space.storageFailed(err)
    }
    this.o.news.committed(a.round, frames)
    // A gap is no outcome (the envelope is sent again at once); the others wait for 2f+1 attestations.
    for (const d of own) if (d.kind === 'dropped' && d.reason === 'gap') await outbox.settle(d.env.idHex, d)
    const final = own.filter((d) => !(d.kind === 'dropped' && d.reason === 'gap'))
    if (final.length) this.awaitingAcks.push({ round: a.round, fromIndex: a.fromIndex, decisions: final })
    for (const relay of c.relays) this.attested(relay, a.round)
    await this.settleConfirmed()
    space.notify(result.changed)
    space.progress()
    space.emitStatus()
    return true
  }

  /** Why the local audit disagrees with an attestation, or undefined when it agrees. */
  private checkAgainst(result: CommitResult, c: CommitCandidate): string | undefined {
    const a = c.attestation
    if (result.stableIndex !== a.toIndex) return `stable index ${result.stableIndex}, attested ${a.toIndex}`
    const mine = encode(result.decisions.filter((d) => d.kind !== 'superseded').map((d) => attestedDecision(d as Exclude<typeof d, { kind: 'superseded' }>)))
    if (!bytesEqual(mine, encode(a.decisions))) return 'decisions differ'
    if (!bytesEqual(this.o.space.replica.stableHash((b) => this.o.crypto.sha256(b)), a.stateHash)) return 'stable state hash differs'
    return undefined
  }

  /** Stops taking news, lets a commit being applied finish its write, stores received envelopes and checkpoints so the next open is quick. */
  async close(): Promise<void> {
    this.closed = true
    this.causal.disarm()
    await this.inbox.flush().catch(() => undefined)
    // A commit run, or a jump that was waiting for one and started since.
    while (this.applying) await this.applying.run
    if (this.o.records.sinceCheckpoint.commits > 0 || this.pacing.unsaved) await this.saveCheckpoint()
  }

  /** Writes the space's whole state as its checkpoint (see Pacing.saveDue). */
  private async saveCheckpoint(): Promise<void> {
    const { records, space } = this.o
    this.pacing.stored(true, this.o.clock.now())
    await records.storage.write(records.checkpoint(space.replica.checkpoint(), space.position)).catch((err) => space.storageFailed(err))
  }
}

/** Compact attestations kept per relay while they match nothing: one that sends made-up rounds cannot grow memory past this. */
const MAX_UNMATCHED_PER_RELAY = 1_000
/** Applied rounds whose attestation bytes are kept to check late attestations against. */
const RECENT_APPLIED = 64

/** The largest state a peer may hand this client in one message. */
const MAX_PEER_STATE_BYTES = 4 * 1024 * 1024
/** The largest commit this client hands a peer (with its attestation and signatures, it must fit one 4 MiB peer message). */
const MAX_PEER_COMMIT_BYTES = 3 * 1024 * 1024

/** How long a space that comes back may wait for a verified delta before it follows commits instead. */
const CATCH_UP_TIMEOUT_MS = 5000
