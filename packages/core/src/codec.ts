import { Packr } from 'msgpackr'
import { SteadError } from './errors.ts'
import { SIGNATURE_BYTES } from './crypto/types.ts'

/**
 * One msgpackr configuration for every wire message. Records and other
 * msgpackr extensions are off so that any msgpack implementation can read
 * Stead's bytes, and decoding never builds anything but plain data.
 */
const packr = new Packr({ useRecords: false, moreTypes: false, mapsAsObjects: true, int64AsType: 'number' })

/**
 * Size limits every decoder enforces, so that no input can make a replica
 * allocate or work without bound; anything over one is refused with
 * `too-large`. Every party must use the same limits, or an envelope one
 * accepts another refuses: use {@link DEFAULT_LIMITS}.
 */
export interface Limits {
  /** Largest frame accepted from a socket or peer. */
  readonly maxFrameBytes: number
  /** Largest signed envelope payload. */
  readonly maxEnvelopeBytes: number
  /** Most entries in an envelope's logical clock. */
  readonly maxClockEntries: number
  /** Most causal dependencies (envelope ids) one envelope names. */
  readonly maxDeps: number
  /** Most operations in one envelope, regular and safe together. */
  readonly maxOpsPerEnvelope: number
  /** Longest object key, in UTF-16 units. */
  readonly maxKeyChars: number
  /** Longest space name, in UTF-16 units. */
  readonly maxSpaceChars: number
}

/** The limits of the Stead protocol: 4 MiB frames, 1 MiB envelopes, 10,000 clock entries and operations, 64 deps, 256-char keys, 128-char space names. */
export const DEFAULT_LIMITS: Limits = Object.freeze({
  maxFrameBytes: 4 * 1024 * 1024,
  maxEnvelopeBytes: 1024 * 1024,
  maxClockEntries: 10_000,
  maxDeps: 64,
  maxOpsPerEnvelope: 10_000,
  maxKeyChars: 256,
  maxSpaceChars: 128,
})

/**
 * Whether a string is well-formed UTF-16 (no unpaired surrogate). An
 * unpaired surrogate does not survive UTF-8: it decodes as other
 * characters, so a key or space name with one would name something else
 * on every other replica.
 */
export function isWellFormed(s: string): boolean {
  return !/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/.test(s)
}

/** Encodes a value as msgpack with Stead's configuration (plain data only, no msgpackr extensions). */
export function encode(value: unknown): Uint8Array {
  return packr.pack(value)
}

/**
 * Decodes one msgpack value, refusing anything over `maxBytes` or with
 * trailing bytes, and any extension type. Safe on untrusted input.
 *
 * @throws SteadError `malformed` for anything but one plain msgpack value, `too-large` over `maxBytes`.
 */
export function decode(bytes: Uint8Array, maxBytes: number = DEFAULT_LIMITS.maxFrameBytes): unknown {
  if (!(bytes instanceof Uint8Array)) throw new SteadError('malformed', 'expected bytes')
  if (bytes.length > maxBytes) throw new SteadError('too-large', `${bytes.length} bytes exceeds the limit of ${maxBytes}`)
  if (bytes.length === 0) throw new SteadError('malformed', 'empty input')
  checkStructure(bytes)
  try {
    return packr.unpack(bytes)
  } catch (err) {
    throw new SteadError('malformed', `not valid msgpack: ${(err as Error).message}`, { cause: err })
  }
}

type Shape = { kind: 'fixed'; bytes: number } | { kind: 'sized'; width: 1 | 2 | 4 } | { kind: 'container'; width: 2 | 4; perItem: 1 | 2 }

/** What follows each msgpack type byte from 0xc0 on (undefined: not allowed here). */
const SHAPES: ReadonlyArray<Shape | undefined> = (() => {
  const table: Array<Shape | undefined> = []
  const fixed = (bytes: number): Shape => ({ kind: 'fixed', bytes })
  const sized = (width: 1 | 2 | 4): Shape => ({ kind: 'sized', width })
  const container = (width: 2 | 4, perItem: 1 | 2): Shape => ({ kind: 'container', width, perItem })
  table[0x00] = fixed(0) // nil
  table[0x02] = fixed(0) // false
  table[0x03] = fixed(0) // true
  table[0x04] = sized(1) // bin 8, 16, 32
  table[0x05] = sized(2)
  table[0x06] = sized(4)
  table[0x0a] = fixed(4) // float 32, 64
  table[0x0b] = fixed(8)
  table[0x0c] = fixed(1) // uint 8, 16, 32, 64
  table[0x0d] = fixed(2)
  table[0x0e] = fixed(4)
  table[0x0f] = fixed(8)
  table[0x10] = fixed(1) // int 8, 16, 32, 64
  table[0x11] = fixed(2)
  table[0x12] = fixed(4)
  table[0x13] = fixed(8)
  table[0x19] = sized(1) // str 8, 16, 32
  table[0x1a] = sized(2)
  table[0x1b] = sized(4)
  table[0x1c] = container(2, 1) // array 16, 32
  table[0x1d] = container(4, 1)
  table[0x1e] = container(2, 2) // map 16, 32
  table[0x1f] = container(4, 2)
  return table
})()

