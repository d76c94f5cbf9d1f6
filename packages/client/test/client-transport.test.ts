import { nodeCrypto } from '@stead/core/node'
import type { ClientTraffic, SimCluster, SimRelay } from '@stead/sim'
import { describe, expect, it } from 'vitest'
import { memoryStorage, type Space } from '../src/index.node.ts'
import type { Fetch } from '../src/transport/cluster.ts'
import { commitUntil, committing, simWorld } from './helpers/sim-world.ts'

/**
 * Sessions, heartbeats and frame sources, and whom the client trusts,
 * against real relays in simulated time; lying relays are the relay's own
 * `--byzantine` modes towards clients (ClientFacingLiar).
 */
const world = simWorld()

/** The fetch a client of `c` is given (its relays' HTTP API). */
const fetchOf = (c: SimCluster): Fetch => c.clientOptions().fetch as Fetch

describe('transport', () => {
  it('drops a session that goes quiet and reconnects; follows the browser offline and online events', async () => {
    const c = await world.cluster()
    // Node has no window events; lend it an EventTarget as a browser's globalThis would have.
    const win = new EventTarget()
    const g = globalThis as { addEventListener?: unknown; removeEventListener?: unknown }
    g.addEventListener = win.addEventListener.bind(win)
    g.removeEventListener = win.removeEventListener.bind(win)
    const a = await world.client(c, { heartbeat: { pingAfterMs: 20, deadAfterMs: 120 }, resubmitAfterMs: 80 })
    delete g.addEventListener
    delete g.removeEventListener
    await c.until('online', () => a.status.online)
    // Relay 0's socket stays open but nothing comes back: a network that vanished under it.
    c.relays[0]?.silence()
    await c.until('relay 0 dropped', () => a.status.relays[0]?.connected === false, 5000)
    await c.until('relay 0 back', () => a.status.relays[0]?.connected === true, 5000)
    // The browser says the device is offline: sessions close; back online: they reconnect at once.
    win.dispatchEvent(new Event('offline'))
    expect(a.status.online).toBe(false)
    win.dispatchEvent(new Event('online'))
    await c.until('online again', () => a.status.online, 5000)
  })

  it('queues offline, keeps values readable and writable, and syncs on reconnect', async () => {
    const c = await world.cluster()
    for (const r of c.relays) await r.down()
    const a = await world.client(c)
    const alice = a.counter('acct:alice')
    for (let i = 0; i < 10; i++) await alice.increment(1)
    expect(alice.value).toBe(10)
    expect(a.status.online).toBe(false)
    expect(a.status.pending).toBeGreaterThan(0)
    for (const r of c.relays) await r.up()
    await c.until('reconnected', () => a.status.online, 5000)
    await a.flush()
    await commitUntil(c, 'stable 10', () => alice.stable === 10)
    // Applied at f+1 attestations; decided (no longer pending) at 2f+1.
    await c.until('nothing pending', () => a.status.pending === 0)
  })

  it('reconnects after relays drop sessions, and catches up on missed commits', async () => {
    const c = await world.cluster()
    const a = await world.client(c)
    const b = await world.client(c)
    await c.until('online', () => a.status.online && b.status.online)
    for (const r of c.relays) r.dropClients()
    await c.until('a offline', () => !a.status.online)
    await b.counter('k').increment(3)
    await c.until('b online', () => b.status.online)
    await b.flush()
    await commitUntil(c, 'a sees 3', () => a.counter('k').stable === 3)
    expect(a.status.relays.every((r) => r.connected)).toBe(true)
  })

  it('resubmits to another relay when one accepts but never includes an envelope', async () => {
    const c = await world.cluster()
    for (const r of c.relays.slice(0, 3)) await r.lie('censor')
    const a = await world.client(c)
    await c.until('online', () => a.status.online)
    const r = a.counter('acct').increment(1, { safe: true })
    const stop = committing(c)
    expect(await r).toMatchObject({ status: 'committed' })
    stop()
    expect(c.submitted.size).toBeGreaterThanOrEqual(1)
  })

  it('refuses a relay that names its pinned key but cannot sign the client\'s nonce with it, and works with the others', async () => {
    const c = await world.cluster()
    await c.relays[2]?.lie('impostor')
    const a = await world.client(c)
    await c.until('impostor reported', () => a.status.relays[2]?.faulty !== undefined)
    expect(a.status.relays[2]?.faulty).toMatch(/did not prove it holds relay 2's key/)
    // The others connect on their own time (the impostor may be found first): wait for them, do not assume it.
    await c.until('the three others connected', () => a.status.relays.filter((r) => r.faulty === undefined && r.connected).length === 3)
    expect(a.status.relays[2]?.connected).toBeFalsy()
    const stop = committing(c)
    expect(await a.counter('acct').increment(1, { safe: true })).toMatchObject({ status: 'committed' })
    stop()
  })

  // With a synchronous verify the welcome is checked before the second challenge arrives; with an async one
  // (as WebCrypto) the second challenge comes while the welcome is still being checked.
  it.each([
    ['after its welcome', false, /second challenge \(as relay 1\) after its welcome as relay 0/],
    ['while it still checks the welcome (an async verify)', true, /second challenge \(as relay 1\)/],
  ] as const)('refuses a relay that challenges again, as another relay, %s, and blames no one else', async (_when, slowVerify, reported) => {
    const c = await world.cluster()
    await c.relays[0]?.lie('rechallenge')
    const slow = { ...nodeCrypto, verify: async (pk: Uint8Array, message: Uint8Array, sig: Uint8Array) => (await c.advance(10), nodeCrypto.verify(pk, message, sig)) }
    const a = await world.client(c, slowVerify ? { crypto: slow } : {})
    await c.until('reported', () => a.status.relays[0]?.faulty !== undefined)
    expect(a.status.relays[0]?.faulty).toMatch(reported)
    const stop = committing(c)
    expect(await a.counter('acct').increment(1, { safe: true })).toMatchObject({ status: 'committed' })
    stop()
    expect(a.status.relays.slice(1).every((r) => r.faulty === undefined)).toBe(true)
  })

  it('believes f+1 matching attestations, ignores and reports a relay that attests something else', async () => {
    const c = await world.cluster()
    await c.relays[0]?.lie('lie-attest')
    const a = await world.client(c)
    await c.until('online', () => a.status.online)
    const res = a.counter('acct').increment(4, { safe: true })
    const stop = committing(c)
    expect(await res).toMatchObject({ status: 'committed' })
    await c.until('liar reported', () => a.status.relays.some((r) => r.faulty !== undefined))
    stop()
    expect(a.status.relays[0]?.faulty).toMatch(/attested round \d+ differently/)
    expect(a.status.problem).toBeUndefined()
    expect(a.counter('acct').stable).toBe(4)
  })

  it('reports a relay whose differing attestation of a commit comes only after the commit was applied', async () => {
    // Found by the real-process liars test: a lie that arrived late was dropped unchecked.
    const c = await world.cluster()
    const liar = c.relays[0] as SimRelay
    await liar.lie('withhold-commits')
    const a = await world.client(c)
    await c.until('online', () => a.status.online)
    const res = a.counter('acct').increment(4, { safe: true })
    const stop = committing(c)
    expect(await res).toMatchObject({ status: 'committed' })
    stop()
    expect(a.status.relays[0]?.faulty).toBeUndefined()
    // It lies now, and says so of the commit the client applied when its session resubscribes.
    await liar.lie('lie-attest')
    liar.dropClients()
    await c.until('late liar reported', () => a.status.relays[0]?.faulty !== undefined)
    expect(a.status.relays[0]?.faulty).toMatch(/attested round \d+ differently/)
    for (const r of a.status.relays.slice(1)) expect(r.faulty).toBeUndefined()
    expect(a.counter('acct').stable).toBe(4)
  })

  it('does not advance on f attestations alone, nor on frames that do not match the attested batch', async () => {
    const c = await world.cluster()
    const set = (i: number, m: 'none' | 'silent' | 'forge-frames'): Promise<void> => (c.relays[i] as SimRelay).lie(...(m === 'none' ? [] : m === 'silent' ? (['withhold-commits'] as const) : (['withhold-envelopes'] as const)))
    await set(0, 'forge-frames')
    await set(1, 'silent')
    await set(2, 'silent')
    await set(3, 'silent')
    const a = await world.client(c)
    await c.until('online', () => a.status.online)
    await a.counter('k').increment(1)
    await a.flush()
    await commitUntil(c, 'committed', () => c.relays.every((r) => r.node.reads.stableHead('bank').index === 1))
    await c.advance(30)
    expect(a.status.stableIndex).toBe(0) // one attestation: f, not f+1
    await set(3, 'forge-frames')
    c.relays[3]?.dropClients() // its resubscription replays the commit
    await c.until('relay 3 back', () => a.status.relays[3]?.connected === true)
    await c.advance(30)
    expect(a.status.stableIndex).toBe(0) // f+1 genuine attestations, but no frames that match them
    await set(1, 'none')
    c.relays[1]?.dropClients()
    await c.until('stable', () => a.counter('k').stable === 1)
    expect(a.status.problem).toBeUndefined()
  })

  it('downloads each update once: envelope frames from one relay, attestations from the others', async () => {
    const c = await world.cluster()
    const a = await world.client(c)
    const b = await world.client(c)
    await c.until('online', () => a.status.online && b.status.online)
    // Every relay ready and followed: the author's home relay is the source by now.
    await c.until('all relays connected', () => [a, b].every((s) => s.status.relays.every((r) => r.connected)))
    await c.advance(20)
    const before = c.relays.map((r) => ({ ...r.traffic }))
    await a.counter('k').increment(1)
    await a.flush()
    await c.until('b sees it', () => b.counter('k').value === 1)
    await commitUntil(c, 'stable at both', () => a.counter('k').stable === 1 && b.counter('k').stable === 1)
    const sent = (what: 'envelopes' | 'commits' | 'attests') => c.relays.reduce((n, r, i) => n + r.traffic[what] - (before[i] as ClientTraffic)[what], 0)
    // Two clients, one envelope: each gets it once, early, and the commit names it by id (four relays used to send it
    // sixteen times; one relay sending it early and in the commit, four); the attestation comes in full from its source
    // and as a signature alone from the three others.
    expect(sent('envelopes')).toBe(2)
    expect(sent('commits')).toBe(2)
    expect(sent('attests')).toBe(6)
  })

  it('counts compact attestations only for the bytes f+1 relays signed, and marks a relay whose signature matches no settled attestation', async () => {
    const c = await world.cluster()
    const a = await world.client(c)
    await c.until('all relays connected', () => a.status.relays.every((r) => r.connected))
    await c.advance(20)
    const source = c.relays.find((r) => r.sendsFramesTo(a.authorId)) as SimRelay
    const liar = c.relays.find((r) => r !== source) as SimRelay
    await liar.lie('lie-attest')
    const res = a.counter('acct').increment(4, { safe: true })
    const stop = committing(c)
    expect(await res).toMatchObject({ status: 'committed' })
    await c.until('liar reported', () => a.status.relays[liar.index]?.faulty !== undefined)
    stop()
    expect(a.status.relays[liar.index]?.faulty).toMatch(/signature does not match/)
    expect(a.status.relays.filter((r) => r.faulty)).toHaveLength(1)
    expect(a.status.problem).toBeUndefined()
    expect(a.counter('acct').stable).toBe(4)
  })

  it('passes over a frame source that withholds frames, and marks one that sends frames its attestation does not bind', async () => {
    const c = await world.cluster()
    const a = await world.client(c)
    const b = await world.client(c)
    await c.until('online', () => a.status.online && b.status.online)
    await c.until('all relays connected', () => b.status.relays.every((r) => r.connected))
    await c.advance(20)
    const sourceOf = (s: Space): SimRelay => c.relays.find((r) => r.sendsFramesTo(s.authorId)) as SimRelay
    const first = sourceOf(b)
    await first.lie('withhold-envelopes')
    await a.counter('k').increment(1)
    await a.flush()
    await commitUntil(c, 'b stable after passing over its source', () => b.counter('k').stable === 1)
    expect(sourceOf(b)).not.toBe(first)
    expect(b.status.relays[first.index]?.faulty).toBeUndefined() // withholding proves nothing
    const second = sourceOf(b)
    await second.lie('pad-frames')
    await a.counter('k').increment(1)
    await a.flush()
    await commitUntil(c, 'b stable after dropping a lying source', () => b.counter('k').stable === 2)
    expect(b.status.relays[second.index]?.faulty).toMatch(/does not bind/)
    expect(b.status.problem).toBeUndefined()
  })

  it('marks a frame source whose commit names by id an envelope it never sent, and takes the commit from another', async () => {
    const c = await world.cluster()
    const a = await world.client(c)
    const b = await world.client(c)
    await c.until('online', () => a.status.online && b.status.online)
    await c.until('all relays connected', () => a.status.relays.every((r) => r.connected) && b.status.relays.every((r) => r.connected))
    await a.counter('k').increment(1)
    await a.flush()
    await commitUntil(c, 'a and b stable', () => a.counter('k').stable === 1 && b.counter('k').stable === 1)
    const source = c.relays.find((r) => r.sendsFramesTo(b.authorId)) as SimRelay
    await source.lie('name-unsent')
    await a.counter('k').increment(1)
    await a.flush()
    await commitUntil(c, 'b stable from another source', () => b.counter('k').stable === 2)
    expect(b.status.relays[source.index]?.faulty).toMatch(/without having sent it/)
    expect(b.status.problem).toBeUndefined()
  })

  it('answers quorum reads with a stable value at least as fresh as f+1 relays report', async () => {
    const c = await world.cluster()
    const a = await world.client(c)
    const b = await world.client(c)
    await c.until('online', () => a.status.online && b.status.online)
    await b.counter('k').increment(2)
    await b.flush()
    // Left running: heads are proven by f+1 relays' signatures, gathered over the mesh.
    c.release()
    await c.until('committed at every relay', () => c.relays.every((r) => r.stableValue('bank', 'k') === 2))
    // a may not have applied the commit yet; the quorum read waits for it.
    expect(await a.readStable('k', { quorum: true })).toBe(2)
    expect(await a.readStable('k')).toBe(2)
  })
})

describe('trust', () => {
  it('pins the cluster all relays agree on when none is given', async () => {
    const c = await world.cluster()
    const storage = memoryStorage()
    const a = await world.client(c, { cluster: undefined, storage })
    await c.until('trusted', () => a.status.trusted && a.status.online)
    expect(a.status.relays.map((r) => r.relay)).toEqual(['r1', 'r2', 'r3', 'r4'])
  })

  it('trusts on first use the descriptor 2f+1 relays agree on, and marks a dissenting relay faulty', async () => {
    const c = await world.cluster()
    const other = await world.cluster({ seed: 2 })
    const fetchMixed: Fetch = async (url) => (url.includes('relay3') ? fetchOf(other)(url) : fetchOf(c)(url))
    const a = await world.client(c, { cluster: undefined, fetch: fetchMixed })
    await c.until('online', () => a.status.online)
    expect(a.status.trusted).toBe(true)
    await c.until('relay 3 flagged', () => a.status.relays[3]?.faulty !== undefined)
    expect(a.status.relays[3]?.faulty).toMatch(/cluster descriptor/)
    const stop = committing(c)
    expect(await a.counter('k').increment(1, { safe: true })).toMatchObject({ status: 'committed' })
    stop()
  })

  it('trusts no cluster while relays disagree without a 2f+1 quorum, and says why', async () => {
    const c = await world.cluster()
    const other = await world.cluster({ seed: 2 })
    const fetchMixed: Fetch = async (url) => (url.includes('relay3') || url.includes('relay2') ? fetchOf(other)(url) : fetchOf(c)(url))
    const a = await world.client(c, { cluster: undefined, fetch: fetchMixed })
    await c.until('problem', () => /different descriptors/.test(a.status.problem ?? ''))
    expect(a.status.trusted).toBe(false)
    expect(a.status.problem).toMatch(/needs 3 identical/)
    // Still local-first: updates work with no trusted cluster.
    await a.counter('k').increment(1)
    expect(a.counter('k').value).toBe(1)
  })

  it('never talks to a relay that proves a key other than the pinned one', async () => {
    const c = await world.cluster()
    const other = await world.cluster({ seed: 2 })
    const descriptor = c.descriptor
    descriptor.relays[2] = other.descriptor.relays[2] as (typeof descriptor.relays)[number]
    const a = await world.client(c, { cluster: descriptor })
    await c.until('relay 3 flagged', () => a.status.relays[2]?.faulty !== undefined)
    expect(a.status.relays[2]?.connected).toBe(false)
  })
})
