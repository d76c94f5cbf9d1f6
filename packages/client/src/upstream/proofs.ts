import { SteadError, asSigned, bytesEqual, causalOrder, clockQuorum, decode, encodeClockVote, fromHex, toHex, verifyClockCertificate, type CertifiedClock, type ClockCertificate, type Cluster, type CommitResult, type Crypto, type Signed } from '@stead/core'
import type { HostClock } from '@stead/core'

/**
 * The proof of one update's clock: its signed envelope and a certificate.
 * Anyone holding the cluster's relay keys checks it with
 * `verifyClockCertificate` from `@stead/core`, trusting no single relay.
 * Before the update is ordered the certificate is the relays' clock votes
 * (ceil((N+f+1)/2) of them: their validators passed it); once it
 * committed, f+1 relays' signatures over the attestation of that commit.
 */
export interface ClockProof {
  /** The update's envelope id (hex); `verifyClockCertificate` recomputes it from the bytes, so it is not trusted. */
  readonly id: string
  /** The stable index it committed at, as the certificate's attestation says (not trusted either: verifying returns it); undefined for a proof from before its commit. */
  readonly index: number | undefined
  /** The envelope's signed bytes and its author's signature. */
  readonly envelope: Signed
  /** The relays' votes for its clock, or their signatures over the attestation that committed it. */
  readonly certificate: ClockCertificate
}

/** What `space.compare` answers: how two updates relate causally, with each one's clock proof. */
export interface CausalComparison {
  /** `before`: the first happened before the second (its author had seen it); `after`: the reverse; `concurrent`: neither; `equal`: the same update. */
  readonly order: 'before' | 'after' | 'concurrent' | 'equal'
  /** The first update's clock proof. */
  readonly a: ClockProof
  /** The second update's clock proof. */
  readonly b: ClockProof
}

/** What one relay holds to prove an update's clock (GET /v1/spaces/:space/clock/:id), as read: nothing in it is trusted yet. */
export interface RelayEvidence {
  /** The answering relay's index. */
  readonly relay: number
  /** The envelope's frame, if it sent one. */
  readonly frame: Uint8Array | undefined
  /** Clock votes it gathered: [relay, weight, signature]. */
  readonly votes: ReadonlyArray<readonly [number, number, Uint8Array]>
  /** Its own attestation of the commit that decided the update, if any. */
  readonly attestation: Signed | undefined
}

/** Where proofs of updates this client did not see commit come from: the relays, asked over HTTP. */
export interface ClockProofSource {
  readonly space: string
  readonly crypto: Crypto
  readonly clock: HostClock
  /** The trusted cluster (its relay keys), once known. */
  cluster(): Promise<Cluster>
  /** Every relay's evidence for `idHex` (the ones that answered in time). */
  evidence(idHex: string): Promise<RelayEvidence[]>
  /** The signed envelope `idHex`, if this client holds it undecided (what votes heard from the relays' feeds certify). */
  envelope?(idHex: string): Signed | undefined
}

interface Held {
  readonly certified: CertifiedClock
  readonly proof: ClockProof
  /** f+1 relays' attestations committed it with a clock the audit could not verify: its position will never be proven. */
  readonly unprovable?: boolean
}

/** Which certificate a caller wants: the strongest held (a commit's once there is one), or the relays' clock votes, which state the clock's weight (`clockRank` needs it). */
export type ProofKind = 'any' | 'validators'

/** The first pause before asking the relays again for a proof that was not there yet (it doubles). */
const FIRST_PAUSE_MS = 5

/** While waiting for a proof, the relays are asked over HTTP at most this often; votes from their feeds are looked at as they come. */
const ASK_EVERY_MS = 1_000

/** How long `compare` waits at most for a stable index that decides it (an update certified before order, not committed yet). */
export const COMPARE_WAIT_MS = 30_000

/**
 * Clock proofs: those of the latest committed envelopes, gathered from the
 * signatures the client collected to apply each commit (no extra round
 * trip), and any other update's fetched from the relays when asked for.
 * Bounded: the oldest go first.
 */
