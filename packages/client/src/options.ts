import { DEFAULT_LIMITS, MAX_PRESENCE_TTL_MS, MIN_PRESENCE_TTL_MS, SteadError, systemClock, type HostClock } from '@stead/core'
import { parseClusterDescriptor, sessionUrlOf, type ClusterDescriptor } from './transport/cluster.ts'
import type { ClientStorage } from './storage/types.ts'
import type { ClientOptions } from './types.ts'

/**
 * How long a safe update (or `safe` group) waits for the stable order by
 * default: long enough to ride out a reconnect (backoff tops out at 10 s),
 * trust on first use and a commit under load, the same as `flush` and
 * `settled` wait; short enough that an app with no quorum hears why within a
 * minute instead of never. `timeoutMs: Infinity` waits for ever.
 */
export const DEFAULT_SAFE_TIMEOUT_MS = 60_000

/** The longest delay a timer can have (setTimeout fires at once past it). */
export const MAX_TIMER_MS = 2 ** 31 - 1

const RELAY_SCHEMES = ['ws:', 'wss:', 'http:', 'https:']

/** Every option `createClient` knows; anything else is a typo or an option of another library. */
const KNOWN: ReadonlyArray<keyof ClientOptions> = [
  'relays',
  'cluster',
  'database',
  'storage',
  'identity',
  'deviceCertificate',
  'historyLimit',
  'batchIntervalMs',
  'maxBatchOps',
  'resubmitAfterMs',
  'epochPollMs',
  'checkpointEvery',
  'heartbeat',
  'backoff',
  'crypto',
  'connect',
  'fetch',
  'peers',
  'now',
  'clock',
  'random',
  'safeTimeoutMs',
  'presenceTtlMs',
]

/** A SteadError `malformed` naming the option, what is wrong with it and the fix. */
function refuse(option: string, problem: string, fix: string): never {
  throw new SteadError('malformed', `createClient: ${option} ${problem}; ${fix}`)
}

function show(v: unknown): string {
  if (typeof v === 'string') return JSON.stringify(v)
  if (typeof v === 'number' || typeof v === 'boolean' || v === null || v === undefined) return String(v)
  if (Array.isArray(v)) return 'an array'
  return /^[aeiou]/.test(typeof v) ? `an ${typeof v}` : `a ${typeof v}`
}

/**
 * Checks every `createClient` option before anything is opened: the first
 * one a user got wrong is refused with a SteadError `malformed` that names
 * it, says what is wrong and how to fix it. Returns the pinned cluster, if
 * one is given, parsed.
 */
