import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { clockInit, encodeEnvelope, isSteadError, sealEnvelope, toHex, type SteadError } from '@stead/core'
import { nodeCrypto, publicKeyOfSync } from '@stead/core/node'
import { clusterToJson, generateIdentity, parseCluster, runRelay, type RunningRelay } from '@stead/relay'
import { freePort, until } from '@stead/relay/testing'
import pino from 'pino'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import WebSocket from 'ws'
import { ClockOffset, robustOffset } from '../src/transport/clock-offset.ts'
import { createClient, memoryStorage, type ClientOptions, type SteadClient } from '../src/index.node.ts'
import type { SocketLike } from '../src/transport/transport.ts'

const HOUR = 3_600_000

describe('the relays clock offset a client estimates', () => {
  it('is the middle of the honest samples however f liars pull, once 2f+1 relays answered', () => {
    // f = 1: one liar among four says +1 day or -1 day; the honest three say about -3 h.
    expect(robustOffset([-3 * HOUR, -3 * HOUR + 40, -3 * HOUR - 25, 24 * HOUR], 1)).toBe(-3 * HOUR)
    expect(robustOffset([-3 * HOUR, -3 * HOUR + 40, -3 * HOUR - 25, -24 * HOUR], 1)).toBe(-3 * HOUR - 25)
    expect(robustOffset([-3 * HOUR + 40, -3 * HOUR - 25, 24 * HOUR], 1)).toBe(-3 * HOUR + 40)
  })

  it('with fewer samples, only the correction every sample agrees on: a liar can shrink it, never push it further', () => {
    expect(robustOffset([], 1)).toBe(0)
    expect(robustOffset([-3 * HOUR, -5 * HOUR], 1)).toBe(-3 * HOUR)
    expect(robustOffset([-3 * HOUR, 2 * HOUR], 1)).toBe(0)
    expect(robustOffset([7000], 0)).toBe(7000)
  })

  it('reads a relay clock halfway through the round trip, keeps one sample per relay, and refuses absurd ones', () => {
    const offsets = new ClockOffset(() => 0)
    // The device read 1000 and 1100 around the pong; the relay read 500 between: 550 behind the midpoint.
    expect(offsets.sample(0, 500, 1000, 1100)).toBe(-550)
    expect(offsets.sample(0, 1050, 1000, 1100)).toBe(0)
    expect(offsets.offset()).toBe(0)
    expect(offsets.sample(0, 5, 1100, 1000)).toBeUndefined()
    expect(offsets.sample(0, 1000 + 40 * 24 * HOUR, 1000, 1000)).toBeUndefined()
    expect(offsets.size).toBe(1)
  })
})

/**
 * Last-writer-wins against a real relay (in process, over WebSockets): a
 * device whose clock runs 3 hours fast must not win over a later write made
 * elsewhere, and the relay refuses a register stamped far ahead of its clock.
 */
