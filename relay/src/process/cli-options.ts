/**
 * Parsers and checks for stead-relay's options. A bad value throws
 * InvalidArgumentError (commander names the option and the value) or
 * UsageError (for checks across options); either ends in one line and a
 * pointer to --help, never a stack trace.
 */
import { InvalidArgumentError, Option } from 'commander'
import type { ApiLimits } from '../api/server.ts'
import type { MeshLimits } from '../mesh/budget.ts'
import { CLIENT_LIES, type ClientLie } from '../faults/client-lies.ts'
import { BYZANTINE_STRATEGIES, type ByzantineStrategy } from '../faults/strategies.ts'
import { LOG_LEVELS } from './logging.ts'

/** A command line that cannot work: the message says why; the CLI adds where to look. */
export class UsageError extends Error {
  override readonly name = 'UsageError'
}

/** A whole number from `min` to `max`, as an option parser; `rule` replaces the generic explanation. */
export function wholeNumber(min: number, max: number, unit = '', rule?: string): (value: string) => number {
  const what = unit ? `a whole number of ${unit}` : 'a whole number'
  return (value) => {
    const n = Number(value)
    if (!/^\s*\d+\s*$/.test(value) || !Number.isSafeInteger(n) || n < min || n > max) {
      throw new InvalidArgumentError(`must be ${rule ?? `${what} from ${min} to ${max}`}`)
    }
    return n
  }
}

/** --leader-timeout-ms and --pace-ms, shared by `start` and `dev`. */
export function timingOptions(): Option[] {
  return [
    new Option('--leader-timeout-ms <ms>', "how long to wait for the previous round's leader before proposing without it (default 250)").argParser(wholeNumber(1, 60_000, 'milliseconds')),
    new Option('--pace-ms <ms>', 'least time between a relay\'s rounds when only regular updates wait to be ordered; 0 turns pacing off (default 50)').argParser(wholeNumber(0, 10_000, 'milliseconds')),
  ]
}

/** The consensus timings a command line set (RunRelayOptions.consensus); unset ones keep the relay's defaults. */
export function timings(o: { leaderTimeoutMs?: number; paceMs?: number }): { leaderTimeoutMs?: number; paceMs?: number } {
  return { ...(o.leaderTimeoutMs === undefined ? {} : { leaderTimeoutMs: o.leaderTimeoutMs }), ...(o.paceMs === undefined ? {} : { paceMs: o.paceMs }) }
}

/** --log-level, or LOG_LEVEL in the environment. */
export function logLevelOption(): Option {
  return new Option('--log-level <level>', 'what to log: trace and debug add every HTTP request and more; silent logs nothing').choices(LOG_LEVELS).env('LOG_LEVEL').default('info')
}

/**
 * `--limit name=value` flags as the API's limits: any of `defaults`' numbers
 * by name, a rate limit's fields as `rateLimit.perSecond` (the rest of it
 * keeps its defaults). Checked here rather than while parsing, so that
 * --help and usage errors need not load the API (defaults: DEFAULT_LIMITS).
 * Flags naming a mesh limit (`mesh.`…) are left to meshLimits.
 */
export function apiLimits(flags: readonly string[], defaults: ApiLimits): Partial<ApiLimits> {
  return namedLimits(
    flags.filter((f) => !f.startsWith('mesh.')),
    defaults,
    '',
  ) as Partial<ApiLimits>
}

/**
 * `--limit mesh.name=value` flags as the mesh budget's numbers (per peer;
 * DEFAULT_MESH_LIMITS in src/mesh/budget.ts): `mesh.maxQueuedRequests=16`,
 * a rate's fields as `mesh.unrequestedBlocks.perSecond=400`.
 */
export function meshLimits(flags: readonly string[], defaults: MeshLimits): Partial<MeshLimits> {
  return namedLimits(
    flags.filter((f) => f.startsWith('mesh.')).map((f) => f.slice('mesh.'.length)),
    defaults,
    'mesh.',
  ) as Partial<MeshLimits>
}

function namedLimits(flags: readonly string[], defaults: object, prefix: string): Record<string, unknown> {
  const names = Object.entries(defaults).flatMap(([k, v]) => (typeof v === 'number' ? [k] : Object.keys(v as object).map((f) => `${k}.${f}`)))
  const out: Record<string, number | Record<string, number>> = {}
  for (const flag of flags) {
    const [name = '', value] = flag.split('=')
    if (!names.includes(name)) throw new UsageError(`--limit ${prefix}${flag}: unknown limit ${prefix}${name} (limits: ${names.map((n) => prefix + n).join(', ')})`)
    const n = Number(value)
    if (value === undefined || !/^\d+$/.test(value) || !Number.isSafeInteger(n) || n < 1) throw new UsageError(`--limit ${prefix}${flag}: the value must be a positive whole number`)
    const [top, field] = name.split('.') as [string, string | undefined]
    if (field === undefined) out[top] = n
    else out[top] = { ...((defaults as Record<string, unknown>)[top] as Record<string, number>), ...(out[top] as Record<string, number> | undefined), [field]: n }
  }
  return out
}

/** A comma-separated list, e.g. --host 10.0.0.1,10.0.0.2; repeated flags add up. */
export function commaList(value: string, previous: readonly string[] = []): string[] {
  const items = value.split(',').map((s) => s.trim())
  if (items.some((s) => s === '')) throw new InvalidArgumentError('has an empty item')
  return [...previous, ...items]
}

/** A repeatable option's values, in order. */
export function repeatable(value: string, previous: readonly string[] = []): string[] {
  return [...previous, value]
}

/** What `--byzantine` asks for: at most one way to lie to other relays, and any ways to lie to clients. */
export interface ByzantineModes {
  readonly toRelays?: ByzantineStrategy
  readonly toClients: readonly ClientLie[]
}

/** `--byzantine equivocate,lie-attest`: relay-facing and client-facing modes, comma-separated. */
export function byzantineModes(value: string): ByzantineModes {
  const modes = commaList(value)
  const toRelays = modes.filter((m): m is ByzantineStrategy => (BYZANTINE_STRATEGIES as readonly string[]).includes(m))
  const toClients = modes.filter((m): m is ClientLie => (CLIENT_LIES as readonly string[]).includes(m))
  const unknown = modes.filter((m) => !toRelays.includes(m as ByzantineStrategy) && !toClients.includes(m as ClientLie))
  if (unknown.length) throw new InvalidArgumentError(`has unknown mode ${unknown.join(', ')}; towards relays: ${BYZANTINE_STRATEGIES.join(', ')}; towards clients: ${CLIENT_LIES.join(', ')}`)
  if (toRelays.length > 1) throw new InvalidArgumentError(`may name one mode towards relays, not ${toRelays.join(' and ')}`)
  return { ...(toRelays[0] ? { toRelays: toRelays[0] } : {}), toClients: [...new Set(toClients)] }
}
