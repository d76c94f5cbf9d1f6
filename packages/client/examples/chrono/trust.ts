/**
 * What the Chrono examples trust and how they read a proven update: the
 * relays' keys, and the value an update's signed envelope wrote to a key.
 */
import { envelopeUnits, type CertifiedClock, type Crypto } from '@stead/core'

/** The relays' keys (the cluster file's), and nothing else, vouch for clock proofs. */
export interface ClusterKeys {
  readonly f: number
  readonly relayKeys: readonly Uint8Array[]
}

/** What checks clock proofs: a crypto (`nodeCrypto`, or `webCrypto()` in browsers) and the relays' keys. */
export interface Trust {
  readonly crypto: Crypto
  readonly cluster: ClusterKeys
}

/** A register write an update made and the audit applied. */
export interface Write {
  readonly value: unknown
  /** Its last-writer-wins timestamp. */
  readonly t: number
  /** The op's tag: last-writer-wins breaks ties by (t, author id, tag). */
  readonly tag: string
}

/**
 * The one register write a certified update made to `key` in a safe group
 * the audit did not reject; none if it made no such write, several, or a
 * regular write of the key as well. A
 * unit the audit rejected (the key holds another type, say) never took
 * effect, though its envelope committed: it is not a write.
 */
export function writeIn(certified: CertifiedClock, key: string): Write | undefined {
  const units = envelopeUnits(certified.env)
  // A regular write of the key beside it may be what the register holds: no single write, then.
  if (units.some((u) => u.kind === 'op' && u.key === key)) return undefined
  const writes = units
    .filter((u) => u.kind === 'group' && !certified.rejected.includes(u.unit))
    .flatMap((u) => (u.kind === 'group' ? u.items.filter((i) => i.key === key) : []))
  if (writes.length !== 1) return undefined
  const { op, tag } = writes[0] as { op: unknown; tag: string }
  return Array.isArray(op) && op[0] === 's' && op.length === 3 && typeof op[2] === 'number' ? { value: op[1], t: op[2], tag } : undefined
}

/** Whether write `a` of `author` wins over write `b` of `bAuthor` by last-writer-wins, as the register decides. */
export function winsOver(a: Write, aAuthor: string, b: Write, bAuthor: string): boolean {
  if (a.t !== b.t) return a.t > b.t
  if (aAuthor !== bAuthor) return aAuthor > bAuthor
  return a.tag > b.tag
}