describe('a client whose clock runs 3 hours fast', () => {
  let relay: RunningRelay
  let dir: string
  let clusterFile: unknown
  const clients: SteadClient[] = []

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'stead-skew-'))
    const id = generateIdentity()
    const cluster = parseCluster({ f: 0, relays: [{ id: 'solo', publicKey: toHex(id.publicKey), mesh: `/ip4/127.0.0.1/tcp/${await freePort()}`, api: `127.0.0.1:${await freePort()}` }], openSpaces: true })
    clusterFile = clusterToJson(cluster)
    relay = await runRelay({ cluster, id: 'solo', secretKey: id.secretKey, dataDir: join(dir, 'data'), logger: pino({ level: 'silent' }) })
  }, 30_000)

  afterAll(async () => {
    for (const c of clients) await c.close()
    await relay?.stop()
    rmSync(dir, { recursive: true, force: true })
  })

  const open = async (options: Partial<ClientOptions> = {}): Promise<{ client: SteadClient; errors: SteadError[] }> => {
    const client = await createClient({ relays: [relay.url.replace(/^http/, 'ws')], cluster: clusterFile, storage: memoryStorage(), ...options })
    clients.push(client)
    const errors: SteadError[] = []
    client.onError((err) => errors.push(err))
    return { client, errors }
  }

  it('loses to a later write from a client that had not seen its write, on both clients, and is told its clock is off', async () => {
    const fast = await open({ now: () => Date.now() + 3 * HOUR })
    const skew = await until('the skew warning', () => fast.errors.find((e) => isSteadError(e, 'clock-skew')))
    expect(skew.message).toMatch(/this device's clock is 2 h 59 min \d+ s ahead of|this device's clock is 3 h 0 min \d+ s ahead of/)
    expect(fast.errors.filter((e) => isSteadError(e, 'clock-skew'))).toHaveLength(1)

    const fastDoc = await fast.client.space('doc')
    const fastTitle = fastDoc.register<string>('title')
    expect(await fastTitle.set('written first, on the fast device')).toMatchObject({ status: 'stored' })
    await until('the fast write stable', () => (fastTitle.stable === 'written first, on the fast device' ? true : undefined))

    // A just-opened client on a correct clock writes before it received anything: it had not seen the fast write.
    const normal = await open()
    const normalTitle = (await normal.client.space('doc')).register<string>('title')
    expect(normalTitle.value).toBeUndefined()
    expect(await normalTitle.set('written later, on a correct clock')).toMatchObject({ status: 'stored' })

    const later = 'written later, on a correct clock'
    await until('both clients settle on the later write', () => ([fastTitle.value, fastTitle.stable, normalTitle.value, normalTitle.stable].every((v) => v === later) ? true : undefined), 10_000)
    expect(normal.errors.filter((e) => isSteadError(e, 'clock-skew'))).toEqual([])
  })

  it('is refused at the relay door when it wrote before it could measure the relays clock; the write is stamped again at the relays time and commits, and the app hears why', async () => {
    // Offline at first: the write is stamped by the device clock alone, 3 hours ahead.
    let online = false
    const fast = await open({
      now: () => Date.now() + 3 * HOUR,
      backoff: { initialMs: 20, maxMs: 50 },
      connect: (url) => {
        if (!online) throw new Error('offline (test)')
        return new WebSocket(url) as unknown as SocketLike
      },
    })
    const space = await fast.client.space('offline-doc')
    const heard: SteadError[] = []
    space.onError((err) => heard.push(err))
    const title = space.register<string>('title')
    expect(await title.set('offline, 3 h ahead')).toMatchObject({ status: 'stored' })
    online = true
    // The one relay (f = 0) refused it: final. Its sequence number is signed again with the stamp corrected, not lost.
    const corrected = await until('the correction', () => heard.find((e) => isSteadError(e, 'clock-skew') && /as clock-ahead/.test(e.message)), 10_000)
    expect(corrected.message).toMatch(/s ahead of this relay's clock .*the limit is 300 s.*stamped again at the relays' time/)
    await until('the write committed', () => (title.stable === 'offline, 3 h ahead' && space.status.pending === 0 ? true : undefined), 10_000)
    expect(heard.filter((e) => isSteadError(e, 'clock-ahead'))).toEqual([])
    // The author's chain goes on.
    expect(await space.counter('n').increment(1, { safe: true, timeoutMs: 10_000 })).toMatchObject({ status: 'committed' })
  })

  it('the relay refuses an envelope stamped past its limit with the stamp, its time and the limit, and takes one within it', async () => {
    const secretKey = new Uint8Array(32).fill(9)
    const author = { secretKey, publicKey: publicKeyOfSync(secretKey) }
    const envelope = (seq: number, t: number) =>
      sealEnvelope(nodeCrypto, author, { space: 'door', seq, clock: clockInit(), deps: [], updates: [{ key: 'r', decl: { type: 'register' }, ops: [['s', 'v', t]] }], safe: [] }).then(encodeEnvelope)
    const ahead = Date.now() + 3 * HOUR
    const frame = await envelope(1, ahead)
    let err: unknown
    try {
      relay.node.submit(frame)
    } catch (e) {
      err = e
    }
    expect(isSteadError(err, 'clock-ahead')).toBe(true)
    expect((err as Error).message).toContain(`timestamp ${ahead}`)
    expect((err as Error).message).toMatch(/(10799|10800) s ahead of this relay's clock \(\d+\); the limit is 300 s/)
    // A minute ahead is within what relays allow for clocks that disagree a little.
    expect(relay.node.submit(await envelope(1, Date.now() + 60_000)).status).toBe('queued')
  })

  it("stamps a transaction's register write later than every write of the register it saw, as a handle's write", async () => {
    // A device clock that stands still: every write reads the same time, so only the logical part can order them.
    const frozen = Date.now()
    const { client } = await open({ now: () => frozen })
    const space = await client.space('tx-stamps')
    const keys = Array.from({ length: 20 }, (_, i) => `r${i}`)
    const results: Array<Promise<unknown>> = []
    for (const key of keys) {
      await space.register<string>(key).set('first')
      results.push(space.safe((tx) => tx.register<string>(key).set('second'), { timeoutMs: 20_000 }))
    }
    expect(await Promise.all(results)).toEqual(keys.map(() => expect.objectContaining({ status: 'committed' })))
    await space.settled({ timeoutMs: 20_000 })
    expect(keys.map((k) => space.register<string>(k).stable)).toEqual(keys.map(() => 'second'))
  })
})
