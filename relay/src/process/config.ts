import { readFileSync, writeFileSync } from 'node:fs'
import { isIPv4, isIPv6 } from 'node:net'
import { fromHex, toHex, type RelayCommittee } from '@stead/core'
import { nodeCrypto, publicKeyOfSync } from '@stead/core/node'
import { z } from 'zod'
import { validateCommittee, type Committee } from '../consensus/index.ts'

/** A configuration problem an operator must fix; the message says what and where. */
export class ConfigError extends Error {
  /** Always 'ConfigError'. */
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
  /**
   * libp2p WebSocket multiaddr where the relay helps clients sync peer to
   * peer (circuit relay and WebRTC signalling for browsers), e.g.
   * /ip4/127.0.0.1/tcp/7601/ws. Absent: the relay offers none.
   */
  readonly peers?: string
}

/**
 * A space the cluster file lists, with who may write and read it until the
 * space has a policy of its own (see the relay README's security model):
 * once one of `admins` creates it, the space's policy decides and these
 * lists no longer do.
 */
export interface SpacePolicy {
  /** Author public keys allowed to write; absent means every signed author may. */
  readonly writers?: readonly Uint8Array[]
  /** Session keys allowed to read (writers may read too); absent means anyone may read. */
  readonly readers?: readonly Uint8Array[]
  /** Author public keys that may create the space's own policy (client.createSpace); absent: nobody, the lists above stay in force. */
  readonly admins?: readonly Uint8Array[]
}

/**
 * A checked cluster file: the same on every relay of a cluster, and what
 * clients pin (as `GET /v1/cluster` serves it). Make one with
 * {@link loadCluster} or {@link parseCluster}.
 */
export interface ClusterConfig {
  /** How many relays may be Byzantine; the file's `f`, or ⌊(N−1)/3⌋ when it has none. */
  readonly f: number
  /** Every relay, in committee order (a relay's index is its place here). */
  readonly relays: readonly RelayEntry[]
  /** The spaces that exist, with who may write and read each. */
  readonly spaces: ReadonlyMap<string, SpacePolicy>
  /** Whether spaces not listed in `spaces` exist (open to every signed author). Default false. */
  readonly openSpaces: boolean
  /** With `openSpaces`: how many new spaces one client key may create per hour, at each relay's door. Default 100. */
  readonly newSpacesPerKeyPerHour: number
  /**
   * How many live spaces (started and not deleted) one user may hold,
   * counted by the cluster in the committed order: the same count on every
   * relay, however many relays the user's devices submit to. Spaces the
   * file lists do not count. Unset: not counted. It must be set from the
   * cluster's first start (the count runs from its first commit), so
   * `stead-relay init` writes 1,000; a file
   * that gains it later is a policy change its data dirs refuse.
   */
  readonly spacesPerUser?: number
  /**
   * Author public keys that may create spaces at runtime (each with its own
   * policy, see client.createSpace) in a cluster without `openSpaces`.
   * Default none.
   */
  readonly spaceCreators: readonly Uint8Array[]
  /**
   * Relays take a checkpoint (which a relay far behind starts again from)
   * at the first commit of every this many consensus rounds. Default 1,000.
   */
  readonly checkpointRounds: number
}

export const DEFAULT_NEW_SPACES_PER_KEY_PER_HOUR = 100
/** The `spacesPerUser` that `stead-relay init` writes. */
export const DEFAULT_SPACES_PER_USER = 1000
export const DEFAULT_CHECKPOINT_ROUNDS = 1000

/**
 * The consensus committee of `c`'s relays: of epoch 0 (the cluster file's),
 * or of the epoch given, whose blocks carry it (a block of another epoch is
 * refused) and whose rounds start after `startRound`.
 */
export function committeeOf(c: ClusterConfig, epoch?: { readonly epoch: number; readonly startRound: number }): Committee {
  return { f: c.f, keys: c.relays.map((r) => r.publicKey), ...(epoch?.epoch ? { epoch: epoch.epoch, startRound: epoch.startRound } : {}) }
}

/** The cluster's relays as an epoch change names them (see @stead/core's epoch.ts). */
export function relayCommitteeOf(c: ClusterConfig): RelayCommittee {
  return { f: c.f, members: c.relays.map((r) => ({ id: r.id, publicKey: r.publicKey, api: r.api, mesh: r.mesh, ...(r.peers ? { peers: r.peers } : {}) })) }
}

