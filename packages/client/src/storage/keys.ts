import { SteadError } from '@stead/core'
import type { StorageChange, StorageKey } from './types.ts'

/**
 * THE key order, shared by every adapter:
 *
 * 1. Keys compare component by component, from the first.
 * 2. Two components compare as JavaScript strings do with `<`: by UTF-16 code
 *    units, so '\u{10000}' (units D800 DC00) sorts before '\uFFFF'.
 * 3. When every component of the shorter key equals the longer key's, the
 *    shorter sorts first: ['a'] < ['a', ''] < ['a', 'b'] < ['ab'].
 *
 * This is exactly IndexedDB's order for arrays of strings, so the browser
 * adapter gets it natively. LMDB compares bytes, and its own array keys order
 * strings by UTF-8 (code points), which disagrees with rule 2 above U+D7FF and
 * cannot store lone surrogates; hence `encodeKey` below.
 */
export function compareStorageKeys(a: StorageKey, b: StorageKey): number {
  const n = Math.min(a.length, b.length)
  for (let i = 0; i < n; i++) {
    const x = a[i] as string
    const y = b[i] as string
    if (x !== y) return x < y ? -1 : 1
  }
  return a.length === b.length ? 0 : a.length < b.length ? -1 : 1
}

export function keyStartsWith(key: StorageKey, prefix: StorageKey): boolean {
  if (prefix.length > key.length) return false
  for (let i = 0; i < prefix.length; i++) if (key[i] !== prefix[i]) return false
  return true
}

/**
 * The largest encoded key (see `encodeKey`) any adapter accepts. It is LMDB's
 * limit with 4 KiB pages; enforcing it everywhere keeps data portable between
 * adapters, and it is far above what the client needs (core caps object keys
 * at 256 chars, at most 769 bytes here).
 */
export const MAX_KEY_BYTES = 1978

/**
 * Order-preserving, prefix-free bytes for a key, so that comparing encodings
 * with memcmp (LMDB) gives `compareStorageKeys`. Each UTF-16 code unit u
 * becomes 1 to 3 bytes that never contain 0x00:
 *   u < 0x7F   → u + 1                                   (01..7F)
 *   u < 0x800  → C0|u>>6, 80|u&3F                        (C1 BF .. DF BF)
 *   otherwise  → E0|u>>12, 80|(u>>6)&3F, 80|u&3F         (E0 A0 80 .. EF BF BF)
 * Byte strings of one length compare like the code units they encode, and a
 * longer form's lead byte is above every shorter form's, so the order of code
 * units is kept. Each component ends with 0x00, which is below every encoded
 * unit: a shorter component, and a shorter key, sort first. ASCII costs one
 * byte per char, and lone surrogates round-trip.
 */
export function encodeKey(key: StorageKey): Uint8Array {
  const out = new Uint8Array(encodedKeyLength(key))
  let p = 0
  for (const part of key) {
    for (let i = 0; i < part.length; i++) {
      const u = part.charCodeAt(i)
      if (u < 0x7f) out[p++] = u + 1
      else if (u < 0x800) {
        out[p++] = 0xc0 | (u >> 6)
        out[p++] = 0x80 | (u & 0x3f)
      } else {
        out[p++] = 0xe0 | (u >> 12)
        out[p++] = 0x80 | ((u >> 6) & 0x3f)
        out[p++] = 0x80 | (u & 0x3f)
      }
    }
    out[p++] = 0
  }
  return out
}

export function encodedKeyLength(key: StorageKey): number {
  let n = 0
  for (const part of key) {
    n += 1
    for (let i = 0; i < part.length; i++) {
      const u = part.charCodeAt(i)
      n += u < 0x7f ? 1 : u < 0x800 ? 2 : 3
    }
  }
  return n
}

/** Inverse of `encodeKey`; throws `malformed` on bytes it could not have produced. */
export function decodeKey(bytes: Uint8Array): string[] {
  const parts: string[] = []
  let units: number[] = []
  let i = 0
  const cont = (): number => {
    const b = bytes[i++]
    if (b === undefined || (b & 0xc0) !== 0x80) throw new SteadError('malformed', 'bad storage key encoding')
    return b & 0x3f
  }
  while (i < bytes.length) {
    const b = bytes[i++] as number
    if (b === 0) {
      parts.push(String.fromCharCode(...units))
      units = []
    } else if (b <= 0x7f) units.push(b - 1)
    else if (b >= 0xc1 && b <= 0xdf) units.push(((b & 0x1f) << 6) | cont())
    else if (b >= 0xe0 && b <= 0xef) {
      const u = ((b & 0x0f) << 12) | (cont() << 6)
      units.push(u | cont())
    } else throw new SteadError('malformed', 'bad storage key encoding')
  }
  if (units.length > 0 || parts.length === 0) throw new SteadError('malformed', 'bad storage key encoding')
  return parts
}

/**
 * The byte range [start, end) holding exactly the encodings of keys that
 * start with `prefix`: every such encoding begins with encodeKey(prefix),
 * whose last byte is the 0x00 terminator; raising it to 0x01 bounds them all.
 */
export function prefixByteRange(prefix: StorageKey): { start: Uint8Array; end: Uint8Array } | undefined {
  if (prefix.length === 0) return undefined
  const start = encodeKey(prefix)
  const end = start.slice()
  end[end.length - 1] = 1
  return { start, end }
}

function checkComponents(key: unknown, what: string): asserts key is StorageKey {
  if (!Array.isArray(key)) throw new SteadError('malformed', `${what} must be an array of strings`)
  for (const part of key) {
    if (typeof part !== 'string') throw new SteadError('malformed', `${what} must be an array of strings`)
  }
}

/** A key given to load/write: non-empty, strings only, within MAX_KEY_BYTES. Returns a private copy. */
export function checkKey(key: unknown): string[] {
  checkComponents(key, 'storage key')
  if (key.length === 0) throw new SteadError('malformed', 'storage key must have at least one component')
  const size = encodedKeyLength(key)
  if (size > MAX_KEY_BYTES) throw new SteadError('too-large', `storage key of ${size} bytes exceeds ${MAX_KEY_BYTES}`)
  return [...key]
}

/** A prefix given to loadRange/removeRange: may be empty (everything). Returns a private copy. */
export function checkPrefix(prefix: unknown): string[] {
  checkComponents(prefix, 'storage prefix')
  return [...prefix]
}

/**
 * Validates a whole batch before any adapter touches its store, so bad input
 * fails with nothing written. Values are copied into tight buffers: the
 * caller may reuse its arrays, and IndexedDB would otherwise clone a view's
 * entire underlying ArrayBuffer (a 10-byte subarray of a pooled 8 KiB Buffer
 * would store 8 KiB). `new Uint8Array(view)` always copies; `Buffer#slice`
 * would not.
 */
export function checkChanges(changes: unknown): Array<{ key: string[]; value: Uint8Array | undefined }> {
  if (!Array.isArray(changes)) throw new SteadError('malformed', 'write expects an array of changes')
  return changes.map((change: unknown, i) => {
    if (typeof change !== 'object' || change === null) throw new SteadError('malformed', `change ${i} is not an object`)
    const { key, value } = change as StorageChange
    const checked = checkKey(key)
    if (value === undefined) return { key: checked, value: undefined }
    if (!(value instanceof Uint8Array)) {
      throw new SteadError('malformed', `change ${i}: value must be a Uint8Array or undefined`)
    }
    return { key: checked, value: new Uint8Array(value) }
  })
}