export class ClockProofs {
  private readonly held = new Map<string, Held>()
  /** Validator certificates of the same envelopes, kept after their commit replaced them in `held` (a commit states no weight). */
  private readonly votes = new Map<string, Held>()
  /**
   * Votes heard on the relays' feeds: per relay (so one that floods pushes
   * out only its own), by envelope id, its first; null once its vote did
   * not check (it is not checked again). Signatures are checked when a
   * certificate is made of them.
   */
  private readonly heardVotes = new Map<number, Map<string, { readonly weight: number; readonly sig: Uint8Array } | null>>()
  /** Who waits for votes on an envelope. */
  private readonly waiters = new Map<string, Set<() => void>>()
  /** Stable index → envelope id (hex), for the same envelopes as `held`. */
  private readonly atIndex = new Map<number, string>()
  private readonly limit: number
  private readonly source: ClockProofSource | undefined
  constructor(limit = 10_000, source?: ClockProofSource) {
    this.limit = limit
    this.source = source
  }

  /** A commit was applied: `signatures` are the relays' over `attestation`, f+1 of them at least. */
  add(decisions: CommitResult['decisions'], attestation: Uint8Array, signatures: ReadonlyMap<number, Uint8Array>): void {
    const certificate: ClockCertificate = { attestation, signatures: [...signatures].map(([relay, sig]) => ({ relay, sig })) }
    for (const d of decisions) {
      if (d.kind !== 'committed' || !d.clockVerified) continue
      this.keep({ certified: { env: d.env, index: d.index, rejected: d.units.flatMap((u) => (u.status === 'rejected' ? [u.unit] : [])) }, proof: { id: d.env.idHex, index: d.index, envelope: d.env.signed, certificate } })
    }
  }

  /**
   * How update `a` relates to update `b`, with both proofs. An update not
   * committed yet is proven by the relays' clock votes; when the answer
   * hangs on where such an update will commit (see `causalOrder`), this
   * waits for its commit, up to `COMPARE_WAIT_MS`.
   *
   * @throws SteadError `unsupported` for an update no relay can prove.
   */
  async compare(a: string, b: string): Promise<CausalComparison> {
    const started = this.source?.clock.now() ?? 0
    for (let pause = 100; ; pause = Math.min(2 * pause, 2_000)) {
      const x = await this.get(a)
      const y = await this.get(b)
      const order = causalOrder(x.certified, y.certified)
      if (order) return { order, a: x.proof, b: y.proof }
      const source = this.source
      if (x.unprovable || y.unprovable) {
        throw new SteadError('unsupported', `how ${a} and ${b} relate depends on where ${x.unprovable ? a : b} committed, and it committed with a clock the audit could not verify, so its commit proves no position`)
      }
      if (!source || source.clock.now() - started >= COMPARE_WAIT_MS) {
        throw new SteadError('unsupported', `how ${a} and ${b} relate depends on where ${x.certified.index === undefined ? a : b} commits, and it did not commit within ${COMPARE_WAIT_MS} ms`)
      }
      await new Promise<void>((resolve) => source.clock.setTimer(pause, resolve))
    }
  }

