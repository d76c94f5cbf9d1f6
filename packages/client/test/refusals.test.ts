import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { SteadError, decode, isSteadError, openEnvelopeSync, toHex, type ErrorReason } from '@stead/core'
import { nodeCrypto, verifySync } from '@stead/core/node'
import { clusterToJson, generateIdentity, parseCluster, runRelay, type RunningRelay } from '@stead/relay'
import { freePort, until } from '@stead/relay/testing'
import pino from 'pino'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import WebSocket from 'ws'
import { createClient, lmdbStorage, memoryStorage, type ClientOptions, type Space, type SteadClient } from '../src/index.node.ts'
import { FILLER_KEY, finalRefusal, fromHome } from '../src/upstream/outbox.ts'
import type { RelayLink, SocketLike } from '../src/transport/transport.ts'

const HOUR = 3_600_000

describe('when a refusal is final', () => {
  const refusals = (...r: Array<[number, ErrorReason, string]>) => new Map(r.map(([relay, reason, detail]) => [relay, { reason, detail }]))

  it('takes f+1 distinct relays: with f = 1, one relay refusing is no verdict, two are', () => {
    expect(finalRefusal(refusals([3, 'unauthorized', 'go away']), 1)).toBeUndefined()
    expect(finalRefusal(refusals(), 1)).toBeUndefined()
    expect(finalRefusal(refusals([3, 'unauthorized', 'go away'], [0, 'clock-ahead', 'stamped 3 h ahead']), 1)).toEqual({
      reason: 'unauthorized',
      detail: 'refused by 2 relays: relay 3: unauthorized: go away; relay 0: clock-ahead: stamped 3 h ahead',
    })
    // The reason most relays gave wins; each relay's own words are kept.
    const three = finalRefusal(refusals([3, 'unauthorized', 'lie'], [0, 'clock-ahead', 'a'], [1, 'clock-ahead', 'b']), 2)
    expect(three?.reason).toBe('clock-ahead')
    expect(three?.detail).toContain('relay 3: unauthorized: lie')
  })

  it('with one relay (f = 0), at its one refusal, in its own words', () => {
    expect(finalRefusal(refusals([0, 'too-large', 'over 1 MiB']), 0)).toEqual({ reason: 'too-large', detail: 'over 1 MiB' })
  })
})

/**
 * Four real relays in this process (f = 1), over real WebSockets. A relay
 * refuses by a decorator on its node's `submit` (the relay's door): one
 * Byzantine relay that refuses everything, or every relay enforcing a rule
 * the way a policy would.
 */
