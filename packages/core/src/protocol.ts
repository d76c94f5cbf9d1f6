import { concatBytes } from './bytes.ts'
import { DEFAULT_LIMITS, asSigned, decode, encode, expect, type Signed } from './codec.ts'
import { decodeDeviceCertificate, encodeDeviceCertificate, type DeviceCertificate } from './device.ts'
import { SteadError, type ErrorReason } from './errors.ts'
import type { Decision } from './replica.ts'

/**
 * The client ↔ relay protocol over a WebSocket: one msgpack array per
 * binary frame, the first element names the message. Shared by the relay
 * and the SDK so both validate the same shapes.
 *
 * A session: the relay sends `challenge`; the client answers `hello` with
 * its public key and a signature over `authBytes(nonce, relayKey)`; the relay
 * answers `welcome`. Then the client may `subscribe` to spaces (from a stable
 * index, to resume) and `submit` envelopes (and `ping`: the `pong` carries
 * the relay's clock, see there); the relay streams `envelope`
 * (certified, for prospective state) and `commit` (audited, with a signed
 * attestation) messages for subscribed spaces.
 */

/** A message from a client to a relay (see the module comment above for the session). */
export type ClientMessage =
  | {
      /** The answer to `challenge`: proves the client holds its key. */
      readonly type: 'hello'
      /** The client's Ed25519 public key: who the session reads as. */
      readonly publicKey: Uint8Array
      /** Its signature over `authBytes(nonce, relayKey)`. */
      readonly sig: Uint8Array
      /**
       * A fresh random 32 bytes for the relay to sign in `welcome`
       * (`welcomeBytes`), proving it holds the key it named. Without it the
       * relay does not sign, and the client cannot tell it from an impostor.
       */
      readonly nonce?: Uint8Array
      /** The key's device certificate, if it is a device of a user: the session then reads as that user (see DeviceCertificate). */
      readonly device?: DeviceCertificate
    }
  | {
      /** Follow a space: its envelopes, and its commits from `fromIndex` on. */
      readonly type: 'subscribe'
      /** The space. */
      readonly space: string
      /** The stable index the client has: commits after it are sent. */
      readonly fromIndex: number
      /**
       * Whether this relay sends the space's envelope frames (each envelope
       * as it arrives, and every commit's batch) or only its attestations.
       * A client takes frames from one relay and attestations from the
       * others. Default true.
       */
      readonly frames?: boolean
      /**
       * Whether the relay may put, among a commit's envelopes, the 32-byte
       * id of an envelope it already sent on this socket (in an `envelope`
       * message) instead of sending the frame again: the client keeps the
       * frames it received and puts them back ({@link ENVELOPE_REF_BYTES}).
       * Default false.
       */
      readonly refs?: boolean
      /**
       * Whether the relay sends its own clock votes on the space's
       * envelopes (`votes` messages) as it casts them, so the client
       * gathers validator certificates from every relay's feed instead of
       * asking for them. Default false.
       */
      readonly votes?: boolean
    }
  | {
      /**
       * Follow a space at a freshness bound (BENDY's live stream): instead
       * of every envelope and commit, the relay sends a `delta` about every
       * `freshnessMs` (less its estimate of the time one takes to arrive and
       * apply), with each changed object as its ops or its state, and f+1
       * relays' signatures on the attestation it ends at. Replaces any
       * subscription of the space on this session. For readers: a client
       * with updates of its own in flight subscribes instead, to see their
       * outcomes.
       */
      readonly type: 'pace'
      /** The space. */
      readonly space: string
      /** The stable index the client has: the first delta starts there. */
      readonly fromIndex: number
      /** How late, at most, a committed update may reach the client, in ms ({@link MIN_FRESHNESS_MS} to {@link MAX_FRESHNESS_MS}). */
      readonly freshnessMs: number
      /** How changed objects travel: as ops, as state, or each the cheaper way (BENDY's rule on the hot objects). Default adaptive. */
      readonly mode?: 'ops' | 'state' | 'adaptive'
    }
  | {
      /** The client applied a `delta` of a paced space: the relay's estimate of how long one takes (μ) learns from it. */
      readonly type: 'applied'
      /** The space. */
      readonly space: string
      /** The stable index the delta ended at. */
      readonly index: number
    }
  | {
      /** Stop following a space. */
      readonly type: 'unsubscribe'
      /** The space. */
      readonly space: string
    }
  | {
      /** Hand the relay an envelope to order. */
      readonly type: 'submit'
      /** The client's number for it: `accepted` and `error` answers name it. */
      readonly id: number
      /** The envelope frame (`encodeEnvelope`). */
      readonly envelope: Uint8Array
    }
  | {
      /**
       * Peer discovery: where this client can be reached for peer-to-peer
       * sync of a space it may read (libp2p multiaddrs, each with its
       * `/p2p/<peer id>`). The relay passes them to the space's other
       * announcing clients, and answers with theirs (`peers`). An empty list
       * withdraws the client.
       */
      readonly type: 'announce'
      /** The space. */
      readonly space: string
      /** At most {@link MAX_PEER_ADDRS} multiaddrs of {@link MAX_PEER_ADDR_CHARS} characters each. */
      readonly addrs: readonly string[]
    }
  | {
      /**
       * This client's presence in a space it may read (see presence.ts):
       * the relay passes it at once to the space's other sessions and
       * keeps the latest one in memory for newcomers, never on disk.
       */
      readonly type: 'presence'
      /** The space. */
      readonly space: string
      /** The encoded PresenceBody, signed with the session's key. */
      readonly signed: Signed
      /**
       * The same author's leave (a body with a null state and the next
       * seq), signed ahead: what the relay passes on for it when its
       * session closes without one, so others see it go at once.
       */
      readonly leave?: Signed
    }
  | {
      /** Keepalive: the relay answers `pong` with the same `n`. */
      readonly type: 'ping'
      /** Any number, echoed. */
      readonly n: number
    }

