/**
 * Every mistake a user can make in createClient options, and in the
 * options of the handles a space opens, is refused at the call with one
 * typed SteadError whose message names the option, what is wrong and the
 * fix: nothing is silently dropped, and nothing fails later with a bare
 * TypeError. One row per bad input.
 */
import { nodeCrypto } from '@stead/core/node'
import { SimCluster } from '@stead/sim'
import { afterAll, afterEach, describe, expect, it } from 'vitest'
import { createClient, isSteadError, memoryStorage, type ClientOptions, type Space, type SteadClient } from '../src/index.node.ts'

const open: SteadClient[] = []
let cluster: SimCluster | undefined
afterEach(async () => {
  for (const c of open.splice(0)) await c.close()
})
afterAll(async () => {
  await cluster?.close()
})

const URL = 'ws://127.0.0.1:7401'
/** Valid options but for what a row changes (memory storage, so a row that is wrongly accepted writes nothing to disk). */
const base = (): Record<string, unknown> => ({ relays: [URL], storage: memoryStorage(), crypto: nodeCrypto })

type Row = readonly [what: string, options: () => unknown, reason: string, message: string]

const rows: Row[] = [
  ['no options at all', () => undefined, 'malformed', 'options is undefined, not an object; call createClient({ relays:'],
  ['relays missing', () => ({ storage: memoryStorage() }), 'malformed', 'options.relays is missing; list the relay URLs'],
  ['relays given as one string', () => ({ ...base(), relays: URL }), 'malformed', `options.relays is the string "${URL}", not an array; wrap it in an array: relays: ["${URL}"]`],
  ['relays not an array', () => ({ ...base(), relays: { a: URL } }), 'malformed', 'options.relays is an object, not an array of URLs'],
  ['relays empty', () => ({ ...base(), relays: [] }), 'malformed', 'options.relays is empty; list at least one relay URL'],
  ['relay URL without a scheme (IP)', () => ({ ...base(), relays: ['127.0.0.1:7401'] }), 'malformed', 'options.relays[0] is "127.0.0.1:7401", which has no scheme; write "ws://127.0.0.1:7401"'],
  ['relay URL without a scheme (host name)', () => ({ ...base(), relays: [URL, 'localhost:7402'] }), 'malformed', 'options.relays[1] is "localhost:7402", which has no scheme; write "ws://localhost:7402"'],
  ['relay URL with another scheme', () => ({ ...base(), relays: ['ftp://relay.example:7401'] }), 'malformed', 'options.relays[0] is "ftp://relay.example:7401", which uses ftp://; relays speak ws://, wss://, http:// or https://: write "ws://relay.example:7401"'],
  ['relay URL not a string', () => ({ ...base(), relays: [7401] }), 'malformed', 'options.relays[0] is 7401, not a URL; give each relay as a string'],
  ['relay URL empty', () => ({ ...base(), relays: [''] }), 'malformed', 'options.relays[0] is an empty string; give the relay URL'],
  ['relay URL that does not parse', () => ({ ...base(), relays: ['ws://exa mple:7401'] }), 'malformed', 'options.relays[0] is "ws://exa mple:7401", which is not a valid URL; write it as "ws://host:port"'],
  ['relay URL with a query', () => ({ ...base(), relays: [`${URL}?token=x`] }), 'malformed', 'whose query or fragment the client would not send; give the bare "ws://host:port"'],
  ['relay listed twice', () => ({ ...base(), relays: [URL, URL] }), 'malformed', `options.relays[1] is "${URL}", the same relay as relays[0]; list each relay once`],
  ['relay listed twice, as ws:// and http://', () => ({ ...base(), relays: [URL, 'http://127.0.0.1:7401/v1/ws'] }), 'malformed', 'the same relay as relays[0]'],
  ['cluster file given as text', () => ({ ...base(), cluster: '{"f":0,"relays":[]}' }), 'malformed', 'options.cluster is a string; pass the parsed cluster file: cluster: JSON.parse(text)'],
  ['cluster without relays', () => ({ ...base(), cluster: { f: 0, relays: [] } }), 'malformed', "options.cluster relays must be a non-empty array; pass the relays' cluster file"],
  ['storage named, not given', () => ({ ...base(), storage: 'memory' }), 'malformed', 'options.storage is "memory", not a ClientStorage (no load, loadRange, write, removeRange, close); pass memoryStorage()'],
  ['storage promise of something else', () => ({ ...base(), storage: Promise.resolve({ load: () => undefined }) }), 'malformed', 'options.storage is an object, not a ClientStorage (no loadRange, write, removeRange, close)'],
  ['database that is a path', () => ({ relays: [URL], crypto: nodeCrypto, database: '../elsewhere' }), 'malformed', 'options.database is "../elsewhere", which is a path; give a plain name'],
  ['database empty', () => ({ relays: [URL], crypto: nodeCrypto, database: '' }), 'malformed', 'options.database is ""; give a name of 1 to 128 characters'],
  ['database and storage both', () => ({ ...base(), database: 'app' }), 'malformed', 'options.database names the default storage, but options.storage is given too, so it would be ignored; give one of them'],
  ['identity key of the wrong length', () => ({ ...base(), identity: { secretKey: new Uint8Array(31) } }), 'malformed', 'options.identity.secretKey is 31 bytes, not a 32-byte Uint8Array'],
  ['identity key as hex', () => ({ ...base(), identity: { secretKey: 'ab'.repeat(32) } }), 'malformed', 'options.identity.secretKey is "abab'],
  ['historyLimit negative', () => ({ ...base(), historyLimit: -1 }), 'malformed', 'options.historyLimit is -1; give a whole number from 0'],
  ['historyLimit fractional', () => ({ ...base(), historyLimit: 1.5 }), 'malformed', 'options.historyLimit is 1.5; give a whole number'],
  ['batchIntervalMs NaN', () => ({ ...base(), batchIntervalMs: Number.NaN }), 'malformed', 'options.batchIntervalMs is NaN; give milliseconds from 0'],
  ['batchIntervalMs Infinity', () => ({ ...base(), batchIntervalMs: Number.POSITIVE_INFINITY }), 'malformed', 'options.batchIntervalMs is Infinity; give milliseconds from 0'],
  ['batchIntervalMs negative', () => ({ ...base(), batchIntervalMs: -5 }), 'malformed', 'options.batchIntervalMs is -5'],
  ['batchIntervalMs as a string', () => ({ ...base(), batchIntervalMs: '10' }), 'malformed', 'options.batchIntervalMs is "10"'],
  ['maxBatchOps zero', () => ({ ...base(), maxBatchOps: 0 }), 'malformed', 'options.maxBatchOps is 0; give a whole number from 1 to 10000'],
  ['maxBatchOps past what relays take', () => ({ ...base(), maxBatchOps: 20_000 }), 'malformed', 'options.maxBatchOps is 20000; give a whole number from 1 to 10000: operations per envelope (relays take at most 10000'],
  ['resubmitAfterMs zero', () => ({ ...base(), resubmitAfterMs: 0 }), 'malformed', 'options.resubmitAfterMs is 0; give milliseconds from 1'],
  ['resubmitAfterMs past a timer', () => ({ ...base(), resubmitAfterMs: 1e12 }), 'malformed', 'options.resubmitAfterMs is 1000000000000; give milliseconds from 1 to 2147483647'],
  ['checkpointEvery zero', () => ({ ...base(), checkpointEvery: 0 }), 'malformed', 'options.checkpointEvery is 0; give a whole number from 1'],
  ['heartbeat drops before it pings', () => ({ ...base(), heartbeat: { pingAfterMs: 20_000, deadAfterMs: 15_000 } }), 'malformed', 'options.heartbeat pings after 20000 ms but drops a quiet session after 15000 ms, before any ping; make pingAfterMs smaller than deadAfterMs'],
  ['heartbeat NaN', () => ({ ...base(), heartbeat: { pingAfterMs: Number.NaN, deadAfterMs: 15_000 } }), 'malformed', 'options.heartbeat.pingAfterMs is NaN; give milliseconds above 0'],
  ['heartbeat as a number', () => ({ ...base(), heartbeat: 5000 }), 'malformed', 'options.heartbeat is 5000, not an object; give { pingAfterMs: 5000, deadAfterMs: 15000 }'],
  ['backoff max below initial', () => ({ ...base(), backoff: { initialMs: 1000, maxMs: 10 } }), 'malformed', 'options.backoff has maxMs 10 below initialMs 1000; make maxMs at least initialMs'],
  ['backoff negative', () => ({ ...base(), backoff: { initialMs: -1, maxMs: 10 } }), 'malformed', 'options.backoff.initialMs is -1'],
  ['safeTimeoutMs negative', () => ({ ...base(), safeTimeoutMs: -1 }), 'malformed', 'options.safeTimeoutMs is -1; give milliseconds from 0 to 2147483647, or Infinity'],
  ['safeTimeoutMs NaN', () => ({ ...base(), safeTimeoutMs: Number.NaN }), 'malformed', 'options.safeTimeoutMs is NaN'],
  ['crypto that is not one', () => ({ ...base(), crypto: {} }), 'malformed', 'options.crypto is not a Crypto (no generateSecretKey, publicKeyOf, sign, verify, sha256)'],
  ['connect not a function', () => ({ ...base(), connect: 'ws' }), 'malformed', 'options.connect is "ws", not a function'],
  ['fetch not a function', () => ({ ...base(), fetch: {} }), 'malformed', 'options.fetch is an object, not a function'],
  ['now as a number', () => ({ ...base(), now: 5 }), 'malformed', 'options.now is 5, not a function'],
  ['clock without timers', () => ({ ...base(), clock: { now: () => 0 } }), 'malformed', 'options.clock is an object, not a HostClock (now and setTimer)'],
  ['random as a number', () => ({ ...base(), random: 0.5 }), 'malformed', 'options.random is 0.5, not a function'],
  ['peers that are not a network', () => ({ ...base(), peers: {} }), 'malformed', 'options.peers is an object, not a PeerNetwork'],
  ['a misspelt option', () => ({ ...base(), relay: [URL] }), 'malformed', 'options.relay is not an option of createClient; did you mean relays?'],
  ['an option createClient does not have', () => ({ ...base(), timeoutMs: 5000 }), 'malformed', 'options.timeoutMs is not an option of createClient; remove it'],
]

