import { readFileSync, writeFileSync } from 'node:fs'
import { fromHex, toHex } from '@stead/core'
import { nodeCrypto, publicKeyOfSync } from '@stead/core/node'
import { validateCommittee, type Committee } from './consensus/index.ts'

/** A configuration problem an operator must fix; the message says what and where. */
export class ConfigError extends Error {
  override readonly name = 'ConfigError'
}

export interface RelayEntry {
  /** Operator-facing name, e.g. "r1". */
  readonly id: string
  readonly publicKey: Uint8Array
  /** libp2p multiaddr of the relay mesh, e.g. /ip4/127.0.0.1/tcp/7501 */
  readonly mesh: string
  /** host:port of the client API (HTTP and WebSocket), e.g. 127.0.0.1:7401 */
  readonly api: string
}

export interface SpacePolicy {
  /** Author public keys allowed to write; absent means every signed author may. */
  readonly writers?: readonly Uint8Array[]
}

export interface ClusterConfig {
  readonly f: number
  readonly relays: readonly RelayEntry[]
  readonly spaces: ReadonlyMap<string, SpacePolicy>
  /** Whether spaces not listed in `spaces` exist (open to every signed author). Default true. */
  readonly openSpaces: boolean
}

export function committeeOf(c: ClusterConfig): Committee {
  return { f: c.f, keys: c.relays.map((r) => r.publicKey) }
}

/**
 * Reads and checks a cluster file:
 * { "f": 1, "relays": [{ "id", "publicKey" (hex), "mesh", "api" }], "spaces": { "bank": { "writers": [hex] } } }
 */
export function loadCluster(path: string): ClusterConfig {
  let raw: unknown
  try {
    raw = JSON.parse(readFileSync(path, 'utf8'))
  } catch (err) {
    throw new ConfigError(`cannot read cluster file ${path}: ${(err as Error).message}`)
  }
  return parseCluster(raw, path)
}

export function parseCluster(raw: unknown, where = 'cluster config'): ClusterConfig {
  const fail = (msg: string): never => {
    throw new ConfigError(`${where}: ${msg}`)
  }
  if (typeof raw !== 'object' || raw === null) fail('must be a JSON object')
  const obj = raw as { f?: unknown; relays?: unknown; spaces?: unknown; openSpaces?: unknown }
  if (obj.openSpaces !== undefined && typeof obj.openSpaces !== 'boolean') fail('"openSpaces" must be true or false')
  if (!Array.isArray(obj.relays) || obj.relays.length === 0) fail('"relays" must be a non-empty array')
  const relays = (obj.relays as unknown[]).map((r, i): RelayEntry => {
    const e = r as Record<string, unknown>
    const field = (name: string): string => (typeof e[name] === 'string' && (e[name] as string).length > 0 ? (e[name] as string) : fail(`relays[${i}].${name} must be a non-empty string`))
    const id = field('id')
    let publicKey: Uint8Array
    try {
      publicKey = fromHex(field('publicKey'))
    } catch {
      return fail(`relays[${i}].publicKey is not hex`)
    }
    if (publicKey.length !== 32) fail(`relays[${i}].publicKey must be 32 bytes (64 hex digits)`)
    const mesh = field('mesh')
    if (!/^\/ip[46]\/[^/]+\/tcp\/\d+$/.test(mesh)) fail(`relays[${i}].mesh must look like /ip4/127.0.0.1/tcp/7501, got ${mesh}`)
    const api = field('api')
    if (!/^[^:/]+:\d+$/.test(api)) fail(`relays[${i}].api must be host:port, got ${api}`)
    return { id, publicKey, mesh, api }
  })
  const f = typeof obj.f === 'number' ? obj.f : Math.floor((relays.length - 1) / 3)
  const committeeProblem = validateCommittee({ f, keys: relays.map((r) => r.publicKey) })
  if (committeeProblem) fail(committeeProblem)
  if (new Set(relays.map((r) => r.id)).size !== relays.length) fail('relay ids must be distinct')
  if (new Set(relays.map((r) => r.api)).size !== relays.length) fail('relay api addresses must be distinct')
  if (new Set(relays.map((r) => r.mesh)).size !== relays.length) fail('relay mesh addresses must be distinct')
  const spaces = new Map<string, SpacePolicy>()
  if (obj.spaces !== undefined) {
    if (typeof obj.spaces !== 'object' || obj.spaces === null) fail('"spaces" must be an object')
    for (const [name, policy] of Object.entries(obj.spaces as Record<string, unknown>)) {
      const writers = (policy as { writers?: unknown } | null)?.writers
      if (writers === undefined) {
        spaces.set(name, {})
        continue
      }
      if (!Array.isArray(writers)) fail(`spaces.${name}.writers must be an array of hex public keys`)
      spaces.set(
        name,
        {
          writers: (writers as unknown[]).map((w, i) => {
            try {
              const k = fromHex(String(w))
              if (k.length === 32) return k
            } catch {
              // reported below
            }
            return fail(`spaces.${name}.writers[${i}] must be a 32-byte hex public key`)
          }),
        },
      )
    }
  }
  return { f, relays, spaces, openSpaces: obj.openSpaces !== false }
}

export function clusterToJson(c: ClusterConfig): unknown {
  return {
    f: c.f,
    relays: c.relays.map((r) => ({ id: r.id, publicKey: toHex(r.publicKey), mesh: r.mesh, api: r.api })),
    spaces: Object.fromEntries([...c.spaces].map(([name, p]) => [name, p.writers ? { writers: p.writers.map(toHex) } : {}])),
    openSpaces: c.openSpaces,
  }
}

export interface Identity {
  readonly secretKey: Uint8Array
  readonly publicKey: Uint8Array
}

export function generateIdentity(): Identity {
  const secretKey = nodeCrypto.generateSecretKey()
  return { secretKey, publicKey: publicKeyOfSync(secretKey) }
}

/** Writes a key file readable only by its owner. */
export function writeIdentity(path: string, id: Identity): void {
  writeFileSync(path, JSON.stringify({ secretKey: toHex(id.secretKey), publicKey: toHex(id.publicKey) }, null, 2) + '\n', { mode: 0o600 })
}

export function loadIdentity(path: string): Identity {
  let raw: { secretKey?: unknown }
  try {
    raw = JSON.parse(readFileSync(path, 'utf8')) as { secretKey?: unknown }
  } catch (err) {
    throw new ConfigError(`cannot read key file ${path}: ${(err as Error).message}`)
  }
  let secretKey: Uint8Array
  try {
    secretKey = fromHex(String(raw.secretKey))
  } catch {
    throw new ConfigError(`${path}: secretKey is not hex`)
  }
  if (secretKey.length !== 32) throw new ConfigError(`${path}: secretKey must be 32 bytes`)
  return { secretKey, publicKey: publicKeyOfSync(secretKey) }
}
