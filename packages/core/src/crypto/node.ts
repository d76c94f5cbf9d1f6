/**
 * node:crypto (OpenSSL) backend: about 20x faster than noble, so relays and
 * the simulator use it. Reachable only through `@stead/core/node`, because
 * the main entry must load in browsers.
 *
 * OpenSSL alone is laxer than our rule (it accepts small-order and
 * non-canonical public keys), so verification first applies the shared
 * policy from noble.ts; see the comment there.
 */
import * as builtin from 'node:crypto'
import { createHash, createPrivateKey, createPublicKey, getRandomValues, sign, verify, type KeyObject } from 'node:crypto'
import { assertSecretKey, isAcceptablePublicKey, isAcceptableSignature, KeyCache } from './noble.ts'
import { PUBLIC_KEY_BYTES, SECRET_KEY_BYTES, type Crypto } from './types.ts'

// DER prefixes that turn raw RFC 8032 bytes into PKCS#8 / SPKI for OID 1.3.101.112.
const PKCS8_PREFIX = Uint8Array.of(0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20)
const SPKI_PREFIX = Uint8Array.of(0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00)

const privateKeys = new KeyCache<KeyObject>()
// null remembers keys refused by the policy or by OpenSSL, so repeats stay cheap.
const publicKeys = new KeyCache<KeyObject | null>()

function privateKeyObject(secretKey: Uint8Array): KeyObject {
  assertSecretKey(secretKey)
  return privateKeys.getOrCreate(secretKey, (seed) =>
    createPrivateKey({ key: Buffer.concat([PKCS8_PREFIX, seed]), format: 'der', type: 'pkcs8' }),
  )
}

function publicKeyObject(publicKey: Uint8Array): KeyObject | null {
  if (!isAcceptablePublicKey(publicKey)) return null
  return publicKeys.getOrCreate(publicKey, (raw) => {
    try {
      return createPublicKey({ key: Buffer.concat([SPKI_PREFIX, raw]), format: 'der', type: 'spki' })
    } catch {
      return null
    }
  })
}

// Node returns Buffers, possibly views into a shared pool; callers get plain
// standalone Uint8Arrays so equality checks and structured clone behave.
function plainBytes(buffer: Buffer): Uint8Array {
  return new Uint8Array(buffer)
}

// One-shot crypto.hash (Node >= 20.12) skips the Hash object: about 30% faster
// for the short inputs hashed on hot paths (envelope ids, author ids). Looked
// up on the namespace so that a runtime without it falls back instead of
// failing to link.
const oneShotHash = (builtin as { hash?: typeof builtin.hash }).hash
const sha256Buffer: (data: Uint8Array) => Buffer =
  typeof oneShotHash === 'function' ? (data) => oneShotHash('sha256', data, 'buffer') : (data) => createHash('sha256').update(data).digest()

/** Synchronous Ed25519 signature (RFC 8032, pure Ed25519). Throws SteadError 'malformed' on a bad key. */
export function signSync(secretKey: Uint8Array, message: Uint8Array): Uint8Array {
  return plainBytes(sign(null, message, privateKeyObject(secretKey)))
}

/** Synchronous verification under the shared policy; never throws. */
export function verifySync(publicKey: Uint8Array, message: Uint8Array, signature: Uint8Array): boolean {
  try {
    if (!isAcceptableSignature(signature)) return false
    const key = publicKeyObject(publicKey)
    return key !== null && verify(null, message, key, signature)
  } catch {
    return false
  }
}

/** Synchronous public key derivation from a 32-byte seed. */
export function publicKeyOfSync(secretKey: Uint8Array): Uint8Array {
  const spki = createPublicKey(privateKeyObject(secretKey)).export({ format: 'der', type: 'spki' })
  return plainBytes(spki.subarray(spki.length - PUBLIC_KEY_BYTES))
}

/** The node:crypto backend: the fastest, for Node (relays, the simulator, the SDK's Node build). */
export const nodeCrypto: Crypto = {
  name: 'node',
  generateSecretKey() {
    return getRandomValues(new Uint8Array(SECRET_KEY_BYTES))
  },
  async publicKeyOf(secretKey) {
    return publicKeyOfSync(secretKey)
  },
  async sign(secretKey, message) {
    return signSync(secretKey, message)
  },
  async verify(publicKey, message, signature) {
    return verifySync(publicKey, message, signature)
  },
  sha256(data) {
    return plainBytes(sha256Buffer(data))
  },
}
