/**
 * The operator's view of stead-relay, with real processes: help, version and
 * usage errors of the CLI; a port in use; `init` and then `start` on what it
 * wrote; /ready following the cluster as relays go down and come back; the
 * shutdown log line.
 */
import { spawn } from 'node:child_process'
import { mkdtempSync, readFileSync } from 'node:fs'
import { createServer, type Server } from 'node:net'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { TestCluster, freePort, stopRelays, until, waitHealthy, type RelayProcess } from './helpers/cluster.ts'

const BIN = resolve(import.meta.dirname, '../bin/stead-relay.mjs')
const VERSION = (JSON.parse(readFileSync(resolve(import.meta.dirname, '../package.json'), 'utf8')) as { version: string }).version
/** A line of a stack trace, as Node prints them. */
const STACK = /^\s+at .+:\d+:\d+\)?$/m

function run(args: string[], env: Record<string, string> = {}): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((done) => {
    const child = spawn(process.execPath, [BIN, ...args], { env: { ...process.env, LOG_LEVEL: '', ...env }, stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()))
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()))
    child.on('close', (code) => done({ code, stdout, stderr }))
  })
}

type Ready = { ready: boolean; relay: string; reasons: Array<{ reason: string; detail: string }>; peers: { connected: string[]; needed: number } }
async function ready(api: string): Promise<{ status: number; body: Ready }> {
  const res = await fetch(`http://${api}/ready`)
  return { status: res.status, body: (await res.json()) as Ready }
}

