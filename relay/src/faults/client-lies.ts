import {
  asSigned,
  auditStateHash,
  createCrdt,
  decode,
  decodeAttestation,
  decodeAuditState,
  decodeDeclaration,
  decodeObjectProof,
  decodeRelayMessage,
  decodeStateDelta,
  encode,
  encodeAttestation,
  encodeClockVote,
  encodeAuditState,
  encodeObjectProof,
  encodeRelayMessage,
  encodeStateDelta,
  freshHeadBytes,
  fromBase64Url,
  fromHex,
  HEAD_NONCE_BYTES,
  objectDigest,
  stableReadBytes,
  toBase64Url,
  toHex,
  bytesEqual,
  encodeEpochChange,
  ENVELOPE_REF_BYTES,
  type EpochChainJson,
  type ClientMessage,
  type RelayMessage,
  type WaitingEnvelope,
} from '@stead/core'
import { nodeCrypto, publicKeyOfSync, signSync, verifySync } from '@stead/core/node'

/**
 * Ways a relay can lie to its clients, for tests and demos (`stead-relay
 * start --byzantine lie-attest`). Each is a decorator on what the honest
 * relay sends: the frames of a client session and the JSON answers of the
 * HTTP API. Nothing inside RelayNode or the session code knows about them.
 */
export const CLIENT_LIES = [
  'lie-attest',
  'admit-revoked',
  'stale-head',
  'replay-head',
  'inflate-head',
  'withhold-commits',
  'withhold-envelopes',
  'forge-envelope',
  'pad-frames',
  'name-unsent',
  'censor',
  'impostor',
  'rechallenge',
  'wrong-object',
  'wrong-delta',
  'stale-delta',
  'forge-snapshot',
  'mismatched-snapshot',
  'wrong-cluster',
  'forge-epoch',
  'slow',
  'junk',
  'lie-votes',
] as const
export type ClientLie = (typeof CLIENT_LIES)[number]

/** How long `slow` holds every answer. */
export const SLOW_MS = 30_000

/** Routes `slow` leaves alone: operators (and test harnesses) still see the process up. */
const OPERATOR_ROUTES = new Set(['/health', '/ready', '/metrics', '/v1/status'])

export interface ClientLiesContext {
  readonly secretKey: Uint8Array
  /** The committee's keys, in order: `rechallenge` names the next relay's (default: this relay's own). */
  readonly relayKeys?: readonly Uint8Array[]
  /** Timers, injected so tests need not wait 30 s. */
  readonly setTimeout?: (fn: () => void, ms: number) => unknown
}

/** A head answer; quorum reads (with a nonce) also carry the f+1 signatures that prove it. */
type Head = { relay: number; index: number; stateHash: string; sig: string; proof?: Array<[number, string]> }

export class ClientFacingLiar {
  private told: ReadonlySet<ClientLie>
  private readonly ctx: ClientLiesContext
  /** Per space, the first head this relay served: what stale-head and replay-head keep serving. */
  private readonly firstHeads = new Map<string, Head>()
  /** Envelope frames sent early lately, by id (hex), for pad-frames: at most RECENT_FRAMES. */
  private readonly recent = new Map<string, Uint8Array>()
  /** `stale-delta`: the first paced delta sent per space (where it ended, and its certified attestation). */
  private readonly firstDeltas = new Map<string, { readonly toIndex: number; readonly attestation: Uint8Array; readonly sigs: ReadonlyArray<readonly [number, Uint8Array]> }>()

  constructor(lies: readonly ClientLie[], ctx: ClientLiesContext) {
    this.told = new Set(lies)
    this.ctx = ctx
  }

  get lies(): ReadonlySet<ClientLie> {
    return this.told
  }

  /** Tells other lies from now on (none: honest), without a restart: what tests switch mid-session. */
  tell(lies: readonly ClientLie[]): void {
    this.told = new Set(lies)
  }

  /** Whether the session should act on this client message; `censor` only pretends to take submits (it answers `accepted`). */
  admits(message: ClientMessage): boolean {
    return !(message.type === 'submit' && this.lies.has('censor'))
  }

  /**
   * Rewrites one frame the relay is about to send a client session, and
   * hands what goes out instead to `emit` (maybe nothing, maybe later).
   */
  outgoing(frame: Uint8Array, emit: (frame: Uint8Array) => void): void {
    const out = this.rewrite(frame)
    if (this.lies.has('junk')) out.push(Uint8Array.of(0xc1), encode(['commit', 7, 'not a commit']))
    if (!this.lies.has('slow')) return out.forEach(emit)
    const later = this.ctx.setTimeout ?? setTimeout
    later(() => out.forEach(emit), SLOW_MS)
  }

