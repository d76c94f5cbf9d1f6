/**
 * Pure-JS backend (@noble/curves, @noble/hashes), plus the verification
 * policy and key cache that all three backends share.
 *
 * Why a shared policy: replicas verify with different engines (relays with
 * OpenSSL through node:crypto, browsers with WebCrypto or this file). If one
 * engine accepted a signature that another rejected, a malicious author could
 * split honest replicas. OpenSSL, as shipped in Node 20, accepts small-order
 * public keys and non-canonical public-key encodings (checked: the identity
 * key with signature (R = identity, S = 0) verifies every message), while
 * noble's strict mode rejects them and uses the cofactored equation. So every
 * backend applies the same cheap byte-level checks first, and this backend
 * uses the cofactorless equation with a byte comparison of R, which is what
 * OpenSSL and BoringSSL do. The resulting rule, identical everywhere:
 *
 *   - A: canonical encoding (y < p, no "negative zero" x), not one of the
 *     eight small-order points, and a point on the curve;
 *   - R: canonical encoding, and equal byte for byte to encode([S]B - [k]A);
 *   - S: 0 <= S < L;
 *   - k = SHA-512(R || A || M) mod L, hashed over the bytes as given.
 *
 * That is RFC 8032 §5.1.7 (which explicitly allows checking [S]B = R + [k]A
 * instead of the cofactored equation) plus the small-order key rejection that
 * libsodium and noble's strict mode also apply. Keys with a mixed-order
 * (torsion) component are not rejected, because finding them needs a full
 * scalar multiplication per key; they cannot cause disagreement here since all
 * backends evaluate the same cofactorless equation on the same bytes.
 */
import { ed25519 } from '@noble/curves/ed25519.js'
import { bytesToNumberLE } from '@noble/curves/utils.js'
import { sha256, sha512 } from '@noble/hashes/sha2.js'
import { bytesEqual, fromHex, toHex } from '../bytes.ts'
import { SteadError } from '../errors.ts'
import { PUBLIC_KEY_BYTES, SECRET_KEY_BYTES, SIGNATURE_BYTES, type Crypto } from './types.ts'

// The group order L = 2^252 + 27742317777372353535851937790883648493, little-endian.
const ORDER_LE = fromHex('edd3f55c1a631258d69cf7a2def9de1400000000000000000000000000000010')

// Canonical encodings of the eight points of order dividing 8. Non-canonical
// encodings of the same points are already refused by isCanonicalPoint.
const SMALL_ORDER_KEYS = new Set([
  '0100000000000000000000000000000000000000000000000000000000000000', // identity
  'ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f', // order 2
  '0000000000000000000000000000000000000000000000000000000000000000', // order 4
  '0000000000000000000000000000000000000000000000000000000000000080', // order 4
  '26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05', // order 8
  '26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85', // order 8
  'c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a', // order 8
  'c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa', // order 8
])

/** The eight small-order encodings, exported so tests can prove the list right. */
export const SMALL_ORDER_ENCODINGS: readonly string[] = [...SMALL_ORDER_KEYS]

/**
 * Whether 32 bytes at `offset` are the RFC 8032 §5.1.3 canonical encoding of
 * some y (y < p = 2^255 - 19) and sign bit: byte arithmetic only, so it costs
 * nothing next to a verification. Whether the point is on the curve is left
 * to the engine.
 */
function isCanonicalPoint(bytes: Uint8Array, offset: number): boolean {
  const top = bytes[offset + 31]! & 0x7f
  let middleAllOnes = top === 0x7f
  let middleAllZero = top === 0
  for (let i = 1; i < 31; i++) {
    const b = bytes[offset + i]!
    if (b !== 0xff) middleAllOnes = false
    if (b !== 0) middleAllZero = false
  }
  const low = bytes[offset]!
  if (middleAllOnes && low >= 0xed) return false // y >= p
  if ((bytes[offset + 31]! & 0x80) !== 0) {
    // x = 0 exactly when y = 1 or y = p - 1; its sign bit must then be clear.
    if (middleAllOnes && low === 0xec) return false
    if (middleAllZero && low === 1) return false
  }
  return true
}

function isCanonicalScalar(bytes: Uint8Array, offset: number): boolean {
  for (let i = 31; i >= 0; i--) {
    const b = bytes[offset + i]!
    const l = ORDER_LE[i]!
    if (b !== l) return b < l
  }
  return false // equal to L
}

function isByteArray(value: unknown): value is Uint8Array {
  return value instanceof Uint8Array || (ArrayBuffer.isView(value) && value.constructor.name === 'Uint8Array')
}

/**
 * The key half of the shared policy: 32 bytes, canonical, not small-order.
 * Cheap enough to call before any import; does not prove the point is on the
 * curve (verification does).
 */