describe('stead-relay command line', () => {
  it('prints help for every command, and the version', async () => {
    const [top, keygen, init, start, dev, help, version] = await Promise.all([
      run(['--help']),
      run(['keygen', '--help']),
      run(['init', '--help']),
      run(['start', '--help']),
      run(['dev', '-h']),
      run(['help', 'start']),
      run(['--version']),
    ])
    for (const r of [top, keygen, init, start, dev, help, version]) {
      expect(r.code).toBe(0)
      expect(r.stderr).toBe('')
    }
    expect(top.stdout).toMatch(/^Usage: stead-relay \[options\] \[command\]/)
    for (const command of ['keygen', 'init', 'start', 'dev']) expect(top.stdout).toMatch(new RegExp(`^  ${command} `, 'm'))
    expect(keygen.stdout).toContain('--out <file>')
    for (const flag of ['--relays <n>', '--host <ip[,ip...]>', '--base-port <port>', '--out <dir>', '--space <name>', '--open-spaces']) expect(init.stdout).toContain(flag)
    for (const flag of ['--config', '--id', '--data', '--key', '--byzantine', '--tls-cert', '--tls-key', '--leader-timeout-ms', '--pace-ms', '--memory-budget-mb', '--limit', '--log-level']) {
      expect(start.stdout).toContain(`${flag} <`)
    }
    expect(start.stdout).toMatch(/env:\s+LOG_LEVEL/)
    for (const flag of ['--relays', '--base-port', '--byzantine', '--byzantine-mode', '--dir', '--fresh', '--leader-timeout-ms', '--pace-ms', '--log-level']) expect(dev.stdout).toContain(flag)
    expect(help.stdout).toBe(start.stdout)
    expect(version.stdout).toBe(`${VERSION}\n`)
  })

  it('answers a misspelt option, command or value with one line and a pointer to --help (exit 2), never a stack', async () => {
    const cases: Array<[string[], Record<string, string>, string]> = [
      [['start', '--confg', 'c.json'], {}, "stead-relay start: unknown option '--confg' (did you mean --config?)"],
      [['dev', '--fressh'], {}, "stead-relay dev: unknown option '--fressh' (did you mean --fresh?)"],
      [['init', '--hosts', '127.0.0.1'], {}, "stead-relay init: unknown option '--hosts' (did you mean --host?)"],
      [['strat'], {}, "stead-relay: unknown command 'strat' (did you mean start?)"],
      [['start', '--config', 'c.json'], {}, 'stead-relay start: needs --config, --id and --data'],
      [['dev', '--relays', '3'], {}, 'stead-relay dev: --relays 3: must be at least 4 (N = 3f+1 with f >= 1)'],
      [['dev', '--byzantine', '2'], {}, 'stead-relay dev: --byzantine must be between 0 and f = 1'],
      [['start', '--config', 'c', '--id', 'r1', '--data', 'd', '--limit', 'maxSesionsPerKey=8'], {}, 'stead-relay start: --limit maxSesionsPerKey=8: unknown limit maxSesionsPerKey (limits: '],
      [['start', '--config', 'c', '--id', 'r1', '--data', 'd', '--byzantine', 'evil'], {}, 'stead-relay start: --byzantine evil: has unknown mode evil; towards relays: equivocate, '],
      [['start', '--config', 'c', '--id', 'r1', '--data', 'd', '--log-level', 'loud'], {}, 'stead-relay start: --log-level loud: allowed choices are trace, debug, info, warn, error, fatal, silent.'],
      [['start', '--config', 'c', '--id', 'r1', '--data', 'd'], { LOG_LEVEL: 'loud' }, 'stead-relay start: LOG_LEVEL=loud: allowed choices are trace, '],
      [['start', '--config', 'c', '--id', 'r1', '--data', 'd', '--tls-cert', 'x.pem'], {}, 'stead-relay start: --tls-cert and --tls-key go together'],
      [['start', '--config', 'c', '--id', 'r1', '--data', 'd', '--pace-ms', '-5'], {}, 'stead-relay start: --pace-ms -5: must be a whole number of milliseconds from 0 to 10000'],
      [['dev', '--pace-ms', '0.5'], {}, 'stead-relay dev: --pace-ms 0.5: must be a whole number of milliseconds from 0 to 10000'],
    ]
    const results = await Promise.all(cases.map(([args, env]) => run(args, env)))
    results.forEach((r, i) => {
      const [args, , first] = cases[i]!
      const command = args[0] === 'strat' ? 'stead-relay' : `stead-relay ${args[0]}`
      expect(r.code, args.join(' ')).toBe(2)
      expect(r.stdout).toBe('')
      const lines = r.stderr.trimEnd().split('\n')
      expect(lines, args.join(' ')).toHaveLength(2)
      expect(lines[0]!.startsWith(first), `${lines[0]} starts with ${first}`).toBe(true)
      expect(lines[1]).toBe(`Run '${command} --help' for the options.`)
      expect(r.stderr).not.toMatch(STACK)
    })
  })

  it('`dev` names a port in use before starting any relay', async () => {
    const { port, server } = await holdPort()
    // The held port is r1's mesh port: only r1's HTTP port is probed before it.
    const base = port - 100
    try {
      const r = await run(['dev', '--base-port', String(base), '--dir', join(mkdtempSync(join(tmpdir(), 'stead-cli-')), 'dev')])
      expect(r.code).toBe(2)
      expect(r.stderr.trim()).toBe(
        `stead-relay: port ${port} (the mesh of r1, 127.0.0.1:${port}) is in use by another process: stop it (find it with: ss -ltnp 'sport = :${port}'), or change --base-port (or stop the other stead-relay dev)`,
      )
    } finally {
      server.close()
    }
  })
})

/** Listens on a free loopback port (the OS picks it) until closed. */
function holdPort(): Promise<{ port: number; server: Server }> {
  return new Promise((ok, fail) => {
    const server = createServer()
    server.once('error', fail)
    server.listen(0, '127.0.0.1', () => ok({ port: (server.address() as { port: number }).port, server }))
  })
}