  private rewrite(frame: Uint8Array): Uint8Array[] {
    // Only the lies below read what they send; the others pass frames through unread.
    if (!READING_LIES.some((l) => this.lies.has(l))) return [frame]
    let m: RelayMessage
    try {
      m = decodeRelayMessage(frame)
    } catch {
      return [frame]
    }
    const commitLike = m.type === 'commit' || m.type === 'commit-more' || m.type === 'attest' || m.type === 'delta'
    if (commitLike && this.lies.has('withhold-commits')) return []
    if (m.type === 'delta') return [encodeRelayMessage(this.pacedLie(m))]
    if (m.type === 'welcome') return this.welcome(m, frame)
    if (m.type === 'envelope') {
      if (this.lies.has('withhold-envelopes') || this.lies.has('name-unsent')) return []
      if (this.lies.has('pad-frames')) this.remember(m.envelope)
      if (this.lies.has('forge-envelope')) return [frame, encodeRelayMessage({ ...m, envelope: forged(m.envelope) })]
      return [frame]
    }
    if (m.type === 'commit') {
      let out: RelayMessage = m
      // The commit without its envelopes: the attestation's batch digest no longer matches what came.
      if (this.lies.has('withhold-envelopes')) out = { ...out, envelopes: [], more: false }
      if (this.lies.has('forge-envelope') && m.envelopes.length > 0) out = { ...out, envelopes: [forged(m.envelopes[0] as Uint8Array), ...m.envelopes.slice(1)] }
      // Every envelope twice (in full the second time, as if never sent early): frames the attestation's batch digest does not bind.
      if (this.lies.has('pad-frames') && out.envelopes.length > 0) out = { ...out, envelopes: [...out.envelopes, ...out.envelopes.map((e) => (e.length === ENVELOPE_REF_BYTES ? (this.recent.get(toHex(e)) ?? e) : e))] }
      // Every envelope named by id, though none was sent early: the client cannot have them.
      if (this.lies.has('name-unsent')) out = { ...out, envelopes: out.envelopes.map((e) => (e.length === ENVELOPE_REF_BYTES ? e : envelopeId(e))) }
      if (this.lies.has('lie-attest')) out = { ...out, attestation: this.wrongAttestation(m.attestation.bytes) }
      if (this.lies.has('admit-revoked')) out = { ...out, attestation: this.admitting(out.attestation) }
      return out === m ? [frame] : [encodeRelayMessage(out)]
    }
    // The rest of a commit whose envelopes were dropped would only confuse the lie.
    if (m.type === 'commit-more' && this.lies.has('withhold-envelopes')) return []
    // A compact attestation signed over other bytes than the commit's.
    if (m.type === 'attest' && this.lies.has('lie-attest')) return [encodeRelayMessage({ ...m, sig: signSync(this.ctx.secretKey, encode(['a lie', m.space, m.round])) })]
    return [frame]
  }

  /**
   * A paced delta: `wrong-delta` with other content (the attested state no
   * longer follows), `lie-attest` under an attestation of another state
   * that only this relay signed (fewer than f+1 signatures).
   */
  private pacedLie(m: Extract<RelayMessage, { type: 'delta' }>): RelayMessage {
    let out = m
    if (this.lies.has('stale-delta')) {
      // After the first, every delta becomes the heartbeat of a space that never moved past it: genuinely certified, and old.
      const first = this.firstDeltas.get(m.space)
      if (!first) this.firstDeltas.set(m.space, { toIndex: decodeAttestation(m.attestation).toIndex, attestation: m.attestation, sigs: m.sigs })
      else out = { ...out, attestation: first.attestation, sigs: first.sigs, delta: encodeStateDelta({ space: m.space, fromIndex: first.toIndex, toIndex: first.toIndex, authors: [], waiting: [], objects: [] }) }
    }
    if (this.lies.has('wrong-delta')) out = { ...out, delta: wrongDeltaBytes(out.delta) }
    if (this.lies.has('lie-attest')) {
      const lie = this.wrongAttestation(out.attestation)
      const mine = m.sigs.find(([, sig]) => verifySync(publicKeyOfSync(this.ctx.secretKey), m.attestation, sig))
      out = { ...out, attestation: lie.bytes, sigs: mine ? [[mine[0], lie.sig]] : [] }
    }
    return out
  }

  private remember(envelope: Uint8Array): void {
    if (this.recent.size >= RECENT_FRAMES) this.recent.delete(this.recent.keys().next().value as string)
    this.recent.set(toHex(envelopeId(envelope)), envelope)
  }

