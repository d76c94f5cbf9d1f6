/**
 * Isomorphic crypto entry. The node:crypto backend is deliberately absent:
 * it lives behind `@stead/core/node` so that browser bundles never see it.
 */
import { nobleCrypto } from './noble.ts'
import type { Crypto } from './types.ts'
import { createWebCrypto, webCryptoSupportsEd25519 } from './webcrypto.ts'

export type { Crypto } from './types.ts'
export { HASH_BYTES, PUBLIC_KEY_BYTES, SECRET_KEY_BYTES, SIGNATURE_BYTES } from './types.ts'
export { isAcceptablePublicKey, isAcceptableSignature, nobleCrypto, verifyEd25519Sync } from './noble.ts'
export { createWebCrypto, webCryptoSupportsEd25519 } from './webcrypto.ts'

// Memoized so the whole process shares one backend and thus one key cache.
let chosen: Promise<Crypto> | undefined

/** WebCrypto when this platform's subtle passes an Ed25519 known-answer test, noble otherwise. */
export async function defaultCrypto(): Promise<Crypto> {
  chosen ??= (async () => {
    const subtle = globalThis.crypto?.subtle
    if (subtle !== undefined && (await webCryptoSupportsEd25519(subtle))) return createWebCrypto(subtle)
    return nobleCrypto
  })()
  return chosen
}
