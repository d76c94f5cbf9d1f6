/**
 * Every mistake an operator can make at stead-relay's command line, in a
 * cluster file, a key file or a data dir, run through the real CLI: each ends
 * in exit 2 (systemd's unit does not restart on 2) and one line naming the
 * input, what is wrong and the fix, never a stack trace. Then a second
 * `stead-relay dev` on a dir another one runs on: refused, naming --dir, and
 * the first keeps running.
 *
 * STEAD_RELAY_BIN runs the table against another build of the CLI (e.g. an
 * older checkout), to see which rows it fails.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import { createServer, type Server } from 'node:net'
import { hostname, tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { afterAll, beforeAll, describe, expect, it, type ExpectStatic } from 'vitest'
import { LOCK_FILE } from '../src/process/datadir.ts'
import { initCluster } from '../src/process/init.ts'
import { freePort, until } from './helpers/cluster.ts'

const BIN = process.env.STEAD_RELAY_BIN ?? resolve(import.meta.dirname, '../bin/stead-relay.mjs')
/** A line of a stack trace, as Node prints them. */
const STACK = /^\s+at /m
/** A row whose process is still running after this is a hang: killed, and reported as such. */
const ROW_TIMEOUT_MS = 20_000

interface Run {
  code: number | null
  stdout: string
  stderr: string
}

function run(args: string[], cwd?: string): Promise<Run> {
  return new Promise((done) => {
    const child = spawn(process.execPath, [BIN, ...args], { cwd, env: { ...process.env, LOG_LEVEL: 'silent' }, stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()))
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()))
    const timer = setTimeout(() => child.kill('SIGKILL'), ROW_TIMEOUT_MS)
    child.on('close', (code) => {
      clearTimeout(timer)
      done({ code, stdout, stderr })
    })
  })
}

/** Listens on a free loopback port (the OS picks it) until closed. */
function holdPort(): Promise<{ port: number; server: Server }> {
  return new Promise((ok, fail) => {
    const server = createServer()
    server.once('error', fail)
    server.listen(0, '127.0.0.1', () => ok({ port: (server.address() as { port: number }).port, server }))
  })
}

type ClusterJson = { f?: number; relays: Array<Record<string, string>>; [k: string]: unknown }