/** A message from a relay to a client (see the module comment above for the session). */
export type RelayMessage =
  | {
      /** The session's first message: the client must answer `hello`. */
      readonly type: 'challenge'
      /** 32 random bytes the client signs (through `authBytes`). */
      readonly nonce: Uint8Array
      /** The relay's index in the cluster. */
      readonly relay: number
      /** The relay's public key: the client checks it against the pinned cluster. */
      readonly relayKey: Uint8Array
    }
  | {
      /** The session is authenticated. */
      readonly type: 'welcome'
      /** The relay's index in the cluster. */
      readonly relay: number
      /** How many relays the cluster has. */
      readonly n: number
      /** How many of them may be faulty. */
      readonly f: number
      /**
       * The relay's libp2p addresses for clients' peer-to-peer sync (a
       * circuit relay and WebRTC signalling for browsers), when it serves
       * them; absent otherwise.
       */
      readonly peers?: readonly string[]
      /** The relay's signature over `welcomeBytes(hello.nonce, hello.publicKey, relay)`, when the hello carried a nonce. */
      readonly sig?: Uint8Array
    }
  | {
      /** Other clients of a space that announced where they can be reached (the answer to `announce`, and news after it). */
      readonly type: 'peers'
      /** The space. */
      readonly space: string
      /** Their multiaddrs, at most {@link MAX_PEERS_PER_MESSAGE}. */
      readonly addrs: readonly string[]
    }
  | {
      /** A refusal. */
      readonly type: 'error'
      /** The `submit` it answers, or null for a session-level error. */
      readonly id: number | null
      /** Why. */
      readonly reason: ErrorReason
      /** A sentence for logs (at most 4,096 characters). */
      readonly detail: string
    }
  | {
      /** A submitted envelope is queued for ordering (or was known already). */
      readonly type: 'accepted'
      /** The `submit` it answers. */
      readonly id: number
      /** `queued`, or `duplicate` when the relay already had it. */
      readonly status: 'queued' | 'duplicate'
    }
  | {
      /**
       * A compact attestation, for a subscription without frames: the
       * relay's signature over its attestation of the space's commit at
       * `round`. Correct relays sign identical bytes, so the client checks
       * it against the attestation its frame source sent in full.
       */
      readonly type: 'attest'
      /** The space. */
      readonly space: string
      /** The commit's round. */
      readonly round: number
      /** The relay's Ed25519 signature over the attestation bytes. */
      readonly sig: Uint8Array
    }
  | {
      /** An envelope of a followed space that consensus certified (for the prospective state). */
      readonly type: 'envelope'
      /** The space. */
      readonly space: string
      /** The envelope frame. */
      readonly envelope: Uint8Array
    }
  /**
   * One attested commit. A commit's envelopes may add up to more than one
   * frame can carry: then `more` is true and `commit-more` frames with the
   * rest follow on the same socket, before anything else of that space's
   * commit feed, the last one with `more` false.
   */
  | {
      /** An audited commit of a followed space. */
      readonly type: 'commit'
      /** The space. */
      readonly space: string
      /** The relay's signed {@link Attestation} of the commit. */
      readonly attestation: Signed
      /**
       * The envelope frames the commit carried for the space, in order
       * (bound to the attestation by its `batch` digest). On a subscription
       * with `refs`, an element of {@link ENVELOPE_REF_BYTES} bytes is the id
       * of an envelope this relay sent earlier on the same socket.
       */
      readonly envelopes: readonly Uint8Array[]
      /** Whether `commit-more` frames with the rest of the envelopes follow. */
      readonly more?: boolean
    }
  | {
      /** The rest of a `commit` whose envelopes did not fit one frame. */
      readonly type: 'commit-more'
      /** The space. */
      readonly space: string
      /** More envelope frames, in order. */
      readonly envelopes: readonly Uint8Array[]
      /** Whether more frames follow. */
      readonly more: boolean
    }
  | {
      /**
       * The answer to a `subscribe` from a stable index older than this
       * relay keeps commits for (its retention window): the client starts
       * again from a verified snapshot.
       */
      readonly type: 'pruned'
      /** The space. */
      readonly space: string
      /** The oldest stable index this relay's commit feed starts from. */
      readonly from: number
    }
  | {
      /**
       * The session may not read the space: the answer to a `subscribe`
       * the space's policy refuses, or sent when a policy change takes the
       * session's key off the space's readers. Nothing more of the space
       * comes on this session (its feed, presence and peers end).
       */
      readonly type: 'unreadable'
      /** The space. */
      readonly space: string
      /** Why, for logs and the app. */
      readonly detail: string
    }
  | {
      /** Another client's presence in a followed space, as its author signed it (see presence.ts). */
      readonly type: 'presence'
      /** The space. */
      readonly space: string
      /** The author's Ed25519 public key (the relay checked it is the key of the session that sent it). */
      readonly author: Uint8Array
      /** The encoded PresenceBody and the author's signature over it. */
      readonly signed: Signed
    }
  | {
      /**
       * What changed in a paced space (see the client's `pace`) since the
       * last delta, or since the stable index the client paced from: the
       * client applies it only if the result hashes to the state hash of
       * the attestation, and believes that attestation only with f+1
       * relays' signatures over its bytes.
       */
      readonly type: 'delta'
      /** The space. */
      readonly space: string
      /** The encoded StateDelta (encodeStateDelta). */
      readonly delta: Uint8Array
      /** The attestation of the commit the delta ends at (its bytes, signed alike by every correct relay). */
      readonly attestation: Uint8Array
      /** [relay, signature over `attestation`], f+1 of them or more. */
      readonly sigs: ReadonlyArray<readonly [number, Uint8Array]>
    }
  | {
      /**
       * The relay cannot pace the space from where the client stands (its
       * change log does not reach back there): the client subscribes
       * instead, and may pace again once it caught up.
       */
      readonly type: 'unpaced'
      /** The space. */
      readonly space: string
      /** Why, for logs. */
      readonly detail: string
    }
  | {
      /**
       * The relay needs these envelopes of the space to judge the clock of
       * one this session submitted, which cites them (Chrono's update
       * validator): the client submits those it holds, undecided.
       */
      readonly type: 'want'
      /** The space. */
      readonly space: string
      /** The envelopes' ids, at most {@link MAX_WANTED_IDS}. */
      readonly ids: readonly Uint8Array[]
    }
  | {
      /**
       * This relay's clock votes on envelopes of a space it cast since its
       * last `votes` (see `encodeClockVote`), durable before they are sent;
       * for sessions that subscribed with `votes`.
       */
      readonly type: 'votes'
      /** The space. */
      readonly space: string
      /** [envelope id, weight, signature], at most {@link MAX_CLIENT_VOTES}. */
      readonly votes: ReadonlyArray<readonly [id: Uint8Array, weight: number, sig: Uint8Array]>
    }
  | {
      /** The answer to `ping`. */
      readonly type: 'pong'
      /** The ping's `n`. */
      readonly n: number
      /**
       * The relay's clock when it answered (ms since the epoch). Clients
       * measure their device clock's offset from it (halfway through the
       * ping's round trip) and stamp register writes with the relays' time,
       * so a device clock running fast cannot win last-writer-wins. Absent
       * from relays that predate it; clients that predate it ignore it.
       */
      readonly time?: number
    }

