import { createLibp2pMesh, MESH_PROTOCOL } from '../src/mesh/libp2p.ts'
import type { Libp2pMesh, Libp2pMeshOptions } from '../src/mesh/libp2p.ts'
import { encodeFrames, FrameDecoder, FrameTooLargeError } from '@stead/core'
import type { PeerAddress } from '../src/mesh/types.ts'
import { halfWindowUpdates, windowUpdateDue } from '../src/mesh/yamux-window.ts'

import { createServer } from 'node:net'
import type { AddressInfo } from 'node:net'
import { generateKeyPairFromSeed } from '@libp2p/crypto/keys'
import { noise } from '@libp2p/noise'
import { tcp } from '@libp2p/tcp'
import { yamux } from '@libp2p/yamux'
import { multiaddr } from '@multiformats/multiaddr'
import { createLibp2p } from 'libp2p'
import type { Libp2p, Stream } from '@libp2p/interface'
import { afterEach, describe, expect, test } from 'vitest'

// ---- helpers --------------------------------------------------------------

interface Member extends PeerAddress {
  readonly seed: Uint8Array
  readonly peerId: string
}

async function freePorts(n: number): Promise<number[]> {
  const servers = await Promise.all(
    Array.from(
      { length: n },
      () =>
        new Promise<ReturnType<typeof createServer>>((resolve, reject) => {
          const s = createServer()
          s.once('error', reject)
          s.listen(0, '127.0.0.1', () => resolve(s))
        }),
    ),
  )
  const ports = servers.map((s) => (s.address() as AddressInfo).port)
  await Promise.all(servers.map((s) => new Promise<void>((resolve) => s.close(() => resolve()))))
  return ports
}

async function makeCommittee(n: number): Promise<Member[]> {
  const ports = await freePorts(n)
  return Promise.all(
    ports.map(async (port, index) => {
      const seed = crypto.getRandomValues(new Uint8Array(32))
      const key = await generateKeyPairFromSeed('Ed25519', seed)
      return {
        index,
        seed,
        publicKey: key.publicKey.raw,
        peerId: key.publicKey.toString(),
        multiaddr: `/ip4/127.0.0.1/tcp/${port}`,
      }
    }),
  )
}

interface LogLine {
  level: 'info' | 'warn'
  obj: object
  msg: string | undefined
}

const cleanups: Array<() => Promise<void>> = []

afterEach(async () => {
  await Promise.all(cleanups.splice(0).map((f) => f()))
})

function makeMesh(
  members: readonly Member[],
  me: number,
  extra: Partial<Libp2pMeshOptions> = {},
): { mesh: Libp2pMesh; logs: LogLine[] } {
  const logs: LogLine[] = []
  const mesh = createLibp2pMesh({
    me,
    secretKey: members[me]!.seed,
    peers: members.map(({ index, publicKey, multiaddr }) => ({ index, publicKey, multiaddr })),
    listen: members[me]!.multiaddr,
    logger: {
      info: (obj, msg) => logs.push({ level: 'info', obj, msg }),
      warn: (obj, msg) => logs.push({ level: 'warn', obj, msg }),
    },
    minBackoffMs: 50,
    maxBackoffMs: 1_000,
    ...extra,
  })
  cleanups.push(() => mesh.stop())
  return { mesh, logs }
}

/** A bare libp2p node (same stack as the mesh) driven by the test. */
async function rawNode(seed: Uint8Array, listen?: string): Promise<Libp2p> {
  const node = await createLibp2p({
    privateKey: await generateKeyPairFromSeed('Ed25519', seed),
    addresses: { listen: listen === undefined ? [] : [listen] },
    transports: [tcp()],
    connectionEncrypters: [noise()],
    streamMuxers: [yamux()],
  })
  cleanups.push(async () => {
    await node.stop()
  })
  return node
}

async function waitFor(cond: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 10))
  }
}