  /**
   * `impostor`: a welcome whose signature is not the relay's key's (as a
   * relay that names a key it does not hold); `rechallenge`: after its
   * welcome, a second challenge in the name of the next relay.
   */
  private welcome(m: Extract<RelayMessage, { type: 'welcome' }>, frame: Uint8Array): Uint8Array[] {
    let out = frame
    if (this.lies.has('impostor') && m.sig) out = encodeRelayMessage({ ...m, sig: signSync(nodeCrypto.generateSecretKey(), encode(['not the relay', m.relay])) })
    if (!this.lies.has('rechallenge')) return [out]
    const other = (m.relay + 1) % Math.max(1, m.n)
    const relayKey = this.ctx.relayKeys?.[other] ?? publicKeyOfSync(this.ctx.secretKey)
    return [out, encodeRelayMessage({ type: 'challenge', nonce: nodeCrypto.generateSecretKey(), relay: other, relayKey })]
  }

  /** A head 5 commits past the true one, signed and "proven" by this relay alone: f+1 relays did not sign it. */
  private inflatedHead(space: string, head: Head, nonceHex: string | undefined): Head {
    const index = head.index + 5
    const hash = fromHex(head.stateHash)
    const nonce = nonceHex === undefined ? undefined : fromHex(nonceHex)
    const bytes = nonce?.length === HEAD_NONCE_BYTES ? freshHeadBytes(space, index, hash, nonce) : stableReadBytes(space, index, hash)
    const own: [number, string] = [head.relay, toHex(signSync(this.ctx.secretKey, stableReadBytes(space, index, hash)))]
    return { ...head, index, sig: toHex(signSync(this.ctx.secretKey, bytes)), ...(head.proof ? { proof: [own] } : {}) }
  }

  /**
   * The true snapshot with one more unit on its first counter: a state no
   * correct relay attests. 'forge' vouches for it with an attestation this
   * relay signs alone (only the f+1 others can contradict it); 'mismatch'
   * keeps the true attestation, so the state fails its hash.
   */
  private raisedSnapshot(body: Snapshot, how: 'forge' | 'mismatch'): Snapshot {
    if (typeof body.state !== 'string' || typeof body.attestation !== 'string') return body
    const state = decodeAuditState(fromBase64Url(body.state), (signed) => ({ signed }) as unknown as WaitingEnvelope)
    const first = state.objects.findIndex((o) => Array.isArray(o[2]) && (o[2] as unknown[]).every((row) => Array.isArray(row) && row.length === 3))
    if (first < 0) return body
    const objects = state.objects.map((o, i) => (i === first ? ([o[0], o[1], (o[2] as Array<[string, number, number]>).map(([r, p, n]) => [r, p + 1, n])] as const) : o))
    const raised = { ...state, objects } as typeof state
    const out = { ...body, state: toBase64Url(encodeAuditState(raised)) }
    if (how === 'mismatch') return out
    const attestation = encodeAttestation({ ...decodeAttestation(fromBase64Url(body.attestation)), stateHash: auditStateHash((b) => nodeCrypto.sha256(b), raised) })
    return { ...out, attestation: toBase64Url(attestation), sig: toHex(signSync(this.ctx.secretKey, attestation)) }
  }

  /** The relay's attestation with another state hash, signed with its real key: a lie only other relays can expose. */
  private wrongAttestation(bytes: Uint8Array): { bytes: Uint8Array; sig: Uint8Array } {
    const a = decodeAttestation(bytes)
    // A copy (Buffer's slice() is a view: it would change the relay's own bytes).
    const stateHash = Uint8Array.from(a.stateHash)
    stateHash[0] = (stateHash[0] as number) ^ 0xff
    const lie = encodeAttestation({ ...a, stateHash })
    return { bytes: lie, sig: signSync(this.ctx.secretKey, lie) }
  }

  /**
   * `admit-revoked`: the attestation as a relay would sign it whose audit
   * lets writers the space's policy refuses through: every unit rejected
   * as `unauthorized` is stated committed (the attestation as it is when it
   * has none).
   */
  private admitting(signed: { bytes: Uint8Array; sig: Uint8Array }): { bytes: Uint8Array; sig: Uint8Array } {
    const a = decodeAttestation(signed.bytes)
    let changed = false
    const admitted = a.decisions.map((d) => {
      if (d[1] !== 'committed' || !d[3].some(([, reason]) => reason === 'unauthorized')) return d
      changed = true
      return [d[0], d[1], d[2], d[3].filter(([, reason]) => reason !== 'unauthorized'), d[4]] as const
    })
    if (!changed) return signed
    const lie = encodeAttestation({ ...a, decisions: admitted })
    return { bytes: lie, sig: signSync(this.ctx.secretKey, lie) }
  }