/** What a client signs to prove it holds its key: bound to this relay and this session's nonce. */
export function authBytes(nonce: Uint8Array, relayKey: Uint8Array): Uint8Array {
  return encode(['stead/auth/v1', nonce, relayKey])
}

/** What a relay signs in `welcome`: the client's nonce, the client's key and the relay's index, so a session proves the relay's key both ways. */
export function welcomeBytes(nonce: Uint8Array, clientKey: Uint8Array, relay: number): Uint8Array {
  return encode(['stead/welcome/v1', nonce, clientKey, relay])
}

/**
 * A relay's signed statement about one audited commit of a space. Correct
 * relays produce identical bytes for the same commit, so a client trusts a
 * commit once f+1 relays sent the same bytes with valid signatures.
 */
export interface Attestation {
  /** The space the commit was audited for. */
  readonly space: string
  /** The consensus commit (anchor round) this audit ran at; replicas replaying it pass it to `commit`. */
  readonly round: number
  /**
   * Round of this space's previous attested commit (0 for the first). It
   * chains a space's commits, so a client applies them in order without
   * missing one that only parked envelopes (fromIndex = toIndex).
   */
  readonly prevRound: number
  /** Stable index before and after this commit. */
  readonly fromIndex: number
  /** Stable index after this commit. */
  readonly toIndex: number
  /** [envelope id, outcome] in audit order; outcome is 'committed' with per-unit results, or the drop reason. */
  readonly decisions: ReadonlyArray<AttestedDecision>
  /** sha256 of the stable snapshot after this commit. */
  readonly stateHash: Uint8Array
  /**
   * batchDigest() of the envelopes of this space the commit carried, in
   * order: the envelope frames travel beside the attestation, unsigned, so
   * this is what binds them to it.
   */
  readonly batch: Uint8Array
}