describe('operator mistakes: exit 2 and one line naming the input and the fix', () => {
  const root = mkdtempSync(join(tmpdir(), 'stead-errors-'))
  const out = join(root, 'cluster')
  const held: Server[] = []
  let good: ClusterJson
  let heldPort = 0
  /** A cluster file like the good one, changed by `edit`, written under a name. */
  const variant = (name: string, edit: (c: ClusterJson) => void): string => {
    const c = structuredClone(good)
    edit(c)
    const path = join(root, name)
    writeFileSync(path, JSON.stringify(c, null, 2))
    return path
  }
  /** A data dir of its own for one row (rows run side by side, and a relay that gets far enough locks its dir), with the relay's key when init wrote one. */
  const dataOf = (id: string): string => {
    const data = mkdtempSync(join(root, `data-${id}-`))
    if (existsSync(join(out, id, 'key.json'))) copyFileSync(join(out, id, 'key.json'), join(data, 'key.json'))
    return data
  }
  const start = (config: string, more: string[] = [], id = 'r1', data = dataOf(id)): string[] => ['start', '--config', config, '--id', id, '--data', data, ...more]

  beforeAll(async () => {
    const base = await freePort()
    initCluster({ relays: 4, hosts: ['127.0.0.1'], basePort: base, out, spaces: ['bank'] })
    good = JSON.parse(readFileSync(join(out, 'cluster.json'), 'utf8')) as ClusterJson
    const h = await holdPort()
    held.push(h.server)
    heldPort = h.port
  })
  afterAll(() => {
    for (const s of held) s.close()
  })

  // [what, command line (built once the cluster exists), pattern the one line must match]
  const rows: Array<[string, () => string[], RegExp]> = [
    // The cluster file itself.
    ['no cluster file', () => start(join(root, 'nope.json')), /cluster file \S*nope\.json does not exist; give --config the cluster\.json that `stead-relay init` wrote$/],
    ['a directory as the cluster file', () => start(out), /cluster file \S*cluster is a directory, not a file; give --config/],
    ['a cluster file that is not JSON', () => (writeFileSync(join(root, 'broken.json'), '{"f": 1,'), start(join(root, 'broken.json'))), /cluster file \S*broken\.json is not valid JSON \(.+\); fix the file, or give --config/],
    ['an empty cluster file', () => (writeFileSync(join(root, 'empty.json'), ''), start(join(root, 'empty.json'))), /cluster file \S*empty\.json is empty; give --config/],
    ['a misspelt key', () => start(variant('typo.json', (c) => ((c.relay = c.relays), delete (c as Partial<ClusterJson>).relays))), /typo\.json: unknown key "relay" at top level; did you mean "relays"\?$/],
    // Addresses in the cluster file.
    ['an API port of 99999', () => start(variant('port.json', (c) => (c.relays[0]!.api = '127.0.0.1:99999'))), /port\.json: relays\[0\]\.api has port 99999; a port is a whole number from 1 to 65535, e.g\. 127\.0\.0\.1:7401$/],
    ['an API port of 0', () => start(variant('port0.json', (c) => (c.relays[0]!.api = '127.0.0.1:0'))), /port0\.json: relays\[0\]\.api has port 0; a port is a whole number from 1 to 65535/],
    ['a mesh port of 99999', () => start(variant('meshport.json', (c) => (c.relays[0]!.mesh = '/ip4/127.0.0.1/tcp/99999'))), /meshport\.json: relays\[0\]\.mesh has port 99999; a port is a whole number from 1 to 65535, e\.g\. \/ip4\/127\.0\.0\.1\/tcp\/7501$/],
    ['a mesh address that is no IP', () => start(variant('meship.json', (c) => (c.relays[0]!.mesh = '/ip4/999.1.1.1/tcp/7501'))), /meship\.json: relays\[0\]\.mesh has 999\.1\.1\.1, which is not an IPv4 address; write the relay's address/],
    ['a peers address without /ws', () => start(variant('peers.json', (c) => (c.relays[0]!.peers = '/ip4/127.0.0.1/tcp/7601'))), /peers\.json: relays\[0\]\.peers must look like \/ip4\/127\.0\.0\.1\/tcp\/7601\/ws, got \/ip4\/127\.0\.0\.1\/tcp\/7601$/],
    ['an API address with a scheme', () => start(variant('scheme.json', (c) => (c.relays[0]!.api = `ws://${c.relays[0]!.api}`))), /scheme\.json: relays\[0\]\.api must be host:port without a scheme \(clients add ws:\/\/ or wss:\/\/\), e\.g\. 127\.0\.0\.1:7401, got ws:\/\//],
    // The committee.
    ['f too large for N', () => start(variant('f2.json', (c) => (c.f = 2))), /f2\.json: 4 relays cannot tolerate f = 2: N must be exactly 3f\+1; set "f" to 1 \(or remove it\), or list 7 relays$/],
    ['N not 3f+1', () => start(variant('five.json', (c) => c.relays.push({ ...c.relays[0]!, id: 'r5', api: '127.0.0.1:1', mesh: '/ip4/127.0.0.1/tcp/1' }))), /five\.json: 5 relays with f = 1: N must be exactly 3f\+1 .*; list 4, 7, 10, \.\.\. relays/],
    ['two relays with one id', () => start(variant('dupid.json', (c) => (c.relays[1]!.id = 'r1'))), /dupid\.json: relay ids must be distinct: relays\[0\] and relays\[1\] both have id r1; give each relay its own$/],
    ['two relays with one key', () => start(variant('dupkey.json', (c) => (c.relays[3]!.publicKey = c.relays[0]!.publicKey!))), /dupkey\.json: relay keys must be distinct: relays\[0\] and relays\[3\] both have publicKey [0-9a-f]{16}…; give each relay its own$/],
    ['a key that is not hex', () => start(variant('hex.json', (c) => (c.relays[0]!.publicKey = `zz${c.relays[0]!.publicKey!.slice(2)}`))), /hex\.json: relays\[0\]\.publicKey is not hex; write the relay's public key as `stead-relay keygen` or `init` printed it/],
    ['a key too short', () => start(variant('short.json', (c) => (c.relays[0]!.publicKey = 'abcd'))), /short\.json: relays\[0\]\.publicKey must be 32 bytes \(64 hex digits\), got 2 bytes; write the relay's whole public key/],
    // Id, key file, data dir.
    ['an id not in the cluster file', () => start(join(out, 'cluster.json'), [], 'r9'), /--id r9: \S*cluster\.json has no relay r9; give one of its ids: r1, r2, r3, r4 \(a relay a committee change added starts with --join <the API of a relay of the cluster>\)$/],
    ['another relay\'s key', () => start(join(out, 'cluster.json'), ['--key', join(out, 'r2', 'key.json')]), /key file \S*r2\/key\.json is not relay r1's: its public key is r2's in \S*cluster\.json; give r1's own key with --key \(or in <data>\/key\.json\), or start it as --id r2$/],
    ['a next key that is another relay\'s', () => start(join(out, 'cluster.json'), ['--key', join(out, 'r1', 'key.json'), '--next-key', join(out, 'r2', 'key.json')]), /--next-key \S*r2\/key\.json is relay r2's key: a rotation gives this relay a key of its own \(stead-relay keygen\)$/],
    ['a next key file that is not one', () => start(join(out, 'cluster.json'), ['--key', join(out, 'r1', 'key.json'), '--next-key', join(out, 'cluster.json')]), /--next-key \S*cluster\.json: key file \S*cluster\.json has no "secretKey" of 64 hex digits; is it a key file written by `stead-relay keygen` or `init`\?.*; give a key file `stead-relay keygen` wrote for this relay's rotation$/],
    ['no key file', () => start(join(out, 'cluster.json'), ['--key', join(root, 'nokey.json')]), /key file \S*nokey\.json does not exist; give the relay's key file with --key, or put it at <data>\/key\.json/],
    ['a key file that is not one', () => start(join(out, 'cluster.json'), ['--key', join(out, 'cluster.json')]), /key file \S*cluster\.json has no "secretKey" of 64 hex digits; is it a key file written by `stead-relay keygen` or `init`\? Give the relay's key file with --key/],
    ['a data dir that is a file', () => start(join(out, 'cluster.json'), ['--key', join(out, 'r1', 'key.json')], 'r1', join(out, 'cluster.json', 'sub')), /data dir \S*cluster\.json\/sub cannot be a directory: it or a part of its path is a file; point --data at a directory this user can write/],
    [
      'a data dir another relay holds',
      () => {
        // A lock held by a live process on this host: this test's own.
        const data = join(root, 'locked')
        mkdirSync(data, { recursive: true })
        writeFileSync(join(data, LOCK_FILE), JSON.stringify({ pid: process.pid, hostname: hostname(), startedAt: '2026-01-01T00:00:00.000Z' }))
        return start(join(out, 'cluster.json'), ['--key', join(out, 'r1', 'key.json')], 'r1', data)
      },
      /data dir \S*locked is in use by another stead-relay \(pid \d+, started 2026-01-01T00:00:00\.000Z\); stop it first, or point --data elsewhere$/,
    ],
    ['a TLS file that is missing', () => start(join(out, 'cluster.json'), ['--tls-cert', join(root, 'no.pem'), '--tls-key', join(root, 'no.pem')]), /--tls-cert \S*no\.pem does not exist; give --tls-cert a PEM file$/],
    ['TLS files that are not PEM', () => start(join(out, 'cluster.json'), ['--tls-cert', join(out, 'cluster.json'), '--tls-key', join(out, 'cluster.json')]), /--tls-cert \S*cluster\.json and --tls-key \S*cluster\.json are not a PEM certificate and its private key \(.+\); give the certificate chain and the key that belongs to it$/],
    // Other commands' outputs.
    ['keygen into a missing directory', () => ['keygen', '--out', join(root, 'no', 'dir', 'key.json')], /--out \S*no\/dir\/key\.json: its directory does not exist; give --out a path in a directory that exists/],
    ['init into a file', () => ['init', '--host', '127.0.0.1', '--out', join(out, 'cluster.json', 'x')], /--out \S*cluster\.json\/x: it or a part of its path is a file, not a directory; give --out a directory this user can write/],
    ['dev in a file', () => ['dev', '--base-port', '24000', '--dir', join(out, 'cluster.json')], /--dir \S*cluster\.json: it or a part of its path is a file, not a directory; give --dir a directory this user can write/],
  ]

  // Each row is a process of its own that reads its own files: they run side by side (vitest's maxConcurrency, 5).
  // Rows that get as far as listening: one at a time (they would take each other's ports).
  const listening: Array<[string, () => string[], RegExp]> = [
    ['an API host that does not resolve', () => start(variant('dns.json', (c) => (c.relays[0]!.api = `host.invalid:${c.relays[0]!.api!.split(':')[1]}`))), /cannot listen on host\.invalid:\d+ \(the HTTP API of r1\): host\.invalid does not resolve to an address \(DNS\); fix r1's "api" in the cluster file/],
    ['an API address not of this machine', () => start(variant('notlocal.json', (c) => (c.relays[0]!.api = `10.255.255.1:${c.relays[0]!.api!.split(':')[1]}`))), /cannot listen on 10\.255\.255\.1:\d+ \(the HTTP API of r1\): 10\.255\.255\.1 is not an address of this machine; fix r1's "api"/],
    ['a mesh port in use', () => start(variant('inuse.json', (c) => (c.relays[0]!.mesh = `/ip4/127.0.0.1/tcp/${heldPort}`))), /port \d+ \(the mesh of r1, 127\.0\.0\.1:\d+\) is in use by another process: stop it .*, or change r1's "mesh" in the cluster file/],
  ]

  const check = async ([, args, line]: [string, () => string[], RegExp], expect: ExpectStatic): Promise<void> => {
    const r = await run(args())
    expect(r.stderr, 'no stack trace').not.toMatch(STACK)
    expect(r.code, `exit code, stderr: ${r.stderr}`).toBe(2)
    const lines = r.stderr.trimEnd().split('\n')
    expect(lines, 'one line on stderr').toHaveLength(1)
    expect(lines[0]).toMatch(/^stead-relay: /)
    expect(lines[0]).toMatch(line)
  }
  it.concurrent.for(rows)('%s', { timeout: ROW_TIMEOUT_MS + 10_000 }, (row, { expect }) => check(row, expect))
  it.for(listening)('%s', { timeout: ROW_TIMEOUT_MS + 10_000 }, (row, { expect }) => check(row, expect))
})

describe('a second dev cluster on the same --dir', () => {
  let first: ChildProcess | undefined
  afterAll(async () => {
    if (first && first.exitCode === null && first.signalCode === null) {
      const exited = new Promise((done) => first?.once('exit', done))
      first.kill('SIGTERM')
      await exited
    }
  })

  it('is refused with one line naming --dir, and the first keeps running', async () => {
    const dir = join(mkdtempSync(join(tmpdir(), 'stead-dev2-')), 'dev')
    const base = await freePort()
    first = spawn(process.execPath, [BIN, 'dev', '--dir', dir, '--base-port', String(base), '--log-level', 'warn'], { stdio: ['ignore', 'pipe', 'pipe'] })
    let log = ''
    first.stdout?.on('data', (d: Buffer) => (log += d.toString()))
    first.stderr?.on('data', (d: Buffer) => (log += d.toString()))
    const apis = [0, 1, 2, 3].map((i) => `127.0.0.1:${base + i}`)
    const healthy = async (): Promise<boolean> => {
      const answers = await Promise.all(apis.map((a) => fetch(`http://${a}/health`).then((r) => r.ok, () => false)))
      return answers.every(Boolean)
    }
    await until('the first cluster to answer /health', async () => ((await healthy()) ? true : undefined), 60_000)

    // Other ports (as the issue's `--base-port 12401` did), same dir.
    const other = await freePort()
    const second = await run(['dev', '--dir', dir, '--base-port', String(other)])
    expect(second.stderr).not.toMatch(STACK)
    expect(second.code, second.stdout + second.stderr).toBe(2)
    expect(second.stderr.trim()).toMatch(
      new RegExp(`^stead-relay: --dir ${dir} is in use by another stead-relay dev \\(its relay r1 runs as pid \\d+, started [^)]+\\): stop that one, or give this one its own --dir, e\\.g\\. --dir ${dir}-${other}$`),
    )
    // Nothing of the second started: it printed no cluster, and the first's cluster file is its own.
    expect(second.stdout).toBe('')
    expect(readFileSync(join(dir, 'cluster.json'), 'utf8')).toContain(`127.0.0.1:${base}`)
    expect(await healthy()).toBe(true)
    expect(first.exitCode).toBe(null)
    expect(log).not.toContain('exited')
  }, 120_000)
})
