/**
 * WebCrypto backend: native Ed25519 in browsers (Chromium, Firefox 129+,
 * Safari 17+) and in Node's globalThis.crypto.subtle, roughly 10x faster than
 * noble. Hashing stays on @noble/hashes because the interface hashes
 * synchronously and subtle.digest is async.
 *
 * Engines differ in how strict they are about keys and encodings, so
 * verification first applies the shared policy from noble.ts.
 */
import { ed25519 } from '@noble/curves/ed25519.js'
import { sha256 } from '@noble/hashes/sha2.js'
import { bytesEqual, concatBytes, fromBase64Url, fromHex } from '../bytes.ts'
import { SteadError } from '../errors.ts'
import { assertSecretKey, isAcceptablePublicKey, isAcceptableSignature, KeyCache, randomSecretKey } from './noble.ts'
import { PUBLIC_KEY_BYTES, type Crypto } from './types.ts'

const ED25519 = { name: 'Ed25519' } as const

// WebCrypto has no raw import for private keys, so the seed is wrapped in the
// fixed PKCS#8 header for OID 1.3.101.112.
const PKCS8_PREFIX = Uint8Array.of(0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20)

// TypeScript's DOM lib wants ArrayBuffer-backed views; every Uint8Array we
// are handed is acceptable to the engines at run time.
function source(bytes: Uint8Array): Uint8Array<ArrayBuffer> {
  return bytes as Uint8Array<ArrayBuffer>
}

function defaultSubtle(): SubtleCrypto {
  const subtle = globalThis.crypto?.subtle
  if (subtle === undefined) throw new SteadError('unsupported', 'globalThis.crypto.subtle is not available')
  return subtle
}

/**
 * The WebCrypto backend over `subtle` (default: `globalThis.crypto.subtle`).
 * Check {@link webCryptoSupportsEd25519} first, or use {@link defaultCrypto},
 * which does.
 *
 * @throws SteadError `unsupported` when there is no `crypto.subtle`.
 */
export function createWebCrypto(subtle: SubtleCrypto = defaultSubtle()): Crypto {
  // Promises are cached, not keys, so concurrent first uses share one import.
  const privateKeys = new KeyCache<Promise<CryptoKey>>()
  const publicKeys = new KeyCache<Promise<CryptoKey | null>>()

  function privateKey(secretKey: Uint8Array): Promise<CryptoKey> {
    assertSecretKey(secretKey)
    return privateKeys.getOrCreate(secretKey, (seed) => {
      // Extractable only so publicKeyOf can read the public half from the JWK.
      const imported = subtle.importKey('pkcs8', source(concatBytes(PKCS8_PREFIX, seed)), ED25519, true, ['sign'])
      const seedCopy = seed.slice()
      imported.catch(() => privateKeys.delete(seedCopy))
      return imported
    })
  }

  function publicKey(raw: Uint8Array): Promise<CryptoKey | null> {
    return publicKeys.getOrCreate(raw, (bytes) =>
      subtle.importKey('raw', source(bytes.slice()), ED25519, false, ['verify']).catch(() => null),
    )
  }

  return {
    name: 'webcrypto',
    generateSecretKey: randomSecretKey,
    async publicKeyOf(secretKey) {
      const key = await privateKey(secretKey)
      const jwk = await subtle.exportKey('jwk', key)
      if (typeof jwk.x === 'string') {
        const x = fromBase64Url(jwk.x)
        if (x.length === PUBLIC_KEY_BYTES) return x
      }
      // Every engine we know of fills in x; deriving it in JS is the safe fallback.
      return ed25519.getPublicKey(secretKey)
    },
    async sign(secretKey, message) {
      const key = await privateKey(secretKey)
      return new Uint8Array(await subtle.sign(ED25519, key, source(message)))
    },
    async verify(pk, message, signature) {
      try {
        if (!isAcceptableSignature(signature) || !isAcceptablePublicKey(pk)) return false
        const key = await publicKey(pk)
        return key !== null && (await subtle.verify(ED25519, key, source(signature), source(message)))
      } catch {
        return false
      }
    },
    sha256(data) {
      return sha256(data)
    },
  }
}

// RFC 8032 §7.1 TEST 1: a known-answer test, because some engines list
// Ed25519 yet fail at import time or (older previews) sign differently.
const KAT_SEED = fromHex('9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60')
const KAT_PUBLIC = fromHex('d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a')
const KAT_SIGNATURE = fromHex(
  'e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b',
)

/** Whether `subtle` signs and verifies Ed25519 correctly (RFC 8032 TEST 1). Never throws. */
export async function webCryptoSupportsEd25519(subtle?: SubtleCrypto): Promise<boolean> {
  try {
    const engine = subtle ?? globalThis.crypto?.subtle
    if (engine === undefined) return false
    const secret = await engine.importKey('pkcs8', source(concatBytes(PKCS8_PREFIX, KAT_SEED)), ED25519, false, ['sign'])
    const signature = new Uint8Array(await engine.sign(ED25519, secret, new Uint8Array(0)))
    if (!bytesEqual(signature, KAT_SIGNATURE)) return false
    const pub = await engine.importKey('raw', source(KAT_PUBLIC), ED25519, false, ['verify'])
    return await engine.verify(ED25519, pub, source(KAT_SIGNATURE), new Uint8Array(0))
  } catch {
    return false
  }
}