/**
 * Size of an envelope reference in a commit's envelopes (see the `refs`
 * subscription): an envelope id. No envelope frame is this short (its
 * signature alone is 64 bytes).
 */
export const ENVELOPE_REF_BYTES = 32

/** sha256 over the concatenated envelope ids of a batch, in order. */
export function batchDigest(sha256: (bytes: Uint8Array) => Uint8Array, ids: readonly Uint8Array[]): Uint8Array {
  const all = new Uint8Array(ids.length * 32)
  ids.forEach((id, i) => all.set(id, i * 32))
  return sha256(all)
}

/**
 * One audit decision as an attestation states it: `[id, 'committed', index,
 * [[unit, reason]…] of the rejected units, whether the clock is verified]`,
 * or `[id, reason]` for an envelope that was dropped. f+1 attestations
 * saying an envelope's clock is verified are its clock certificate:
 * Chrono's update validator run by the relays.
 */
export type AttestedDecision =
  | readonly [id: Uint8Array, outcome: 'committed', index: number, rejected: ReadonlyArray<readonly [unit: number, reason: ErrorReason]>, clockVerified: boolean]
  | readonly [id: Uint8Array, outcome: 'duplicate' | 'conflict' | 'gap' | 'malformed' | 'bad-clock']

/** How an attestation states one of the audit's decisions (every replica states it alike). */
export function attestedDecision(d: Exclude<Decision, { kind: 'superseded' }>): AttestedDecision {
  if (d.kind === 'committed') {
    return [d.env.id, 'committed', d.index, d.units.flatMap((u) => (u.status === 'rejected' ? [[u.unit, u.reason] as const] : [])), d.clockVerified]
  }
  return [d.env.id, d.reason]
}

const ATTEST_TAG = 'stead/attest/v2'

/** The bytes a relay signs for an attestation (tagged, so they can pass for nothing else). */
export function encodeAttestation(a: Attestation): Uint8Array {
  return encode([ATTEST_TAG, a.space, a.round, a.prevRound, a.fromIndex, a.toIndex, a.decisions, a.stateHash, a.batch])
}

/**
 * Reads attestation bytes; check the signature (over these very bytes)
 * separately.
 *
 * @throws SteadError `malformed` or `too-large`.
 */
export function decodeAttestation(bytes: Uint8Array): Attestation {
  // As large as a relay message may be: a commit deciding ~80k envelopes outgrows the 4 MiB frame limit.
  const v = expect.array(decode(bytes, MAX_RELAY_MESSAGE_BYTES), 'attestation', 9)
  if (v.length !== 9 || v[0] !== ATTEST_TAG) throw new SteadError('malformed', `not a ${ATTEST_TAG}`)
  const decisions = expect.array(v[6], 'attestation.decisions', 1_000_000).map((d, i): AttestedDecision => {
    const t = expect.array(d, `decisions[${i}]`, 5)
    const id = expect.bytes(t[0], `decisions[${i}].id`, 32)
    if (t[1] === 'committed') {
      const rejected = expect.array(t[3], `decisions[${i}].rejected`, 100_000).map((r, j) => {
        const pair = expect.array(r, `decisions[${i}].rejected[${j}]`, 2)
        return [expect.uint(pair[0], 'unit'), expect.string(pair[1], 'reason', 32) as ErrorReason] as const
      })
      return [id, 'committed', expect.uint(t[2], `decisions[${i}].index`), rejected, expect.boolean(t[4], `decisions[${i}].clockVerified`)]
    }
    if (t[1] === 'duplicate' || t[1] === 'conflict' || t[1] === 'gap' || t[1] === 'malformed' || t[1] === 'bad-clock') return [id, t[1]]
    throw new SteadError('malformed', `decisions[${i}] has unknown outcome ${JSON.stringify(t[1])}`)
  })
  return {
    space: expect.string(v[1], 'attestation.space', DEFAULT_LIMITS.maxSpaceChars, 1),
    round: expect.uint(v[2], 'attestation.round'),
    prevRound: expect.uint(v[3], 'attestation.prevRound'),
    fromIndex: expect.uint(v[4], 'attestation.fromIndex'),
    toIndex: expect.uint(v[5], 'attestation.toIndex'),
    decisions,
    stateHash: expect.bytes(v[7], 'attestation.stateHash', 32),
    batch: expect.bytes(v[8], 'attestation.batch', 32),
  }
}

/** Longest error detail on the wire. */
const MAX_DETAIL_CHARS = 4096

type CommitMessage = Extract<RelayMessage, { type: 'commit' }>

/**
 * Joins a commit a relay sent in several frames (`commit` with `more`, then
 * `commit-more` frames) back into one `commit`. One per socket: the parts
 * of a commit come in a row. Throws SteadError('malformed') for the rest of
 * a commit that never started and 'too-large' past `maxBytes` of envelopes.
 */
export class CommitAssembler {
  private partial: { message: CommitMessage; envelopes: Uint8Array[]; bytes: number } | undefined

  private readonly maxBytes: number
  constructor(maxBytes = 512 * 1024 * 1024) {
    this.maxBytes = maxBytes
  }