describe('init, then start on what it wrote', () => {
  const relays: RelayProcess[] = []
  afterAll(() => stopRelays(relays, 5000))

  it('starts a relay that names itself r1, is live but not ready alone, logs requests only at debug, and logs its shutdown', async () => {
    const out = join(mkdtempSync(join(tmpdir(), 'stead-cli-')), 'cluster')
    const base = await freePort()
    const init = await run(['init', '--relays', '4', '--host', '127.0.0.1', '--base-port', String(base), '--out', out, '--space', 'bank'])
    expect(init.stderr).toBe('')
    expect(init.code).toBe(0)
    expect(init.stdout).toContain(`wrote ${join(out, 'cluster.json')}: 4 relays, f = 1, openSpaces false, spaces: bank`)
    expect(init.stdout).toContain(`stead-relay start --config ${join(out, 'cluster.json')} --id r1 --data ${join(out, 'r1')}`)
    // A second init on the same files is refused, and changes nothing.
    const again = await run(['init', '--relays', '4', '--host', '127.0.0.1', '--out', out])
    expect(again.code).toBe(2)
    expect(again.stderr).toMatch(/^stead-relay init: refusing to overwrite /)

    // The start command init printed, as an operator would paste it, with LOG_LEVEL=debug.
    const command = (/^ {2}stead-relay (start .* --id r1 .*)$/m.exec(init.stdout)?.[1] ?? '').split(' ')
    const r: RelayProcess = { id: 'r1', api: `127.0.0.1:${base}`, process: null, log: '' }
    r.process = spawn(process.execPath, [BIN, ...command], { env: { ...process.env, LOG_LEVEL: 'debug' }, stdio: ['ignore', 'pipe', 'pipe'] })
    r.process.stdout?.on('data', (d: Buffer) => (r.log += d.toString()))
    r.process.stderr?.on('data', (d: Buffer) => (r.log += d.toString()))
    relays.push(r)
    await waitHealthy(r, 60_000)
    expect(await (await fetch(`http://${r.api}/health`)).json()).toEqual({ ok: true, relay: 'r1' })
    const alone = await ready(r.api)
    expect(alone.status).toBe(503)
    expect(alone.body).toMatchObject({ ready: false, relay: 'r1', peers: { connected: [], needed: 2 } })
    expect(alone.body.reasons).toEqual([{ reason: 'peers', detail: 'connected to 0 of 3 peers; a quorum needs 2 (2f, f = 1)' }])
    expect(((await (await fetch(`http://${r.api}/v1/status`)).json()) as { relay: string }).relay).toBe('r1')
    await until('the request log line', () => (/"level":20,.*"url":"\/v1\/status".*"msg":"http request"/.test(r.log) ? true : undefined), 5000)
    for (const line of r.log.split('\n').filter((l) => l.startsWith('{'))) expect((JSON.parse(line) as { relay?: string }).relay).toBe('r1')

    // 'close', not 'exit': the last log lines may still be in the pipe when the process has exited.
    const exited = new Promise<number | null>((done) => r.process?.once('close', (code) => done(code)))
    r.process.kill('SIGTERM')
    expect(await exited).toBe(0)
    const last = JSON.parse(r.log.trim().split('\n').at(-1) ?? '{}') as { msg?: string; signal?: string; closed?: string[]; relay?: string }
    expect(last).toMatchObject({ msg: 'relay stopped', signal: 'SIGTERM', relay: 'r1' })
    expect(last.closed).toEqual([`client API on 127.0.0.1:${base} (0 sessions)`, `mesh on /ip4/127.0.0.1/tcp/${base + 100}`, `store in ${join(out, 'r1')}`, 'data dir lock'])
    expect(r.log).not.toMatch(STACK)
  }, 90_000)

  it('a port in use stops start with one line naming it (exit 2)', async () => {
    const out = join(mkdtempSync(join(tmpdir(), 'stead-cli-')), 'cluster')
    // Held from the start, so nothing else can take it meanwhile: r1's HTTP port.
    const { port: base, server } = await holdPort()
    try {
      expect((await run(['init', '--relays', '4', '--host', '127.0.0.1', '--base-port', String(base), '--out', out])).code).toBe(0)
      const r = await run(['start', '--config', join(out, 'cluster.json'), '--id', 'r1', '--data', join(out, 'r1')])
      expect(r.code).toBe(2)
      expect(r.stderr.trim()).toBe(
        `stead-relay: port ${base} (the HTTP API of r1, 127.0.0.1:${base}) is in use by another process: stop it (find it with: ss -ltnp 'sport = :${base}'), or change r1's "api" in the cluster file (on every relay)`,
      )
    } finally {
      server.close()
    }
  }, 60_000)
})

