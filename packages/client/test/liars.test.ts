import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { TestCluster, until } from '@stead/relay/testing'
import { nodeCrypto } from '@stead/core/node'
import { fetchVerifiedDelta, fetchVerifiedObject } from '../src/upstream/bootstrap.ts'
import { fetchCluster } from '../src/transport/cluster.ts'
import { fromHome } from '../src/upstream/outbox.ts'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { ReliableReplica } from '@stead/core'
import { createClient, lmdbStorage, memoryStorage, type ClientOptions, type Space, type SteadClient } from '../src/index.node.ts'

/**
 * The SDK against four real relay processes of which one lies to its
 * clients (`stead-relay start --byzantine MODE`, relay/src/faults/client-lies.ts).
 * Clients list the liar first, so it is the relay they try first for
 * everything. For every lie: trust on first use still pins the true
 * cluster, a safe update resolves with the right outcome, another client
 * sees it, and a quorum read returns it; lies a client can prove get the
 * liar marked faulty. Then every mode again with seven relays and two
 * liars at a time.
 */
const LIAR = 3
/** The relay a space's clients take its feed from first. */
const homeOf = (space: string, n: number): number => fromHome(space, n, Array.from({ length: n }, (_, relay) => ({ relay })) as never)[0]!.relay as number
const MODES: Array<{ mode: string; exposed?: RegExp }> = [
  { mode: 'lie-attest', exposed: /attested|attestation/ },
  { mode: 'stale-head' },
  { mode: 'replay-head' },
  { mode: 'withhold-commits' },
  { mode: 'withhold-envelopes' },
  { mode: 'forge-envelope' },
  { mode: 'wrong-object' },
  { mode: 'wrong-cluster', exposed: /cluster descriptor/ },
  { mode: 'slow' },
  { mode: 'junk', exposed: /undecodable/ },
  { mode: 'inflate-head' },
  { mode: 'pad-frames' },
  { mode: 'name-unsent' },
  { mode: 'censor' },
  { mode: 'impostor', exposed: /did not prove it holds/ },
  { mode: 'rechallenge', exposed: /second challenge/ },
  { mode: 'forge-snapshot' },
  { mode: 'mismatched-snapshot' },
]

/** A safe update's outcomes, a quorum read at once on another client, and that client seeing it, on a fresh space of two fresh clients. */
async function exercise(open: (space: string) => Promise<Space>, space: string): Promise<[Space, Space]> {
  const [writer, reader] = [await open(space), await open(space)]
  await until('both clients online', () => (writer.status.online && reader.status.online ? true : undefined), 30_000)
  expect(writer.status.trusted).toBe(true)
  const seen = reader.counter('n', { min: 0 })
  const n = writer.counter('n', { min: 0 })
  expect(await n.increment(10, { safe: true })).toMatchObject({ status: 'committed' })
  expect(await n.decrement(25, { safe: true })).toMatchObject({ status: 'rejected', reason: 'invariant' })
  expect(await n.decrement(4, { safe: true })).toMatchObject({ status: 'committed' })
  expect(n.stable).toBe(6)
  // Linearizable: a quorum read that starts after the safe update resolved includes it, on another
  // client that may not have applied it yet (and whatever the liars answer).
  expect(await reader.readStable('n', { quorum: true, timeoutMs: 20_000 })).toBe(6)
  await until('the other client sees it', () => (seen.stable === 6 ? true : undefined), 30_000)
  expect(seen.value).toBe(6)
  return [writer, reader]
}

/**
 * n honest relays started once for the enclosing describe block; `open` makes
 * a client that lists them in `order` (the liars first), `lie` restarts one in
 * `--byzantine modes`.
 */
function liarCluster(n: number, order: readonly number[]) {
  let cluster: TestCluster
  const owners: SteadClient[] = []
  const spaces = new Map<Space, SteadClient>()
  beforeAll(async () => {
    cluster = await TestCluster.create(n, { openSpaces: true })
    await cluster.startAll()
  }, 120_000)
  afterAll(async () => {
    for (const c of owners) await c.close()
    await cluster?.stopAll()
  })
  return {
    open: async (space: string, storage = memoryStorage(), fetchFn?: ClientOptions['fetch']): Promise<Space> => {
      const client = await createClient({ relays: order.map((i) => `ws://${cluster.relays[i]!.api}`), storage, ...(fetchFn && { fetch: fetchFn }) })
      owners.push(client)
      const opened = await client.space(space)
      spaces.set(opened, client)
      return opened
    },
    /** Closes the client a space of `open` belongs to, as an app shutting down does. */
    closeOwner: async (space: Space): Promise<void> => {
      const client = spaces.get(space) as SteadClient
      owners.splice(owners.indexOf(client), 1)
      await client.close()
    },
    urls: (): string[] => order.map((i) => `http://${cluster.relays[i]!.api}`),
    lie: async (i: number, modes: string): Promise<void> => {
      cluster.kill(i)
      cluster.start(i, ['--byzantine', modes])
      await cluster.waitHealthy(i)
    },
  }
}