  /** The whole commit once its last part is in, else undefined. */
  push(m: CommitMessage | Extract<RelayMessage, { type: 'commit-more' }>): CommitMessage | undefined {
    const size = (list: readonly Uint8Array[]): number => list.reduce((n, e) => n + e.length, 0)
    if (m.type === 'commit') {
      // A relay abandons the rest of a commit only when its subscription ended (the client
      // unsubscribed or subscribed again): the unfinished one is simply dropped.
      this.partial = undefined
      if (!m.more) return m
      this.partial = { message: m, envelopes: [...m.envelopes], bytes: size(m.envelopes) }
      return undefined
    }
    const p = this.partial
    if (!p || p.message.space !== m.space) throw new SteadError('malformed', `the rest of a ${m.space} commit that never started`)
    p.bytes += size(m.envelopes)
    if (p.bytes > this.maxBytes) throw new SteadError('too-large', `a commit of more than ${this.maxBytes} bytes`)
    p.envelopes.push(...m.envelopes)
    if (m.more) return undefined
    this.partial = undefined
    return { type: 'commit', space: p.message.space, attestation: p.message.attestation, envelopes: p.envelopes }
  }

  /** Forgets a commit in progress (the socket it came on closed). */
  reset(): void {
    this.partial = undefined
  }
}

function envelopeFrames(v: unknown): Uint8Array[] {
  return expect.array(v, 'commit.envelopes', 1_000_000).map((e) => {
    if (!(e instanceof Uint8Array)) throw new SteadError('malformed', 'commit envelopes must be bytes')
    return e
  })
}

/**
 * What a reader signs to read a space with a `readers` list over HTTP
 * (heads, snapshots), sent as the `x-stead-reader` header
 * `<public key hex>.<time ms>.<signature hex>`. Bound to the space; relays
 * accept it within a few minutes of their own clock. (Not bound to one
 * relay: a relay that replays it to another learns nothing it did not hold.)
 */
export function readAuthBytes(space: string, timeMs: number): Uint8Array {
  return encode(['stead/read/v1', space, timeMs])
}

/**
 * Bytes a relay signs for a page of an object's stable history: the entries
 * ([stable index, value] pairs, newest first, msgpack) before stable index
 * `before`. Correct relays serve identical pages, so a client believes one
 * that f+1 relays signed.
 */
export function historyPageBytes(space: string, key: string, before: number, entries: Uint8Array): Uint8Array {
  return encode(['stead/history/v1', space, key, before, entries])
}

/** Size of the nonce a client sends with a head request (see freshHeadBytes). */
export const HEAD_NONCE_BYTES = 32

/** Bytes a relay signs for a quorum read of a space's stable state (a snapshot, or a head asked for without a nonce). */
export function stableReadBytes(space: string, index: number, stateHash: Uint8Array): Uint8Array {
  return encode(['stead/stable-read/v1', space, index, stateHash])
}

/**
 * Bytes a relay signs for a space's head asked for with the client's
 * `nonce` (HEAD_NONCE_BYTES random bytes): the signature is fresh, so a
 * head recorded earlier cannot be replayed to the client as current.
 */
export function freshHeadBytes(space: string, index: number, stateHash: Uint8Array, nonce: Uint8Array): Uint8Array {
  return encode(['stead/head/v2', space, index, stateHash, nonce])
}

/** The frame of a client message. */
export function encodeClientMessage(m: ClientMessage): Uint8Array {
  switch (m.type) {
    case 'hello':
      if (m.device) return encode(['hello', m.publicKey, m.sig, m.nonce ?? null, encodeDeviceCertificate(m.device)])
      return encode(m.nonce ? ['hello', m.publicKey, m.sig, m.nonce] : ['hello', m.publicKey, m.sig])
    case 'subscribe':
      if (m.votes) return encode(['subscribe', m.space, m.fromIndex, m.frames !== false, m.refs === true, true])
      if (m.refs) return encode(['subscribe', m.space, m.fromIndex, m.frames !== false, true])
      return encode(m.frames === false ? ['subscribe', m.space, m.fromIndex, false] : ['subscribe', m.space, m.fromIndex])
    case 'pace':
      return encode(m.mode && m.mode !== 'adaptive' ? ['pace', m.space, m.fromIndex, m.freshnessMs, m.mode] : ['pace', m.space, m.fromIndex, m.freshnessMs])
    case 'applied':
      return encode(['applied', m.space, m.index])
    case 'unsubscribe':
      return encode(['unsubscribe', m.space])
    case 'submit':
      return encode(['submit', m.id, m.envelope])
    case 'announce':
      return encode(['announce', m.space, m.addrs])
    case 'ping':
      return encode(['ping', m.n])
    case 'presence':
      return encode(m.leave ? ['presence', m.space, [m.signed.bytes, m.signed.sig], [m.leave.bytes, m.leave.sig]] : ['presence', m.space, [m.signed.bytes, m.signed.sig]])
  }
}

/**
 * Reads a client's frame (relays call this on untrusted input).
 *
 * @throws SteadError `malformed`, or `too-large` over `maxBytes`.
 */
