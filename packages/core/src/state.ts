import type { ClockRecord } from './causal.ts'
import { decodeClock, encodeClock } from './clock.ts'
import { bytesEqual } from './bytes.ts'
import { DEFAULT_LIMITS, decode, encode, expect, type Signed } from './codec.ts'
import { SteadError } from './errors.ts'
import { encodeDeclaration, leafPayload, leafPayloadOfSnapshot, type AnyCrdt, type Declaration } from './crdt/index.ts'
import { MERKLE_DEPTH, merkleRoot, merkleRootOfPath, type MerkleEntry, type MerklePath } from './merkle.ts'

/**
 * The canonical audit state of a space: everything a replica needs to
 * audit every later commit exactly as the relays do, and nothing local to
 * one replica (no pending envelopes, no in-memory histories, no counters a
 * relay and a client advance differently). Attestations sign its hash, so
 * a replica can start from a state one relay serves once f+1 relays'
 * attestations vouch for that hash (verified snapshot bootstrap).
 *
 * The hash is a tree: one digest per object and one per author, each list
 * a keyed Merkle tree (merkle.ts), and the two roots hashed with the rest.
 * A replica recomputes only the digests a commit changed and the paths
 * above them; a verifier recomputes everything from the snapshot's bytes
 * (`auditStateHash`), or checks one object against the hash with an
 * `ObjectProof`.
 */
export interface AuditState<E extends WaitingEnvelope = WaitingEnvelope> {
  /** The space. */
  readonly space: string
  /** The stable index: envelopes committed so far. */
  readonly index: number
  /** [author id, last committed sequence number, recent records ascending by seq], sorted by author id. */
  readonly authors: ReadonlyArray<AuditAuthor>
  /** Committed envelopes parked behind their author's sequence gap, sorted by (author, seq). */
  readonly waiting: ReadonlyArray<ParkedEnvelope<E>>
  /** [key, encoded declaration, CRDT snapshot], sorted by key. */
  readonly objects: ReadonlyArray<AuditObject>
}

/** One author's audit bookkeeping: [author id, last committed seq, recent records ascending by seq (see `encodeRecent`)]. */
export type AuditAuthor = readonly [authorId: string, seq: number, recent: readonly RecentRecord[]]

/**
 * One recently committed envelope of an author, as audit states carry it:
 * [seq, id hex, stable index, clock base, listed clock (flat) or null when
 * not kept, whether the clock is verified].
 */
export type RecentRecord = readonly [seq: number, idHex: string, index: number, base: number, clock: ReadonlyArray<string | number> | null, verified: boolean]

/** One recent record, read. */
export interface RecentEntry {
  /** The author's sequence number. */
  readonly seq: number
  /** The envelope's id (hex). */
  readonly idHex: string
  /** Its clock record. */
  readonly record: ClockRecord
}

/** The wire form of one recent record. */
export function encodeRecent(seq: number, idHex: string, r: ClockRecord): RecentRecord {
  return [seq, idHex, r.index, r.base, r.clock ? encodeClock(r.clock) : null, r.verified]
}

/**
 * Reads one recent record (from an untrusted snapshot or the replica's own checkpoint).
 *
 * @throws SteadError `malformed` or `too-large`.
 */
export function decodeRecent(v: unknown, field: string): RecentEntry {
  const t = expect.array(v, field, 6)
  if (t.length !== 6) throw new SteadError('malformed', `${field} is [seq, id, index, base, clock, verified]`)
  return {
    seq: expect.uint(t[0], `${field}.seq`),
    idHex: expect.string(t[1], `${field}.id`, 64, 64),
    record: {
      index: expect.uint(t[2], `${field}.index`),
      base: expect.uint(t[3], `${field}.base`),
      clock: t[4] === null ? undefined : decodeClock(t[4], DEFAULT_LIMITS.maxClockEntries),
      verified: expect.boolean(t[5], `${field}.verified`),
    },
  }
}

/** One stable object: [key, encoded declaration, CRDT snapshot]. */
export type AuditObject = readonly [key: string, declaration: unknown, snapshot: unknown]

/** A committed envelope parked behind its author's sequence gap. */
export interface ParkedEnvelope<E extends WaitingEnvelope = WaitingEnvelope> {
  /** The envelope. */
  readonly env: E
  /** The commit position it parked at: it is dropped as `gap` `gapWaitCommits` later. */
  readonly since: number
}

