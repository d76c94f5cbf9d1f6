import { toBase64Url, toHex } from './bytes.ts'
import { decodeClock, encodeClock, type Clock } from './clock.ts'
import { DEFAULT_LIMITS, asSigned, decode, encode, encodeSigned, expect, type Limits, type Signed } from './codec.ts'
import { POLICY_KEY, POOL, decodeDeclaration, encodeDeclaration, isRedemption, placementProblem, validateOp, type AnyOp, type Declaration } from './crdt/index.ts'
import { HASH_BYTES, PUBLIC_KEY_BYTES, type Crypto } from './crypto/types.ts'
import { decodeDeviceCertificate, deviceCertificateHolds, deviceCertificateHoldsAsync, encodeDeviceCertificate, type DeviceCertificate } from './device.ts'
import { SteadError } from './errors.ts'

/** Regular operations on one object, compacted by the sender. */
export interface ObjectUpdate {
  /** The object's key (at most one ObjectUpdate per key in an envelope). */
  readonly key: string
  /** The type and invariants the author declares the object with; the audit rejects ops whose declaration differs from the committed one. */
  readonly decl: Declaration
  /** The operations, applied in order; at least one. */
  readonly ops: readonly AnyOp[]
}

/** One safe operation on one object (see {@link SafeGroup}). */
export interface SafeUpdate {
  /** The object's key. */
  readonly key: string
  /** The object's declared type and invariants. */
  readonly decl: Declaration
  /** The operation. */
  readonly op: AnyOp
}

/**
 * Safe updates in the order they must run. An atomic group commits wholly or
 * not at all; a non-atomic group is a list of independent safe updates.
 */
export interface SafeGroup {
  /** Whether the updates commit all together or not at all (one audit unit) or each on its own. */
  readonly atomic: boolean
  /** The updates, in order; at least one. */
  readonly updates: readonly SafeUpdate[]
}

/** What an author fills in; signing adds the author key, id and bytes. */
export interface EnvelopeDraft {
  /** The space the envelope belongs to (1 to 128 characters). */
  readonly space: string
  /** Per-author, per-space sequence number, from 1, without gaps. */
  readonly seq: number
  /** The stable index the clock counts from: the stable history up to it counts as seen (see causal.ts). Default 0. */
  readonly base?: number
  /** The clock's entries above the base, without the author's own (which is `seq`); see `composeClock`. */
  readonly clock: Clock
  /** Ids of other authors' envelopes this one causally follows: the heads of what the author had applied beyond the stable history. */
  readonly deps: readonly Uint8Array[]
  /** Regular updates, one entry per object. */
  readonly updates: readonly ObjectUpdate[]
  /** Safe groups, decided after the regular updates, in order. */
  readonly safe: readonly SafeGroup[]
}

/**
 * A signed, content-addressed batch of one author's updates to one space:
 * the unit that clients send, relays order and every replica audits. Make
 * one with {@link sealEnvelope}; check one from the wire with
 * {@link openEnvelope}. Its fields are what the signed bytes say.
 */
export interface Envelope extends EnvelopeDraft {
  /** The stable index the clock counts from (0 when the author set none). */
  readonly base: number
  /** The author's Ed25519 public key (32 bytes), which the signature verifies against. */
  readonly author: Uint8Array
  /** Short, stable id of the author used in clocks, tags and CRDT replica ids. */
  readonly authorId: string
  /** The certificate of a device key (see DeviceCertificate): the envelope acts for its user. Absent: the author is its own user. */
  readonly device?: DeviceCertificate
  /** Whom policies see making the updates: the id of the certificate's user, else the author id. */
  readonly userId: string
  /** sha256 of the signed bytes. */
  readonly id: Uint8Array
  /** `id` in lowercase hex: how the SDK and relays name envelopes. */
  readonly idHex: string
  /** The exact signed bytes and signature, to send on as received. */
  readonly signed: Signed
}

const TAG = 'stead/env/v2'

/** The author id: 12 bytes of sha256(public key), base64url (16 chars). */
export function authorIdOf(crypto: Pick<Crypto, 'sha256'>, publicKey: Uint8Array): string {
  return toBase64Url(crypto.sha256(publicKey).subarray(0, 12))
}

/** Whom policies see signing with `publicKey`: the user its device certificate names, else the key's own author id. */
export function userIdOf(crypto: Pick<Crypto, 'sha256'>, publicKey: Uint8Array, certificate?: DeviceCertificate): string {
  return authorIdOf(crypto, certificate ? certificate.user : publicKey)
}

