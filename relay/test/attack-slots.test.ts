import '../src/mesh/polyfill.ts'

import { randomBytes } from 'node:crypto'
import { readFileSync, writeFileSync } from 'node:fs'
import { connect, type Socket } from 'node:net'
import { circuitRelayTransport } from '@libp2p/circuit-relay-v2'
import { publicKeyFromRaw } from '@libp2p/crypto/keys'
import { identify } from '@libp2p/identify'
import { noise } from '@libp2p/noise'
import { peerIdFromPublicKey } from '@libp2p/peer-id'
import { webSockets } from '@libp2p/websockets'
import { yamux } from '@libp2p/yamux'
import { clockInit, encodeEnvelope, sealEnvelope, type RelayMessage } from '@stead/core'
import { nodeCrypto, publicKeyOfSync } from '@stead/core/node'
import { createLibp2p, type Libp2p } from 'libp2p'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import WebSocketImpl from 'ws'
import { TestClient } from './helpers/client.ts'
import { TestCluster, freePort, until } from './helpers/cluster.ts'

/**
 * Issue 51, slots and shares, attacked from outside: four `stead-relay
 * start` processes with their default limits; a flood of peer
 * announcements, of circuit reservations, and of TCP connections that send
 * nothing. CI size by default; STEAD_ATTACK_FULL=1 for the red team's size
 * (16 attacking addresses; 300 throwaway reservations from 8 addresses;
 * 19,000 idle connections from 38 addresses: the test process holds them
 * too, and the red team's 24,000 would pass its own 20,000 descriptors).
 */
const FULL = process.env.STEAD_ATTACK_FULL === '1'

type Identity = { secretKey: Uint8Array; publicKey: Uint8Array }
const newIdentity = (): Identity => {
  const secretKey = new Uint8Array(randomBytes(32))
  return { secretKey, publicKey: publicKeyOfSync(secretKey) }
}
const peerIdOf = (who: Identity): string => peerIdFromPublicKey(publicKeyFromRaw(who.publicKey)).toString()

let nextId = 1
async function deposit(c: TestClient, who: Identity, seq: number): Promise<RelayMessage> {
  const envelope = encodeEnvelope(await sealEnvelope(nodeCrypto, who, { space: 'bank', seq, clock: clockInit(), deps: [], updates: [{ key: 'acct', decl: { type: 'counter', bounds: {} }, ops: [1] }], safe: [] }))
  const id = nextId++
  c.send({ type: 'submit', id, envelope })
  return c.next((m) => (m.type === 'accepted' || m.type === 'error') && m.id === id, 30_000)
}

/** Bytes of peer addresses a client was told. */
const peerBytes = (c: TestClient): number => c.messages.reduce((n, m) => n + (m.type === 'peers' ? m.addrs.reduce((k, a) => k + a.length, 0) : 0), 0)

/**
 * libp2p's WebSocket transport opens `new WebSocket(url)`: this one binds
 * each connection to the next of `localAddresses` (any of 127.0.0.0/8 on
 * Linux), so throwaway peers come from several hosts.
 */
let localAddresses: string[] = ['127.0.0.1']
let nextLocal = 0
class BoundWebSocket extends WebSocketImpl {
  constructor(url: string, protocols?: string | string[]) {
    super(url, protocols, { localAddress: localAddresses[nextLocal++ % localAddresses.length] })
  }
}
;(globalThis as { WebSocket?: unknown }).WebSocket = BoundWebSocket

/**
 * A peer that reserves a circuit slot at `relay`, or why not: `slot` when
 * the relay refused the reservation, `connection` when it refused the
 * connection (libp2p takes 5 connections a second from a host).
 */
async function reserve(relay: string): Promise<Libp2p | 'slot' | 'connection'> {
  let why = ''
  const node = await createLibp2p({
    transports: [webSockets(), circuitRelayTransport()],
    connectionEncrypters: [noise()],
    streamMuxers: [yamux()],
    services: { identify: identify() },
    addresses: { listen: [`${relay}/p2p-circuit`] },
  }).catch((err: Error) => void (why = err.message))
  if (node && node.getMultiaddrs().some((a) => a.toString().includes('/p2p-circuit'))) return node
  await node?.stop()
  return /RESERVATION_REFUSED|PERMISSION_DENIED|refused|denied/i.test(why) && !/EOF|Encryption/.test(why) ? 'slot' : 'connection'
}