function allConnected(meshes: readonly Libp2pMesh[], n: number): boolean {
  return meshes.every((m) => m.connectedPeers().length === n - 1)
}

function u32(n: number): Uint8Array {
  const b = new Uint8Array(4)
  new DataView(b.buffer).setUint32(0, n)
  return b
}

function readU32(b: Uint8Array, off = 0): number {
  return new DataView(b.buffer, b.byteOffset, b.byteLength).getUint32(off)
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms))

// ---- framing (pure) --------------------------------------------------------

describe('mesh framing', () => {
  test('decodes frames split at every byte boundary, including empty frames', () => {
    const frames = [new Uint8Array([1, 2, 3]), new Uint8Array(0), new Uint8Array(300).fill(7), new Uint8Array([9])]
    const wire = encodeFrames(frames, 304)
    const same = (x: Uint8Array[]): boolean =>
      x.length === frames.length && x.every((f, i) => Buffer.compare(f, frames[i]!) === 0)
    const failures: string[] = []
    for (let cut = 0; cut <= wire.byteLength; cut++) {
      for (const step of [1, 2, 5, 1000]) {
        const out: Uint8Array[] = []
        const d = new FrameDecoder(1024)
        d.push(wire.subarray(0, cut), (f) => out.push(f))
        for (let i = cut; i < wire.byteLength; i += step) d.push(wire.subarray(i, i + step), (f) => out.push(f))
        if (!same(out) || !d.idle) failures.push(`cut ${cut} step ${step}`)
      }
    }
    expect(failures).toEqual([])
  })

  test('takes a list of chunks as one push (what libp2p streams hand over)', () => {
    const wire = encodeFrames([new Uint8Array([1, 2, 3]), new Uint8Array([4])], 4)
    const out: Uint8Array[] = []
    new FrameDecoder(16).push([wire.subarray(0, 2), wire.subarray(2, wire.byteLength - 1), wire.subarray(wire.byteLength - 1)], (f) => out.push(f))
    expect(out).toEqual([new Uint8Array([1, 2, 3]), new Uint8Array([4])])
  })

  test('emitted frames are copies, not views of the input', () => {
    const wire = encodeFrames([new Uint8Array([1, 2, 3])], 3)
    const out: Uint8Array[] = []
    new FrameDecoder(16).push(wire, (f) => out.push(f))
    wire.fill(0)
    expect(out[0]).toEqual(new Uint8Array([1, 2, 3]))
  })

  test('an oversized length prefix throws FrameTooLargeError', () => {
    const d = new FrameDecoder(100)
    expect(() => d.push(new Uint8Array([0, 0, 0, 101]), () => {})).toThrow(FrameTooLargeError)
    expect(() => new FrameDecoder(100).push(new Uint8Array([0xff, 0xff, 0xff, 0xff]), () => {})).toThrow(/exceeds/)
  })
})

// ---- real libp2p meshes on loopback ------------------------------------------

