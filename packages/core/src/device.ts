import { bytesEqual, toHex } from './bytes.ts'
import { encode, expect } from './codec.ts'
import { PUBLIC_KEY_BYTES, SIGNATURE_BYTES, type Crypto } from './crypto/types.ts'
import { SteadError } from './errors.ts'

/**
 * A user's statement that a device key acts for them: the user's public
 * key and its signature over {@link deviceCertificateBytes} of the device's
 * public key. A device signs its envelopes with its own key (its author id
 * keeps its own sequence numbers and clock entries) and carries the
 * certificate in each, so policies, which name users, apply to it as to
 * its user. The certificate names no space and no time: it holds in every
 * space until the user revokes the device there (a policy's `['v', ...]`).
 */
export interface DeviceCertificate {
  /** The user's Ed25519 public key (32 bytes). */
  readonly user: Uint8Array
  /** The user's signature over deviceCertificateBytes(device key) (64 bytes). */
  readonly sig: Uint8Array
}

/** What a user signs to certify a device key. */
export function deviceCertificateBytes(devicePublicKey: Uint8Array): Uint8Array {
  return encode(['stead/device/v1', devicePublicKey])
}

/** Certifies `devicePublicKey` as a device of the user whose key pair is `user`. */
export async function certifyDevice(crypto: Pick<Crypto, 'sign'>, user: { readonly secretKey: Uint8Array; readonly publicKey: Uint8Array }, devicePublicKey: Uint8Array): Promise<DeviceCertificate> {
  return { user: user.publicKey, sig: await crypto.sign(user.secretKey, deviceCertificateBytes(devicePublicKey)) }
}

/** A certificate's wire form: `[user key, signature]`. */
export function encodeDeviceCertificate(cert: DeviceCertificate): [Uint8Array, Uint8Array] {
  return [cert.user, cert.sig]
}

/**
 * A certificate from its wire form (its shape only: see deviceCertificateHolds).
 *
 * @throws SteadError `malformed` for anything but `[32-byte key, 64-byte signature]`.
 */
export function decodeDeviceCertificate(v: unknown): DeviceCertificate {
  const pair = expect.array(v, 'device certificate', 2)
  if (pair.length !== 2) throw new SteadError('malformed', 'a device certificate is [user public key, signature]')
  return { user: expect.bytes(pair[0], "device certificate's user key", PUBLIC_KEY_BYTES), sig: expect.bytes(pair[1], "device certificate's signature", SIGNATURE_BYTES) }
}

/** Certificates that verified, so that each envelope of a device does not cost a second signature check. */
const verified = new Set<string>()
/** Certificates remembered at most (one per device a process hears from). */
const MAX_VERIFIED = 4096

/**
 * What is known of a certificate without checking its signature: false for
 * one naming the device itself as its user (never valid: a key without
 * certificate is its own user), true for one verified before; else the
 * memo key to remember it under once its signature verifies.
 */
function known(devicePublicKey: Uint8Array, cert: DeviceCertificate): boolean | string {
  if (bytesEqual(cert.user, devicePublicKey)) return false
  const key = toHex(devicePublicKey) + toHex(cert.user) + toHex(cert.sig)
  return verified.has(key) || key
}

/** `ok`, remembering the certificate under `key` when it verified. */
function remembered(key: string, ok: boolean): boolean {
  if (!ok) return false
  if (verified.size >= MAX_VERIFIED) verified.delete(verified.values().next().value as string)
  verified.add(key)
  return true
}

/** Whether `cert` certifies `devicePublicKey`. */
export function deviceCertificateHolds(verify: (publicKey: Uint8Array, message: Uint8Array, signature: Uint8Array) => boolean, devicePublicKey: Uint8Array, cert: DeviceCertificate): boolean {
  const k = known(devicePublicKey, cert)
  return typeof k === 'boolean' ? k : remembered(k, verify(cert.user, deviceCertificateBytes(devicePublicKey), cert.sig))
}

/** The same check with an asynchronous verifier (WebCrypto). */
export async function deviceCertificateHoldsAsync(crypto: Pick<Crypto, 'verify'>, devicePublicKey: Uint8Array, cert: DeviceCertificate): Promise<boolean> {
  const k = known(devicePublicKey, cert)
  return typeof k === 'boolean' ? k : remembered(k, await crypto.verify(cert.user, deviceCertificateBytes(devicePublicKey), cert.sig))
}