export function decodeClientMessage(frame: Uint8Array, maxBytes: number = DEFAULT_LIMITS.maxFrameBytes): ClientMessage {
  const v = expect.array(decode(frame, maxBytes), 'message', 6)
  const fields = (n: number) => {
    if (v.length !== n) throw new SteadError('malformed', `${String(v[0])} takes ${n - 1} fields`)
  }
  switch (v[0]) {
    case 'hello': {
      if (v.length < 3 || v.length > 5) throw new SteadError('malformed', 'hello takes 2 to 4 fields')
      const nonce = v.length >= 4 && v[3] !== null ? expect.bytes(v[3], 'nonce', 32) : undefined
      const device = v.length === 5 ? decodeDeviceCertificate(v[4]) : undefined
      return { type: 'hello', publicKey: expect.bytes(v[1], 'publicKey', 32), sig: expect.bytes(v[2], 'sig', 64), ...(nonce ? { nonce } : {}), ...(device ? { device } : {}) }
    }
    case 'subscribe': {
      if (v.length < 3 || v.length > 6) throw new SteadError('malformed', 'subscribe takes 2 to 5 fields')
      const frames = v.length >= 4 ? expect.boolean(v[3], 'frames') : true
      const refs = v.length >= 5 ? expect.boolean(v[4], 'refs') : false
      const votes = v.length === 6 ? expect.boolean(v[5], 'votes') : false
      return { type: 'subscribe', space: expect.string(v[1], 'space', DEFAULT_LIMITS.maxSpaceChars, 1), fromIndex: expect.uint(v[2], 'fromIndex'), frames, ...(refs ? { refs } : {}), ...(votes ? { votes } : {}) }
    }
    case 'pace': {
      if (v.length !== 4 && v.length !== 5) throw new SteadError('malformed', 'pace takes 3 or 4 fields')
      const freshnessMs = expect.uint(v[3], 'freshnessMs')
      if (freshnessMs < MIN_FRESHNESS_MS || freshnessMs > MAX_FRESHNESS_MS) throw new SteadError('malformed', `freshnessMs must lie in [${MIN_FRESHNESS_MS}, ${MAX_FRESHNESS_MS}], got ${freshnessMs}`)
      const mode = v.length === 5 ? v[4] : 'adaptive'
      if (mode !== 'ops' && mode !== 'state' && mode !== 'adaptive') throw new SteadError('malformed', 'pace mode is ops, state or adaptive')
      return { type: 'pace', space: expect.string(v[1], 'space', DEFAULT_LIMITS.maxSpaceChars, 1), fromIndex: expect.uint(v[2], 'fromIndex'), freshnessMs, ...(mode === 'adaptive' ? {} : { mode }) }
    }
    case 'applied':
      fields(3)
      return { type: 'applied', space: expect.string(v[1], 'space', DEFAULT_LIMITS.maxSpaceChars, 1), index: expect.uint(v[2], 'index') }
    case 'unsubscribe':
      fields(2)
      return { type: 'unsubscribe', space: expect.string(v[1], 'space', DEFAULT_LIMITS.maxSpaceChars, 1) }
    case 'submit': {
      fields(3)
      const envelope = v[2]
      if (!(envelope instanceof Uint8Array)) throw new SteadError('malformed', 'submit carries the envelope frame as bytes')
      return { type: 'submit', id: expect.uint(v[1], 'id'), envelope }
    }
    case 'announce':
      fields(3)
      return { type: 'announce', space: expect.string(v[1], 'space', DEFAULT_LIMITS.maxSpaceChars, 1), addrs: addrsOf(v[2], MAX_PEER_ADDRS) }
    case 'ping':
      fields(2)
      return { type: 'ping', n: expect.uint(v[1], 'n') }
    case 'presence': {
      if (v.length !== 3 && v.length !== 4) throw new SteadError('malformed', 'presence takes 2 or 3 fields')
      const leave = v.length === 4 ? asSigned(v[3]) : undefined
      return { type: 'presence', space: expect.string(v[1], 'space', DEFAULT_LIMITS.maxSpaceChars, 1), signed: asSigned(v[2]), ...(leave ? { leave } : {}) }
    }
    default:
      throw new SteadError('malformed', `unknown client message ${JSON.stringify(v[0])}`)
  }
}

/**
 * A `commit` frame (with its attestation) or a `commit-more` frame (without)
 * around envelope frames already encoded as one msgpack array: a relay
 * sends the bytes it stored, without decoding and encoding them again for
 * every subscriber. Byte for byte what encodeRelayMessage makes of the same
 * message.
 */
export function encodeCommitFrame(space: string, attestation: Signed | undefined, encodedEnvelopes: Uint8Array, more: boolean): Uint8Array {
  const head = attestation ? ['commit', space, [attestation.bytes, attestation.sig]] : ['commit-more', space]
  const tail = attestation ? (more ? [true] : []) : [more]
  // A msgpack array is its header and then its elements, each encoded on its own.
  const header = Uint8Array.of(0x90 | (head.length + 1 + tail.length))
  return concatBytes(header, ...head.map((v) => encode(v)), encodedEnvelopes, ...tail.map((v) => encode(v)))
}