describe('refusals from four relays', () => {
  const relays: RunningRelay[] = []
  const clients: SteadClient[] = []
  let dir: string
  let clusterFile: unknown
  const honest: Array<RunningRelay['node']['submit']> = []

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'stead-refusals-'))
    const ids = [0, 1, 2, 3].map(() => generateIdentity())
    const entries = []
    for (const [i, id] of ids.entries()) entries.push({ id: `r${i}`, publicKey: toHex(id.publicKey), mesh: `/ip4/127.0.0.1/tcp/${await freePort()}`, api: `127.0.0.1:${await freePort()}` })
    const cluster = parseCluster({ f: 1, relays: entries, openSpaces: true })
    clusterFile = clusterToJson(cluster)
    for (const [i, id] of ids.entries()) {
      const relay = await runRelay({ cluster, id: `r${i}`, secretKey: id.secretKey, dataDir: join(dir, `r${i}`), logger: pino({ level: 'silent' }) })
      relays.push(relay)
      honest.push(relay.node.submit.bind(relay.node))
    }
  }, 60_000)

  afterAll(async () => {
    for (const c of clients) await c.close()
    for (const r of relays) await r.stop()
    rmSync(dir, { recursive: true, force: true })
  })

  /** Relay `i` refuses what `why` names a reason for (undefined: it takes it, honestly); returns how many it refused. */
  const refuse = (i: number, why: (frame: Uint8Array) => SteadError | undefined): { count: number } => {
    const seen = { count: 0 }
    const relay = relays[i] as RunningRelay
    relay.node.submit = (frame, ...rest) => {
      const err = why(frame)
      if (!err) return (honest[i] as RunningRelay['node']['submit'])(frame, ...rest)
      seen.count++
      throw err
    }
    return seen
  }
  const honestAgain = (): void => {
    for (const [i, r] of relays.entries()) r.node.submit = honest[i] as RunningRelay['node']['submit']
  }

  const urls = (): string[] => relays.map((r) => r.url.replace(/^http/, 'ws'))
  const open = async (name: string, options: Partial<ClientOptions> = {}): Promise<{ client: SteadClient; space: Space; errors: SteadError[] }> => {
    const client = await createClient({ relays: urls(), cluster: clusterFile, storage: memoryStorage(), ...options })
    clients.push(client)
    const space = await client.space(name)
    const errors: SteadError[] = []
    space.onError((err) => errors.push(err))
    return { client, space, errors }
  }
  const allConnected = (space: Space) => (space.status.relays.every((r) => r.connected) ? true : undefined)
  /** A space name whose home relay (the first its envelopes go to) is relay `i`. */
  const homedAt = (i: number, prefix: string): string => {
    const links = [0, 1, 2, 3].map((relay) => ({ relay }) as RelayLink)
    for (let n = 0; ; n++) if (fromHome(`${prefix}-${n}`, 4, links)[0]?.relay === i) return `${prefix}-${n}`
  }
  const touches = (frame: Uint8Array, key: string): boolean => openEnvelopeSync({ sha256: (d) => nodeCrypto.sha256(d), verify: verifySync }, decode(frame)).updates.some((u) => u.key === key)

  it('one Byzantine relay refusing everything as unauthorized cannot censor an update: it goes on to the others and commits', async () => {
    const liar = refuse(3, () => new SteadError('unauthorized', 'this relay lies: it refuses everything'))
    try {
      const { space, errors } = await open(homedAt(3, 'censored'))
      await until('all four relays connected', () => allConnected(space), 30_000)
      const n = space.counter('n')
      // Its home relay is the liar: the first relay it goes to refuses it.
      expect(await n.increment(5, { safe: true, timeoutMs: 30_000 })).toMatchObject({ status: 'committed' })
      expect(liar.count).toBeGreaterThan(0)
      await space.register<string>('title').set('kept')
      await until('the regular write stable', () => (space.register<string>('title').stable === 'kept' ? true : undefined), 30_000)
      expect(n.stable).toBe(5)
      expect(errors.filter((e) => isSteadError(e, 'unauthorized'))).toEqual([])
    } finally {
      honestAgain()
    }
  }, 60_000)

  it('an envelope every relay refuses is refused for good, and the author goes on: its next update commits (the refused seq is filled)', async () => {
    const why = (frame: Uint8Array) => (touches(frame, 'forbidden') ? new SteadError('unauthorized', 'nobody may write forbidden') : undefined)
    const counts = [0, 1, 2, 3].map((i) => refuse(i, why))
    try {
      const { space, errors } = await open(homedAt(0, 'refused'))
      await until('all four relays connected', () => allConnected(space), 30_000)
      const forbidden = space.counter('forbidden')
      const settled: string[] = []
      space.onSettled((u) => settled.push(u.keys.join(',')))
      expect(await forbidden.increment(1)).toMatchObject({ status: 'stored' })
      const refused = await until('the refusal', () => errors.find((e) => isSteadError(e, 'unauthorized')), 30_000)
      await until('undone here', () => (forbidden.value === 0 ? true : undefined))
      // The next update of this author in the space: behind the refused seq, it would wait for ever.
      const n = space.counter('n')
      expect(await n.increment(2, { safe: true, timeoutMs: 30_000 })).toMatchObject({ status: 'committed' })
      expect(n.stable).toBe(2)
      // f+1 = 2 relays refused it, each in its own words.
      expect(refused.message).toMatch(/refused by 2 relays: relay 0: unauthorized: nobody may write forbidden; relay 1: unauthorized: nobody may write forbidden/)
      expect(counts.reduce((k, c) => k + c.count, 0)).toBe(2)
      expect(forbidden.stable).toBe(0)
      await until('nothing pending', () => (space.status.pending === 0 ? true : undefined), 30_000)
      // The filler is nobody's update: the app hears of its own two only.
      expect(settled).toEqual(['forbidden', 'n'])
      expect(space.set(FILLER_KEY).stable).toEqual([])
    } finally {
      honestAgain()
    }
  }, 60_000)

  it('a client restarted after a refusal sends the filler, not the refused envelope, and its chain goes on', async () => {
    const store = join(dir, 'client-store')
    const name = homedAt(2, 'restart')
    try {
      // Every relay refuses `forbidden` for good, and is too busy for anything else: the filler is made and stays undecided.
      for (const i of [0, 1, 2, 3]) refuse(i, (frame) => (touches(frame, 'forbidden') ? new SteadError('unauthorized', 'nobody may write forbidden') : new SteadError('rate-limited', 'busy (test)')))
      const first = await open(name, { storage: lmdbStorage(store) })
      await until('all four relays connected', () => allConnected(first.space), 30_000)
      expect(await first.space.counter('forbidden').increment(1)).toMatchObject({ status: 'stored' })
      await until('the refusal', () => first.errors.find((e) => isSteadError(e, 'unauthorized')), 30_000)
      await until('the filler made and stored', () => (first.space.pendingUpdates().length === 1 && first.space.pendingUpdates()[0]?.keys.length === 0 ? true : undefined), 30_000)
      await first.client.close()
      clients.splice(clients.indexOf(first.client), 1)
    } finally {
      honestAgain()
    }
    // Back, against honest relays: storage held the filler alone, and after it the chain goes on.
    const back = await open(name, { storage: lmdbStorage(store) })
    expect(back.space.pendingUpdates()).toEqual([expect.objectContaining({ keys: [], regular: 0, safe: 0 })])
    const n = back.space.counter('n')
    expect(await n.increment(3, { safe: true, timeoutMs: 30_000 })).toMatchObject({ status: 'committed' })
    expect(back.space.counter('forbidden').stable).toBe(0)
    await until('nothing pending', () => (back.space.status.pending === 0 ? true : undefined), 30_000)
  }, 90_000)

  it('a register write stamped 3 hours ahead, refused as clock-ahead by f+1 relays, commits stamped at the relays time, and the update after it commits too', async () => {
    let online = false
    const { space, errors } = await open(homedAt(1, 'fast'), {
      now: () => Date.now() + 3 * HOUR,
      backoff: { initialMs: 20, maxMs: 50 },
      connect: (url) => {
        if (!online) throw new Error('offline (test)')
        return new WebSocket(url) as unknown as SocketLike
      },
    })
    // Offline: stamped by the device clock alone, 3 hours ahead.
    const title = space.register<string>('title')
    expect(await title.set('written offline, 3 h ahead')).toMatchObject({ status: 'stored' })
    online = true
    await until('all four relays connected', () => allConnected(space), 30_000)
    const n = space.counter('n')
    expect(await n.increment(1, { safe: true, timeoutMs: 30_000 })).toMatchObject({ status: 'committed' })
    await until('the register write stable', () => (title.stable === 'written offline, 3 h ahead' ? true : undefined), 30_000)
    const warning = errors.find((e) => isSteadError(e, 'clock-skew') && /refused envelope 1 as clock-ahead/.test(e.message))
    expect(warning?.message).toMatch(/refused by 2 relays: .*s ahead of this relay's clock/)
    expect(warning?.message).toMatch(/stamped again at the relays' time/)
    expect(errors.filter((e) => isSteadError(e, 'clock-ahead'))).toEqual([])
  }, 60_000)
})