  /**
   * A clock evidence answer that tries to certify another weight: this
   * relay's own genuine signature for the weight plus one, the other
   * relays' votes for it made up, all listed before the true votes, and
   * the envelope's frame with its signature broken.
   */
  private lyingVotes(space: string, body: ClockEvidence): unknown {
    const votes = body.votes
    if (typeof body.id !== 'string' || !Array.isArray(votes) || typeof body.relay !== 'number') return body
    const id = fromHex(body.id)
    const weights = new Set(votes.map(([, w]) => w))
    const lies = [...weights].flatMap((w) =>
      votes.map(([relay]): [number, number, string] => [relay, w + 1, toHex(relay === body.relay ? signSync(this.ctx.secretKey, encodeClockVote(space, id, w + 1)) : new Uint8Array(64).fill(relay + 1))]),
    )
    const envelope = typeof body.envelope === 'string' ? toBase64Url(forged(fromBase64Url(body.envelope))) : body.envelope
    return { ...body, envelope, votes: [...lies, ...votes] }
  }

  /**
   * The chain of epoch certificates with one more at its end: a change to a
   * committee of made-up relays, signed by this relay and, for the other
   * 2f signatures a certificate needs, by keys of no relay in the committee's
   * places. A client checking it from the committee it trusts finds too few
   * valid signatures; one that did not would move its sessions to the liar's relays.
   */
  private forgedEpoch(body: EpochChainJson): EpochChainJson {
    const keys = this.ctx.relayKeys ?? []
    const me = publicKeyOfSync(this.ctx.secretKey)
    const mine = Math.max(0, keys.findIndex((k) => bytesEqual(k, me)))
    const f = Math.max(1, Math.floor((keys.length - 1) / 3))
    const fake = (i: number) => new Uint8Array(32).fill(220 + i)
    const next = { f: 1, members: [0, 1, 2, 3].map((i) => ({ id: `forged${i + 1}`, publicKey: publicKeyOfSync(fake(i)), api: `forged${i + 1}.invalid:4000`, mesh: '/dns4/forged.invalid/tcp/4001' })) }
    const change = encodeEpochChange({ epoch: body.epoch + 1, startRound: 1_000_000_000, stateDigest: new Uint8Array(32), next })
    const others = Array.from({ length: keys.length }, (_, i) => i).filter((i) => i !== mine).slice(0, 2 * f)
    const signatures = [[mine, toBase64Url(signSync(this.ctx.secretKey, change))] as const, ...others.map((i) => [i, toBase64Url(signSync(fake(i), change))] as const)]
    return { epoch: body.epoch + 1, certificates: [...body.certificates, { change: toBase64Url(change), signatures }] }
  }

  /** How long to hold an HTTP answer to `route` (a route pattern such as '/v1/spaces/:space/head'). */
  delayOf(route: string | undefined): number {
    return this.lies.has('slow') && route !== undefined && !OPERATOR_ROUTES.has(route) ? SLOW_MS : 0
  }

  /** Rewrites the JSON answer to `route` before it is serialized. */
  answer(route: string | undefined, params: Record<string, string>, query: Record<string, string | undefined>, body: unknown): unknown {
    if (route === '/v1/cluster' && this.lies.has('wrong-cluster')) return wrongCluster(body as ClusterBody)
    if (route === '/v1/epochs' && this.lies.has('forge-epoch')) return this.forgedEpoch(body as EpochChainJson)
    // Said openly to operators and the demo's cluster panel, beside any mode towards relays.
    if (route === '/v1/status') {
      const status = body as { byzantine?: string | null }
      return { ...status, byzantine: [status.byzantine, ...this.lies].filter(Boolean).join(',') }
    }
    if (route === '/v1/spaces/:space/objects/:key' && this.lies.has('wrong-object')) return wrongObject(body as { proof?: string })
    if (route === '/v1/spaces/:space/snapshot' && this.lies.has('forge-snapshot')) return this.raisedSnapshot(body as Snapshot, 'forge')
    if (route === '/v1/spaces/:space/snapshot' && this.lies.has('mismatched-snapshot')) return this.raisedSnapshot(body as Snapshot, 'mismatch')
    if (route === '/v1/spaces/:space/delta' && this.lies.has('wrong-delta')) return wrongDelta(body as { delta?: string })
    if (route === '/v1/spaces/:space/clock/:id' && this.lies.has('lie-votes') && typeof params.space === 'string') return this.lyingVotes(params.space, body as ClockEvidence)
    if (route !== '/v1/spaces/:space/head' || typeof params.space !== 'string') return body
    const head = body as Head
    const space = params.space
    if (!this.firstHeads.has(space)) this.firstHeads.set(space, { ...head })
    const first = this.firstHeads.get(space) as Head
    // A signed head recorded earlier, served as is: its signature covers an old nonce (or none).
    if (this.lies.has('replay-head')) return first
    if (this.lies.has('inflate-head')) return this.inflatedHead(space, head, query.nonce)
    if (this.lies.has('stale-head')) {
      // The old index and hash (and their proof, still valid), genuinely signed over this request's
      // nonce: only other relays' heads show it is stale.
      const nonce = query.nonce === undefined ? undefined : fromHex(query.nonce)
      const hash = fromHex(first.stateHash)
      const bytes = nonce?.length === HEAD_NONCE_BYTES ? freshHeadBytes(space, first.index, hash, nonce) : stableReadBytes(space, first.index, hash)
      return { ...head, index: first.index, stateHash: first.stateHash, proof: first.proof, sig: toHex(signSync(this.ctx.secretKey, bytes)) }
    }
    return body
  }
}

