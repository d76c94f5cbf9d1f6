import { PUBLIC_KEY_BYTES, SteadError, decodeDeviceCertificate, encode, encodeDeviceCertificate, toBase64Url, type DeviceCertificate } from '@stead/core'
import { tokenValue } from './invitation-token.ts'

/** What every device certificate token starts with. */
export const DEVICE_PREFIX = 'stead-device:'

/** The longest token taken (its content is about 170 bytes). */
const MAX_TOKEN_CHARS = 512

/** What a device token carries: the device's public key, and the user's certificate of it. */
export interface DeviceToken {
  /** The device's Ed25519 public key (32 bytes). */
  readonly device: Uint8Array
  /** The user's certificate of that key. */
  readonly certificate: DeviceCertificate
}

/**
 * A device certificate token: `stead-device:` followed by the base64url (no
 * padding) of the msgpack array `[device key, [user key, signature]]`.
 * Public (it proves nothing without the device's secret key), so it may
 * travel by any channel: a link, a QR code, a copied line.
 */
export function encodeDeviceToken(device: Uint8Array, certificate: DeviceCertificate): string {
  return DEVICE_PREFIX + toBase64Url(encode([device, encodeDeviceCertificate(certificate)]))
}

/**
 * What a device token carries (its shape: the certificate's signature is
 * checked where it is used). Whitespace around it is ignored.
 *
 * @throws SteadError `malformed` for anything that is not such a token.
 */
export function decodeDeviceToken(token: unknown): DeviceToken {
  const bad = (why: string): SteadError => new SteadError('malformed', `not a device certificate (${DEVICE_PREFIX}…): ${why}`)
  const value = tokenValue(token, DEVICE_PREFIX, MAX_TOKEN_CHARS, bad)
  if (!Array.isArray(value) || value.length !== 2) throw bad('it does not hold [device key, certificate]')
  const [device, cert] = value as [unknown, unknown]
  if (!(device instanceof Uint8Array) || device.length !== PUBLIC_KEY_BYTES) throw bad(`its device key is not ${PUBLIC_KEY_BYTES} bytes`)
  try {
    return { device, certificate: decodeDeviceCertificate(cert) }
  } catch (err) {
    throw bad((err as Error).message)
  }
}