/**
 * The cluster as it stands in an epoch after the file's: the file's
 * settings (spaces, quotas, checkpoints) with the committee that epoch's
 * certificate names. The file itself keeps naming epoch 0's committee,
 * which every data dir and client pinned.
 */
export function clusterInEpoch(file: ClusterConfig, committee: RelayCommittee): ClusterConfig {
  return { ...file, f: committee.f, relays: committee.members.map((m) => ({ id: m.id, publicKey: m.publicKey, mesh: m.mesh, api: m.api, ...(m.peers ? { peers: m.peers } : {}) })) }
}

/**
 * Reads and checks a cluster file:
 * `{ "f": 1, "relays": [{ "id", "publicKey" (hex), "mesh", "api" }],
 *   "spaces": { "bank": { "writers": [hex], "readers": [hex], "admins": [hex] } }, "openSpaces": false, "spaceCreators": [hex], "newSpacesPerKeyPerHour": 100, "spacesPerUser": 1000, "checkpointRounds": 1000 }`
 *
 * @throws {@link ConfigError} if the file cannot be read or parsed, or fails {@link parseCluster}'s checks.
 */
export function loadCluster(path: string): ClusterConfig {
  return parseCluster(readJsonFile(path, 'cluster file', 'give --config the cluster.json that `stead-relay init` wrote'), path)
}

/**
 * What an operator reads when a file cannot be read: the file, the reason in
 * words (not an errno), and `fix`. Undefined for an error that is not a
 * file-system error.
 */
export function fileProblem(err: unknown, what: string, path: string, fix: string): string | undefined {
  switch ((err as NodeJS.ErrnoException | null)?.code) {
    case 'ENOENT':
      return `${what} ${path} does not exist; ${fix}`
    case 'ENOTDIR':
      return `${what} ${path}: a part of the path is a file, not a directory; ${fix}`
    case 'EISDIR':
      return `${what} ${path} is a directory, not a file; ${fix}`
    case 'EACCES':
    case 'EPERM':
      return `${what} ${path}: permission denied; run as a user that may use it, or change its owner or mode`
    case 'EROFS':
      return `${what} ${path} is on a read-only file system; ${fix}`
    case 'ENOSPC':
      return `${what} ${path}: no space left on the device; free some space`
    case 'ELOOP':
    case 'ENAMETOOLONG':
      return `${what} ${path} cannot be resolved (${(err as NodeJS.ErrnoException).code}); ${fix}`
    default:
      return undefined
  }
}

/** Reads a JSON file, or throws a ConfigError naming it, the problem and `fix`. */
function readJsonFile(path: string, what: string, fix: string): unknown {
  let text: string
  try {
    text = readFileSync(path, 'utf8')
  } catch (err) {
    throw new ConfigError(fileProblem(err, what, path, fix) ?? `cannot read ${what} ${path}: ${(err as Error).message}`)
  }
  try {
    return JSON.parse(text)
  } catch (err) {
    if (text.trim() === '') throw new ConfigError(`${what} ${path} is empty; ${fix}`)
    throw new ConfigError(`${what} ${path} is not valid JSON (${(err as Error).message}); fix the file, or ${fix}`)
  }
}

/** A port as the cluster file writes it: a whole number from 1 to 65535. */
function validPort(text: string): boolean {
  const n = Number(text)
  return /^\d+$/.test(text) && n >= 1 && n <= 65_535
}

/** What is wrong with a multiaddr /ip4|ip6/<ip>/tcp/<port>[suffix], or undefined if nothing is. */
function multiaddrProblem(s: string, suffix: '' | '/ws'): string | undefined {
  const example = `/ip4/127.0.0.1/tcp/${suffix ? 7601 : 7501}${suffix}`
  const m = /^\/(ip4|ip6)\/([^/]+)\/tcp\/([^/]+)(\/.*)?$/.exec(s)
  if (!m || (m[4] ?? '') !== suffix) return `must look like ${example}, got ${s}`
  const [, proto, ip = '', port = ''] = m
  if (proto === 'ip4' ? !isIPv4(ip) : !isIPv6(ip)) return `has ${ip}, which is not an ${proto === 'ip4' ? 'IPv4' : 'IPv6'} address; write the relay's address, e.g. ${example}`
  if (!validPort(port)) return `has port ${port}; a port is a whole number from 1 to 65535, e.g. ${example}`
  return undefined
}