type ClockEvidence = { relay?: number; id?: string; envelope?: string | null; votes?: Array<[number, number, string]> }

type ClusterBody = { f: number; relays: Array<{ id: string; publicKey: string; api: string }> }

type Snapshot = { space: string; relay: number; attestation: string | null; sig?: string; state?: string }

/** How many envelope frames pad-frames remembers (to send in full what a commit names by id). */
const RECENT_FRAMES = 256

/** The lies that decode what the session sends (the others pass frames through unread). */
const READING_LIES: readonly ClientLie[] = ['lie-attest', 'admit-revoked', 'withhold-commits', 'withhold-envelopes', 'forge-envelope', 'pad-frames', 'name-unsent', 'impostor', 'rechallenge', 'wrong-delta', 'stale-delta']

/** An envelope frame's id (the hash of its signed bytes): what a commit names an envelope sent early by. */
function envelopeId(frame: Uint8Array): Uint8Array {
  return nodeCrypto.sha256(asSigned(decode(frame)).bytes)
}

/** The same cluster with every relay's key replaced: clients that trust it would trust nobody real. */
function wrongCluster(c: ClusterBody): ClusterBody {
  return { ...c, relays: c.relays.map((r, i) => ({ ...r, publicKey: toHex(publicKeyOfSync(new Uint8Array(32).fill(200 + i))) })) }
}

/**
 * An object proof whose object is reset to its type's initial state, with
 * its bucket entry changed to match: consistent in itself, it only fails
 * to lead to the state hash the relays attested.
 */
function wrongObject(body: { proof?: string }): unknown {
  if (typeof body.proof !== 'string') return body
  const p = decodeObjectProof(fromBase64Url(body.proof))
  if (!p.object) return body
  const snapshot = createCrdt(decodeDeclaration(p.object[0])).snapshot()
  const leaf = objectDigest((b) => nodeCrypto.sha256(b), [p.key, p.object[0], snapshot])
  const bucket = p.path.bucket.map(([k, l]) => [k, k === p.key ? leaf : l] as const)
  return { ...body, proof: toBase64Url(encodeObjectProof({ ...p, object: [p.object[0], snapshot], path: { ...p.path, bucket } })) }
}

/**
 * A delta with every object sent as state reset to its type's initial
 * state and the last op of every object sent as ops left out: well formed,
 * it only fails to lead to the state hash the relays attested.
 */
function wrongDelta(body: { delta?: string }): unknown {
  if (typeof body.delta !== 'string') return body
  return { ...body, delta: toBase64Url(wrongDeltaBytes(fromBase64Url(body.delta))) }
}

/** A delta with every object's state emptied, or its last op dropped. */
function wrongDeltaBytes(bytes: Uint8Array): Uint8Array {
  // Parked envelopes are passed on as they are: only their signed bytes are re-encoded.
  const d = decodeStateDelta(bytes, (signed) => ({ signed }) as unknown as WaitingEnvelope)
  const objects = d.objects.map((o) => (o.mode === 'state' ? { ...o, snapshot: createCrdt(decodeDeclaration(o.decl)).snapshot() } : { ...o, ops: o.ops.slice(0, -1) }))
  return encodeStateDelta({ ...d, objects })
}

/** The envelope with one bit of its signature flipped. */
function forged(envelope: Uint8Array): Uint8Array {
  const copy = Uint8Array.from(envelope) // not slice(): on a Buffer that is a view of the relay's frame
  copy[copy.length - 1] = (copy[copy.length - 1] as number) ^ 0x01
  return copy
}