describe('attacks on slots and shares (4 relay processes)', () => {
  let cluster: TestCluster
  let peerPort = 0
  const api = (i: number) => cluster.relays[i]!.api
  const health = async (i: number): Promise<number> => {
    const t = performance.now()
    const res = await fetch(`http://${api(i)}/health`, { signal: AbortSignal.timeout(5000) })
    expect(res.status).toBe(200)
    return performance.now() - t
  }

  beforeAll(async () => {
    cluster = await TestCluster.create(4, { spaces: { board: {}, bank: {} } })
    peerPort = await freePort()
    const file = JSON.parse(readFileSync(cluster.clusterPath, 'utf8')) as { relays: Array<Record<string, unknown>> }
    file.relays[0]!.peers = `/ip4/127.0.0.1/tcp/${peerPort}/ws`
    writeFileSync(cluster.clusterPath, JSON.stringify(file, null, 2))
    await cluster.startAll()
  }, 90_000)

  afterAll(async () => cluster?.stopAll())

  it('keeps honest clients in a space’s peer directory, and their peer news within a byte rate, while many sessions announce', async () => {
    const ATTACK_ADDRESSES = FULL ? 16 : 5
    const SESSIONS_PER_ADDRESS = FULL ? 32 : 20
    const FLOOD_MS = FULL ? 20_000 : 3000
    const honest: Array<{ c: TestClient; addr: string }> = []
    for (let i = 0; i < 4; i++) {
      const who = newIdentity()
      const c = await TestClient.connect(api(0), who)
      c.send({ type: 'subscribe', space: 'board', fromIndex: 0 })
      const addr = `/ip4/127.0.0.1/tcp/9/ws/p2p/${peerIdOf(who)}`
      c.send({ type: 'announce', space: 'board', addrs: [addr] })
      await c.barrier()
      honest.push({ c, addr })
    }
    const attackers: Array<{ c: TestClient; id: string }> = []
    for (let a = 0; a < ATTACK_ADDRESSES; a++) {
      const made = await Promise.all(
        Array.from({ length: SESSIONS_PER_ADDRESS }, async () => {
          const who = newIdentity()
          const c = await TestClient.connect(api(0), who, { localAddress: `127.0.0.${21 + a}` })
          c.send({ type: 'subscribe', space: 'board', fromIndex: 0 })
          return { c, id: peerIdOf(who) }
        }),
      )
      attackers.push(...made)
    }
    const before = honest.map((h) => peerBytes(h.c))
    const started = Date.now()
    let round = 0
    // Each round, every attacker announces eight long addresses that differ from its last (news for everyone).
    while (Date.now() - started < FLOOD_MS) {
      round++
      for (const { c, id } of attackers) c.send({ type: 'announce', space: 'board', addrs: Array.from({ length: 8 }, (_, k) => `/dns4/${'x'.repeat(400)}${round}-${k}.example/tcp/9/ws/p2p/${id}`) })
      await Promise.all(attackers.slice(0, 4).map(({ c }) => c.barrier()))
    }
    const seconds = (Date.now() - started) / 1000
    await Promise.all(attackers.map(({ c }) => c.barrier()))
    await health(0)
    const told = honest.map((h, i) => peerBytes(h.c) - (before[i] as number))
    // Past their addresses' share: rate-limited, a typed error.
    const limited = attackers.filter(({ c }) => c.messages.some((m) => m.type === 'error' && m.reason === 'rate-limited')).length
    // A newcomer hears of every honest client: none was pushed out.
    const newcomer = newIdentity()
    const n = await TestClient.connect(api(0), newcomer)
    n.send({ type: 'subscribe', space: 'board', fromIndex: 0 })
    n.send({ type: 'announce', space: 'board', addrs: [`/ip4/127.0.0.1/tcp/9/ws/p2p/${peerIdOf(newcomer)}`] })
    const reply = (await n.next((m) => m.type === 'peers')) as Extract<RelayMessage, { type: 'peers' }>
    console.log(`peer announcements: ${attackers.length} attacking sessions from ${ATTACK_ADDRESSES} addresses, ${round} rounds in ${seconds.toFixed(1)} s; ${limited} rate-limited; peer news per honest client: ${told.map((b) => `${Math.round(b / 1024)} KiB`).join(', ')}`)
    for (const h of honest) expect(reply.addrs).toContain(h.addr)
    expect(limited).toBeGreaterThan(0)
    // The default budget: 64 KiB at once and 16 KiB/s (addresses only here, so a little less).
    for (const b of told) expect(b).toBeLessThanOrEqual(64 * 1024 + 16 * 1024 * (seconds + 1))
    // Honest clients still work.
    const writer = newIdentity()
    const w = await TestClient.connect(api(0), writer)
    expect((await deposit(w, writer, 1)).type).toBe('accepted')
    for (const c of [...honest.map((h) => h.c), ...attackers.map((a) => a.c), n, w]) c.close()
  }, 180_000)

  it('lets a new peer reserve a circuit slot after a flood of reservations from a few addresses', async () => {
    const relay = await peerAddress()
    const ADDRESSES = FULL ? ['127.0.0.41', '127.0.0.42', '127.0.0.43', '127.0.0.44', '127.0.0.45', '127.0.0.46', '127.0.0.47', '127.0.0.48'] : ['127.0.0.41', '127.0.0.42', '127.0.0.43', '127.0.0.44']
    // Each address: more peers that stay connected than its share, then throwaway peers that reserve and leave.
    const STAYING = 20
    const THROWAWAY = FULL ? 300 : 200
    localAddresses = ADDRESSES
    const staying: Libp2p[] = []
    let refused = 0
    const deadline = Date.now() + (FULL ? 60_000 : 30_000)
    /** Reserves `jobs` slots (keeping or leaving each), retrying connections libp2p's rate turned away, until a slot is refused. */
    const worker = async (jobs: number, keep: boolean): Promise<void> => {
      for (let j = 0; j < jobs && Date.now() < deadline; ) {
        const got = await reserve(relay)
        if (got === 'connection') continue
        j++
        if (got === 'slot') {
          refused++
          if (keep) return
        } else if (keep) staying.push(got)
        else await got.stop()
      }
    }
    const started = Date.now()
    // One worker per address: libp2p's own rate (5 connections a second per host) paces them.
    await Promise.all(ADDRESSES.map(() => worker(STAYING, true)))
    await Promise.all(ADDRESSES.map(() => worker(Math.ceil(THROWAWAY / ADDRESSES.length), false)))
    const seconds = (Date.now() - started) / 1000
    await health(0)
    // A new peer from another address gets a slot.
    localAddresses = ['127.0.0.49']
    const newcomer = await until('a new peer to get a circuit slot', async () => {
      const got = await reserve(relay)
      if (got === 'slot') throw new Error('a new peer was refused a circuit slot')
      return got === 'connection' ? undefined : got
    }, 30_000)
    console.log(`circuit reservations: ${staying.length} peers staying and ${THROWAWAY} throwaway from ${ADDRESSES.length} addresses in ${seconds.toFixed(1)} s, ${refused} refused; a new peer reserved`)
    // Each address held to its share of the slots (16).
    expect(staying.length).toBeLessThanOrEqual(16 * ADDRESSES.length)
    expect(refused).toBeGreaterThan(0)
    await newcomer.stop()
    await Promise.all(staying.map((s) => s.stop()))
    localAddresses = ['127.0.0.1']
  }, 300_000)

  it('closes TCP connections that send nothing, caps them per address, and keeps /health and sessions answering', async () => {
    const [host, port] = api(0).split(':') as [string, string]
    // Default limits: 512 per address, a first request within 10 s.
    const ADDRESSES = FULL ? Array.from({ length: 38 }, (_, i) => `127.0.1.${i + 1}`) : ['127.0.1.1', '127.0.1.2']
    const PER_ADDRESS = FULL ? 500 : 600
    const open = (localAddress: string): Promise<{ s: Socket; closed: () => boolean; at: () => number }> =>
      new Promise((ok) => {
        let closedAt = 0
        const s = connect({ host, port: Number(port), localAddress })
        s.on('error', () => undefined)
        s.on('close', () => (closedAt = Date.now()))
        const done = () => ok({ s, closed: () => closedAt > 0, at: () => closedAt })
        s.once('connect', done)
        s.once('close', done)
      })
    const started = Date.now()
    const conns: Array<Awaited<ReturnType<typeof open>>> = []
    for (const a of ADDRESSES) {
      for (let i = 0; i < PER_ADDRESS; i += 100) conns.push(...(await Promise.all(Array.from({ length: Math.min(100, PER_ADDRESS - i) }, () => open(a)))))
    }
    const opened = Date.now() - started
    // While they are held: /health answers, and a client opens a session and writes.
    const healthMs = [await health(0), await health(0), await health(0)]
    const writer = newIdentity()
    const w = await TestClient.connect(api(0), writer)
    expect((await deposit(w, writer, 1)).type).toBe('accepted')
    w.close()
    // Past an address's cap, closed at once; the rest within the first-request deadline.
    const over = PER_ADDRESS > 512 ? (PER_ADDRESS - 512) * ADDRESSES.length : 0
    await until('the silent connections to be closed', () => (conns.every((c) => c.closed()) ? true : undefined), 25_000)
    const lasted = Math.max(...conns.map((c) => c.at() - started))
    console.log(`idle TCP: ${conns.length} connections from ${ADDRESSES.length} addresses opened in ${opened} ms (${over} over the per-address cap); /health ${healthMs.map((m) => m.toFixed(0)).join(', ')} ms; all closed by ${lasted} ms`)
    expect(lasted).toBeLessThan(10_000 + opened + 5000)
    await health(0)
    for (const c of conns) c.s.destroy()
  }, 120_000)

  /** The peer port's address with the relay's peer id, from a session's welcome. */
  async function peerAddress(): Promise<string> {
    const c = await TestClient.connect(api(0), newIdentity())
    const welcome = (await c.next((m) => m.type === 'welcome')) as Extract<RelayMessage, { type: 'welcome' }>
    c.close()
    const addr = welcome.peers?.find((a) => a.includes(`/tcp/${peerPort}/ws`))
    if (!addr) throw new Error('the relay offers no peer address')
    return addr
  }
})
