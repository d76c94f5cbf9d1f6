/**
 * Ed25519 and SHA-256 behind one interface, so that relays (node:crypto),
 * browsers (WebCrypto) and anything else (@noble/curves) share every caller.
 *
 * Keys are raw bytes: a secret key is the 32-byte RFC 8032 seed, a public key
 * the 32-byte encoded point, a signature 64 bytes. Backends may cache imported
 * key objects internally, but callers only ever see bytes.
 *
 * Signing and verifying are async because WebCrypto is; hashing is sync
 * because content ids are computed on hot paths and every platform can do it
 * synchronously (WebCrypto backends hash with @noble/hashes).
 */
export interface Crypto {
  /** 'node' | 'webcrypto' | 'noble': shown in benchmarks and logs. */
  readonly name: string
  /** A fresh random 32-byte secret key (seed). */
  generateSecretKey(): Uint8Array
  /** The 32-byte public key of a secret key. */
  publicKeyOf(secretKey: Uint8Array): Promise<Uint8Array>
  /** A 64-byte Ed25519 signature (RFC 8032, pure Ed25519) over `message`. */
  sign(secretKey: Uint8Array, message: Uint8Array): Promise<Uint8Array>
  /** Never throws on bad input: a malformed key or signature just does not verify. */
  verify(publicKey: Uint8Array, message: Uint8Array, signature: Uint8Array): Promise<boolean>
  /** SHA-256 of `data` (32 bytes), synchronously. */
  sha256(data: Uint8Array): Uint8Array
}

/** Length of an Ed25519 secret key (the RFC 8032 seed). */
export const SECRET_KEY_BYTES = 32
/** Length of an Ed25519 public key. */
export const PUBLIC_KEY_BYTES = 32
/** Length of an Ed25519 signature. */
export const SIGNATURE_BYTES = 64
/** Length of a SHA-256 hash (envelope ids, state hashes). */
export const HASH_BYTES = 32
