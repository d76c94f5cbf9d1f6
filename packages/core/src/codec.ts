import { Packr } from 'msgpackr'
import { SteadError } from './errors.ts'
import { SIGNATURE_BYTES } from './crypto/types.ts'

/**
 * One msgpackr configuration for every wire message. Records and other
 * msgpackr extensions are off so that any msgpack implementation can read
 * Stead's bytes, and decoding never builds anything but plain data.
 */
const packr = new Packr({ useRecords: false, moreTypes: false, mapsAsObjects: true, int64AsType: 'number' })

export interface Limits {
  /** Largest frame accepted from a socket or peer. */
  readonly maxFrameBytes: number
  /** Largest signed envelope payload. */
  readonly maxEnvelopeBytes: number
  readonly maxClockEntries: number
  readonly maxDeps: number
  readonly maxOpsPerEnvelope: number
  readonly maxKeyChars: number
  readonly maxSpaceChars: number
}

export const DEFAULT_LIMITS: Limits = Object.freeze({
  maxFrameBytes: 4 * 1024 * 1024,
  maxEnvelopeBytes: 1024 * 1024,
  maxClockEntries: 10_000,
  maxDeps: 64,
  maxOpsPerEnvelope: 10_000,
  maxKeyChars: 256,
  maxSpaceChars: 128,
})

export function encode(value: unknown): Uint8Array {
  return packr.pack(value)
}

/** Decodes one msgpack value, refusing anything over `maxBytes` or with trailing bytes. */
export function decode(bytes: Uint8Array, maxBytes: number = DEFAULT_LIMITS.maxFrameBytes): unknown {
  if (!(bytes instanceof Uint8Array)) throw new SteadError('malformed', 'expected bytes')
  if (bytes.length > maxBytes) throw new SteadError('too-large', `${bytes.length} bytes exceeds the limit of ${maxBytes}`)
  if (bytes.length === 0) throw new SteadError('malformed', 'empty input')
  let values: unknown[]
  try {
    values = packr.unpackMultiple(bytes) as unknown[]
  } catch (err) {
    throw new SteadError('malformed', `not valid msgpack: ${(err as Error).message}`, { cause: err })
  }
  if (values.length !== 1) throw new SteadError('malformed', `expected one msgpack value, found ${values.length}`)
  return values[0]
}

/**
 * A signed message: `sig` covers exactly `bytes`, which are kept as
 * received, so nobody ever re-encodes to check a signature.
 */
export interface Signed {
  readonly bytes: Uint8Array
  readonly sig: Uint8Array
}

export function encodeSigned(s: Signed): Uint8Array {
  return encode([s.bytes, s.sig])
}

export function decodeSigned(frame: Uint8Array, maxBytes: number = DEFAULT_LIMITS.maxFrameBytes): Signed {
  return asSigned(decode(frame, maxBytes))
}

/** Checks the shape of a decoded `[bytes, sig]` pair. */
export function asSigned(v: unknown): Signed {
  if (!Array.isArray(v) || v.length !== 2) throw new SteadError('malformed', 'a signed message is [bytes, signature]')
  const [bytes, sig] = v as unknown[]
  if (!(bytes instanceof Uint8Array)) throw new SteadError('malformed', 'signed payload must be bytes')
  if (!(sig instanceof Uint8Array) || sig.length !== SIGNATURE_BYTES) throw new SteadError('malformed', `signature must be ${SIGNATURE_BYTES} bytes`)
  return { bytes, sig }
}

/** Small shape checkers that throw SteadError('malformed') naming the field. */
export const expect = {
  array(v: unknown, field: string, max: number): unknown[] {
    if (!Array.isArray(v)) throw new SteadError('malformed', `${field} must be an array`)
    if (v.length > max) throw new SteadError('too-large', `${field} has ${v.length} items, limit ${max}`)
    return v
  },
  string(v: unknown, field: string, maxChars: number, minChars = 0): string {
    if (typeof v !== 'string') throw new SteadError('malformed', `${field} must be a string`)
    if (v.length > maxChars) throw new SteadError('too-large', `${field} is longer than ${maxChars} chars`)
    if (v.length < minChars) throw new SteadError('malformed', `${field} is shorter than ${minChars} chars`)
    return v
  },
  uint(v: unknown, field: string): number {
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) throw new SteadError('malformed', `${field} must be a non-negative safe integer`)
    return v
  },
  /** Bytes, of exactly `length` when given. */
  bytes(v: unknown, field: string, length?: number): Uint8Array {
    if (!(v instanceof Uint8Array) || (length !== undefined && v.length !== length)) throw new SteadError('malformed', length === undefined ? `${field} must be bytes` : `${field} must be ${length} bytes`)
    return v
  },
  boolean(v: unknown, field: string): boolean {
    if (typeof v !== 'boolean') throw new SteadError('malformed', `${field} must be a boolean`)
    return v
  },
}