/** The frame of a relay message (an error's detail is cut to what decoders accept). */
export function encodeRelayMessage(m: RelayMessage): Uint8Array {
  switch (m.type) {
    case 'challenge':
      return encode(['challenge', m.nonce, m.relay, m.relayKey])
    case 'welcome':
      if (m.sig) return encode(['welcome', m.relay, m.n, m.f, m.peers ?? [], m.sig])
      return encode(m.peers?.length ? ['welcome', m.relay, m.n, m.f, m.peers] : ['welcome', m.relay, m.n, m.f])
    case 'peers':
      return encode(['peers', m.space, m.addrs])
    case 'error':
      // Details may quote the input: cut to what every decoder accepts.
      return encode(['error', m.id, m.reason, m.detail.length > MAX_DETAIL_CHARS ? `${m.detail.slice(0, MAX_DETAIL_CHARS - 1)}…` : m.detail])
    case 'accepted':
      return encode(['accepted', m.id, m.status])
    case 'envelope':
      return encode(['envelope', m.space, m.envelope])
    case 'attest':
      return encode(['attest', m.space, m.round, m.sig])
    case 'commit':
      return encodeCommitFrame(m.space, m.attestation, encode(m.envelopes), m.more === true)
    case 'commit-more':
      return encodeCommitFrame(m.space, undefined, encode(m.envelopes), m.more)
    case 'pruned':
      return encode(['pruned', m.space, m.from])
    case 'unreadable':
      return encode(['unreadable', m.space, m.detail.length > MAX_DETAIL_CHARS ? `${m.detail.slice(0, MAX_DETAIL_CHARS - 1)}…` : m.detail])
    case 'presence':
      return encode(['presence', m.space, m.author, [m.signed.bytes, m.signed.sig]])
    case 'delta':
      return encode(['delta', m.space, m.delta, m.attestation, m.sigs.map(([relay, sig]) => [relay, sig])])
    case 'unpaced':
      return encode(['unpaced', m.space, m.detail.length > MAX_DETAIL_CHARS ? `${m.detail.slice(0, MAX_DETAIL_CHARS - 1)}…` : m.detail])
    case 'want':
      return encode(['want', m.space, m.ids.slice(0, MAX_WANTED_IDS)])
    case 'votes':
      return encode(['votes', m.space, m.votes.slice(0, MAX_CLIENT_VOTES)])
    case 'pong':
      // The time goes last: decoders that predate it read ['pong', n] and ignore what follows.
      return encode(m.time === undefined ? ['pong', m.n] : ['pong', m.n, m.time])
  }
}

/** The shortest freshness bound a `pace` may ask for: below it a delta per commit costs more than the commits. */
export const MIN_FRESHNESS_MS = 50
/** The longest freshness bound a `pace` may ask for (an hour). */
export const MAX_FRESHNESS_MS = 3_600_000
/** Most signatures a `delta` carries (a committee's size is far below it). */
const MAX_DELTA_SIGS = 256

/** Most multiaddrs one client announces for a space (and a relay offers for itself). */
export const MAX_PEER_ADDRS = 8
/** Longest multiaddr in an `announce` or `peers` message. */
export const MAX_PEER_ADDR_CHARS = 512
/** Most multiaddrs in one `peers` message. */
export const MAX_PEERS_PER_MESSAGE = 512
/** Envelope ids one `want` names at most (an envelope cites at most this many deps). */
export const MAX_WANTED_IDS = 64

/** At most this many clock votes in one `votes` message to a client. */
export const MAX_CLIENT_VOTES = 64

function addrsOf(v: unknown, max: number): string[] {
  return expect.array(v, 'addrs', max).map((a) => expect.string(a, 'addr', MAX_PEER_ADDR_CHARS, 1))
}

/** The largest message a client accepts from a relay (commits carry many envelopes), and the largest attestation. */
export const MAX_RELAY_MESSAGE_BYTES = 64 * 1024 * 1024

/**
 * Reads a relay's frame (clients call this on untrusted input).
 *
 * @throws SteadError `malformed`, or `too-large` over `maxBytes` (default 64 MiB: commits carry many envelopes).
 */