describe('clients against a relay that lies to them', () => {
  const { open, lie, urls, closeOwner } = liarCluster(4, [LIAR, 0, 1, 2])

  it('wrong-object: a proven object read refuses the state the liar serves (its path does not lead to the attested hash) and takes a true one', async () => {
    await lie(LIAR, 'wrong-object')
    const writer = await open('liar-object')
    await until('online', () => (writer.status.online ? true : undefined), 30_000)
    const n = writer.counter('n')
    for (let i = 0; i < 3; i++) await n.increment(2, { safe: true })
    const blamed: Array<[string, string]> = []
    const relays = urls()
    const cluster = await fetchCluster(relays, fetch)
    const read = (key: string, atLeast: number) =>
      fetchVerifiedObject({ space: 'liar-object', cluster, crypto: nodeCrypto, fetch, headers: {}, relays: relays.map((url, i) => ({ relay: [LIAR, 0, 1, 2][i], url })), timeoutMs: 10_000, faulty: (url, why) => blamed.push([url, why]) }, key, atLeast)
    const found = await read('n', 3)
    expect(found).toMatchObject({ value: 6 })
    expect(found!.index).toBeGreaterThanOrEqual(3)
    expect(blamed).toEqual([[relays[0], expect.stringMatching(/does not lead to the state hash/)]])
    // Absent objects lie nothing to change: every relay proves them absent, the liar too.
    expect(await read('never-written', 0)).toMatchObject({ value: undefined })
    expect(blamed).toHaveLength(1)
    // Nobody at or past an index no relay reached: nothing proven, nobody blamed.
    expect(await read('n', 1_000_000)).toBeUndefined()
    expect(blamed).toHaveLength(1)
  }, 120_000)

  it('forge-snapshot: a fresh client refuses the snapshot the liar attests under its own signature, reports it, and starts from a true one, never showing the forged state', async () => {
    await lie(LIAR, 'forge-snapshot')
    const writer = await open('liar-snapshot')
    for (let i = 0; i < 5; i++) await writer.counter('n').increment(10, { safe: true })
    // The fresh client asks first whichever relay's session was ready first, then the others in
    // their listed order (the liar first). So that the liar is always asked, an honest relay asked
    // before it fails to answer (as one that cannot be reached does); after it, honest ones answer.
    const liarUrl = urls()[0] as string
    let liarAsked = false
    let trueAnswers = 0
    const liarFirst: ClientOptions['fetch'] = async (url, init) => {
      if (new URL(url).pathname !== '/v1/spaces/liar-snapshot/snapshot') return fetch(url, init)
      if (url.startsWith(liarUrl)) liarAsked = true
      else if (!liarAsked) throw new TypeError('not reached before the liar (the test holds honest snapshots back until it was asked)')
      else trueAnswers++
      return fetch(url, init)
    }
    const fresh = await open('liar-snapshot', memoryStorage(), liarFirst)
    const n = fresh.counter('n')
    const shown: number[] = []
    n.subscribe(() => shown.push(n.value))
    await until('the liar reported', () => fresh.status.relays[0]?.faulty, 30_000)
    expect(fresh.status.relays[0]?.faulty).toMatch(/attested differently/)
    await until('the true state', () => (n.stable === 50 ? true : undefined), 30_000)
    // It started from a true snapshot an honest relay served after the liar's was refused.
    expect(trueAnswers).toBeGreaterThanOrEqual(1)
    expect(shown.every((v) => v === 0 || v === 50)).toBe(true)
    expect(n.value).toBe(50)
    for (const r of fresh.status.relays.slice(1)) expect(r.faulty).toBeUndefined()
  }, 120_000)

  it('wrong-delta: a delta whose result does not lead to the attested hash is refused and its relay reported; a client back after a while catches up from a true one', async () => {
    await lie(LIAR, 'wrong-delta')
    const writer = await open('liar-delta')
    await until('online', () => (writer.status.online ? true : undefined), 30_000)
    const n = writer.counter('n')
    await n.increment(1, { safe: true })
    const dir = mkdtempSync(join(tmpdir(), 'stead-liar-delta-'))
    const away = await open('liar-delta', lmdbStorage(dir))
    await until('the other client caught up', () => (away.counter('n').stable === 1 ? true : undefined), 30_000)
    await closeOwner(away)
    for (let i = 0; i < 8; i++) await n.increment(2, { safe: true })
    await writer.set('s').add('x', { safe: true })
    const blamed: Array<[string, string]> = []
    const relays = urls()
    const cluster = await fetchCluster(relays, fetch)
    const replica = new ReliableReplica({ space: 'liar-delta' })
    const found = await fetchVerifiedDelta({ space: 'liar-delta', cluster, crypto: nodeCrypto, fetch, headers: {}, relays: relays.map((url, i) => ({ relay: [LIAR, 0, 1, 2][i], url })), timeoutMs: 10_000, faulty: (url, why) => blamed.push([url, why]) }, replica)
    expect(found).toBeDefined()
    replica.applyDelta((b) => nodeCrypto.sha256(b), found!.delta, found!.attestation.round)
    expect(replica.stableValue('n')).toBe(17)
    expect(blamed).toEqual([[relays[0], expect.stringMatching(/delta that proves nothing/)]])
    // The SDK the same way: back from storage, it ends at the true state whichever relay it asked first.
    const back = await open('liar-delta', lmdbStorage(dir))
    await until('back at the true state', () => (back.counter('n').stable === 17 && back.set('s').stable.length === 1 ? true : undefined), 30_000)
    expect(back.counter('n').value).toBe(17)
  }, 120_000)

  it('a paced reader (BENDY on the live stream) follows the writer through certified deltas, and a liar that paces it (wrong-delta, lie-attest) is reported and passed over', async () => {
    await lie(LIAR, 'wrong-delta,lie-attest')
    // A space whose home relay, the one that paces it, is the liar.
    let space = 'paced'
    for (let i = 0; homeOf(space, 4) !== LIAR; i++) space = `paced-${i}`
    const writer = await open(space)
    const reader = await open(space)
    await until('online', () => (writer.status.online && reader.status.online ? true : undefined), 30_000)
    reader.setFreshness(300)
    const n = reader.counter('n')
    const seen: number[] = []
    n.subscribe(() => seen.push(n.stable))
    for (let i = 1; i <= 5; i++) await writer.counter('n').increment(i, { safe: true })
    await until('the reader at the writer state', () => (n.stable === 15 ? true : undefined), 60_000)
    expect(n.value).toBe(15)
    expect(reader.status.relays[0]?.faulty).toMatch(/delta/)
    // Only states the writer went through: the stable value climbed through sums of its increments.
    expect(seen.every((v) => [0, 1, 3, 6, 10, 15].includes(v))).toBe(true)
    for (const r of reader.status.relays.slice(1)) expect(r.faulty).toBeUndefined()
  }, 120_000)

  for (const { mode, exposed } of MODES) {
    it(`${mode}: trust, safe updates, subscriptions and quorum reads stay right${exposed ? ', and the liar is reported' : ''}`, async () => {
      await lie(LIAR, mode)
      const [writer, reader] = await exercise(open, `liar-${mode}`)
      if (exposed) {
        await until('the liar reported', () => writer.status.relays[0]?.faulty ?? reader.status.relays[0]?.faulty, 30_000)
        expect(writer.status.relays[0]?.faulty ?? reader.status.relays[0]?.faulty).toMatch(exposed)
      }
      // Honest relays are never blamed.
      for (const c of [writer, reader]) for (const r of c.status.relays.slice(1)) expect(r.faulty).toBeUndefined()
    }, 120_000)
  }
})