export function checkClientOptions(options: ClientOptions): ClusterDescriptor | undefined {
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    refuse('options', `is ${show(options)}, not an object`, `call createClient({ relays: ['ws://127.0.0.1:7401', ...] })`)
  }
  const given = options as unknown as Record<string, unknown>
  for (const key of Object.keys(given)) {
    if (!(KNOWN as readonly string[]).includes(key)) {
      const near = KNOWN.find((k) => k.toLowerCase().startsWith(key.toLowerCase().slice(0, 4)) || key.toLowerCase().startsWith(k.toLowerCase()))
      refuse(`options.${key}`, 'is not an option of createClient', near ? `did you mean ${near}?` : `remove it (the options are ${KNOWN.join(', ')})`)
    }
  }
  checkRelays(given.relays)
  const cluster = checkCluster(given.cluster)
  if (given.database !== undefined) {
    const d = given.database
    if (typeof d !== 'string' || d.length === 0 || d.length > 128) refuse('options.database', `is ${show(d)}`, 'give a name of 1 to 128 characters, e.g. "my-app"')
    if (/[/\\\0]/.test(d) || d === '.' || d === '..') refuse('options.database', `is ${show(d)}, which is a path`, 'give a plain name (in Node the storage goes to ./.stead/<database>; pass `storage: lmdbStorage(dir)` to choose the directory)')
    if (given.storage !== undefined) refuse('options.database', 'names the default storage, but options.storage is given too, so it would be ignored', 'give one of them')
  }
  if (given.storage !== undefined && !isThenable(given.storage)) checkStorage(given.storage)
  if (given.identity !== undefined) {
    const id = given.identity as { secretKey?: unknown } | null
    const key = typeof id === 'object' && id !== null ? id.secretKey : undefined
    if (!(key instanceof Uint8Array) || key.length !== 32) {
      refuse('options.identity.secretKey', `is ${key instanceof Uint8Array ? `${key.length} bytes` : show(key)}, not a 32-byte Uint8Array`, 'pass { secretKey } with the 32-byte Ed25519 seed, or leave identity out to use the one kept in storage')
    }
  }
  integer(given, 'historyLimit', 0, Number.MAX_SAFE_INTEGER, 'entries kept in memory per object (0 keeps none; default 1000)')
  integer(given, 'presenceTtlMs', MIN_PRESENCE_TTL_MS, MAX_PRESENCE_TTL_MS, `ms others keep this client's presence without hearing it again (default 30000)`)
  ms(given, 'batchIntervalMs', 0, 'default 10')
  integer(given, 'maxBatchOps', 1, DEFAULT_LIMITS.maxOpsPerEnvelope, `operations per envelope (relays take at most ${DEFAULT_LIMITS.maxOpsPerEnvelope}; default 500)`)
  ms(given, 'resubmitAfterMs', 1, 'default 2000')
  ms(given, 'epochPollMs', 1, 'default 30000')
  integer(given, 'checkpointEvery', 1, Number.MAX_SAFE_INTEGER, 'envelopes per checkpoint (default 1000)')
  if (given.heartbeat !== undefined) {
    const h = pair(given, 'heartbeat', 'pingAfterMs', 'deadAfterMs', '{ pingAfterMs: 5000, deadAfterMs: 15000 }')
    if (h.pingAfterMs >= h.deadAfterMs) refuse('options.heartbeat', `pings after ${h.pingAfterMs} ms but drops a quiet session after ${h.deadAfterMs} ms, before any ping`, 'make pingAfterMs smaller than deadAfterMs')
  }
  if (given.backoff !== undefined) {
    const b = pair(given, 'backoff', 'initialMs', 'maxMs', '{ initialMs: 250, maxMs: 10000 }')
    if (b.maxMs < b.initialMs) refuse('options.backoff', `has maxMs ${b.maxMs} below initialMs ${b.initialMs}`, 'make maxMs at least initialMs')
  }
  if (given.safeTimeoutMs !== undefined) {
    const t = given.safeTimeoutMs
    if (typeof t !== 'number' || Number.isNaN(t) || t < 0 || (t > MAX_TIMER_MS && t !== Number.POSITIVE_INFINITY)) {
      refuse('options.safeTimeoutMs', `is ${show(t)}`, `give milliseconds from 0 to ${MAX_TIMER_MS}, or Infinity to let safe updates wait for ever (default ${DEFAULT_SAFE_TIMEOUT_MS})`)
    }
  }
  if (given.crypto !== undefined) {
    const c = given.crypto as Record<string, unknown> | null
    const missing = ['generateSecretKey', 'publicKeyOf', 'sign', 'verify', 'sha256'].filter((f) => typeof c !== 'object' || c === null || typeof c[f] !== 'function')
    if (missing.length) refuse('options.crypto', `is not a Crypto (no ${missing.join(', ')})`, 'leave it out for the platform default, or pass nodeCrypto from @stead/core/node')
  }
  if (given.clock !== undefined) {
    const c = given.clock as Record<string, unknown> | null
    if (typeof c !== 'object' || c === null || typeof c.now !== 'function' || typeof c.setTimer !== 'function') {
      refuse('options.clock', `is ${show(c)}, not a HostClock (now and setTimer)`, 'leave it out for the system clock')
    }
  }
  for (const f of ['connect', 'fetch', 'now', 'random'] as const) {
    if (given[f] !== undefined && typeof given[f] !== 'function') refuse(`options.${f}`, `is ${show(given[f])}, not a function`, 'pass a function or leave it out for the platform default')
  }
  if (given.peers !== undefined) {
    const p = given.peers as Record<string, unknown> | null
    if (typeof p !== 'object' || p === null || typeof p.start !== 'function' || typeof p.stop !== 'function') {
      refuse('options.peers', `is ${show(p)}, not a PeerNetwork`, 'pass libp2pPeers(...) from @stead/client/node (or a PeerNetwork), or leave it out to sync through relays only')
    }
  }
  return cluster
}