/** What the state hash needs of a parked envelope (its signed form travels in snapshots); an `Envelope` is one. */
export interface WaitingEnvelope {
  /** Its author's id. */
  readonly authorId: string
  /** Its author's sequence number. */
  readonly seq: number
  /** Its id (sha256 of its signed bytes). */
  readonly id: Uint8Array
  /** Its signed bytes and signature. */
  readonly signed: Signed
}

type Sha256 = (bytes: Uint8Array) => Uint8Array

const STATE_TAG = 'stead/state/v4'
const SNAPSHOT_TAG = 'stead/snapshot/v2'

/** Orders keys and author ids the same way everywhere (UTF-16 code units, like `Array.prototype.sort`). */
export function compareKeys(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0
}

/** One object's leaf in the state hash, from its snapshot (what a verifier has; a long text is hashed as its digest: see leafPayload). */
export function objectDigest(sha256: Sha256, o: AuditObject): Uint8Array {
  return sha256(encode(['o', o[0], o[1], leafPayloadOfSnapshot(o[1], o[2], sha256)]))
}

/** One object's leaf in the state hash, from the live CRDT (equal to objectDigest of its snapshot, without building it for types that keep a digest). */
export function liveObjectDigest(sha256: Sha256, key: string, decl: Declaration, crdt: AnyCrdt): Uint8Array {
  return sha256(encode(['o', key, encodeDeclaration(decl), leafPayload(decl, crdt, sha256)]))
}

/** One author's leaf in the state hash. */
export function authorDigest(sha256: Sha256, a: AuditAuthor): Uint8Array {
  return authorLeafOf(
    sha256,
    a[0],
    a[1],
    a[2].map((r) => recentDigest(sha256, r)),
  )
}

/** One recent record's digest. An author's leaf folds these, so a replica hashes each record once, however often its author commits. */
export function recentDigest(sha256: Sha256, r: RecentRecord): Uint8Array {
  return sha256(encode(['r', ...r]))
}

/** An author's leaf from its id, last seq and its recent records' digests (ascending by seq). */
export function authorLeafOf(sha256: Sha256, id: string, seq: number, recent: readonly Uint8Array[]): Uint8Array {
  return sha256(encode(['a', id, seq, digestRoot(sha256, recent)]))
}

/** A short list of leaves (an author's recent records, ascending) folded into one digest. */
function digestRoot(sha256: Sha256, leaves: readonly Uint8Array[]): Uint8Array {
  const all = new Uint8Array(leaves.length * 32)
  leaves.forEach((d, i) => all.set(d, i * 32))
  return sha256(all)
}

/** The digest of the envelopes parked behind a sequence gap: [author, seq, since, id] each, in (author, seq) order. */
export function parkedDigest(sha256: Sha256, waiting: AuditState['waiting']): Uint8Array {
  return sha256(encode(waiting.map((w) => [w.env.authorId, w.env.seq, w.since, w.env.id])))
}

/** The state hash from its parts: what attestations and heads sign. */
export function stateHashOf(sha256: Sha256, space: string, index: number, authorsRoot: Uint8Array, objectsRoot: Uint8Array, parked: Uint8Array): Uint8Array {
  return sha256(encode([STATE_TAG, space, index, authorsRoot, objectsRoot, parked]))
}

/** The state hash of a whole audit state, computed from scratch (a verifier's view; replicas keep the trees). */
export function auditStateHash(sha256: Sha256, s: AuditState): Uint8Array {
  const authors = merkleRoot(
    sha256,
    s.authors.map((a): MerkleEntry => [a[0], authorDigest(sha256, a)]),
  )
  const objects = merkleRoot(
    sha256,
    s.objects.map((o): MerkleEntry => [o[0], objectDigest(sha256, o)]),
  )
  return stateHashOf(sha256, s.space, s.index, authors, objects, parkedDigest(sha256, s.waiting))
}

/**
 * One object's stable state at a stable index, with what proves it against
 * that index's state hash without the rest of the state: the object's path
 * in the objects tree and the hash's other parts. `object` is undefined
 * when the key has no stable state there (the path then proves absence).
 */
export interface ObjectProof {
  /** The space. */
  readonly space: string
  /** The stable index the state is at. */
  readonly index: number
  /** The object's key. */
  readonly key: string
  /** [encoded declaration, CRDT snapshot], or undefined for an object not in the state. */
  readonly object: readonly [declaration: unknown, snapshot: unknown] | undefined
  /** The object's path in the objects tree. */
  readonly path: MerklePath
  /** The root of the authors tree at that index. */
  readonly authorsRoot: Uint8Array
  /** The digest of the parked envelopes at that index (`parkedDigest`). */
  readonly parked: Uint8Array
}