  /**
   * The clock proof of one update: by envelope id (hex), or by the stable
   * index it took (only among the commits this client applied). `kind`
   * 'validators' asks for the relays' clock votes even once the update
   * committed (the relays keep them for about ten minutes). Asks again
   * (5 ms, doubling up to 1 s apart) for up to `waitMs` while there is
   * none yet.
   *
   * @throws SteadError `unsupported` for an update no relay can prove (by votes, for 'validators').
   */
  async proof(update: string | number, kind: ProofKind = 'any', waitMs = 0): Promise<ClockProof> {
    const started = this.source?.clock.now() ?? 0
    const idHex = this.idOf(update)
    // An envelope this client holds undecided is voted on in the relays' feeds it follows: asked for over HTTP only if they stay silent.
    let askedAt = waitMs > 0 && idHex !== undefined && this.source?.envelope?.(idHex) ? started : -Infinity
    for (let pause = FIRST_PAUSE_MS; ; pause = Math.min(2 * pause, 1_000)) {
      const now = this.source?.clock.now() ?? 0
      const ask = now - askedAt >= ASK_EVERY_MS
      if (ask) askedAt = now
      try {
        return kind === 'any' ? (await this.get(update, ask)).proof : await this.voted(update, ask)
      } catch (err) {
        const source = this.source
        if (!source || !(err instanceof SteadError) || err.reason !== 'unsupported' || source.clock.now() - started + pause > waitMs) throw err
        await this.votesOn(idHex, pause)
      }
    }
  }

  /** The committee changed: votes heard by relay index are of relays that index no longer names. */
  committeeChanged(): void {
    this.heardVotes.clear()
  }

  /** Votes a relay cast, from its feed: kept until a certificate is asked for (bounded: the oldest ids go first). */
  heard(relay: number, votes: ReadonlyArray<readonly [Uint8Array, number, Uint8Array]>): void {
    let byId = this.heardVotes.get(relay)
    if (!byId) this.heardVotes.set(relay, (byId = new Map()))
    for (const [id, weight, sig] of votes) {
      const idHex = toHex(id)
      if (byId.has(idHex)) continue
      byId.set(idHex, { weight, sig })
      if (byId.size > this.limit) byId.delete(byId.keys().next().value as string)
      for (const wake of [...(this.waiters.get(idHex) ?? [])]) wake()
    }
  }

  /** Resolves when a vote on `idHex` is heard, or after `ms`. */
  private votesOn(idHex: string | undefined, ms: number): Promise<void> {
    const source = this.source as ClockProofSource
    return new Promise<void>((resolve) => {
      const done = (): void => {
        timer.cancel()
        const set = idHex === undefined ? undefined : this.waiters.get(idHex)
        set?.delete(done)
        if (set?.size === 0 && idHex !== undefined) this.waiters.delete(idHex)
        resolve()
      }
      const timer = source.clock.setTimer(ms, done)
      if (idHex === undefined) return
      let set = this.waiters.get(idHex)
      if (!set) this.waiters.set(idHex, (set = new Set()))
      set.add(done)
    })
  }

  /** An update's envelope id (hex), by id or by the stable index of a commit this client applied; undefined if it names none. */
  private idOf(update: string | number): string | undefined {
    const id = typeof update === 'number' ? this.atIndex.get(update) : update.toLowerCase()
    return id !== undefined && /^[0-9a-f]{64}$/.test(id) ? id : undefined
  }

  /** The relays' votes on one update's clock: kept, heard on their feeds, or (`ask`) asked for. */
  private async voted(update: string | number, ask = true): Promise<ClockProof> {
    const id = this.idOf(update)
    const held = id === undefined ? undefined : this.votes.get(id)
    if (held) return held.proof
    const fetched = id === undefined ? undefined : ((await this.fromHeard(id)) ?? (ask ? await this.fetch(id, 'validators') : undefined))
    if (fetched) {
      this.keep(fetched)
      return fetched.proof
    }
    throw new SteadError(
      'unsupported',
      `no validator certificate for ${typeof update === 'number' ? `the update at stable index ${update}` : `update ${update}`}: no relay holds ceil((N+f+1)/2) votes for its clock (not voted yet, refused by the relays' validators, or voted on longer ago than the relays keep votes)`,
    )
  }