describe('createClient refuses every bad option with one typed error naming it, the problem and the fix', () => {
  it.each(rows)('%s', async (_what, options, reason, message) => {
    let outcome: unknown
    try {
      const c = await createClient(options() as ClientOptions)
      open.push(c)
      outcome = 'accepted'
    } catch (err) {
      outcome = err
    }
    expect(isSteadError(outcome), `not a SteadError: ${String(outcome)}`).toBe(true)
    expect(outcome).toMatchObject({ reason })
    expect((outcome as Error).message).toContain(message)
    // One line, no stack in the message.
    expect((outcome as Error).message).not.toContain('\n')
  })

  it('takes what the types allow: safeTimeoutMs Infinity, historyLimit 0, an http:// relay URL, a promise of a storage', async () => {
    const c = await createClient({ relays: ['http://127.0.0.1:7401', 'wss://relay.example'], storage: Promise.resolve(memoryStorage()), crypto: nodeCrypto, safeTimeoutMs: Number.POSITIVE_INFINITY, historyLimit: 0 })
    open.push(c)
    expect(c.status.relays.map((r) => r.url)).toEqual(['http://127.0.0.1:7401', 'wss://relay.example'])
  })
})

describe('handle options: honoured or refused at the call', () => {
  async function space(): Promise<Space> {
    cluster ??= await SimCluster.start()
    const cl = await createClient(cluster.clientOptions())
    open.push(cl)
    return cl.space('bank')
  }

  type HandleRow = readonly [what: string, open: (s: Space) => unknown, message: string]
  const handleRows: HandleRow[] = [
    ['boundedCounter with initial above max', (s) => s.boundedCounter('seats', { min: 0, max: 10, initial: 11 }), 'seats: initial 11 is above max 10'],
    ['boundedCounter with max below min', (s) => s.boundedCounter('seats', { min: 5, max: 4, initial: 5 }), 'seats: initial 5 is above max 4'],
    ['boundedCounter with a fractional bound', (s) => s.boundedCounter('seats', { min: 0.5, initial: 5 }), 'seats: min must be a safe integer'],
    ['boundedCounter with no bound', (s) => s.boundedCounter('seats', { initial: 5 } as never), 'seats: boundedCounter needs a bound: boundedCounter(key, { min, initial })'],
    ['boundedCounter with no initial', (s) => s.boundedCounter('seats', { min: 0 } as never), 'seats: boundedCounter needs initial'],
    ['boundedCounter with an option it lacks', (s) => s.boundedCounter('seats', { min: 0, initial: 5, maxSize: 3 } as never), 'seats: boundedCounter has no option maxSize'],
    ['counter with initial', (s) => s.counter('n', { min: 0, initial: 5 } as never), 'n: counter has no option initial (a counter starts at 0: increment it, or use boundedCounter(key, { min, initial }))'],
    ['counter with a misspelt bound', (s) => s.counter('n', { minimum: 0 } as never), 'n: counter has no option minimum; it takes min, max, freshness'],
    ['counter with a NaN bound', (s) => s.counter('n', { min: Number.NaN }), 'n: min must be a safe integer'],
    ['counter with null options', (s) => s.counter('n', null as never), 'n: counter options must be an object, got null'],
    ['set with max instead of maxSize', (s) => s.set('tags', { max: 3 } as never), 'tags: set has no option max; it takes maxSize, freshness'],
    ['register with maxSize', (s) => s.register('title', { maxSize: 3 } as never), 'title: register has no option maxSize; it takes freshness'],
    ['register with a negative freshness', (s) => s.register('title', { freshness: -1 }), 'title: freshness is a number of milliseconds from 0 to'],
  ]

  it.each(handleRows)('%s', async (_what, openIt, message) => {
    const s = await space()
    let outcome: unknown = 'accepted'
    try {
      openIt(s)
    } catch (err) {
      outcome = err
    }
    expect(outcome).toMatchObject({ reason: 'malformed' })
    expect((outcome as Error).message).toContain(message)
  })

  it('a boundedCounter keeps both bounds it is given (the issue: a safe increment committed 105 on a counter meant to stay ≤ 10)', async () => {
    const s = await space()
    const stock = s.boundedCounter('stock', { min: 0, max: 10, initial: 5 })
    expect(stock.declaration).toEqual({ type: 'bounded-counter', params: { min: 0, max: 10, initial: 5 } })
    expect(await stock.increment(100, { safe: true })).toMatchObject({ status: 'rejected', reason: 'invariant' })
    expect(stock.stable).toBe(5)
    expect(await stock.increment(5, { safe: true })).toMatchObject({ status: 'committed' })
    expect(stock.stable).toBe(10)
    // Reaching max gave this client 5 rights to decrement; the other 5 come from the pool.
    expect(stock.rightsToDecrement).toBe(5)
    expect(await stock.decrement(11, { safe: true })).toMatchObject({ status: 'rejected', reason: 'invariant' })
    expect(await stock.decrement(10, { safe: true })).toMatchObject({ status: 'committed' })
    expect(stock.stable).toBe(0)
    expect(stock.rightsToIncrement).toBe(10)
    // Within its rights an update is regular: no round trip.
    expect(await stock.increment(3)).toMatchObject({ status: 'stored' })
    await expect(stock.transfer(1, 'someone-else')).rejects.toMatchObject({ reason: 'malformed', message: expect.stringContaining("say which rights to transfer") })
    expect(await stock.transfer(1, 'someone-else', { rights: 'increment', safe: true })).toMatchObject({ status: 'committed' })
    expect(stock.rightsToIncrement).toBe(6)
  })

  it('per-call timeoutMs: refuses a wait no timer can hold, instead of timing out at once', async () => {
    const s = await space()
    await expect(s.counter('n').increment(1, { safe: true, timeoutMs: 1e12 })).rejects.toMatchObject({ reason: 'malformed', message: expect.stringContaining('timeoutMs must be milliseconds from 0 to 2147483647, or Infinity to wait for ever; got 1000000000000') })
    await expect(s.counter('n').increment(1, { safe: true, timeoutMs: -1 })).rejects.toMatchObject({ reason: 'malformed' })
  })
})