describe('a relay whose log reader fails it', () => {
  let cluster: TestCluster | undefined
  const started: RelayProcess[] = []
  afterAll(async () => {
    await stopRelays(started, 1000)
    await cluster?.stopAll()
  })

  // Its launcher killed (the pipe's other end gone) or a pipe nobody drains: pino's own stdout flushed
  // synchronously on exit, retrying for ever, and the relay never ended after SIGTERM.
  it.for(['stops reading', 'is gone'] as const)('still stops on SIGTERM when the reader of its log %s', { timeout: 60_000 }, async (fault) => {
    cluster ??= await TestCluster.create(4)
    const i = fault === 'stops reading' ? 0 : 1
    const t = cluster.relays[i] as (typeof cluster.relays)[number]
    const r: RelayProcess = { id: t.id, api: t.api, process: null, log: '' }
    // Nothing reads its stdout: the pipe fills once the first few hundred kB are out.
    r.process = spawn(process.execPath, [BIN, 'start', '--config', cluster.clusterPath, '--id', t.id, '--data', t.data, '--log-level', 'debug'], { stdio: ['ignore', 'pipe', 'ignore'] })
    started.push(r)
    await waitHealthy(r, 60_000)
    if (fault === 'is gone') r.process.stdout?.destroy()
    // Every request logs a line at debug: about a MB of them.
    for (let k = 0; k < 40; k++) await Promise.all(Array.from({ length: 100 }, () => fetch(`http://${r.api}/v1/status`).then((res) => res.arrayBuffer())))
    const exited = new Promise<number | null>((done) => r.process?.once('exit', (code) => done(code)))
    const t0 = Date.now()
    r.process.kill('SIGTERM')
    expect(await exited).toBe(0)
    // It waits a few seconds at most for a log reader that does not read.
    expect(Date.now() - t0).toBeLessThan(12_000)
  })
})

describe('/ready follows the cluster', () => {
  let cluster: TestCluster
  afterAll(async () => cluster?.stopAll())

  it('is 200 with the cluster up, 503 naming the peers with two of four relays down, and 200 again when one comes back', async () => {
    cluster = await TestCluster.create(4)
    await cluster.startAll()
    const api = (i: number) => cluster.relays[i]!.api
    await until('every relay to be ready', async () => ((await Promise.all([0, 1, 2, 3].map((i) => ready(api(i))))).every((r) => r.status === 200) ? true : undefined), 60_000)
    // Ready needs 2 of 3 peers: the third may still be dialling.
    const up = await until('r1 to reach all three peers', async () => {
      const r = await ready(api(0))
      return r.body.peers?.connected?.length === 3 ? r : undefined
    })
    expect(up.body).toMatchObject({ ready: true, relay: 'r1', reasons: [], peers: { connected: ['r2', 'r3', 'r4'], needed: 2 } })

    cluster.kill(2)
    cluster.kill(3)
    const down = await until('r1 to notice', async () => {
      const r = await ready(api(0))
      return r.status === 503 ? r : undefined
    })
    expect(down.body.ready).toBe(false)
    expect(down.body.reasons).toEqual([{ reason: 'peers', detail: 'connected to 1 of 3 peers; a quorum needs 2 (2f, f = 1)' }])
    expect(down.body.peers.connected).toEqual(['r2'])
    // Liveness is another question: r1 still serves.
    expect((await fetch(`http://${api(0)}/health`)).status).toBe(200)
    const metrics = await (await fetch(`http://${api(0)}/metrics`)).text()
    expect(metrics).toMatch(/^stead_ready 0$/m)
    expect(metrics).toMatch(/^stead_peers_connected 1$/m)
    expect(metrics).toMatch(/^stead_peer_connected\{peer="r4"\} 0$/m)

    cluster.start(2)
    await cluster.waitHealthy(2)
    const back = await until('r1 to be ready again', async () => {
      const r = await ready(api(0))
      return r.status === 200 ? r : undefined
    })
    expect(back.body.peers.connected).toEqual(['r2', 'r3'])
    // At info, no relay logged a line per request.
    for (const r of cluster.relays) expect(r.log).not.toContain('"msg":"http request"')
  }, 120_000)
})