/** The state hash an object proof leads to. */
export interface ProvenHash {
  /** The state hash. */
  readonly hash: Uint8Array
}

/** Why an object proof proves nothing. */
export interface ProofProblem {
  /** The reason, in words. */
  readonly problem: string
}

const OBJECT_PROOF_TAG = 'stead/object-proof/v1'

/** Wire form of an object proof. */
export function encodeObjectProof(p: ObjectProof): Uint8Array {
  return encode([OBJECT_PROOF_TAG, p.space, p.index, p.key, p.object ?? null, p.path.bucket, p.path.siblings, p.authorsRoot, p.parked, p.path.lone ? [p.path.lone.bucket, p.path.lone.entries] : null])
}

/**
 * Reads `encodeObjectProof` bytes from an untrusted relay (shapes and
 * sizes only; `objectProofHash` says what it proves).
 *
 * @throws SteadError `malformed` or `too-large`.
 */
export function decodeObjectProof(bytes: Uint8Array, maxBytes = DEFAULT_LIMITS.maxFrameBytes): ObjectProof {
  const v = expect.array(decode(bytes, maxBytes), 'object proof', 10)
  if (v.length !== 10 || v[0] !== OBJECT_PROOF_TAG) throw new SteadError('malformed', `not a ${OBJECT_PROOF_TAG}`)
  let object: ObjectProof['object']
  if (v[4] !== null) {
    const o = expect.array(v[4], 'object proof.object', 2)
    if (o.length !== 2) throw new SteadError('malformed', 'object proof.object is [declaration, snapshot]')
    object = [o[0], o[1]]
  }
  const entries = (x: unknown, field: string): MerkleEntry[] =>
    expect.array(x, field, 1_000_000).map((e, i): MerkleEntry => {
      const t = expect.array(e, `${field}[${i}]`, 2)
      return [expect.string(t[0], `${field}[${i}].key`, DEFAULT_LIMITS.maxKeyChars), expect.bytes(t[1], `${field}[${i}].leaf`, 32)]
    })
  const bucket = entries(v[5], 'object proof.bucket')
  const siblings = expect.array(v[6], 'object proof.siblings', MERKLE_DEPTH).map((x, i) => expect.bytes(x, `object proof.siblings[${i}]`, 32))
  let lone: MerklePath['lone']
  if (v[9] !== null) {
    const t = expect.array(v[9], 'object proof.lone', 2)
    lone = { bucket: expect.uint(t[0], 'object proof.lone.bucket'), entries: entries(t[1], 'object proof.lone.entries') }
  }
  return {
    space: expect.string(v[1], 'object proof.space', DEFAULT_LIMITS.maxSpaceChars, 1),
    index: expect.uint(v[2], 'object proof.index'),
    key: expect.string(v[3], 'object proof.key', DEFAULT_LIMITS.maxKeyChars, 1),
    object,
    path: { bucket, siblings, ...(lone ? { lone } : {}) },
    authorsRoot: expect.bytes(v[7], 'object proof.authorsRoot', 32),
    parked: expect.bytes(v[8], 'object proof.parked', 32),
  }
}

/**
 * The state hash an object proof leads to, or why it proves nothing: the
 * bucket must hold the object's leaf once (or, for an absent object, no
 * entry for its key). The proof holds when the hash equals the one f+1
 * relays attested for `proof.space` at `proof.index`.
 */
export function objectProofHash(sha256: Sha256, proof: ObjectProof): ProvenHash | ProofProblem {
  const entries = proof.path.bucket.filter(([k]) => k === proof.key)
  if (entries.length > 1) return { problem: `the bucket lists ${proof.key} more than once` }
  if (proof.object) {
    const leaf = objectDigest(sha256, [proof.key, proof.object[0], proof.object[1]])
    const entry = entries[0]
    if (!entry || !bytesEqual(entry[1], leaf)) return { problem: `the bucket does not hold ${proof.key}'s state as sent` }
  } else if (entries.length) return { problem: `the bucket holds ${proof.key}, sent as absent` }
  const objects = merkleRootOfPath(sha256, proof.key, proof.path)
  if (!objects) return { problem: 'the path has the wrong length' }
  return { hash: stateHashOf(sha256, proof.space, proof.index, proof.authorsRoot, objects, proof.parked) }
}