function checkRelays(relays: unknown): void {
  const example = `e.g. relays: ['ws://127.0.0.1:7401', 'ws://127.0.0.1:7402', ...]`
  if (relays === undefined) refuse('options.relays', 'is missing', `list the relay URLs, ${example}`)
  if (typeof relays === 'string') refuse('options.relays', `is the string ${show(relays)}, not an array`, `wrap it in an array: relays: [${show(relays)}]`)
  if (!Array.isArray(relays)) refuse('options.relays', `is ${show(relays)}, not an array of URLs`, `list the relay URLs, ${example}`)
  const list = relays as unknown[]
  if (list.length === 0) refuse('options.relays', 'is empty', `list at least one relay URL (every relay of the cluster, for the best availability), ${example}`)
  if (list.length > 1000) refuse('options.relays', `lists ${list.length} URLs`, 'a cluster has at most 1000 relays: list each once')
  const seen = new Map<string, number>()
  list.forEach((url, i) => {
    const where = `options.relays[${i}]`
    if (typeof url !== 'string') refuse(where, `is ${show(url)}, not a URL`, 'give each relay as a string like "ws://127.0.0.1:7401"')
    const s = url as string
    if (s.trim().length === 0) refuse(where, 'is an empty string', 'give the relay URL, like "ws://127.0.0.1:7401", or remove the entry')
    if (!/^[a-z][a-z0-9+.-]*:\/\//i.test(s.trim())) refuse(where, `is ${show(s)}, which has no scheme`, `write ${show(`ws://${s.trim().replace(/^\/+/, '')}`)} (or wss:// for a relay behind TLS)`)
    let u: URL
    try {
      u = new URL(s)
    } catch {
      return refuse(where, `is ${show(s)}, which is not a valid URL`, 'write it as "ws://host:port", e.g. "ws://127.0.0.1:7401"')
    }
    if (!RELAY_SCHEMES.includes(u.protocol)) refuse(where, `is ${show(s)}, which uses ${u.protocol}//`, `relays speak ws://, wss://, http:// or https://: write ${show(`ws://${u.host || 'host:port'}${u.pathname === '/' ? '' : u.pathname}`)}`)
    if (u.hostname === '') refuse(where, `is ${show(s)}, which has no host`, 'write it as "ws://host:port", e.g. "ws://127.0.0.1:7401"')
    if (u.search !== '' || u.hash !== '' || u.username !== '' || u.password !== '') refuse(where, `is ${show(s)}, whose ${u.search || u.hash ? 'query or fragment' : 'user name or password'} the client would not send`, 'give the bare "ws://host:port" (relays authenticate clients by their key)')
    const key = sessionUrlOf(s)
    const first = seen.get(key)
    if (first !== undefined) refuse(where, `is ${show(s)}, the same relay as relays[${first}]`, 'list each relay once (a relay listed twice would count twice towards the f+1 relays the client needs)')
    seen.set(key, i)
  })
}

function checkCluster(raw: unknown): ClusterDescriptor | undefined {
  if (raw === undefined) return undefined
  if (typeof raw === 'string') refuse('options.cluster', 'is a string', 'pass the parsed cluster file: cluster: JSON.parse(text) (or leave it out to trust the descriptor 2f+1 relays serve)')
  try {
    return parseClusterDescriptor(raw, 'options.cluster')
  } catch (err) {
    const why = (err as SteadError).message.replace(/^malformed: options\.cluster: /, '')
    return refuse('options.cluster', why, "pass the relays' cluster file as parsed JSON or what GET /v1/cluster serves (or leave it out to trust on first use)")
  }
}

/** Whether `storage` is a ClientStorage; refuses it with the fix otherwise. */
export function checkStorage(storage: unknown): ClientStorage {
  const s = storage as Record<string, unknown> | null
  const missing = ['load', 'loadRange', 'write', 'removeRange', 'close'].filter((f) => typeof s !== 'object' || s === null || typeof s[f] !== 'function')
  if (missing.length) {
    refuse('options.storage', `is ${show(storage)}, not a ClientStorage (no ${missing.join(', ')})`, 'pass memoryStorage(), indexedDbStorage(name) or lmdbStorage(dir) (or a promise of one), or leave it out for the default storage')
  }
  return storage as ClientStorage
}

function isThenable(v: unknown): v is Promise<unknown> {
  return typeof v === 'object' && v !== null && typeof (v as { then?: unknown }).then === 'function'
}

function integer(o: Record<string, unknown>, name: string, min: number, max: number, what: string): void {
  const v = o[name]
  if (v === undefined) return
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min || v > max) {
    refuse(`options.${name}`, `is ${show(v)}`, `give a whole number from ${min} to ${max === Number.MAX_SAFE_INTEGER ? 'any' : max}: ${what}`)
  }
}

function ms(o: Record<string, unknown>, name: string, min: number, dflt: string): void {
  const v = o[name]
  if (v === undefined) return
  if (typeof v !== 'number' || !Number.isFinite(v) || v < min || v > MAX_TIMER_MS) refuse(`options.${name}`, `is ${show(v)}`, `give milliseconds from ${min} to ${MAX_TIMER_MS} (${dflt})`)
}

function pair<A extends string, B extends string>(o: Record<string, unknown>, name: string, a: A, b: B, example: string): Record<A | B, number> {
  const v = o[name] as Record<string, unknown> | null
  if (typeof v !== 'object' || v === null) refuse(`options.${name}`, `is ${show(v)}, not an object`, `give ${example}, or leave it out for the default`)
  for (const k of [a, b]) {
    const x = (v as Record<string, unknown>)[k]
    if (typeof x !== 'number' || !Number.isFinite(x) || x <= 0 || x > MAX_TIMER_MS) refuse(`options.${name}.${k}`, `is ${show(x)}`, `give milliseconds above 0 and at most ${MAX_TIMER_MS}, as in ${example}`)
  }
  return v as Record<A | B, number>
}

/** The clock everything the client schedules runs on: `clock`, else the system's timers reading `now` (when given). */
export function clockOf(options: Pick<ClientOptions, 'clock' | 'now'>): HostClock {
  if (options.clock) return options.clock
  const now = options.now
  return now ? { now, setTimer: (ms, fn) => systemClock.setTimer(ms, fn) } : systemClock
}
