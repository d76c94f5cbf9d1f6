/**
 * Byte helpers shared by every module. Pure and isomorphic: no Buffer, no
 * Node built-ins, so the main entry runs unchanged in browsers.
 *
 * Decoders are strict: every byte string has exactly one accepted encoding
 * (apart from hex letter case), so two replicas that decode the same text can
 * never disagree about the bytes, and nothing else decodes "by accident".
 */
import { SteadError } from './errors.ts'

const HEX_DIGITS = '0123456789abcdef'
const BYTE_TO_HEX: string[] = Array.from({ length: 256 }, (_, i) => HEX_DIGITS[i >> 4]! + HEX_DIGITS[i & 15]!)

/** Lowercase hex, two digits per byte. */
export function toHex(bytes: Uint8Array): string {
  // Joined, not grown with +=: V8 keeps a grown string as a tree of its pieces (about 870 bytes
  // for a 32-byte hash instead of 90), and hex ids are kept by the thousand as map keys.
  const parts = new Array<string>(bytes.length)
  for (let i = 0; i < bytes.length; i++) parts[i] = BYTE_TO_HEX[bytes[i]!]!
  return parts.join('')
}

// -1 marks "not a hex digit"; both cases are accepted because hex from other
// tools is often uppercase and case carries no information.
const HEX_VALUE = new Int8Array(128).fill(-1)
for (let i = 0; i < 16; i++) {
  HEX_VALUE[HEX_DIGITS.charCodeAt(i)] = i
  HEX_VALUE[HEX_DIGITS.toUpperCase().charCodeAt(i)] = i
}

function hexDigit(text: string, index: number): number {
  const code = text.charCodeAt(index)
  const value = code < 128 ? HEX_VALUE[code]! : -1
  if (value < 0) throw new SteadError('malformed', `invalid hex character at offset ${index}`)
  return value
}

/** Parses hex (either case, no prefix, no whitespace). Throws SteadError 'malformed'. */
export function fromHex(hex: string): Uint8Array {
  if (typeof hex !== 'string') throw new SteadError('malformed', 'hex input is not a string')
  if (hex.length % 2 !== 0) throw new SteadError('malformed', `hex string has odd length ${hex.length}`)
  const out = new Uint8Array(hex.length / 2)
  for (let i = 0; i < out.length; i++) {
    out[i] = (hexDigit(hex, 2 * i) << 4) | hexDigit(hex, 2 * i + 1)
  }
  return out
}

const B64URL_ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_'
const B64URL_VALUE = new Int8Array(128).fill(-1)
for (let i = 0; i < 64; i++) B64URL_VALUE[B64URL_ALPHABET.charCodeAt(i)] = i

/** RFC 4648 §5 base64url without padding. */
export function toBase64Url(bytes: Uint8Array): string {
  let out = ''
  let i = 0
  for (; i + 2 < bytes.length; i += 3) {
    const n = (bytes[i]! << 16) | (bytes[i + 1]! << 8) | bytes[i + 2]!
    out +=
      B64URL_ALPHABET[n >> 18]! +
      B64URL_ALPHABET[(n >> 12) & 63]! +
      B64URL_ALPHABET[(n >> 6) & 63]! +
      B64URL_ALPHABET[n & 63]!
  }
  const rest = bytes.length - i
  if (rest === 1) {
    const n = bytes[i]! << 16
    out += B64URL_ALPHABET[n >> 18]! + B64URL_ALPHABET[(n >> 12) & 63]!
  } else if (rest === 2) {
    const n = (bytes[i]! << 16) | (bytes[i + 1]! << 8)
    out += B64URL_ALPHABET[n >> 18]! + B64URL_ALPHABET[(n >> 12) & 63]! + B64URL_ALPHABET[(n >> 6) & 63]!
  }
  return out
}

function b64Digit(text: string, index: number): number {
  const code = text.charCodeAt(index)
  const value = code < 128 ? B64URL_VALUE[code]! : -1
  if (value < 0) throw new SteadError('malformed', `invalid base64url character at offset ${index}`)
  return value
}

/**
 * Parses unpadded base64url. Rejects padding, the '+' and '/' alphabet,
 * whitespace, impossible lengths and non-zero unused trailing bits, so the
 * encoding of given bytes is unique. Throws SteadError 'malformed'.
 */
export function fromBase64Url(text: string): Uint8Array {
  if (typeof text !== 'string') throw new SteadError('malformed', 'base64url input is not a string')
  const tail = text.length % 4
  if (tail === 1) throw new SteadError('malformed', `base64url string has impossible length ${text.length}`)
  const out = new Uint8Array(((text.length - tail) / 4) * 3 + (tail === 0 ? 0 : tail - 1))
  let o = 0
  let i = 0
  for (; i + 4 <= text.length; i += 4) {
    const n = (b64Digit(text, i) << 18) | (b64Digit(text, i + 1) << 12) | (b64Digit(text, i + 2) << 6) | b64Digit(text, i + 3)
    out[o++] = n >> 16
    out[o++] = (n >> 8) & 255
    out[o++] = n & 255
  }
  if (tail === 2) {
    const a = b64Digit(text, i)
    const b = b64Digit(text, i + 1)
    if ((b & 15) !== 0) throw new SteadError('malformed', 'base64url has non-zero trailing bits')
    out[o] = (a << 2) | (b >> 4)
  } else if (tail === 3) {
    const a = b64Digit(text, i)
    const b = b64Digit(text, i + 1)
    const c = b64Digit(text, i + 2)
    if ((c & 3) !== 0) throw new SteadError('malformed', 'base64url has non-zero trailing bits')
    out[o++] = (a << 2) | (b >> 4)
    out[o] = ((b & 15) << 4) | (c >> 2)
  }
  return out
}

/**
 * Content equality. Not constant-time: use it for ids, hashes and public
 * data, never to compare secrets or MACs.
 */
export function bytesEqual(a: Uint8Array, b: Uint8Array): boolean {
  if (a === b) return true
  if (a.length !== b.length) return false
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false
  return true
}

/** A fresh array holding the parts one after another (never aliases an input). */
export function concatBytes(...parts: Uint8Array[]): Uint8Array {
  let length = 0
  for (const part of parts) length += part.length
  const out = new Uint8Array(length)
  let offset = 0
  for (const part of parts) {
    out.set(part, offset)
    offset += part.length
  }
  return out
}