/**
 * Wire form of an audit state, as relays serve it for bootstrap. Parked
 * envelopes travel as their signed bytes; the reader derives their ids
 * (and so the hash) from those bytes.
 */
export function encodeAuditState(s: AuditState): Uint8Array {
  return encode([
    SNAPSHOT_TAG,
    s.space,
    s.index,
    s.authors,
    s.waiting.map((w) => [w.env.signed.bytes, w.env.signed.sig, w.since]),
    s.objects,
  ])
}

/**
 * Reads `encodeAuditState` bytes from an untrusted relay: shapes and sizes
 * are checked; `open` turns a parked envelope's signed bytes into the
 * envelope (it throws on bytes that are not one). The result is believed
 * only once its `auditStateHash` matches what f+1 relays attested; object
 * snapshots are checked when the replica restores them.
 *
 * @throws SteadError `malformed` or `too-large`.
 */
export function decodeAuditState<E extends WaitingEnvelope>(bytes: Uint8Array, open: (signed: Signed) => E, maxBytes = 1024 * 1024 * 1024): AuditState<E> {
  const v = expect.array(decode(bytes, maxBytes), 'snapshot', 6)
  if (v.length !== 6 || v[0] !== SNAPSHOT_TAG) throw new SteadError('malformed', `not a ${SNAPSHOT_TAG}`)
  const authors = decodeAuthors(v[3], 'snapshot.authors')
  const waiting = decodeParked(v[4], 'snapshot.waiting', open)
  const objects = expect.array(v[5], 'snapshot.objects', 100_000_000).map((o, i): AuditObject => {
    const t = expect.array(o, `objects[${i}]`, 3)
    if (t.length !== 3) throw new SteadError('malformed', `objects[${i}] is [key, declaration, snapshot]`)
    return [expect.string(t[0], `objects[${i}].key`, DEFAULT_LIMITS.maxKeyChars, 1), t[1], t[2]]
  })
  // Sorted and distinct, as replicas write them: the hash's trees are sets, so a repeated or
  // misplaced entry would hash alike and yet restore differently.
  strictlyAscending(objects.map((o) => o[0]), 'snapshot.objects')
  return { space: expect.string(v[1], 'snapshot.space', DEFAULT_LIMITS.maxSpaceChars, 1), index: expect.uint(v[2], 'snapshot.index'), authors, waiting, objects }
}

/**
 * Reads authors' records in their wire form (audit states, deltas), sorted
 * by id without repeats.
 *
 * @throws SteadError `malformed` or `too-large`.
 */
export function decodeAuthors(v: unknown, field: string): AuditAuthor[] {
  const authors = expect.array(v, field, 10_000_000).map((a, i): AuditAuthor => {
    const t = expect.array(a, `authors[${i}]`, 3)
    const recent = expect.array(t[2], `authors[${i}].recent`, 100_000).map((r, j) => {
      const e = decodeRecent(r, `authors[${i}].recent[${j}]`)
      return encodeRecent(e.seq, e.idHex, e.record)
    })
    return [expect.string(t[0], `authors[${i}].id`, 256, 1), expect.uint(t[1], `authors[${i}].seq`), recent]
  })
  strictlyAscending(authors.map((a) => a[0]), field)
  return authors
}

/**
 * Reads parked envelopes in their wire form ([signed bytes, signature,
 * since]); `open` turns the signed bytes into the envelope.
 *
 * @throws SteadError `malformed` or `too-large`.
 */
export function decodeParked<E extends WaitingEnvelope>(v: unknown, field: string, open: (signed: Signed) => E): Array<ParkedEnvelope<E>> {
  return expect.array(v, field, 10_000_000).map((w, i) => {
    const t = expect.array(w, `waiting[${i}]`, 3)
    return { env: open({ bytes: expect.bytes(t[0], `waiting[${i}].bytes`), sig: expect.bytes(t[1], `waiting[${i}].sig`) }), since: expect.uint(t[2], `waiting[${i}].since`) }
  })
}

/** Throws unless `keys` are sorted and distinct (the hash's trees are sets: a repeat would hash alike and apply twice). */
export function strictlyAscending(keys: readonly string[], field: string): void {
  for (let i = 1; i < keys.length; i++) {
    if (compareKeys(keys[i - 1] as string, keys[i] as string) >= 0) throw new SteadError('malformed', `${field} must be sorted by key without repeats (at ${i})`)
  }
}