/** What is wrong with an API address host:port, or undefined if nothing is. */
function apiProblem(s: string): string | undefined {
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(s)) return `must be host:port without a scheme (clients add ws:// or wss://), e.g. 127.0.0.1:7401, got ${s}`
  const m = /^([^:/]+):([^:/]*)$/.exec(s)
  if (!m) return `must be host:port, e.g. 127.0.0.1:7401, got ${s}`
  if (!validPort(m[2] ?? '')) return `has port ${m[2] ?? ''}; a port is a whole number from 1 to 65535, e.g. 127.0.0.1:7401`
  return undefined
}

// The schema's messages say what is wrong; `describeIssue` puts the field's path in front.
const nonEmpty = z.string({ error: 'must be a non-empty string' }).min(1, { error: 'must be a non-empty string' })

const relayKey = nonEmpty.transform((s, ctx) => {
  let key: Uint8Array
  try {
    key = fromHex(s)
  } catch {
    ctx.addIssue({ code: 'custom', message: "is not hex; write the relay's public key as `stead-relay keygen` or `init` printed it (64 hex digits)" })
    return z.NEVER
  }
  if (key.length !== 32) {
    ctx.addIssue({ code: 'custom', message: `must be 32 bytes (64 hex digits), got ${key.length} bytes; write the relay's whole public key as \`stead-relay keygen\` or \`init\` printed it` })
    return z.NEVER
  }
  return key
})

const clientKey = z.unknown().transform((s, ctx) => {
  try {
    const key = typeof s === 'string' ? fromHex(s) : undefined
    if (key?.length === 32) return key
  } catch {
    // reported below
  }
  ctx.addIssue({ code: 'custom', message: 'must be a 32-byte hex public key' })
  return z.NEVER
})

const relaySchema = z.strictObject(
  {
    id: nonEmpty,
    publicKey: relayKey,
    mesh: nonEmpty.superRefine((s, ctx) => {
      const problem = multiaddrProblem(s, '')
      if (problem) ctx.addIssue({ code: 'custom', message: problem })
    }),
    api: nonEmpty.superRefine((s, ctx) => {
      const problem = apiProblem(s)
      if (problem) ctx.addIssue({ code: 'custom', message: problem })
    }),
    peers: nonEmpty
      .superRefine((s, ctx) => {
        const problem = multiaddrProblem(s, '/ws')
        if (problem) ctx.addIssue({ code: 'custom', message: problem })
      })
      .optional(),
  },
  { error: 'must be an object { "id", "publicKey", "mesh", "api" } (and optionally "peers")' },
)

const keyList = z.array(clientKey, { error: 'must be an array of hex public keys' })

const policySchema = z.strictObject(
  {
    writers: keyList.optional(),
    readers: keyList.optional(),
    admins: keyList.optional(),
  },
  { error: 'must be an object, e.g. { "writers": [hex], "readers": [hex], "admins": [hex] } or {}' },
)

const clusterSchema = z.strictObject(
  {
    f: z.number({ error: 'must be a non-negative integer' }).int({ error: 'must be a non-negative integer' }).min(0, { error: 'must be a non-negative integer' }).optional(),
    relays: z.array(relaySchema, { error: 'must be a non-empty array' }).min(1, { error: 'must be a non-empty array' }),
    spaces: z.record(z.string(), policySchema, { error: 'must be an object' }).optional(),
    openSpaces: z.boolean({ error: 'must be true or false' }).optional(),
    spaceCreators: keyList.optional(),
    newSpacesPerKeyPerHour: z
      .number({ error: 'must be a non-negative integer' })
      .int({ error: 'must be a non-negative integer' })
      .min(0, { error: 'must be a non-negative integer' })
      .optional(),
    spacesPerUser: z
      .number({ error: 'must be a whole number from 1 to 1000000000' })
      .int({ error: 'must be a whole number from 1 to 1000000000' })
      .min(1, { error: 'must be a whole number from 1 to 1000000000' })
      .max(1_000_000_000, { error: 'must be a whole number from 1 to 1000000000' })
      .optional(),
    checkpointRounds: z
      .number({ error: 'must be a whole number from 10 to 1000000' })
      .int({ error: 'must be a whole number from 10 to 1000000' })
      .min(10, { error: 'must be a whole number from 10 to 1000000' })
      .max(1_000_000, { error: 'must be a whole number from 10 to 1000000' })
      .optional(),
  },
  { error: 'must be a JSON object' },
)