  /** A validator certificate made of the votes heard on the relays' feeds, checked; undefined while they make none. */
  private async fromHeard(idHex: string): Promise<Held | undefined> {
    const source = this.source
    const heard: Array<readonly [number, number, Uint8Array]> = []
    for (const [relay, byId] of this.heardVotes) {
      const vote = byId.get(idHex)
      if (vote) heard.push([relay, vote.weight, vote.sig])
    }
    const envelope = source?.envelope?.(idHex) ?? this.held.get(idHex)?.proof.envelope
    if (!source || !envelope || heard.length < clockQuorum(await source.cluster())) return undefined
    // A relay whose vote did not check is not checked again for this envelope.
    return certificateOfVotes(source.crypto, await source.cluster(), source.space, idHex, envelope, heard, (relay) => this.heardVotes.get(relay)?.set(idHex, null))
  }

  private keep(h: Held): void {
    const id = h.proof.id
    if (h.certified.index === undefined) {
      this.votes.set(id, h)
      if (this.votes.size > this.limit) this.votes.delete(this.votes.keys().next().value as string)
    }
    const old = this.held.get(id)
    // A commit's proof replaces a proof from before the order; never the reverse.
    if (old && old.certified.index !== undefined && h.certified.index === undefined) return
    this.held.set(id, h)
    if (h.certified.index !== undefined) this.atIndex.set(h.certified.index, id)
    if (this.held.size > this.limit) {
      const oldest = this.held.entries().next().value as [string, Held]
      this.held.delete(oldest[0])
      if (oldest[1].certified.index !== undefined) this.atIndex.delete(oldest[1].certified.index)
    }
  }

  private async get(update: string | number, ask = true): Promise<Held> {
    const id = this.idOf(update)
    const h = id === undefined ? undefined : this.held.get(id)
    if (h && h.certified.index !== undefined) return h
    // The relays are asked for a commit's proof (the stronger one); between asks, votes heard on their feeds do.
    const fetched = id === undefined ? undefined : ((ask ? await this.fetch(id) : undefined) ?? (h ? undefined : await this.fromHeard(id)))
    if (fetched) {
      this.keep(fetched)
      return fetched
    }
    if (h) return h
    const what = typeof update === 'number' ? `the update at stable index ${update}` : `update ${update}`
    throw new SteadError(
      'unsupported',
      `no clock certificate for ${what}: no relay holds ceil((N+f+1)/2) votes for its clock nor a kept commit of it (not seen yet, refused by the relays' validators, committed with a clock the audit could not verify, or older than the relays keep)${typeof update === 'number' ? '; by stable index, only the updates committed while this client ran are found' : ''}`,
    )
  }

  /** Asks the relays for what proves `idHex` and builds the strongest proof of `kind` their answers make, checked. */
  private async fetch(idHex: string, kind: ProofKind = 'any'): Promise<Held | undefined> {
    const source = this.source
    if (!source) return undefined
    const [cluster, answers] = await Promise.all([source.cluster(), source.evidence(idHex)])
    return proofFrom(source.crypto, cluster, source.space, idHex, answers, kind)
  }
}

/**
 * The proof relays' answers make for envelope `idHex`, checked with
 * `verifyClockCertificate`: the commit's (f+1 relays' attestations alike)
 * when there is one and `kind` is 'any', else the clock votes (ceil((N+f+1)/2) relays' valid
 * votes for one weight, each relay's taken from whichever answer has a
 * valid one).
 * Undefined when they make neither. A relay's answer is believed in
 * nothing: a liar's bytes fail the checks and count for nothing.
 */