/**
 * Walks msgpack bytes before msgpackr sees them: exactly one value, no
 * extension types but `undefined` (Stead writes no others, and msgpackr's,
 * such as bundled strings, let crafted input hang or crash the decoder), no
 * declared length past the end. Linear in the input, without recursion.
 */
function checkStructure(b: Uint8Array): void {
  const bad = (why: string): never => {
    throw new SteadError('malformed', `not valid msgpack: ${why}`)
  }
  const view = new DataView(b.buffer, b.byteOffset, b.byteLength)
  let pos = 0
  /** Values still to read; each takes at least one byte, so it can never exceed what is left. */
  let pending = 1
  const skip = (n: number): void => {
    pos += n
    if (pos > b.length) bad(`a length runs past the end (offset ${pos - n})`)
  }
  const items = (n: number): void => {
    pending += n
    if (pending > b.length - pos) bad(`${n} items declared at offset ${pos} but only ${b.length - pos} bytes left`)
  }
  const len = (width: 1 | 2 | 4): number => {
    if (pos + width > b.length) bad('truncated length')
    const n = width === 1 ? view.getUint8(pos) : width === 2 ? view.getUint16(pos) : view.getUint32(pos)
    pos += width
    return n
  }
  while (pending > 0) {
    if (pos >= b.length) bad('truncated')
    const t = b[pos++] as number
    pending--
    if (t <= 0x7f || t >= 0xe0) continue // fixint
    if (t <= 0x8f) items(2 * (t & 0x0f)) // fixmap
    else if (t <= 0x9f) items(t & 0x0f) // fixarray
    else if (t <= 0xbf) skip(t & 0x1f) // fixstr
    else if (t === 0xd4) {
      // fixext 1: only msgpackr's `undefined` (type 0, one zero byte), which encode() writes for it
      if (b[pos] !== 0 || b[pos + 1] !== 0) bad(`extension type ${String(b[pos])} at offset ${pos - 1} is not allowed`)
      skip(2)
    } else {
      const shape = SHAPES[t - 0xc0]
      if (shape === undefined) bad(`type 0x${t.toString(16)} at offset ${pos - 1} is not allowed`) // 0xc1 and the other extension types
      else if (shape.kind === 'fixed') skip(shape.bytes)
      else if (shape.kind === 'sized') skip(len(shape.width))
      else items(shape.perItem * len(shape.width))
    }
  }
  if (pos !== b.length) bad(`expected one msgpack value, found ${b.length - pos} more bytes`)
}

/**
 * A signed message: `sig` covers exactly `bytes`, which are kept as
 * received, so nobody ever re-encodes to check a signature.
 */
export interface Signed {
  /** The signed payload, exactly as signed. */
  readonly bytes: Uint8Array
  /** The Ed25519 signature over `bytes` (64 bytes). */
  readonly sig: Uint8Array
}

/** Wire form of a signed message: msgpack `[bytes, sig]` (read back with `asSigned(decode(frame))`). */
export function encodeSigned(s: Signed): Uint8Array {
  return encode([s.bytes, s.sig])
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
  /** An array of at most `max` items (`too-large` past it). */
  array(v: unknown, field: string, max: number): unknown[] {
    if (!Array.isArray(v)) throw new SteadError('malformed', `${field} must be an array`)
    if (v.length > max) throw new SteadError('too-large', `${field} has ${v.length} items, limit ${max}`)
    return v
  },
  /** A string of `minChars` to `maxChars` UTF-16 units (`too-large` past the maximum). */
  string(v: unknown, field: string, maxChars: number, minChars = 0): string {
    if (typeof v !== 'string') throw new SteadError('malformed', `${field} must be a string`)
    if (v.length > maxChars) throw new SteadError('too-large', `${field} is longer than ${maxChars} chars`)
    if (v.length < minChars) throw new SteadError('malformed', `${field} is shorter than ${minChars} chars`)
    return v
  },
  /** A non-negative safe integer. */
  uint(v: unknown, field: string): number {
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) throw new SteadError('malformed', `${field} must be a non-negative safe integer`)
    return v
  },
  /** Bytes, of exactly `length` when given. */
  bytes(v: unknown, field: string, length?: number): Uint8Array {
    if (!(v instanceof Uint8Array) || (length !== undefined && v.length !== length)) throw new SteadError('malformed', length === undefined ? `${field} must be bytes` : `${field} must be ${length} bytes`)
    return v
  },
  /** A boolean. */
  boolean(v: unknown, field: string): boolean {
    if (typeof v !== 'boolean') throw new SteadError('malformed', `${field} must be a boolean`)
    return v
  },
}
