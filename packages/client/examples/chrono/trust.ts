/**
 * What the Chrono examples trust and how they read a proven update: the
 * relays' keys, and the value an update's signed envelope wrote to a key.
 */
import type { Crypto, Envelope } from '@stead/core'

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

/** The one register write `env` makes to `key` (regular or safe): its value and timestamp; none if it makes no write there, or several. */
export function writeIn(env: Envelope, key: string): { readonly value: unknown; readonly t: number } | undefined {
  const ops = [...env.updates.filter((u) => u.key === key).flatMap((u) => u.ops), ...env.safe.flatMap((g) => g.updates.filter((u) => u.key === key).map((u) => u.op))]
  if (ops.length !== 1) return undefined
  const op = ops[0] as unknown
  return Array.isArray(op) && op[0] === 's' && op.length === 3 && typeof op[2] === 'number' ? { value: op[1], t: op[2] } : undefined
}
