import { existsSync, mkdtempSync, readFileSync, statSync } from 'node:fs'
import { createServer, type Server } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { toHex } from '@stead/core'
import pino from 'pino'
import { afterAll, describe, expect, it } from 'vitest'
import { DEFAULT_LIMITS } from '../src/api/server.ts'
import { apiLimits, UsageError } from '../src/process/cli-options.ts'
import { ConfigError, generateIdentity, loadCluster, loadIdentity, parseCluster } from '../src/process/config.ts'
import { describeInit, initCluster } from '../src/process/init.ts'
import { prettyLogLines } from '../src/process/logging.ts'
import { ListenError, isListenFailure, probePort } from '../src/process/ports.ts'
import { runRelay } from '../src/process/relay.ts'
import { freePort } from './helpers/cluster.ts'

const tmp = () => mkdtempSync(join(tmpdir(), 'stead-op-'))

describe('stead-relay init', () => {
  it('writes a key per relay (0600) and a cluster file that start loads, with closed spaces by default', () => {
    const out = join(tmp(), 'cluster')
    const result = initCluster({ relays: 4, hosts: ['127.0.0.1'], basePort: 7401, out, spaces: ['bank'] })
    const cluster = loadCluster(join(out, 'cluster.json'))
    expect(cluster.f).toBe(1)
    expect(cluster.openSpaces).toBe(false)
    expect([...cluster.spaces.keys()]).toEqual(['bank'])
    expect(cluster.newSpacesPerKeyPerHour).toBe(100)
    // A new cluster counts each user's live spaces from its first commit.
    expect(cluster.spacesPerUser).toBe(1000)
    expect(cluster.relays.map((r) => [r.id, r.api, r.mesh])).toEqual([
      ['r1', '127.0.0.1:7401', '/ip4/127.0.0.1/tcp/7501'],
      ['r2', '127.0.0.1:7402', '/ip4/127.0.0.1/tcp/7502'],
      ['r3', '127.0.0.1:7403', '/ip4/127.0.0.1/tcp/7503'],
      ['r4', '127.0.0.1:7404', '/ip4/127.0.0.1/tcp/7504'],
    ])
    for (const [i, r] of result.relays.entries()) {
      const key = join(out, r.id, 'key.json')
      expect(statSync(key).mode & 0o777).toBe(0o600)
      expect(statSync(join(out, r.id)).mode & 0o777).toBe(0o700)
      expect(toHex(loadIdentity(key).publicKey)).toBe(toHex(cluster.relays[i]!.publicKey))
    }
    const text = describeInit(result)
    expect(text).toContain(`stead-relay start --config ${join(out, 'cluster.json')} --id r1 --data ${join(out, 'r1')}`)
    expect(text).toContain('openSpaces false')
  })

  it('puts one relay on each host, all on the same ports, and says where to copy what', () => {
    const out = join(tmp(), 'c')
    const hosts = ['10.0.0.1', '10.0.0.2', '10.0.0.3', '10.0.0.4', '10.0.0.5', '10.0.0.6', '10.0.0.7']
    const result = initCluster({ relays: 7, hosts, basePort: 8000, out, openSpaces: true })
    expect(result.cluster.relays.map((r) => r.api)).toEqual(hosts.map((h) => `${h}:8000`))
    expect(result.cluster.relays.map((r) => r.mesh)).toEqual(hosts.map((h) => `/ip4/${h}/tcp/8100`))
    expect(result.cluster.f).toBe(2)
    expect(result.cluster.openSpaces).toBe(true)
    expect(describeInit(result)).toMatch(/--id r7 --data \S+ +# on 10\.0\.0\.7/)
  })

  it('gives relays sharing a host consecutive ports', () => {
    const result = initCluster({ relays: 4, hosts: ['10.0.0.1', '10.0.0.1', '10.0.0.2', '10.0.0.2'], basePort: 7401, out: join(tmp(), 'c') })
    expect(result.cluster.relays.map((r) => r.api)).toEqual(['10.0.0.1:7401', '10.0.0.1:7402', '10.0.0.2:7401', '10.0.0.2:7402'])
  })

  it('refuses bad input before writing anything, and never overwrites', () => {
    const out = join(tmp(), 'c')
    const refused = (o: Partial<Parameters<typeof initCluster>[0]>) => () => initCluster({ relays: 4, hosts: ['127.0.0.1'], basePort: 7401, out, ...o })
    expect(refused({ relays: 3 })).toThrow(new UsageError('--relays must be at least 4 (N = 3f+1 with f >= 1)'))
    expect(refused({ relays: 5 })).toThrow(new UsageError('--relays must be 3f+1 (4, 7, 10, ...), got 5'))
    expect(refused({ hosts: ['10.0.0.1', '10.0.0.2'] })).toThrow(/one address for every relay or one per relay \(4\), got 2/)
    expect(refused({ hosts: ['relay.example.com'] })).toThrow(/--host relay\.example\.com: give the IPv4 address/)
    expect(refused({ hosts: ['0.0.0.0'] })).toThrow(/cannot be dialed/)
    expect(refused({ basePort: 65_500 })).toThrow(/leaves no room/)
    expect(existsSync(out)).toBe(false)
    initCluster({ relays: 4, hosts: ['127.0.0.1'], basePort: 7401, out })
    const before = readFileSync(join(out, 'r1', 'key.json'), 'utf8')
    expect(refused({})).toThrow(/refusing to overwrite .*cluster\.json, .*r1\/key\.json/)
    expect(readFileSync(join(out, 'r1', 'key.json'), 'utf8')).toBe(before)
  })
})

describe('--limit', () => {
  it('takes any API limit by name, fills a rate limit from its defaults, and refuses the rest with the names it knows', () => {
    expect(apiLimits(['maxSessionsPerKey=8', 'rateLimit.perSecond=9'], DEFAULT_LIMITS)).toEqual({ maxSessionsPerKey: 8, rateLimit: { ...DEFAULT_LIMITS.rateLimit, perSecond: 9 } })
    expect(() => apiLimits(['maxSesionsPerKey=8'], DEFAULT_LIMITS)).toThrow(/^--limit maxSesionsPerKey=8: unknown limit maxSesionsPerKey \(limits: maxFrameBytes, rateLimit\.perSecond, .*, maxSessionsPerKey, .*idleTimeoutMs, .*readDeadlineMs\)$/)
    expect(() => apiLimits(['maxSessionsPerKey=0'], DEFAULT_LIMITS)).toThrow(/--limit maxSessionsPerKey=0: the value must be a positive whole number/)
    expect(() => apiLimits(['maxSessionsPerKey'], DEFAULT_LIMITS)).toThrow(/positive whole number/)
  })
})

describe('a port in use', () => {
  const held: Server[] = []
  afterAll(() => held.forEach((s) => s.close()))
  /** A loopback port the OS picked, held until the tests end. */
  const hold = async (): Promise<number> => {
    const server = createServer()
    await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok))
    held.push(server)
    return (server.address() as { port: number }).port
  }

  /** A one-relay cluster (f = 0) on loopback with the given ports. */
  const solo = async (ports: { api?: number; mesh?: number }) => {
    const id = generateIdentity()
    const cluster = parseCluster({
      relays: [{ id: 'r1', publicKey: toHex(id.publicKey), mesh: `/ip4/127.0.0.1/tcp/${ports.mesh ?? (await freePort())}`, api: `127.0.0.1:${ports.api ?? (await freePort())}` }],
    })
    return runRelay({ cluster, id: 'r1', secretKey: id.secretKey, dataDir: join(tmp(), 'data'), logger: pino({ level: 'silent' }) })
  }

  it('is probed as in use', async () => {
    const port = await hold()
    expect(await probePort('127.0.0.1', port)).toBe('in-use')
    expect(await probePort('127.0.0.1', await freePort())).toBe('free')
  })

  it('of the HTTP API: a ListenError naming the port, the relay and what to change', async () => {
    const port = await hold()
    const err = await solo({ api: port }).then(
      () => undefined,
      (e: unknown) => e,
    )
    expect(err).toBeInstanceOf(ListenError)
    expect(err).toBeInstanceOf(ConfigError)
    expect((err as ListenError).port).toBe(port)
    expect((err as Error).message).toBe(
      `port ${port} (the HTTP API of r1, 127.0.0.1:${port}) is in use by another process: stop it (find it with: ss -ltnp 'sport = :${port}'), or change r1's "api" in the cluster file (on every relay)`,
    )
  })

  it('of the mesh: the same, instead of libp2p advising transportManager.faultTolerance', async () => {
    const port = await hold()
    const err = (await solo({ mesh: port }).then(
      () => undefined,
      (e: unknown) => e,
    )) as Error
    expect(err).toBeInstanceOf(ListenError)
    expect(err.message).toMatch(new RegExp(`^port ${port} \\(the mesh of r1, 127\\.0\\.0\\.1:${port}\\) is in use by another process: .*change r1's "mesh" in the cluster file`))
    expect(err.message).not.toMatch(/faultTolerance/)
  })

  it('is told from other failures', () => {
    expect(isListenFailure(Object.assign(new Error('listen EADDRINUSE: address already in use 127.0.0.1:1'), { code: 'EADDRINUSE' }))).toBe(true)
    expect(isListenFailure(Object.assign(new Error('x'), { name: 'UnsupportedListenAddressesError' }))).toBe(true)
    expect(isListenFailure(new Error('MDB_CORRUPTED'))).toBe(false)
  })
})

describe('readable dev logs', () => {
  it('shows time, level, message and fields on one line, naming no pid or host', () => {
    const pretty = prettyLogLines(false)
    const line = pretty(JSON.stringify({ level: 40, time: Date.UTC(2026, 0, 1), pid: 1, hostname: 'h', name: 'stead-relay', relay: 'r1', component: 'mesh', peer: 'r2', err: 'Error: connect ECONNREFUSED', msg: 'mesh: dial failed, will retry' }))
    expect(line).toMatch(/^\[\d\d:\d\d:\d\d\.\d{3}\] WARN: mesh: dial failed, will retry: Error: connect ECONNREFUSED \{"component":"mesh","peer":"r2"\}$/)
    expect(pretty('stead-relay: data dir x is in use')).toBe('stead-relay: data dir x is in use')
  })
})