export async function proofFrom(crypto: Crypto, cluster: Cluster, space: string, idHex: string, answers: readonly RelayEvidence[], kind: ProofKind = 'any'): Promise<Held | undefined> {
  let envelope: Signed | undefined
  for (const a of answers) {
    if (!a.frame) continue
    try {
      const signed = asSigned(decode(a.frame))
      if (toHex(crypto.sha256(signed.bytes)) === idHex) {
        envelope = signed
        break
      }
    } catch {
      // Not an envelope: that relay's answer proves nothing.
    }
  }
  if (!envelope) return undefined
  // The commit's proof: f+1 relays' attestations with the same bytes.
  const groups: Array<{ bytes: Uint8Array; signatures: Array<{ relay: number; sig: Uint8Array }> }> = []
  for (const a of kind === 'any' ? answers : []) {
    if (!a.attestation) continue
    let g = groups.find((x) => bytesEqual(x.bytes, a.attestation?.bytes as Uint8Array))
    if (!g) groups.push((g = { bytes: a.attestation.bytes, signatures: [] }))
    if (!g.signatures.some((s) => s.relay === a.relay)) g.signatures.push({ relay: a.relay, sig: a.attestation.sig })
  }
  // A commit with a clock the audit could not verify: f+1 relays said so, yet it proves no position.
  let unprovable = false
  for (const g of groups.sort((x, y) => y.signatures.length - x.signatures.length)) {
    if (g.signatures.length < cluster.f + 1) break
    const certificate: ClockCertificate = { attestation: g.bytes, signatures: g.signatures }
    const certified = await verifyClockCertificate(crypto, cluster, envelope, certificate).catch((err: unknown) => {
      if (err instanceof SteadError && err.reason === 'bad-clock') unprovable = true
      return undefined
    })
    if (certified) return { certified, proof: { id: idHex, index: certified.index, envelope, certificate } }
  }
  // Before the order: the relays' clock votes, for the weight a quorum of them signed.
  const voted = await certificateOfVotes(crypto, cluster, space, idHex, envelope, answers.flatMap((a) => a.votes))
  return voted && (unprovable ? { ...voted, unprovable } : voted)
}

/**
 * The validator certificate `votes` ([relay, weight, signature], any
 * number per relay, in no order, trusted in nothing) make for envelope
 * `idHex`: for a weight ceil((N+f+1)/2) relays validly signed. The
 * signatures are checked together by `verifyClockCertificate`, and one by
 * one only when that fails (a liar's vote among them), so honest votes
 * cost one check each. `bad` hears of each relay none of whose votes for
 * a weight checked.
 */
async function certificateOfVotes(
  crypto: Crypto,
  cluster: Cluster,
  space: string,
  idHex: string,
  envelope: Signed,
  votes: Iterable<readonly [number, number, Uint8Array]>,
  bad?: (relay: number) => void,
): Promise<Held | undefined> {
  const byWeight = new Map<number, Map<number, Uint8Array[]>>()
  for (const [relay, weight, sig] of votes) {
    if (!cluster.relayKeys[relay] || !Number.isSafeInteger(weight) || weight < 0) continue
    let byRelay = byWeight.get(weight)
    if (!byRelay) byWeight.set(weight, (byRelay = new Map()))
    byRelay.set(relay, [...(byRelay.get(relay) ?? []), sig])
  }
  const quorum = clockQuorum(cluster)
  const certify = async (weight: number, signatures: Array<{ relay: number; sig: Uint8Array }>): Promise<Held | undefined> => {
    const certificate: ClockCertificate = { kind: 'validators', weight, signatures }
    const certified = await verifyClockCertificate(crypto, cluster, envelope, certificate).catch(() => undefined)
    return certified && { certified, proof: { id: idHex, index: undefined, envelope, certificate } }
  }
  for (const [weight, byRelay] of byWeight) {
    if (byRelay.size < quorum) continue
    const first = await certify(weight, [...byRelay].map(([relay, sigs]) => ({ relay, sig: sigs[0] as Uint8Array })))
    if (first) return first
    // One of them did not check: each relay's first vote that does.
    const bytes = encodeClockVote(space, fromHex(idHex), weight)
    const valid: Array<{ relay: number; sig: Uint8Array }> = []
    for (const [relay, sigs] of byRelay) {
      let sig: Uint8Array | undefined
      for (const candidate of sigs) {
        if (await crypto.verify(cluster.relayKeys[relay] as Uint8Array, bytes, candidate)) {
          sig = candidate
          break
        }
      }
      if (sig) valid.push({ relay, sig })
      else bad?.(relay)
    }
    const checked = valid.length >= quorum ? await certify(weight, valid) : undefined
    if (checked) return checked
  }
  return undefined
}