const KNOWN_KEYS = {
  top: Object.keys(clusterSchema.shape),
  relay: Object.keys(relaySchema.shape),
  policy: Object.keys(policySchema.shape),
}

/** relays[3].publicKey, spaces.bank.writers[0]; a top-level field is quoted: "relays". */
function pathText(path: readonly PropertyKey[]): string {
  if (path.length === 1) return `"${String(path[0])}"`
  return path
    .map((p, i) => {
      if (typeof p === 'number') return `[${p}]`
      const s = String(p)
      const bare = /^[A-Za-z_$][\w$-]*$/.test(s)
      return i === 0 ? s : bare ? `.${s}` : `[${JSON.stringify(s)}]`
    })
    .join('')
}

/** Levenshtein distance, for "did you mean". */
function distance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j)
  for (let i = 1; i <= a.length; i++) {
    const row = [i]
    for (let j = 1; j <= b.length; j++) row[j] = Math.min((prev[j] as number) + 1, (row[j - 1] as number) + 1, (prev[j - 1] as number) + (a[i - 1] === b[j - 1] ? 0 : 1))
    prev = row
  }
  return prev[b.length] as number
}

function unknownKey(key: string, path: readonly PropertyKey[]): string {
  const known = path.length === 0 ? KNOWN_KEYS.top : path[0] === 'relays' ? KNOWN_KEYS.relay : KNOWN_KEYS.policy
  const where = path.length === 0 ? 'at top level' : `in ${path.length === 1 ? String(path[0]) : pathText(path)}`
  const scored = known.map((k) => ({ k, d: distance(key.toLowerCase(), k.toLowerCase()) })).sort((x, y) => x.d - y.d)
  const best = scored[0]
  const hint = best && best.d <= Math.max(2, Math.ceil(Math.max(key.length, best.k.length) / 3)) ? `did you mean "${best.k}"?` : `known keys: ${known.join(', ')}`
  return `unknown key "${key}" ${where}; ${hint}`
}

function describeIssue(issue: z.core.$ZodIssue): string {
  if (issue.code === 'unrecognized_keys') return unknownKey(issue.keys[0] as string, issue.path)
  return issue.path.length === 0 ? issue.message : `${pathText(issue.path)} ${issue.message}`
}

/**
 * Checks a parsed cluster file (see {@link loadCluster} for its shape):
 * unknown keys (naming the closest known one), bad keys and addresses,
 * N < 3f+1, repeated ids, keys or addresses.
 *
 * @param where Names the source in error messages (a file path).
 * @throws {@link ConfigError} saying which field is wrong and why.
 */
export function parseCluster(raw: unknown, where = 'cluster config'): ClusterConfig {
  const fail = (msg: string): never => {
    throw new ConfigError(`${where}: ${msg}`)
  }
  const parsed = clusterSchema.safeParse(raw)
  if (!parsed.success) {
    // A misspelt key explains the errors that follow from it (a missing "relays" behind "relay"): name it first.
    const issues = parsed.error.issues
    const first = issues.find((i) => i.code === 'unrecognized_keys') ?? issues[0]
    return fail(first ? describeIssue(first) : 'invalid')
  }
  const obj = parsed.data
  const relays: RelayEntry[] = obj.relays
  const n = relays.length
  const f = obj.f ?? Math.floor((n - 1) / 3)
  // N = 3f+1 exactly (see validateCommittee), said in the file's terms, with the fix.
  if (n !== 3 * f + 1) {
    const fits = n >= 4 && (n - 1) % 3 === 0
    const fix = obj.f !== undefined && fits ? `set "f" to ${(n - 1) / 3} (or remove it), or list ${3 * f + 1} relays` : `list 4, 7, 10, ... relays${obj.f === undefined ? '' : ` (${3 * f + 1} for "f" ${f})`}`
    fail(n < 3 * f + 1 ? `${n} relays cannot tolerate f = ${f}: N must be exactly 3f+1; ${fix}` : `${n} relays with f = ${f}: N must be exactly 3f+1 (with more, quorums of 2f+1 could meet in a Byzantine relay only); ${fix}`)
  }
  // Two relays with the same id, key or address: name both, and the field.
  for (const [field, what] of [
    ['id', 'ids'],
    ['publicKey', 'keys'],
    ['api', 'api addresses'],
    ['mesh', 'mesh addresses'],
    ['peers', 'peers addresses'],
  ] as const) {
    const seen = new Map<string, number>()
    relays.forEach((r, i) => {
      const v = r[field]
      if (v === undefined) return
      const key = typeof v === 'string' ? v : toHex(v)
      const first = seen.get(key)
      if (first !== undefined) fail(`relay ${what} must be distinct: relays[${first}] and relays[${i}] both have ${field} ${typeof v === 'string' ? v : `${key.slice(0, 16)}…`}; give each relay its own`)
      seen.set(key, i)
    })
  }
  const committeeProblem = validateCommittee({ f, keys: relays.map((r) => r.publicKey) })
  if (committeeProblem) fail(committeeProblem)
  const spaces = new Map<string, SpacePolicy>()
  for (const [name, policy] of Object.entries(obj.spaces ?? {})) {
    spaces.set(name, { ...(policy.writers ? { writers: policy.writers } : {}), ...(policy.readers ? { readers: policy.readers } : {}), ...(policy.admins ? { admins: policy.admins } : {}) })
  }
  return {
    f,
    relays,
    spaces,
    openSpaces: obj.openSpaces ?? false,
    newSpacesPerKeyPerHour: obj.newSpacesPerKeyPerHour ?? DEFAULT_NEW_SPACES_PER_KEY_PER_HOUR,
    ...(obj.spacesPerUser === undefined ? {} : { spacesPerUser: obj.spacesPerUser }),
    spaceCreators: obj.spaceCreators ?? [],
    checkpointRounds: obj.checkpointRounds ?? DEFAULT_CHECKPOINT_ROUNDS,
  }
}

