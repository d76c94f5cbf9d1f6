/**
 * stead-relay: keygen | init | start | dev. Every command takes --help; a
 * command line that cannot work gets one line saying why and where to look
 * (exit 2), a problem an operator must fix (cluster file, data dir, a port in
 * use) one line saying what to do (exit 2), never a stack trace.
 */
import { existsSync, readFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { pathToFileURL } from 'node:url'
import { Command, type CommanderError, Option } from 'commander'
import type { Logger } from 'pino'
import type { ApplicationValidator, Envelope } from '@stead/core'
import { UsageError, apiLimits, byzantineModes, meshLimits, commaList, logLevelOption, repeatable, timingOptions, timings, wholeNumber, type ByzantineModes } from './cli-options.ts'
import type { ClusterConfig } from './config.ts'
import type { LogLevel } from './logging.ts'
import type { RunningRelay } from './relay.ts'
import { RELAY_VERSION } from './version.ts'

// The relay itself (libp2p, fastify, LMDB) is loaded by the commands that run
// it: --help, --version and a mistyped option answer at once.

/** A command line commander refused, or its --help / --version: carries the command it was for. */
class CommandLineExit extends Error {
  readonly exitCode: number
  readonly command: string
  constructor(err: CommanderError, command: string) {
    super(err.message)
    this.exitCode = err.exitCode
    this.command = command
  }
}

/** Commander reports through CommandLineExit instead of printing and exiting: main() words it. */
function reporting(cmd: Command, path: string): Command {
  return cmd.configureOutput({ outputError: () => {} }).exitOverride((err) => {
    throw new CommandLineExit(err, path)
  })
}

/** How long a stopping relay may take before it is made to exit. */
const STOP_TIMEOUT_MS = 10_000

interface StartOptions {
  config?: string
  id?: string
  data?: string
  key?: string
  nextKey?: string[]
  join?: string
  leaveGraceMs?: number
  byzantine?: ByzantineModes
  tlsCert?: string
  tlsKey?: string
  leaderTimeoutMs?: number
  paceMs?: number
  memoryBudgetMb?: number
  snapshotEvery?: number
  peerQueueFrames?: number
  retainRounds?: number
  retainUpdates?: number
  clockValidator?: string
  limit?: string[]
  logLevel: LogLevel
}

async function start(options: StartOptions): Promise<void> {
  const { config, id, data } = options
  if (!config || !id || !data) throw new UsageError('needs --config, --id and --data')
  const o = { ...options, config, id, data }
  if (Boolean(o.tlsCert) !== Boolean(o.tlsKey)) throw new UsageError('--tls-cert and --tls-key go together')
  // Handlers first: a signal while the relay starts is then no abrupt exit but a clean stop
  // once it has started. A second Ctrl-C finds no handler and ends the process at once.
  const state: { logger?: Logger; relay?: RunningRelay; signal?: string } = {}
  const shutdown = (signal: string): void => {
    if (state.signal) return
    state.signal = signal
    state.logger?.info({ signal }, state.relay ? 'stopping' : 'stopping as soon as the relay has started')
    if (state.relay && state.logger) stopRelay(state.relay, state.logger, signal)
    // A start that hangs (a file system that does not answer) must not outlive a stop request.
    else setTimeout(() => process.exit(1), STOP_TIMEOUT_MS).unref()
  }
  process.once('SIGINT', () => shutdown('SIGINT'))
  process.once('SIGTERM', () => shutdown('SIGTERM'))
  // Started by `dev`: go down with it, even if it was killed with SIGKILL.
  if (process.channel) process.once('disconnect', () => shutdown('parent exited'))

  const [{ DEFAULT_LIMITS }, { DEFAULT_MESH_LIMITS }, { ConfigError, fileProblem, loadCluster, loadIdentity }, { relayLogger }, { runRelay }, { toHex }] = await Promise.all([
    import('../api/server.ts'),
    import('../mesh/budget.ts'),
    import('./config.ts'),
    import('./logging.ts'),
    import('./relay.ts'),
    import('@stead/core'),
  ])
  // Bad flags are refused before any file is touched.
  const limits = apiLimits(o.limit ?? [], DEFAULT_LIMITS)
  const mesh = meshLimits(o.limit ?? [], DEFAULT_MESH_LIMITS)
  // Whatever the relay writes (store, lock, metadata) is its owner's alone.
  process.umask(0o077)
  const cluster = loadCluster(o.config)
  // The id before the key: an id not in the file is the mistake, not the key file its data dir lacks.
  const entry = cluster.relays.find((r) => r.id === o.id)
  // After a committee change the store's epoch (or the one --join leads to) may list other relays and keys: runRelay checks against that.
  const laterEpoch = o.join !== undefined || (await storedEpochOf(o.data, cluster)) > 0
  if (!entry && !laterEpoch) throw new ConfigError(`--id ${o.id}: ${o.config} has no relay ${o.id}; give one of its ids: ${cluster.relays.map((r) => r.id).join(', ')} (a relay a committee change added starts with --join <the API of a relay of the cluster>)`)
  const keyPath = o.key ?? join(o.data, 'key.json')
  const identity = loadIdentity(keyPath)
  // A key of no relay in the file may be one a committee change gave this relay while it was down: runRelay checks it once it caught up.
  const anothers = cluster.relays.some((r) => r.id !== o.id && toHex(r.publicKey) === toHex(identity.publicKey))
  if (entry && toHex(entry.publicKey) !== toHex(identity.publicKey) && !laterEpoch && anothers) {
    const owner = cluster.relays.find((r) => toHex(r.publicKey) === toHex(identity.publicKey))
    throw new ConfigError(
      `key file ${keyPath} is not relay ${o.id}'s: its public key ${owner ? `is ${owner.id}'s` : 'is not'} in ${o.config}; give ${o.id}'s own key with --key (or in <data>/key.json)${owner ? `, or start it as --id ${owner.id}` : ''}`,
    )
  }
  const readTls = (path: string, flag: string): Buffer => {
    try {
      return readFileSync(path)
    } catch (err) {
      throw new ConfigError(fileProblem(err, flag, path, `give ${flag} a PEM file`) ?? `${flag} ${path}: ${(err as Error).message}`)
    }
  }
  const tls = o.tlsCert ? { cert: readTls(o.tlsCert, '--tls-cert'), key: readTls(o.tlsKey as string, '--tls-key') } : undefined
  if (tls) {
    // Checked here, where the flags are known: the HTTPS server would throw a bare OpenSSL error.
    const { createSecureContext } = await import('node:tls')
    try {
      createSecureContext(tls)
    } catch (err) {
      throw new ConfigError(`--tls-cert ${o.tlsCert} and --tls-key ${o.tlsKey} are not a PEM certificate and its private key (${(err as Error).message}); give the certificate chain and the key that belongs to it`)
    }
  }
  const clockValidator = o.clockValidator === undefined ? undefined : await loadClockValidator(o.clockValidator, ConfigError)
  const logger = (state.logger = relayLogger(o.id, o.logLevel))
  if (state.signal) {
    // Asked to stop before anything was opened: nothing to close.
    logger.info({ signal: state.signal, closed: [] }, 'relay stopped before it started')
    return exitAfterLogs(logger, 0)
  }
  state.relay = await runRelay({
    cluster,
    id: o.id,
    secretKey: identity.secretKey,
    dataDir: o.data,
    logger,
    consensus: timings(o),
    limits,
    ...(Object.keys(mesh).length ? { meshLimits: mesh } : {}),
    ...(o.byzantine?.toRelays ? { byzantine: o.byzantine.toRelays } : {}),
    ...(o.byzantine?.toClients.length ? { clientLies: o.byzantine.toClients } : {}),
    ...(o.memoryBudgetMb === undefined ? {} : { memoryBudgetBytes: o.memoryBudgetMb * 1024 * 1024 }),
    ...(o.snapshotEvery === undefined ? {} : { snapshotEveryBatches: o.snapshotEvery }),
    ...(o.peerQueueFrames === undefined ? {} : { peerQueueFrames: o.peerQueueFrames }),
    ...(o.retainRounds === undefined && o.retainUpdates === undefined
      ? {}
      : { retention: { ...(o.retainRounds === undefined ? {} : { blockRounds: o.retainRounds }), ...(o.retainUpdates === undefined ? {} : { updates: o.retainUpdates }) } }),
    ...(tls ? { tls } : {}),
    ...(clockValidator ? { clockValidator } : {}),
    ...(o.join ? { join: o.join } : {}),
    ...(o.leaveGraceMs === undefined ? {} : { leaveGraceMs: o.leaveGraceMs }),
    ...(o.nextKey?.length ? { nextKeys: o.nextKey.map((path) => nextKeyOf(path, cluster, o.id, ConfigError, loadIdentity)) } : {}),
    onLeft: () => {
      logger.info({ closed: ['data dir lock'] }, 'relay stopped: it left the committee')
      exitAfterLogs(logger, 0)
    },
    // The fatal line it just logged is out before the process ends (the log is written asynchronously).
    onFatal: (err) => exitAfterLogs(logger, err instanceof ConfigError ? 2 : 1),
  })
  if (state.signal) stopRelay(state.relay, logger, state.signal)
}

/**
 * The operators' application validator for clock votes: a module whose
 * default export is `(space) => ApplicationValidator | undefined` (see
 * RelayNodeOptions.clockValidator). Every relay of the cluster must load
 * the same one.
 */
async function loadClockValidator(path: string, ConfigError: new (message: string) => Error): Promise<(space: string) => ApplicationValidator<Envelope> | undefined> {
  let mod: { default?: unknown }
  try {
    mod = (await import(pathToFileURL(resolve(path)).href)) as { default?: unknown }
  } catch (err) {
    throw new ConfigError(`--clock-validator ${path}: cannot load it (${(err as Error).message}); give a JavaScript module whose default export is (space) => validator | undefined`)
  }
  const rule = mod.default
  if (typeof rule !== 'function') throw new ConfigError(`--clock-validator ${path}: its default export is ${typeof rule}, not a function (space) => validator | undefined`)
  return (space) => {
    // A factory that throws, or gives something else than a function or undefined, refuses every vote in the space.
    let v: unknown
    try {
      v = (rule as (space: string) => unknown)(space)
    } catch (err) {
      return () => ({ ok: false, reason: 'unauthorized', detail: `the clock validator module ${path} threw for space ${space}: ${(err as Error)?.message ?? String(err)}` })
    }
    if (v === undefined || v === null) return undefined
    return typeof v === 'function' ? (v as ApplicationValidator<Envelope>) : () => ({ ok: false, reason: 'unauthorized', detail: `the clock validator module ${path} gave a ${typeof v} for space ${space}, not a validator function` })
  }
}

/** A --next-key file's key: not another relay's of the cluster file (the relay would start as that relay once this one left). */
function nextKeyOf(path: string, cluster: ClusterConfig, id: string, ConfigError: new (message: string) => Error, load: (path: string) => { secretKey: Uint8Array; publicKey: Uint8Array }): Uint8Array {
  let key: { secretKey: Uint8Array; publicKey: Uint8Array }
  try {
    key = load(path)
  } catch (err) {
    throw new ConfigError(`--next-key ${path}: ${(err as Error).message.replace(/; give the relay's key file with --key.*$/, '')}; give a key file \`stead-relay keygen\` wrote for this relay's rotation`)
  }
  const owner = cluster.relays.find((r) => r.id !== id && Buffer.from(r.publicKey).equals(Buffer.from(key.publicKey)))
  if (owner) throw new ConfigError(`--next-key ${path} is relay ${owner.id}'s key: a rotation gives this relay a key of its own (stead-relay keygen)`)
  return key.secretKey
}

/** The epoch a data dir's store is in (0 for a dir with no store yet). */
async function storedEpochOf(data: string, cluster: ClusterConfig): Promise<number> {
  if (!existsSync(join(data, 'data.mdb'))) return 0
  const [{ LmdbKv }, { storedEpoch }] = await Promise.all([import('../store/kv.ts'), import('../runtime/epochs.ts')])
  const kv = new LmdbKv(data)
  try {
    return storedEpoch(kv, cluster).epoch?.epoch ?? 0
  } finally {
    await kv.close()
  }
}

/** How an operator command finds its relay and key. */
interface OperatorOptions {
  readonly url?: string
  readonly config?: string
  readonly id?: string
  readonly key?: string
  readonly data?: string
}

/** The relay API and key an operator command uses: --url, or this relay's API from --config and --id; --key, or <data>/key.json. */
async function operator(o: OperatorOptions): Promise<{ url: string; identity: { secretKey: Uint8Array; publicKey: Uint8Array } }> {
  const { ConfigError, loadCluster, loadIdentity } = await import('./config.ts')
  const keyPath = o.key ?? (o.data ? join(o.data, 'key.json') : undefined)
  if (!keyPath) throw new UsageError("needs --key (or --data): the key of this relay, whose operator backs the change")
  const identity = loadIdentity(keyPath)
  if (o.url) return { url: o.url, identity }
  if (!o.config || !o.id) throw new UsageError('needs --url, or --config and --id: the relay to send the request to')
  const entry = loadCluster(o.config).relays.find((r) => r.id === o.id)
  if (!entry) throw new ConfigError(`--id ${o.id}: ${o.config} has no relay ${o.id}`)
  return { url: `http://${entry.api}`, identity }
}

/** Closes a running relay on a signal and exits, logging what it closed (or that it could not). */
function stopRelay(relay: RunningRelay, logger: Logger, signal: string): void {
  const t0 = Date.now()
  // Not unref'd: it keeps the process alive while the stop runs. A step that waits on work Node holds
  // no reference for (a store commit finishing on another thread, say) would otherwise let Node exit 0
  // mid-stop with nothing said and the store unclosed (CI saw a relay end right after 'stopping').
  setTimeout(() => {
    logger.error({ signal, ms: STOP_TIMEOUT_MS }, 'relay did not stop in time (the last debug line says at what step); exiting anyway')
    exitAfterLogs(logger, 1)
  }, STOP_TIMEOUT_MS)
  relay.stop().then(
    ({ closed }) => {
      logger.info({ signal, closed, ms: Date.now() - t0 }, 'relay stopped')
      exitAfterLogs(logger, 0)
    },
    (err: unknown) => {
      logger.error({ signal, err }, 'relay stopped with an error')
      exitAfterLogs(logger, 1)
    },
  )
}

/**
 * Exits once the log lines written so far are out: pino writes stdout
 * asynchronously, and an exit with a write in flight cuts the last line
 * (the one that says how the relay stopped; CI saw it missing, twice, the
 * second time with a 1 s bound on a loaded machine). A stdout that does
 * not drain gets five seconds to.
 */
function exitAfterLogs(logger: Logger, code: number): void {
  process.exitCode = code
  setTimeout(() => process.exit(code), 5000).unref()
  logger.flush(() => process.exit(code))
}

async function keygen(o: { out: string }): Promise<void> {
  if (existsSync(o.out)) throw new UsageError(`${o.out} exists; refusing to overwrite a key`)
  const [{ generateIdentity, writeIdentity }, { toHex }] = await Promise.all([import('./config.ts'), import('@stead/core')])
  const id = generateIdentity()
  try {
    writeIdentity(o.out, id)
  } catch (err) {
    const { ConfigError, fileProblem } = await import('./config.ts')
    const fix = 'give --out a path in a directory that exists and this user can write'
    const problem = (err as NodeJS.ErrnoException).code === 'ENOENT' ? `--out ${o.out}: its directory does not exist; ${fix}` : fileProblem(err, '--out', o.out, fix)
    throw problem ? new ConfigError(problem) : err
  }
  console.log(`wrote ${o.out}\npublicKey ${toHex(id.publicKey)}`)
}

/** The command being run, for messages about it. */
let running = 'stead-relay'

function buildProgram(): Command {
  const program = reporting(new Command('stead-relay'), 'stead-relay')
    .description('A Stead relay: one of a cluster of N = 3f+1 relays that order, audit and serve client updates (up to f may be Byzantine).')
    .version(RELAY_VERSION, '-v, --version', 'print the version')
    .helpOption('-h, --help', 'show help')
    .showSuggestionAfterError(true)
    .addHelpText('after', '\nRun `stead-relay <command> --help` for a command\'s options. Operating a cluster: relay/README.md.')
    .hook('preAction', (_program, action) => {
      running = `stead-relay ${action.name()}`
    })

  const command = (name: string): Command => reporting(program.command(name), `stead-relay ${name}`)

  command('keygen')
    .description('Write a new Ed25519 key (mode 0600) and print its public key.')
    .option('--out <file>', 'where to write the key', 'key.json')
    .action(keygen)

  command('init')
    .description('Write the keys and cluster file of a new cluster: <out>/cluster.json and <out>/rN/key.json (mode 0600) for every relay.')
    .option('--host <ip[,ip...]>', 'the IPv4 address of every relay (one) or of each relay (one per relay, in order; repeats share a machine); required', commaList)
    .addOption(new Option('--relays <n>', 'how many relays (N = 3f+1 tolerates f Byzantine ones)').argParser(wholeNumber(4, 1000, '', 'at least 4 (N = 3f+1 with f >= 1)')).default(4))
    .addOption(new Option('--base-port <port>', 'HTTP port of the first relay on a machine; the next ones take the next ports, the mesh ports are 100 above').argParser(wholeNumber(1, 65_435)).default(7401))
    .option('--out <dir>', 'where to write the files', 'stead-cluster')
    .option('--space <name>', 'a space the cluster serves (repeatable); spaces get writers and readers in the file', repeatable)
    .option('--open-spaces', 'let any signed client create spaces (default: only the listed spaces exist)')
    .option('--peers', 'give each relay a "peers" address (HTTP port + 200, WebSocket) where it helps browsers sync peer to peer')
    .addHelpText(
      'after',
      `
Nothing is overwritten. Settle the spaces' policies (writers, readers, openSpaces) in
cluster.json before the first start: a relay binds its data dir to them.

Examples:
  stead-relay init --relays 4 --host 127.0.0.1 --space bank           # one machine, ports 7401-7404
  stead-relay init --relays 4 --host 10.0.0.1,10.0.0.2,10.0.0.3,10.0.0.4 --space bank`,
    )
    .action(async (o: { host?: string[]; relays: number; basePort: number; out: string; space?: string[]; openSpaces?: boolean; peers?: boolean }) => {
      if (!o.host) throw new UsageError('needs --host: the address of every relay, or of each relay')
      const { describeInit, initCluster } = await import('./init.ts')
      const result = initCluster({ relays: o.relays, hosts: o.host, basePort: o.basePort, out: o.out, spaces: o.space ?? [], openSpaces: o.openSpaces === true, peers: o.peers === true })
      console.log(describeInit(result))
    })

  const startCmd = command('start')
    .description('Run one relay of a cluster.')
    // Checked in start(), not as required options: commander would name a missing one before a misspelt one.
    .option('--config <file>', 'the cluster file (the same on every relay); required')
    .option('--id <name>', "this relay's id in the cluster file, e.g. r1; required")
    .option('--data <dir>', 'its data dir (mode 0700, locked while it runs, bound to the cluster); required')
    .option('--key <file>', 'its key file (default: <data>/key.json)')
    .option('--next-key <file>', "a key a committee change will give this relay (a rotation, repeatable): from the epoch whose committee lists it, the relay runs with it", repeatable)
    .option('--join <url>', 'a relay a committee change added: the API (http://host:port) of a relay of the cluster, to take the epoch certificates since the cluster file from')
    .addOption(new Option('--leave-grace-ms <ms>', "how long a relay a committee change left out keeps serving the old epoch (its certificate, for relays that missed it, and reads) before it exits (default 15000: 1.5 times the 10 s epoch poll)").argParser(wholeNumber(0, 3_600_000, 'ms')))
    .option('--tls-cert <file>', 'serve HTTPS and WSS with this certificate (PEM), with --tls-key')
    .option('--tls-key <file>', 'the private key (PEM) of --tls-cert')
    .addOption(new Option('--memory-budget-mb <mib>', 'bytes held for clients: queued envelopes, send buffers, verification cache (default 512)').argParser(wholeNumber(16, 1024 * 1024, 'MiB')))
    .addOption(new Option('--snapshot-every <batches>', 'snapshot the spaces\' audit state after this many committed batches, or a minute after the last (default 1000): what a restart replays at most').argParser(wholeNumber(1, 1_000_000, 'batches')))
    .addOption(new Option('--retain-rounds <rounds>', 'consensus rounds of blocks kept for relays that fell behind (default 20000); older ones are deleted at each snapshot').argParser(wholeNumber(200, 1_000_000_000, 'rounds')))
    .addOption(new Option('--peer-queue-frames <n>', 'frames held for a relay this one cannot reach, sent when it is back (default 100000; at most 64 MiB): a relay that missed more asks for blocks, or installs a checkpoint').argParser(wholeNumber(1, 100_000_000, 'frames')))
    .addOption(new Option('--retain-updates <n>', 'per space, stable indexes of commits kept for clients resuming (default 1000000); a client further behind starts from a verified snapshot').argParser(wholeNumber(1, 1_000_000_000_000, 'updates')))
    .option('--clock-validator <module>', "Chrono's application validator: a JavaScript module whose default export is (space) => ((author, clock, envelope) => { ok: true } | { ok: false, reason, detail }) | undefined; this relay votes for no clock it refuses (every relay of the cluster must load the same module)")
    .option('--limit <name=value>', 'set a client API or mesh limit (repeatable), e.g. --limit maxSessionsPerKey=8 or --limit mesh.unrequestedBlocks.perSecond=400; names and defaults: relay/README.md', repeatable)
    .addOption(new Option('--byzantine <modes>', 'misbehave on purpose, for tests and demos only: one mode towards relays and any towards clients, comma-separated (relay/README.md lists them)').argParser(byzantineModes))
  for (const option of timingOptions()) startCmd.addOption(option)
  startCmd
    .addOption(logLevelOption())
    .addHelpText(
      'after',
      `
Logs are JSON lines on stdout. GET /health answers while the relay runs; GET /ready
answers 200 once it has 2f peers, is caught up and commits (503 with the reasons otherwise).

Example:
  stead-relay start --config cluster.json --id r1 --data ./data/r1`,
    )
    .action(start)

  const committee = command('committee').description(
    'Change the committee of relays (add, remove or replace a relay, rotate a key, change f): 2f+1 operators of the current relays back the same committee, and it takes over at the commit that decides it.',
  )
  const sub = (name: string): Command => reporting(committee.command(name), `stead-relay committee ${name}`)
  const target = (c: Command): Command =>
    c.option('--url <url>', "a relay's API, http://host:port (default: this relay's, from --config and --id)").option('--config <file>', 'the cluster file').option('--id <name>', "this relay's id in it").option('--key <file>', "this relay's key file (default: <data>/key.json)").option('--data <dir>', "this relay's data dir")
  sub('status')
    .description("Show the relay's epoch, the proposals for the next committee with their backers, and a decided change.")
    .option('--url <url>', "a relay's API, http://host:port; required")
    .option('--json', 'print the status as JSON')
    .action(async (o: { url?: string; json?: boolean }) => {
      if (!o.url) throw new UsageError('needs --url: the API of a relay of the cluster')
      const { committeeStatus, describeStatus } = await import('./committee.ts')
      const status = await committeeStatus(o.url)
      console.log(o.json ? JSON.stringify({ relay: status.relay, epoch: status.epoch, epochStartRound: status.epochStartRound, committeeChange: status.committeeChange }, null, 2) : describeStatus(status))
    })
  target(sub('propose'))
    .description('Back a new committee, written as a cluster file (its f and relays; the rest is ignored), for the next epoch with this relay\'s key.')
    .argument('<committee-file>', 'the cluster file of the next committee')
    .action(async (file: string, o: OperatorOptions) => {
      const { backCommittee, committeeOfFile, describeStatus } = await import('./committee.ts')
      const { url, identity } = await operator(o)
      const { id, status } = await backCommittee(url, identity, committeeOfFile(file))
      console.log(`backed proposal ${id}\n${describeStatus(status)}`)
    })
  target(sub('approve'))
    .description('Back a proposal another operator made (its id, from `stead-relay committee status`) with this relay\'s key.')
    .argument('<proposal-id>', 'the proposal to back')
    .action(async (proposal: string, o: OperatorOptions) => {
      const { backCommittee, describeStatus, proposalOf } = await import('./committee.ts')
      const { url, identity } = await operator(o)
      const { id, status } = await backCommittee(url, identity, await proposalOf(url, proposal))
      console.log(`backed proposal ${id}\n${describeStatus(status)}`)
    })

  const devCmd = command('dev')
    .description('Run a whole cluster on loopback for development: keys, cluster.json ("openSpaces": true) and data under --dir, one process per relay, readable logs.')
    .addOption(new Option('--relays <n>', 'how many relays').argParser(wholeNumber(4, 100, '', 'at least 4 (N = 3f+1 with f >= 1)')).default(4))
    .addOption(new Option('--base-port <port>', 'relay i serves HTTP and WebSocket at 127.0.0.1:<base-port + i - 1>; mesh ports are 100 above').argParser(wholeNumber(1, 65_435)).default(7401))
    .addOption(new Option('--byzantine <count>', 'run the last <count> relays (at most f) in --byzantine-mode').argParser(wholeNumber(0, 1000)).default(0))
    .addOption(new Option('--byzantine-mode <modes>', 'how the Byzantine relays misbehave, as for start --byzantine').argParser((v) => (byzantineModes(v), v)).default('equivocate'))
    .option('--dir <dir>', 'where keys, cluster file and data live between runs', '.stead/dev')
    .option('--fresh', 'start over: new keys, empty data')
  for (const option of timingOptions()) devCmd.addOption(option)
  devCmd.addOption(logLevelOption()).action((o: { relays: number; basePort: number; byzantine: number; byzantineMode: string; dir: string; fresh?: boolean; leaderTimeoutMs?: number; paceMs?: number; logLevel: LogLevel }) =>
    import('./dev.ts').then(({ runDev }) => runDev({ ...o, fresh: o.fresh === true, ...timings(o) })),
  )

  return program
}

/**
 * Commander's "error: unknown option '--x'\n(Did you mean --y?)" as one line
 * naming the command; "option '--relays <n>' argument '2' is invalid. why" as
 * "--relays 2: why".
 */
function usageLine(message: string, command: string): string {
  const text = message
    .replace(/^error: /, '')
    .replace(/\n\(Did you mean (.+)\?\)/, ' (did you mean $1?)')
    .replace(/\s*\n\s*/g, ' ')
    .replace(/^option '(-[\w-]+)[^']*' argument '([^']*)' is invalid\.\s*(.*)$/, (_, flag: string, value: string, why: string) => `${flag} ${value}: ${why.charAt(0).toLowerCase()}${why.slice(1)}`)
    .replace(/^option '[^']*' value '([^']*)' from env '(\w+)' is invalid\.\s*(.*)$/, (_, value: string, name: string, why: string) => `${name}=${value}: ${why.charAt(0).toLowerCase()}${why.slice(1)}`)
    .replace(/^option '(-[\w-]+)[^']*' argument missing$/, '$1 needs a value')
    .trim()
  return `${command}: ${text}`
}

async function main(argv: string[]): Promise<void> {
  // `LOG_LEVEL=` (an env file or unit with the value left out) means the default, not a level named "".
  if (process.env.LOG_LEVEL === '') delete process.env.LOG_LEVEL
  const program = buildProgram()
  if (argv.length === 0) {
    program.outputHelp()
    return
  }
  try {
    await program.parseAsync(argv, { from: 'user' })
  } catch (err) {
    if (err instanceof CommandLineExit) {
      // --help and --version end here too, having printed what was asked.
      if (err.exitCode === 0) process.exit(0)
      console.error(`${usageLine(err.message, err.command)}\nRun '${err.command} --help' for the options.`)
      process.exit(2)
    }
    if (err instanceof UsageError) {
      console.error(`${running}: ${err.message}\nRun '${running} --help' for the options.`)
      process.exit(2)
    }
    // Typed errors explain themselves; a stack trace would bury the reason.
    const [{ ConfigError }, { SteadError }] = await Promise.all([import('./config.ts'), import('@stead/core')])
    if (err instanceof ConfigError || err instanceof SteadError) {
      console.error(`stead-relay: ${err.message}`)
      process.exit(2)
    }
    throw err
  }
}

main(process.argv.slice(2)).catch((err: unknown) => {
  console.error(err)
  process.exit(1)
})