describe('libp2p mesh', () => {
  test('4 meshes connect; every broadcast reaches every other peer exactly once, in order', async () => {
    const members = await makeCommittee(4)
    const meshes = members.map((_, i) => makeMesh(members, i).mesh)
    const got = meshes.map(() => new Map<number, number[]>())
    meshes.forEach((m, i) =>
      m.onFrame((from, frame) => {
        // The claimed sender inside the frame must match the authenticated one.
        expect(frame[0]).toBe(from)
        const seqs = got[i]!.get(from) ?? []
        seqs.push(readU32(frame, 1))
        got[i]!.set(from, seqs)
      }),
    )
    await Promise.all(meshes.map((m) => m.start()))
    await waitFor(() => allConnected(meshes, 4), 'full mesh')

    const N = 200
    for (let seq = 0; seq < N; seq++) {
      meshes.forEach((m, i) => {
        const f = new Uint8Array(1 + 4 + 32)
        f[0] = i
        f.set(u32(seq), 1)
        m.broadcast(f)
      })
      if (seq % 50 === 0) await sleep(1) // several ticks, several batches
    }
    const complete = (n: number) => (): boolean => got.every((g, i) => [0, 1, 2, 3].every((j) => j === i || g.get(j)?.length === n))
    await waitFor(complete(N), 'all broadcasts')
    // A last frame from each: what a peer sends arrives in order, so a late duplicate would come before it.
    meshes.forEach((m, i) => {
      const f = new Uint8Array(1 + 4 + 32)
      f[0] = i
      f.set(u32(N), 1)
      m.broadcast(f)
    })
    await waitFor(complete(N + 1), 'the last frames')
    const expected = Array.from({ length: N + 1 }, (_, k) => k)
    got.forEach((g, i) => {
      expect(g.has(i)).toBe(false)
      for (const j of [0, 1, 2, 3]) if (j !== i) expect(g.get(j)).toEqual(expected)
    })
    for (const m of meshes) {
      expect(m.stats().framesDropped).toBe(0)
      expect(m.stats().framesReceived).toBe(3 * (N + 1))
    }
  })

  test('a 1,000-frame burst of mixed sizes (up to 100 KB) arrives complete and in order', async () => {
    const members = await makeCommittee(2)
    const a = makeMesh(members, 0).mesh
    const b = makeMesh(members, 1).mesh
    const got: Uint8Array[] = []
    b.onFrame((from, frame) => {
      expect(from).toBe(0)
      got.push(frame)
    })
    await Promise.all([a.start(), b.start()])
    await waitFor(() => allConnected([a, b], 2), 'connection')

    const sizes = Array.from({ length: 1000 }, (_, i) => (i % 100 === 0 ? 100_000 : 4 + ((i * 7919) % 20_000)))
    for (let i = 0; i < sizes.length; i++) {
      const f = new Uint8Array(sizes[i]!).fill(i & 0xff)
      f.set(u32(i), 0)
      a.send(1, f)
    }
    await waitFor(() => got.length === sizes.length, '1,000 frames', 20_000)
    got.forEach((f, i) => {
      expect(f.byteLength).toBe(sizes[i])
      expect(readU32(f)).toBe(i)
      expect(f[f.byteLength - 1]).toBe(f.byteLength > 4 ? i & 0xff : f[3])
    })
    expect(a.stats().framesSent).toBe(1000)
    expect(a.stats().drainWaits).toBeGreaterThan(0) // the writer did wait on onDrain()
  })

  test('tells a sender about its receive window once half of it is used, not after every frame', async () => {
    const members = await makeCommittee(2)
    const { mesh: m0, logs } = makeMesh(members, 0)
    let got = 0
    m0.onFrame(() => got++)
    await m0.start()
    const peer = await rawNode(members[1]!.seed, members[1]!.multiaddr)
    const stream = await peer.dialProtocol(multiaddr(`${members[0]!.multiaddr}/p2p/${members[0]!.peerId}`), MESH_PROTOCOL)
    // The sender's view of the window, a field of @libp2p/yamux's stream: what this test guards.
    const sendWindow = () => (stream as unknown as { sendWindowCapacity: number }).sendWindowCapacity
    const frame = encodeFrames([new Uint8Array(1000)], 1000)
    // A frame of m0's own back to the peer, on the same connection: it is written after any window update m0 sent for our frames.
    let back = 0
    await peer.handle(MESH_PROTOCOL, (s) => s.addEventListener('message', () => back++))
    for (let i = 0; i < 10; i++) stream.send(frame)
    await waitFor(() => got === 10, 'ten frames')
    m0.send(1, u32(1))
    await waitFor(() => back > 0, "m0's frame back")
    // No update came before it: without halfWindowUpdates, one follows every data frame and the window is whole again.
    expect(sendWindow()).toBe(256 * 1024 - 10 * frame.byteLength)
    // Past half the window an update comes, and the sender never stalls.
    const big = encodeFrames([new Uint8Array(60_000)], 60_000)
    for (let i = 0; i < 20; i++) {
      stream.send(big)
      if (sendWindow() < big.byteLength) await waitFor(() => sendWindow() >= big.byteLength, 'a window update')
    }
    await waitFor(() => got === 30, 'every frame')
    expect(logs.some((l) => /window updates/.test(l.msg ?? ''))).toBe(false)
  })

  test('window updates: only an established stream with more than half its window left waits', () => {
    expect(windowUpdateDue(3, 1000, 501)).toBe(false)
    expect(windowUpdateDue(3, 1000, 500)).toBe(true)
    expect(windowUpdateDue(2, 1000, 999)).toBe(true) // an update that acknowledges the stream goes at once
    const calls: number[] = []
    const stream = { state: 3, recvWindow: 1000, recvWindowCapacity: 900, sendWindowUpdate: () => calls.push(1) }
    expect(halfWindowUpdates(stream)).toBe(true)
    stream.sendWindowUpdate()
    expect(calls).toHaveLength(0)
    stream.recvWindowCapacity = 400
    stream.sendWindowUpdate()
    expect(calls).toHaveLength(1)
    expect(halfWindowUpdates({ sendWindowUpdate: () => undefined })).toBe(false)
  })

  test('a restarted node (new mesh, same key and port) is reconnected and gets new frames', async () => {
    const members = await makeCommittee(4)
    const meshes = members.map((_, i) => makeMesh(members, i).mesh)
    await Promise.all(meshes.map((m) => m.start()))
    await waitFor(() => allConnected(meshes, 4), 'full mesh')

    await meshes[3]!.stop()
    await waitFor(() => meshes.slice(0, 3).every((m) => !m.connectedPeers().includes(3)), 'peers to notice the stop')

    const restarted = makeMesh(members, 3).mesh
    const got: Array<[number, string]> = []
    restarted.onFrame((from, frame) => got.push([from, new TextDecoder().decode(frame)]))
    await restarted.start()
    const live = [meshes[0]!, meshes[1]!, meshes[2]!, restarted]
    await waitFor(() => allConnected(live, 4), 'reconnection')
    meshes[0]!.send(3, new TextEncoder().encode('hello again'))
    meshes[1]!.broadcast(new TextEncoder().encode('to all'))
    await waitFor(() => got.length === 2, 'frames at the restarted node')
    expect(got.sort()).toEqual([
      [0, 'hello again'],
      [1, 'to all'],
    ])
    // And the restarted node can talk back.
    const back: number[] = []
    meshes[2]!.onFrame((from) => back.push(from))
    restarted.send(2, new Uint8Array([42]))
    await waitFor(() => back.length === 1, 'frame from the restarted node')
    expect(back).toEqual([3])
  })

  test('a node outside the committee cannot deliver frames, and the member stays up', async () => {
    const members = await makeCommittee(2)
    const { mesh: m0, logs } = makeMesh(members, 0)
    const m1 = makeMesh(members, 1).mesh
    const got: number[] = []
    m0.onFrame((from) => got.push(from))
    await Promise.all([m0.start(), m1.start()])
    await waitFor(() => allConnected([m0, m1], 2), 'connection')

    const outsider = await rawNode(crypto.getRandomValues(new Uint8Array(32)))
    const target = multiaddr(`${members[0]!.multiaddr}/p2p/${members[0]!.peerId}`)
    let stream: Stream | undefined
    try {
      stream = await outsider.dialProtocol(target, MESH_PROTOCOL)
      stream.send(encodeFrames([new Uint8Array([1, 2, 3])], 3))
    } catch {
      // Expected: the member's gater refuses the connection after the handshake.
    }
    // Once the member refused the outsider, nothing of it can arrive any more.
    await waitFor(() => m0.stats().connectionsRefused + m0.stats().streamsRefused >= 1, 'the outsider refused')
    expect(got).toEqual([])
    expect(logs.some((l) => l.level === 'warn' && /outside the committee/.test(l.msg ?? ''))).toBe(true)

    // The member still works.
    m1.send(0, new Uint8Array([5]))
    await waitFor(() => got.length === 1, 'frame from a member')
    expect(got).toEqual([1])
    expect(m0.connectedPeers()).toEqual([1])
  })

  test('a garbage or oversized length prefix closes only that stream; the member keeps working', async () => {
    const members = await makeCommittee(2)
    const { mesh: m0, logs } = makeMesh(members, 0, { maxFrameBytes: 1 << 20 })
    const got: Array<[number, string]> = []
    m0.onFrame((from, frame) => got.push([from, new TextDecoder().decode(frame)]))
    await m0.start()
    // Member 1 is a hand-driven libp2p node holding member 1's key.
    const evil = await rawNode(members[1]!.seed, members[1]!.multiaddr)
    await evil.handle(MESH_PROTOCOL, () => {})
    const target = multiaddr(`${members[0]!.multiaddr}/p2p/${members[0]!.peerId}`)
    const enc = (s: string): Uint8Array => {
      const b = new TextEncoder().encode(s)
      return encodeFrames([b], b.byteLength)
    }

    const s1 = await evil.dialProtocol(target, MESH_PROTOCOL)
    s1.send(enc('first'))
    await waitFor(() => got.length === 1, 'a valid frame')
    // 0xffffffff: far beyond maxFrameBytes (and any sane frame).
    s1.send(new Uint8Array([0xff, 0xff, 0xff, 0xff, 1, 2, 3]))
    await waitFor(() => s1.status !== 'open', 'the bad stream to be closed')
    expect(m0.stats().badStreams).toBe(1)
    expect(logs.some((l) => l.level === 'warn' && /bad frame/.test(l.msg ?? ''))).toBe(true)

    // Just over the configured limit.
    const s2 = await evil.dialProtocol(target, MESH_PROTOCOL)
    s2.send(u32((1 << 20) + 1))
    await waitFor(() => s2.status !== 'open', 'the oversized stream to be closed')
    expect(m0.stats().badStreams).toBe(2)

    // A truncated frame followed by end of stream delivers nothing.
    const s3 = await evil.dialProtocol(target, MESH_PROTOCOL)
    s3.send(new Uint8Array([0, 0, 0, 100, 1, 2, 3]))
    await s3.close()

    // The member is still up and accepts well-formed frames.
    const s4 = await evil.dialProtocol(target, MESH_PROTOCOL)
    s4.send(enc('after'))
    await waitFor(() => got.length === 2, 'a frame after the bad ones')
    expect(got).toEqual([
      [1, 'first'],
      [1, 'after'],
    ])
  })

  test('the outbound queue is bounded: oldest frames are dropped while a peer is down', async () => {
    const members = await makeCommittee(2)
    const m0 = makeMesh(members, 0, { maxQueueFrames: 10 }).mesh
    await m0.start()
    for (let i = 0; i < 25; i++) m0.send(1, u32(i))
    m0.send(0, u32(99)) // to myself: rejected
    m0.send(7, u32(99)) // not a member: rejected
    expect(m0.stats()).toMatchObject({ framesDropped: 15, queuedFrames: 10, framesRejected: 2 })

    const m1 = makeMesh(members, 1).mesh
    const got: number[] = []
    m1.onFrame((_from, frame) => got.push(readU32(frame)))
    await m1.start()
    await waitFor(() => got.length === 10, 'the queued frames')
    expect(got).toEqual([15, 16, 17, 18, 19, 20, 21, 22, 23, 24])
  })

  test('a peer that stops reading holds frames in our bounded queue, not in the stream below it', async () => {
    // Found by CI: libp2p's stream.onDrain() resolved at once after the first drain, so a
    // writer faster than its reader moved every queued frame into yamux's unbounded write
    // buffer, and relays grew to 12 GB.
    const members = await makeCommittee(2)
    const m0 = makeMesh(members, 0, { maxQueueBytes: 512 * 1024 * 1024 }).mesh
    await m0.start()
    // Member 1 is a hand-driven node: it reads the first 4 MiB (so the writer waits for drains
    // and gets them), then stops reading.
    const slow = await rawNode(members[1]!.seed, members[1]!.multiaddr)
    let read = 0
    let paused = false
    await slow.handle(MESH_PROTOCOL, (stream) => {
      stream.addEventListener('message', (evt) => {
        read += evt.data.byteLength
        if (read > 4 * 1024 * 1024 && !paused) {
          paused = true
          stream.pause()
        }
      })
    })
    const frames = 128
    const frame = new Uint8Array(1024 * 1024).fill(1)
    for (let i = 0; i < frames; i++) m0.send(1, frame)
    // The writer parks on the paused stream with frames still queued: a writer that ignored
    // backpressure would never park and would empty its queue into yamux instead.
    await waitFor(() => paused && m0.stats().writersWaiting === 1 && m0.stats().queuedBytes > 0, 'the writer to wait on the paused reader')
    // Parked, it moves nothing more until a drain: what left our queue is what the reader took
    // plus what yamux lets be in flight (its window, 16 MiB at most), not all 128 MiB.
    const left = frames * frame.byteLength - m0.stats().queuedBytes
    expect(left - read).toBeLessThan(32 * 1024 * 1024)
  })

  test('an unreachable peer is redialed with backoff until it comes up, and the relay hears when it is connected', async () => {
    const members = await makeCommittee(2)
    const { mesh: m0, logs } = makeMesh(members, 0)
    const opened: number[] = []
    m0.onPeerConnected((peer) => opened.push(peer))
    await m0.start()
    m0.send(1, u32(1))
    await waitFor(() => m0.stats().dialsFailed >= 3, 'several failed dials')
    expect(opened).toEqual([])
    expect(logs.filter((l) => /dial failed/.test(l.msg ?? '')).length).toBe(1) // logged once per outage
    // Member 1 comes up as a passive node that never dials: only m0's redial can connect them.
    const passive = await rawNode(members[1]!.seed, members[1]!.multiaddr)
    const got: number[] = []
    await passive.handle(MESH_PROTOCOL, (stream) => {
      const d = new FrameDecoder(1024)
      stream.addEventListener('message', (evt) => {
        const chunks = evt.data instanceof Uint8Array ? [evt.data] : [...evt.data]
        for (const c of chunks) d.push(c, (f) => got.push(readU32(f)))
      })
    })
    await waitFor(() => m0.connectedPeers().includes(1), 'the redial', 5_000)
    m0.send(1, u32(2))
    await waitFor(() => got.length === 2, 'frames at the passive peer')
    expect(got).toEqual([1, 2])
    expect(logs.some((l) => /peer reconnected/.test(l.msg ?? ''))).toBe(true)
    // The relay hears of the connection (its consensus sends its latest block again).
    expect(opened).toEqual([1])
  })

  test('stop() resolves promptly while redials are pending and start() afterwards is refused', async () => {
    const members = await makeCommittee(3)
    const m0 = makeMesh(members, 0).mesh
    await m0.start()
    await waitFor(() => m0.stats().dialsFailed >= 2, 'a few failed dials, with backoff timers armed')
    const t = Date.now()
    await m0.stop()
    expect(Date.now() - t).toBeLessThan(2_000)
    await expect(m0.start()).rejects.toThrow(/stopped/)
    m0.send(1, new Uint8Array([1])) // never throws
    expect(m0.connectedPeers()).toEqual([])
  })

  test('start() rejects when the listen port is taken, and stop() still resolves', async () => {
    const members = await makeCommittee(2)
    const m0 = makeMesh(members, 0).mesh
    await m0.start()
    const clash = makeMesh(members, 0).mesh // same key and port
    await expect(clash.start()).rejects.toThrow()
    await clash.stop()
    expect(m0.stats().badStreams).toBe(0)
  })
})