/** Signs a draft. The result is exactly what `openEnvelope` would return for its bytes. */
export async function sealEnvelope(
  crypto: Crypto,
  identity: { readonly secretKey: Uint8Array; readonly publicKey: Uint8Array; readonly certificate?: DeviceCertificate },
  draft: EnvelopeDraft,
  limits: Limits = DEFAULT_LIMITS,
): Promise<Envelope> {
  const cert = identity.certificate
  const payload = [
    TAG,
    draft.space,
    identity.publicKey,
    draft.seq,
    draft.base ?? 0,
    encodeClock(draft.clock),
    draft.deps,
    draft.updates.map((u) => [u.key, encodeDeclaration(u.decl), u.ops]),
    draft.safe.map((g) => [g.atomic, g.updates.map((u) => [u.key, encodeDeclaration(u.decl), u.op])]),
    ...(cert ? [encodeDeviceCertificate(cert)] : []),
  ]
  const bytes = encode(payload)
  // Validating what we are about to sign means a sealed envelope can never be one peers refuse; and the
  // envelope is what they will read from these bytes (a string with an unpaired surrogate reads back
  // as other characters), not the draft.
  const parsed = parsePayload(decode(bytes, limits.maxEnvelopeBytes), limits)
  const sig = await crypto.sign(identity.secretKey, bytes)
  return finish(crypto, { bytes, sig }, parsed, identity.publicKey)
}

/**
 * Opens a signed envelope from the wire: shape, types and limits first (cheap),
 * then the signature (expensive). Throws SteadError with reason 'malformed',
 * 'too-large' or 'bad-signature'; never returns a partly valid envelope.
 */
export async function openEnvelope(crypto: Crypto, signed: Signed | unknown, limits: Limits = DEFAULT_LIMITS): Promise<Envelope> {
  const { bytes, sig } = asSigned(isSignedObject(signed) ? [signed.bytes, signed.sig] : signed)
  const parsed = parsePayload(decode(bytes, limits.maxEnvelopeBytes), limits)
  if (!(await crypto.verify(parsed.author, bytes, sig))) throw new SteadError('bad-signature', 'envelope signature does not verify against its author key')
  if (parsed.device && !(await deviceCertificateHoldsAsync(crypto, parsed.author, parsed.device))) throw new SteadError('bad-signature', DEVICE_CERT_FAILS)
  return finish(crypto, { bytes, sig }, parsed, parsed.author)
}

const DEVICE_CERT_FAILS = "the envelope's device certificate does not verify: its user key did not certify this author key"

/**
 * The same checks as `openEnvelope` with a synchronous verifier, for relays
 * and the simulator, which verify with node:crypto inside a synchronous step.
 */
export function openEnvelopeSync(
  crypto: { sha256(data: Uint8Array): Uint8Array; verify(publicKey: Uint8Array, message: Uint8Array, signature: Uint8Array): boolean },
  signed: Signed | unknown,
  limits: Limits = DEFAULT_LIMITS,
): Envelope {
  const { bytes, sig } = asSigned(isSignedObject(signed) ? [signed.bytes, signed.sig] : signed)
  const parsed = parsePayload(decode(bytes, limits.maxEnvelopeBytes), limits)
  if (!crypto.verify(parsed.author, bytes, sig)) throw new SteadError('bad-signature', 'envelope signature does not verify against its author key')
  if (parsed.device && !deviceCertificateHolds(crypto.verify, parsed.author, parsed.device)) throw new SteadError('bad-signature', DEVICE_CERT_FAILS)
  return finish(crypto, { bytes, sig }, parsed, parsed.author)
}

/** Wire form of an envelope on its own: msgpack [bytes, sig]. */
export function encodeEnvelope(env: Envelope): Uint8Array {
  return encodeSigned(env.signed)
}

/**
 * Reads and opens an envelope frame written by {@link encodeEnvelope}.
 *
 * @throws SteadError `malformed`, `too-large` or `bad-signature` (see {@link openEnvelope}).
 */
export async function decodeEnvelope(crypto: Crypto, frame: Uint8Array, limits: Limits = DEFAULT_LIMITS): Promise<Envelope> {
  return openEnvelope(crypto, decode(frame, limits.maxEnvelopeBytes + 128), limits)
}

function isSignedObject(v: unknown): v is Signed {
  return typeof v === 'object' && v !== null && !Array.isArray(v) && 'bytes' in v && 'sig' in v
}

