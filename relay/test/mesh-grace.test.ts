/**
 * A peer that is not up yet is what a cluster starting looks like, not a
 * warning: the mesh logs it at info, once, and warns only about a peer that
 * stays unreachable past the grace period (unreachableWarnMs).
 */
import { createServer, type AddressInfo } from 'node:net'
import { generateKeyPairFromSeed } from '@libp2p/crypto/keys'
import { afterEach, expect, test } from 'vitest'
import { createLibp2pMesh, type Libp2pMesh } from '../src/mesh/libp2p.ts'
import type { PeerAddress } from '../src/mesh/types.ts'
import { until } from './helpers/cluster.ts'

interface Line {
  level: 'debug' | 'info' | 'warn'
  obj: { peer?: string; downMs?: number }
  msg: string
  at: number
}

const meshes: Libp2pMesh[] = []
afterEach(async () => {
  await Promise.all(meshes.splice(0).map((m) => m.stop()))
})

async function freePorts(n: number): Promise<number[]> {
  const servers = await Promise.all(
    Array.from({ length: n }, () => new Promise<ReturnType<typeof createServer>>((ok) => {
      const s = createServer()
      s.listen(0, '127.0.0.1', () => ok(s))
    })),
  )
  const ports = servers.map((s) => (s.address() as AddressInfo).port)
  await Promise.all(servers.map((s) => new Promise((done) => s.close(done))))
  return ports
}

test('peers not up yet are logged at info once; only a peer still unreachable after the grace period is a warning', async () => {
  const GRACE_MS = 1500
  const ports = await freePorts(3)
  const members = await Promise.all(
    ports.map(async (port, index) => {
      const seed = crypto.getRandomValues(new Uint8Array(32))
      const key = await generateKeyPairFromSeed('Ed25519', seed)
      return { index, seed, publicKey: key.publicKey.raw, multiaddr: `/ip4/127.0.0.1/tcp/${port}`, name: `r${index + 1}` }
    }),
  )
  const peers: PeerAddress[] = members.map(({ index, publicKey, multiaddr, name }) => ({ index, publicKey, multiaddr, name }))
  const logs: Line[] = []
  const mesh = (me: number, log: Line[] | undefined): Libp2pMesh => {
    const m = createLibp2pMesh({
      me,
      secretKey: members[me]!.seed,
      peers,
      listen: members[me]!.multiaddr,
      minBackoffMs: 50,
      maxBackoffMs: 300,
      unreachableWarnMs: GRACE_MS,
      ...(log
        ? {
            logger: {
              debug: (obj, msg) => log.push({ level: 'debug', obj, msg: msg ?? '', at: Date.now() }),
              info: (obj, msg) => log.push({ level: 'info', obj, msg: msg ?? '', at: Date.now() }),
              warn: (obj, msg) => log.push({ level: 'warn', obj, msg: msg ?? '', at: Date.now() }),
            },
          }
        : {}),
    })
    meshes.push(m)
    return m
  }
  const r1 = mesh(0, logs)
  await r1.start()
  const failed = (peer: string) => logs.filter((l) => l.obj.peer === peer && /dial failed/.test(l.msg))
  // Both peers are down at first: one info line each, however often they are redialled.
  await until('a failed dial to r2 and to r3', () => (failed('r2').length >= 1 && failed('r3').length >= 1 ? true : undefined), 10_000)
  const firstFailure = failed('r3')[0]!
  expect(failed('r2')[0]!.level).toBe('info')
  expect(firstFailure.level).toBe('info')
  // Later redials are debug lines.
  await until('several redials of r3', () => (failed('r3').length >= 3 ? true : undefined), 10_000)
  expect(failed('r3').filter((l) => l.level !== 'debug')).toEqual([firstFailure])

  // r2 comes up within the grace period: connected, never a warning.
  await mesh(1, undefined).start()
  await until('r1 to connect to r2', () => (r1.connectedPeers().includes(1) ? true : undefined), 10_000)

  // r3 stays down: one warning, and only once the grace period has passed.
  const warned = await until('a warning about r3', () => logs.find((l) => l.level === 'warn' && l.obj.peer === 'r3'), 10_000)
  expect(warned.msg).toMatch(/^mesh: peer unreachable for \d+ s, still redialling$/)
  expect(warned.obj.downMs).toBeGreaterThanOrEqual(GRACE_MS)
  expect(warned.at - firstFailure.at).toBeGreaterThanOrEqual(GRACE_MS)
  await until('more redials of r3', () => (failed('r3').filter((l) => l.at > warned.at).length >= 2 ? true : undefined), 10_000)
  expect(logs.filter((l) => l.level === 'warn')).toEqual([warned])
})