export function isAcceptablePublicKey(publicKey: Uint8Array): boolean {
  return (
    isByteArray(publicKey) &&
    publicKey.length === PUBLIC_KEY_BYTES &&
    isCanonicalPoint(publicKey, 0) &&
    !SMALL_ORDER_KEYS.has(toHex(publicKey))
  )
}

/** The signature half of the shared policy: 64 bytes, canonical R, S < L. */
export function isAcceptableSignature(signature: Uint8Array): boolean {
  return (
    isByteArray(signature) &&
    signature.length === SIGNATURE_BYTES &&
    isCanonicalPoint(signature, 0) &&
    isCanonicalScalar(signature, 32)
  )
}

/** Throws SteadError 'malformed' unless `secretKey` is a 32-byte array. */
export function assertSecretKey(secretKey: Uint8Array): void {
  if (!isByteArray(secretKey) || secretKey.length !== SECRET_KEY_BYTES) {
    throw new SteadError('malformed', `secret key must be ${SECRET_KEY_BYTES} bytes`)
  }
}

/**
 * Bounded map from key bytes to an imported key object (or a decoded point),
 * least recently used evicted first. Importing costs more than signing small
 * messages in every engine, and the same few authors sign almost everything,
 * so a small cache removes most of that cost; the bound keeps a stream of
 * one-off keys from growing memory without limit.
 */
export class KeyCache<V> {
  readonly #entries = new Map<string, V>()
  readonly #capacity: number

  constructor(capacity = 1024) {
    this.#capacity = capacity
  }

  get size(): number {
    return this.#entries.size
  }

  /** `create` must not keep a reference to `key`: callers may reuse the array. */
  getOrCreate(key: Uint8Array, create: (key: Uint8Array) => V): V {
    const id = toHex(key)
    const hit = this.#entries.get(id)
    if (hit !== undefined || this.#entries.has(id)) {
      // Re-insert so that Map order is recency order.
      this.#entries.delete(id)
      this.#entries.set(id, hit as V)
      return hit as V
    }
    const value = create(key)
    if (this.#entries.size >= this.#capacity) {
      const oldest = this.#entries.keys().next()
      if (oldest.done !== true) this.#entries.delete(oldest.value)
    }
    this.#entries.set(id, value)
    return value
  }

  delete(key: Uint8Array): void {
    this.#entries.delete(toHex(key))
  }
}

/** Fresh seed from the platform CSPRNG (WebCrypto getRandomValues, present in Node 20 and browsers). */
export function randomSecretKey(): Uint8Array {
  return globalThis.crypto.getRandomValues(new Uint8Array(SECRET_KEY_BYTES))
}

const Point = ed25519.Point
type EdPoint = ReturnType<typeof Point.fromBytes>

// Decompressing A needs a square root; caching the point skips it for repeat signers.
const points = new KeyCache<EdPoint | null>()

function decodePublicKey(publicKey: Uint8Array): EdPoint | null {
  if (!isAcceptablePublicKey(publicKey)) return null
  return points.getOrCreate(publicKey, (bytes) => {
    try {
      return Point.fromBytes(bytes.slice(), false)
    } catch {
      return null // not on the curve
    }
  })
}

function nobleVerify(publicKey: Uint8Array, message: Uint8Array, signature: Uint8Array): boolean {
  if (!isAcceptableSignature(signature) || !isByteArray(message)) return false
  const A = decodePublicKey(publicKey)
  if (A === null) return false
  const r = signature.subarray(0, 32)
  const s = bytesToNumberLE(signature.subarray(32, 64))
  const k = Point.Fn.create(bytesToNumberLE(sha512.create().update(r).update(publicKey).update(message).digest()))
  const expectedR = Point.BASE.multiplyUnsafe(s).subtract(A.multiplyUnsafe(k))
  return bytesEqual(expectedR.toBytes(), r)
}

/**
 * Ed25519 verification, synchronous and pure JS: for the audit, which must
 * check a signature inside an update (an invitation's redemption) the same
 * way on every replica, in browsers too.
 */
export function verifyEd25519Sync(publicKey: Uint8Array, message: Uint8Array, signature: Uint8Array): boolean {
  try {
    return nobleVerify(publicKey, message, signature)
  } catch {
    return false
  }
}

/** The pure-JS backend (@noble/curves): works everywhere, about 20 times slower than node:crypto; the fallback where WebCrypto lacks Ed25519. */
export const nobleCrypto: Crypto = {
  name: 'noble',
  generateSecretKey: randomSecretKey,
  async publicKeyOf(secretKey) {
    assertSecretKey(secretKey)
    return ed25519.getPublicKey(secretKey)
  },
  async sign(secretKey, message) {
    assertSecretKey(secretKey)
    return ed25519.sign(message, secretKey)
  },
  async verify(publicKey, message, signature) {
    try {
      return nobleVerify(publicKey, message, signature)
    } catch {
      return false
    }
  },
  sha256(data) {
    return sha256(data)
  },
}