function finish(crypto: Pick<Crypto, 'sha256'>, signed: Signed, draft: EnvelopeDraft & { device?: DeviceCertificate }, author: Uint8Array): Envelope {
  const id = crypto.sha256(signed.bytes)
  const authorId = authorIdOf(crypto, author)
  // The author's own entry is its seq: listing it too would give a clock two encodings.
  if (draft.clock.has(authorId)) throw new SteadError('malformed', `the clock lists its own author ${authorId}; that entry is the seq`)
  return {
    space: draft.space,
    seq: draft.seq,
    base: draft.base ?? 0,
    clock: draft.clock,
    deps: draft.deps,
    updates: draft.updates,
    safe: draft.safe,
    author,
    authorId,
    ...(draft.device ? { device: draft.device } : {}),
    userId: draft.device ? userIdOf(crypto, author, draft.device) : authorId,
    id,
    idHex: toHex(id),
    signed,
  }
}

function parsePayload(v: unknown, limits: Limits): EnvelopeDraft & { author: Uint8Array; device?: DeviceCertificate } {
  const p = expect.array(v, 'envelope', 16)
  // A tenth field: the author is a device, and this is its certificate.
  if ((p.length !== 9 && p.length !== 10) || p[0] !== TAG) throw new SteadError('malformed', `not a ${TAG} envelope`)
  const device = p.length === 10 ? decodeDeviceCertificate(p[9]) : undefined
  const space = expect.string(p[1], 'space', limits.maxSpaceChars, 1)
  const author = expect.bytes(p[2], 'author', PUBLIC_KEY_BYTES)
  const seq = expect.uint(p[3], 'seq')
  if (seq < 1) throw new SteadError('malformed', 'seq starts at 1')
  const base = expect.uint(p[4], 'base')
  const clock = decodeClock(p[5], limits.maxClockEntries)
  const deps = expect.array(p[6], 'deps', limits.maxDeps).map((d, i) => expect.bytes(d, `deps[${i}]`, HASH_BYTES))

  let opCount = 0
  const count = (n: number): void => {
    opCount += n
    if (opCount > limits.maxOpsPerEnvelope) throw new SteadError('too-large', `more than ${limits.maxOpsPerEnvelope} operations in one envelope`)
  }
  const seenKeys = new Set<string>()
  const updates: ObjectUpdate[] = expect.array(p[7], 'updates', limits.maxOpsPerEnvelope).map((u, i) => {
    const field = `updates[${i}]`
    const [key, decl, ops] = tuple(u, field, 3)
    const k = expect.string(key, `${field}.key`, limits.maxKeyChars, 1)
    if (seenKeys.has(k)) throw new SteadError('malformed', `${field}: object ${k} appears twice; regular updates are one group per object`)
    seenKeys.add(k)
    const d = decodeDeclaration(decl)
    const list = expect.array(ops, `${field}.ops`, limits.maxOpsPerEnvelope)
    if (list.length === 0) throw new SteadError('malformed', `${field} has no operations`)
    count(list.length)
    list.forEach((op, j) => checkOp(k, d, op, `${field}.ops[${j}]`, false))
    return { key: k, decl: d, ops: list as AnyOp[] }
  })
  const safe: SafeGroup[] = expect.array(p[8], 'safe', limits.maxOpsPerEnvelope).map((g, i) => {
    const field = `safe[${i}]`
    const [atomic, list] = tuple(g, field, 2)
    const items = expect.array(list, `${field}.updates`, limits.maxOpsPerEnvelope)
    if (items.length === 0) throw new SteadError('malformed', `${field} has no updates`)
    count(items.length)
    return {
      atomic: expect.boolean(atomic, `${field}.atomic`),
      updates: items.map((it, j) => {
        const f = `${field}.updates[${j}]`
        const [key, decl, op] = tuple(it, f, 3)
        const k = expect.string(key, `${f}.key`, limits.maxKeyChars, 1)
        const d = decodeDeclaration(decl)
        checkOp(k, d, op, `${f}.op`, true)
        return { key: k, decl: d, op: op as AnyOp }
      }),
    }
  })
  if (updates.length === 0 && safe.length === 0) throw new SteadError('malformed', 'envelope carries no updates')
  // Each costs every replica a signature check in the audit: one an envelope.
  if (safe.flatMap((g) => g.updates).filter((u) => u.key === POLICY_KEY && isRedemption(u.op)).length > 1) throw new SteadError('malformed', 'an envelope redeems at most one invitation')
  // The bounded-counter pool is a replica nobody may sign as.
  if (clock.has(POOL)) throw new SteadError('malformed', `clock id ${POOL} is reserved`)
  return { space, author, seq, base, clock, deps, updates, safe, ...(device ? { device } : {}) }
}

function tuple(v: unknown, field: string, n: number): unknown[] {
  const t = expect.array(v, field, n)
  if (t.length !== n) throw new SteadError('malformed', `${field} must have ${n} fields`)
  return t
}