export function decodeRelayMessage(frame: Uint8Array, maxBytes: number = MAX_RELAY_MESSAGE_BYTES): RelayMessage {
  const v = expect.array(decode(frame, maxBytes), 'message', 6)
  switch (v[0]) {
    case 'challenge':
      return { type: 'challenge', nonce: expect.bytes(v[1], 'nonce', 32), relay: expect.uint(v[2], 'relay'), relayKey: expect.bytes(v[3], 'relayKey', 32) }
    case 'welcome': {
      const peers = v[4] === undefined ? undefined : addrsOf(v[4], MAX_PEER_ADDRS)
      const sig = v[5] === undefined ? undefined : expect.bytes(v[5], 'sig', 64)
      return { type: 'welcome', relay: expect.uint(v[1], 'relay'), n: expect.uint(v[2], 'n'), f: expect.uint(v[3], 'f'), ...(peers?.length ? { peers } : {}), ...(sig ? { sig } : {}) }
    }
    case 'peers':
      return { type: 'peers', space: expect.string(v[1], 'space', DEFAULT_LIMITS.maxSpaceChars, 1), addrs: addrsOf(v[2], MAX_PEERS_PER_MESSAGE) }
    case 'error':
      return { type: 'error', id: v[1] === null ? null : expect.uint(v[1], 'id'), reason: expect.string(v[2], 'reason', 32) as ErrorReason, detail: expect.string(v[3], 'detail', MAX_DETAIL_CHARS) }
    case 'accepted': {
      if (v[2] !== 'queued' && v[2] !== 'duplicate') throw new SteadError('malformed', 'accepted status must be queued or duplicate')
      return { type: 'accepted', id: expect.uint(v[1], 'id'), status: v[2] }
    }
    case 'attest':
      return { type: 'attest', space: expect.string(v[1], 'space', DEFAULT_LIMITS.maxSpaceChars, 1), round: expect.uint(v[2], 'round'), sig: expect.bytes(v[3], 'sig', 64) }
    case 'envelope': {
      if (!(v[2] instanceof Uint8Array)) throw new SteadError('malformed', 'envelope frame must be bytes')
      return { type: 'envelope', space: expect.string(v[1], 'space', DEFAULT_LIMITS.maxSpaceChars, 1), envelope: v[2] }
    }
    case 'commit': {
      const more = v[4] === undefined ? false : expect.boolean(v[4], 'commit.more')
      return { type: 'commit', space: expect.string(v[1], 'space', DEFAULT_LIMITS.maxSpaceChars, 1), attestation: asSigned(v[2]), envelopes: envelopeFrames(v[3]), more }
    }
    case 'commit-more':
      return { type: 'commit-more', space: expect.string(v[1], 'space', DEFAULT_LIMITS.maxSpaceChars, 1), envelopes: envelopeFrames(v[2]), more: expect.boolean(v[3], 'commit-more.more') }
    case 'pruned':
      return { type: 'pruned', space: expect.string(v[1], 'space', DEFAULT_LIMITS.maxSpaceChars, 1), from: expect.uint(v[2], 'from') }
    case 'unreadable':
      return { type: 'unreadable', space: expect.string(v[1], 'space', DEFAULT_LIMITS.maxSpaceChars, 1), detail: expect.string(v[2], 'detail', MAX_DETAIL_CHARS) }
    case 'presence':
      return { type: 'presence', space: expect.string(v[1], 'space', DEFAULT_LIMITS.maxSpaceChars, 1), author: expect.bytes(v[2], 'author', 32), signed: asSigned(v[3]) }
    case 'delta': {
      if (!(v[2] instanceof Uint8Array) || !(v[3] instanceof Uint8Array)) throw new SteadError('malformed', 'delta carries the delta and the attestation as bytes')
      const sigs = expect.array(v[4], 'delta.sigs', MAX_DELTA_SIGS).map((x, i) => {
        const pair = expect.array(x, `delta.sigs[${i}]`, 2)
        return [expect.uint(pair[0], `delta.sigs[${i}].relay`), expect.bytes(pair[1], `delta.sigs[${i}].sig`, 64)] as const
      })
      return { type: 'delta', space: expect.string(v[1], 'space', DEFAULT_LIMITS.maxSpaceChars, 1), delta: v[2], attestation: v[3], sigs }
    }
    case 'unpaced':
      return { type: 'unpaced', space: expect.string(v[1], 'space', DEFAULT_LIMITS.maxSpaceChars, 1), detail: expect.string(v[2], 'detail', MAX_DETAIL_CHARS) }
    case 'want':
      return { type: 'want', space: expect.string(v[1], 'space', DEFAULT_LIMITS.maxSpaceChars, 1), ids: expect.array(v[2], 'want.ids', MAX_WANTED_IDS).map((id, i) => expect.bytes(id, `want.ids[${i}]`, 32)) }
    case 'votes':
      return {
        type: 'votes',
        space: expect.string(v[1], 'space', DEFAULT_LIMITS.maxSpaceChars, 1),
        votes: expect.array(v[2], 'votes', MAX_CLIENT_VOTES).map((x, i) => {
          const t = expect.array(x, `votes[${i}]`, 3)
          if (t.length !== 3) throw new SteadError('malformed', `votes[${i}] is [id, weight, signature]`)
          return [expect.bytes(t[0], `votes[${i}].id`, 32), expect.uint(t[1], `votes[${i}].weight`), expect.bytes(t[2], `votes[${i}].sig`, 64)] as const
        }),
      }
    case 'pong':
      return { type: 'pong', n: expect.uint(v[1], 'n'), ...(v[2] === undefined ? {} : { time: expect.uint(v[2], 'pong.time') }) }
    default:
      throw new SteadError('malformed', `unknown relay message ${JSON.stringify(v[0])}`)
  }
}