/** The cluster file for `c`: JSON data that {@link parseCluster} reads back as `c`. */
export function clusterToJson(c: ClusterConfig): unknown {
  return {
    f: c.f,
    relays: c.relays.map((r) => ({ id: r.id, publicKey: toHex(r.publicKey), mesh: r.mesh, api: r.api, ...(r.peers ? { peers: r.peers } : {}) })),
    spaces: Object.fromEntries(
      [...c.spaces].map(([name, p]) => [
        name,
        { ...(p.writers ? { writers: p.writers.map(toHex) } : {}), ...(p.readers ? { readers: p.readers.map(toHex) } : {}), ...(p.admins ? { admins: p.admins.map(toHex) } : {}) },
      ]),
    ),
    openSpaces: c.openSpaces,
    newSpacesPerKeyPerHour: c.newSpacesPerKeyPerHour,
    // Only when set: a file without it reads back, and pins, as before.
    ...(c.spaceCreators.length ? { spaceCreators: c.spaceCreators.map(toHex) } : {}),
    ...(c.spacesPerUser === undefined ? {} : { spacesPerUser: c.spacesPerUser }),
    checkpointRounds: c.checkpointRounds,
  }
}

export interface Identity {
  readonly secretKey: Uint8Array
  readonly publicKey: Uint8Array
}

/** A fresh Ed25519 key pair for a relay (what `stead-relay keygen` writes). */
export function generateIdentity(): Identity {
  const secretKey = nodeCrypto.generateSecretKey()
  return { secretKey, publicKey: publicKeyOfSync(secretKey) }
}

/** Writes a key file readable only by its owner. */
export function writeIdentity(path: string, id: Identity): void {
  writeFileSync(path, JSON.stringify({ secretKey: toHex(id.secretKey), publicKey: toHex(id.publicKey) }, null, 2) + '\n', { mode: 0o600 })
}

/**
 * Reads a key file written by {@link writeIdentity} (or `stead-relay
 * keygen`); the public key is derived from the secret key.
 *
 * @throws {@link ConfigError} if the file cannot be read or holds no 32-byte hex `secretKey`.
 */
export function loadIdentity(path: string): Identity {
  const fix = 'give the relay\'s key file with --key, or put it at <data>/key.json (`stead-relay init` or `keygen` writes one)'
  const raw = readJsonFile(path, 'key file', fix) as { secretKey?: unknown } | null
  const hex = typeof raw === 'object' && raw !== null ? raw.secretKey : undefined
  let secretKey: Uint8Array | undefined
  try {
    secretKey = typeof hex === 'string' ? fromHex(hex) : undefined
  } catch {
    // reported below
  }
  if (secretKey?.length !== 32) throw new ConfigError(`key file ${path} has no "secretKey" of 64 hex digits; is it a key file written by \`stead-relay keygen\` or \`init\`? ${fix.charAt(0).toUpperCase()}${fix.slice(1)}`)
  return { secretKey, publicKey: publicKeyOfSync(secretKey) }
}