function checkOp(key: string, d: Declaration, op: unknown, field: string, safe: boolean): void {
  const problem = validateOp(d, op) ?? placementProblem(key, d, op as AnyOp, safe)
  if (problem) throw new SteadError('malformed', `${field}: ${problem}`)
}

/** One thing the audit decides on: a regular op, or a safe group (see {@link envelopeUnits}). */
export type EnvelopeUnit =
  | {
      /** A regular operation. */
      readonly kind: 'op'
      /** Its place among the envelope's units, from 0: what decisions refer to. */
      readonly unit: number
      /** The object's key. */
      readonly key: string
      /** The object's declared type and invariants. */
      readonly decl: Declaration
      /** The operation. */
      readonly op: AnyOp
      /** The operation's tag, unique across all envelopes (the CRDTs' op identity). */
      readonly tag: string
    }
  | {
      /** A safe group, or one update of a non-atomic one. */
      readonly kind: 'group'
      /** Its place among the envelope's units, from 0: what decisions refer to. */
      readonly unit: number
      /** Whether its items commit all together or not at all. */
      readonly atomic: boolean
      /** The group's updates, in order. */
      readonly items: ReadonlyArray<{
        /** The object's key. */
        readonly key: string
        /** The object's declared type and invariants. */
        readonly decl: Declaration
        /** The operation. */
        readonly op: AnyOp
        /** The operation's tag, unique across all envelopes. */
        readonly tag: string
      }>
    }

/** Units per envelope: envelopes are immutable, and replicas, audits and views each ask for them. */
const unitsOf = new WeakMap<Envelope, readonly EnvelopeUnit[]>()

/** The key a FILLER_CONTENT update names: one apps do not use. */
export const FILLER_KEY = '$stead/filler'
/**
 * The content of an envelope that only takes a refused one's sequence
 * number (a client's FILLER: see the SDK's outbox). Envelopes must carry an update (relays and the audit refuse an
 * empty one as `malformed`, see parsePayload), so it carries the smallest
 * one that changes no value: removing nothing (no tags) from a set under a
 * key apps do not use. Its audit unit commits (a key of another type there
 * only rejects the unit: the envelope, and its sequence number, still
 * commit). Its trace in the stable state is an empty set under that key.
 */
export const FILLER_CONTENT: Pick<EnvelopeDraft, 'updates' | 'safe'> = { updates: [{ key: FILLER_KEY, decl: { type: 'set', bounds: {} }, ops: [['r', 0, []]] }], safe: [] }

/**
 * Whether an envelope only fills a sequence number (see FILLER_CONTENT),
 * also after a restart, when only its bytes are left. Relays let one pass
 * whatever the space's policy: it changes nothing, and until its sequence
 * number is taken every later envelope of its author waits behind the gap.
 */
export function isFiller(env: Pick<Envelope, 'updates' | 'safe'>): boolean {
  const u = env.updates[0]
  const op = u?.ops[0]
  return env.updates.length === 1 && env.safe.length === 0 && u?.key === FILLER_KEY && u.ops.length === 1 && Array.isArray(op) && op[0] === 'r' && Array.isArray(op[2]) && op[2].length === 0
}

/** The part of an envelope's unit tags that names the envelope: its id's first 12 bytes, base64url (see `envelopeUnits`). */
export function unitTagPrefix(id: Uint8Array): string {
  return toBase64Url(id.subarray(0, 12))
}

/**
 * The units an audit decides on, in order: every regular op on its own, then
 * each safe group (a non-atomic group is one unit per update). Tags are
 * `${first 12 bytes of the envelope id, base64url}:${n}` with n counting ops
 * across the whole envelope.
 */
export function envelopeUnits(env: Envelope): readonly EnvelopeUnit[] {
  const known = unitsOf.get(env)
  if (known) return known
  const out: EnvelopeUnit[] = []
  let n = 0
  // Tags come from the envelope id, not from (author, seq): two conflicting envelopes of one
  // author must never share a tag, or undoing the loser would undo the winner too.
  const prefix = unitTagPrefix(env.id)
  const tag = (): string => `${prefix}:${n++}`
  for (const u of env.updates) for (const op of u.ops) out.push({ kind: 'op', unit: out.length, key: u.key, decl: u.decl, op, tag: tag() })
  for (const g of env.safe) {
    if (g.atomic) {
      out.push({ kind: 'group', unit: out.length, atomic: true, items: g.updates.map((u) => ({ key: u.key, decl: u.decl, op: u.op, tag: tag() })) })
    } else {
      for (const u of g.updates) out.push({ kind: 'group', unit: out.length, atomic: false, items: [{ key: u.key, decl: u.decl, op: u.op, tag: tag() }] })
    }
  }
  unitsOf.set(env, out)
  return out
}