describe('clients against seven relays, two of which lie', () => {
  const { open, lie } = liarCluster(7, [5, 6, 0, 1, 2, 3, 4])

  // Every client-facing mode once, two liars at a time (r6 and r7), the first pair also lying to relays.
  const pairs: Array<[string, string]> = [
    ['equivocate,lie-attest,forge-envelope', 'withhold-commits,replay-head,slow'],
    ['stale-head,wrong-object', 'withhold-envelopes'],
    ['wrong-cluster', 'junk'],
  ]
  for (const [r6, r7] of pairs) {
    it(`${r6} and ${r7}: trust, safe updates, subscriptions and quorum reads stay right`, async () => {
      await Promise.all([lie(5, r6), lie(6, r7)])
      const [writer, reader] = await exercise(open, `liars-${r6}-${r7}`.replaceAll(',', '-'))
      const exposing = [r6, r7].map((modes) => MODES.some((m) => m.exposed && modes.split(',').includes(m.mode)))
      for (const [k, exposed] of exposing.entries()) {
        if (exposed) await until(`r${6 + k} reported`, () => writer.status.relays[k]?.faulty ?? reader.status.relays[k]?.faulty, 30_000)
      }
      for (const c of [writer, reader]) for (const r of c.status.relays.slice(2)) expect(r.faulty).toBeUndefined()
    }, 180_000)
  }
})
