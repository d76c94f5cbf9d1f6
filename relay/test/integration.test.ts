import { readFileSync } from 'node:fs'
import { clockInit, encode, encodeEnvelope, fromHex, sealEnvelope, type Envelope, type EnvelopeDraft } from '@stead/core'
import { nodeCrypto, publicKeyOfSync, verifySync } from '@stead/core/node'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { TestClient } from './helpers/client.ts'
import { TestCluster, until } from './helpers/cluster.ts'

/**
 * Real relay processes (stead-relay start) on loopback, talked to over
 * WebSockets with the wire protocol, killed with SIGKILL and restarted from
 * their data dirs.
 */
const SPACE = 'it'
let author = { secretKey: new Uint8Array(32).fill(42), publicKey: publicKeyOfSync(new Uint8Array(32).fill(42)) }
const acct = { type: 'counter' as const, bounds: { min: 0 } }
let seq = 0

/** Each author's envelopes must be numbered 1, 2, 3... without gaps, or the audit waits for the missing one. */
function draft(parts: Partial<EnvelopeDraft>, space = SPACE): EnvelopeDraft {
  return { space, seq: ++seq, clock: clockInit(), deps: [], updates: [], safe: [], ...parts }
}
const deposit = (n: number) => sealEnvelope(nodeCrypto, author, draft({ updates: [{ key: 'acct', decl: acct, ops: [n] }] }))
const withdraw = (n: number) => sealEnvelope(nodeCrypto, author, draft({ safe: [{ atomic: false, updates: [{ key: 'acct', decl: acct, op: -n }] }] }))

/** The value of counter `key` in a stable snapshot served by /v1/spaces/:space/stable. */
function counterIn(snapshot: unknown, key: string): number {
  const objects = (snapshot as unknown[])[4] as Array<[string, unknown, Array<[string, number, number]>]>
  const rows = objects.find(([k]) => k === key)?.[2] ?? []
  return rows.reduce((sum, [, p, n]) => sum + p - n, 0)
}

type Stable = { index: number; stateHash: string }

async function stable(cluster: TestCluster, i: number): Promise<Stable | undefined> {
  const s = await cluster.json<Stable & { error?: string }>(i, `/v1/spaces/${SPACE}/stable`)
  return s.error ? undefined : s
}

/** Waits until the listed relays report the same stable state at `index`, and returns its hash. */
async function agreeAt(cluster: TestCluster, relays: number[], index: number): Promise<string> {
  return until(`relays ${relays.join(',')} to agree at stable index ${index}`, async () => {
    const states = await Promise.all(relays.map((i) => stable(cluster, i)))
    if (states.some((s) => !s || s.index < index)) return undefined
    const hashes = new Set(states.map((s) => `${s?.index}:${s?.stateHash}`))
    expect(hashes.size).toBe(1) // G2: same index, same state
    return states[0]?.stateHash
  }, 60_000)
}

async function submitAll(client: TestClient, envs: Envelope[], firstId: number): Promise<void> {
  envs.forEach((e, i) => client.send({ type: 'submit', id: firstId + i, envelope: encodeEnvelope(e) }))
  for (let i = 0; i < envs.length; i++) {
    const reply = await client.next((m) => (m.type === 'accepted' || m.type === 'error') && m.id === firstId + i)
    expect(reply.type).toBe('accepted')
  }
}

describe('a cluster of 4 relay processes', () => {
  let cluster: TestCluster
  const clients: TestClient[] = []
  let attestOnly: TestClient

  beforeAll(async () => {
    cluster = await TestCluster.create(4, { spaces: { [SPACE]: {} }, openSpaces: false })
    // Snapshots every other batch: restarts below load one and replay what came after.
    await cluster.startAll(() => ['--snapshot-every', '2'])
    for (const r of cluster.relays) clients.push(await TestClient.connect(r.api, author))
    for (const c of clients) c.send({ type: 'subscribe', space: SPACE, fromIndex: 0 })
    // A client that takes its frames elsewhere: attestations only from this relay.
    attestOnly = await TestClient.connect(cluster.relays[2]!.api, author)
    attestOnly.send({ type: 'subscribe', space: SPACE, fromIndex: 0, frames: false })
  }, 60_000)

  afterAll(async () => {
    for (const c of clients) c.close()
    attestOnly?.close()
    await cluster?.stopAll()
  })

  it('commits submitted envelopes and every relay attests the same stable state', async () => {
    const envs = [await deposit(10), await deposit(5), await withdraw(12), await withdraw(20), await deposit(1)]
    // (the withdrawal of 20 cannot fit: 10 + 5 - 12 = 3)
    await submitAll(clients[0]!, envs, 1)
    await agreeAt(cluster, [0, 1, 2, 3], envs.length)
    // Every relay sent an attestation per commit; for the same commit the signed bytes are identical.
    const last = await until('each client to see the last commit', () =>
      clients.every((c) => c.commits.some((x) => x.attestation.toIndex === envs.length)) ? true : undefined,
    )
    expect(last).toBe(true)
    const finals = clients.map((c) => Buffer.from(c.commits.find((x) => x.attestation.toIndex === envs.length)!.bytes).toString('hex'))
    expect(new Set(finals).size).toBe(1)
    // A subscriber that asked for no frames gets compact attestations: relay 2's signature over the very
    // bytes every relay attested, and nothing of the envelopes.
    const lastCommit = clients[0]!.commits.find((x) => x.attestation.toIndex === envs.length)!
    const compact = await until('the attestation-only subscriber to see the last commit', () =>
      attestOnly.messages.find((m) => m.type === 'attest' && m.round === lastCommit.attestation.round),
    )
    const relay2Key = fromHex((JSON.parse(readFileSync(cluster.clusterPath, 'utf8')) as { relays: Array<{ publicKey: string }> }).relays[2]!.publicKey)
    expect(compact.type === 'attest' && verifySync(relay2Key, lastCommit.bytes, compact.sig)).toBe(true)
    expect(attestOnly.messages.filter((m) => m.type === 'envelope' || m.type === 'commit' || m.type === 'commit-more')).toEqual([])
    expect(clients[2]!.messages.some((m) => m.type === 'envelope')).toBe(true)
    // The safe withdrawal of 20 could not fit (10 + 5 - 12 = 3 left): rejected by the audit.
    const decisions = clients[0]!.commits.flatMap((c) => c.attestation.decisions)
    const byId = new Map(decisions.map((d) => [Buffer.from(d[0]).toString('hex'), d]))
    expect(byId.get(envs[3]!.idHex)).toEqual([envs[3]!.id, 'committed', 4, [[0, 'invariant']], true])
    expect(byId.get(envs[2]!.idHex)?.[3]).toEqual([])
    const snap = await cluster.json<{ snapshot: unknown[] }>(0, `/v1/spaces/${SPACE}/stable`)
    expect(counterIn(snap.snapshot, 'acct')).toBe(4)
  }, 90_000)

  it('answers bad input with typed errors and stays up without losing data', async () => {
    const before = await stable(cluster, 1)
    const c = await TestClient.connect(cluster.relays[1]!.api) // not authenticated yet
    const errorFor = async (send: () => void) => {
      const seen = c.messages.length
      send()
      const m = await c.next((x) => x.type === 'error' && c.messages.indexOf(x) >= seen)
      return m.type === 'error' ? m.reason : 'none'
    }
    const env = await deposit(1)
    expect(await errorFor(() => c.send({ type: 'submit', id: 1, envelope: encodeEnvelope(env) }))).toBe('unauthenticated')
    expect(await errorFor(() => c.raw(new Uint8Array([0xc1, 0x00, 0xff])))).toBe('malformed')
    expect(await errorFor(() => c.raw('{"type":"submit"}'))).toBe('malformed')
    expect(await errorFor(() => c.raw(encode(['submit', 'x', 'y'])))).toBe('malformed')
    // A frame over the limit is refused at its header: the socket closes with 1009 (message too big) before
    // the frame is buffered, so there is no frame to answer with (1006 when the close frame is lost to a reset).
    c.raw(new Uint8Array(3 * 1024 * 1024))
    expect([1009, 1006]).toContain((await until('the oversize frame to close the session', () => c.closed ?? undefined)).code)
    const authed = await TestClient.connect(cluster.relays[1]!.api, author)
    const submitError = async (id: number, frame: Uint8Array) => {
      authed.send({ type: 'submit', id, envelope: frame })
      return authed.next((m) => (m.type === 'error' || m.type === 'accepted') && m.id === id)
    }
    const forged = encodeEnvelope(env).slice()
    forged[forged.length - 3]! ^= 0x55
    expect(await submitError(10, forged)).toMatchObject({ type: 'error', reason: 'bad-signature' })
    expect(await submitError(11, new Uint8Array([1, 2, 3]))).toMatchObject({ type: 'error', reason: 'malformed' })
    // An envelope the cluster already committed is a duplicate, never a new update.
    const replay = clients[0]!.commits[0]!.attestation
    expect(replay).toBeDefined()
    const committed = await until('a committed envelope frame', () => {
      const m = clients[0]!.messages.find((x) => x.type === 'commit' && x.envelopes.length > 0)
      return m && m.type === 'commit' ? m.envelopes[0] : undefined
    })
    expect(await submitError(12, committed)).toMatchObject({ type: 'accepted', status: 'duplicate' })
    // Unknown space on a cluster that serves only its listed spaces.
    const elsewhere = await sealEnvelope(nodeCrypto, author, { ...draft({ updates: [{ key: 'k', decl: acct, ops: [1] }] }, 'nope'), seq: 1 })
    seq-- // that one lives in another space's numbering
    expect(await submitError(13, encodeEnvelope(elsewhere))).toMatchObject({ type: 'error', reason: 'unauthorized' })
    // A flood is slowed down to the session's rate (500 messages/s after a burst of 200), every
    // message still answered, nothing crashing.
    const t0 = Date.now()
    for (let i = 0; i < 1200; i++) authed.send({ type: 'ping', n: i })
    expect((await fetch(`http://${cluster.relays[1]!.api}/health`)).ok).toBe(true)
    await authed.next((m) => m.type === 'pong' && m.n === 1199)
    expect(Date.now() - t0).toBeGreaterThanOrEqual(1500)
    expect(authed.messages.filter((m) => m.type === 'pong').length).toBe(1200)
    const metrics = await (await fetch(`http://${cluster.relays[1]!.api}/metrics`)).text()
    expect(metrics).toMatch(/stead_commits_total \d+/)
    // The envelope refused while unauthenticated still goes through once the session is proven,
    // and nothing accepted before was lost.
    expect(await submitError(14, encodeEnvelope(env))).toMatchObject({ type: 'accepted', status: 'queued' })
    await agreeAt(cluster, [0, 1, 2, 3], before!.index + 1)
    c.close()
    authed.close()
  }, 60_000)

  it('a relay killed with SIGKILL restarts from its data dir and catches up to the same state', async () => {
    const base = (await stable(cluster, 0))!.index
    cluster.kill(2)
    const more = [await deposit(3), await deposit(4), await withdraw(2)]
    await submitAll(clients[0]!, more, 100)
    const hash = await agreeAt(cluster, [0, 1, 3], base + more.length)
    cluster.start(2, ['--snapshot-every', '2'])
    await cluster.waitHealthy(2)
    expect(await agreeAt(cluster, [0, 1, 2, 3], base + more.length)).toBe(hash)
    const recovered = JSON.parse(cluster.relays[2]!.log.split('\n').find((l) => l.includes('recovered from store')) as string) as { snapshotBatch: number | null }
    expect(recovered.snapshotBatch).toBeGreaterThan(0)
    // It keeps up with new work too.
    const last = [await deposit(7)]
    await submitAll(clients[1]!, last, 200)
    const final = base + more.length + 1
    await agreeAt(cluster, [0, 1, 2, 3], final)
    // A client resuming from scratch gets the same attested history from the restarted relay as from any other.
    const history = async (i: number) => {
      const c = await TestClient.connect(cluster.relays[i]!.api, author)
      c.send({ type: 'subscribe', space: SPACE, fromIndex: 0 })
      await until(`relay ${i} to replay up to ${final}`, () => (c.commits.some((x) => x.attestation.toIndex === final) ? true : undefined))
      c.close()
      return c.commits.map((x) => Buffer.from(x.bytes).toString('hex'))
    }
    const [fromRestarted, fromOther] = [await history(2), await history(0)]
    expect(fromRestarted).toEqual(fromOther)
  }, 120_000)
})

describe('a cluster with one relay in a Byzantine mode', () => {
  let cluster: TestCluster
  afterAll(async () => cluster?.stopAll())

  it('changes nothing the correct relays agree on, and they keep committing', async () => {
    cluster = await TestCluster.create(4)
    await cluster.startAll((i) => (i === 3 ? ['--byzantine', 'equivocate'] : []))
    author = { secretKey: new Uint8Array(32).fill(43), publicKey: publicKeyOfSync(new Uint8Array(32).fill(43)) }
    const a = await TestClient.connect(cluster.relays[0]!.api, author)
    const b = await TestClient.connect(cluster.relays[1]!.api, author)
    const evil = await TestClient.connect(cluster.relays[3]!.api, author)
    seq = 0
    const envs = [await deposit(5), await deposit(6), await withdraw(3)]
    await submitAll(a, envs.slice(0, 2), 1)
    await submitAll(evil, envs.slice(2), 2)
    // A Byzantine relay may drop what it was given: a correct client also sends it elsewhere (G7).
    await submitAll(b, envs.slice(2), 3)
    // Conflicting twins from a Byzantine client, one to each of two relays.
    const twinSeq = ++seq
    const t1 = await sealEnvelope(nodeCrypto, author, { ...draft({ updates: [{ key: 'acct', decl: acct, ops: [100] }] }), seq: twinSeq })
    const t2 = await sealEnvelope(nodeCrypto, author, { ...draft({ updates: [{ key: 'acct', decl: acct, ops: [1] }] }), seq: twinSeq })
    a.send({ type: 'submit', id: 50, envelope: encodeEnvelope(t1) })
    b.send({ type: 'submit', id: 51, envelope: encodeEnvelope(t2) })
    // The first three land at indices 1..3, exactly one twin at 4.
    const hash = await agreeAt(cluster, [0, 1, 2], envs.length + 1)
    // Sequence numbers are per author per space: seq 1 elsewhere is not a conflict.
    const elsewhere = await sealEnvelope(nodeCrypto, author, { space: 'other', seq: 1, clock: clockInit(), deps: [], updates: [{ key: 'k', decl: acct, ops: [1] }], safe: [] })
    a.send({ type: 'submit', id: 60, envelope: encodeEnvelope(elsewhere) })
    expect(await a.next((m) => (m.type === 'accepted' || m.type === 'error') && m.id === 60)).toMatchObject({ type: 'accepted', status: 'queued' })
    expect(hash).toMatch(/^[0-9a-f]{64}$/)
    const snap = await cluster.json<{ snapshot: unknown }>(0, `/v1/spaces/${SPACE}/stable`)
    // 5 + 6 - 3 plus exactly one twin's deposit: 108 or 9, never both (G4).
    expect([108, 9]).toContain(counterIn(snap.snapshot, 'acct'))
    const status = await cluster.json<{ committedRound: number }>(0, '/v1/status')
    // An idle cluster makes no rounds: more work, committed despite the liar.
    await submitAll(a, [await deposit(1), await deposit(2)], 70)
    const later = await until('more commits', async () => {
      const s = await cluster.json<{ committedRound: number }>(0, '/v1/status')
      return s.committedRound > status.committedRound + 2 ? s : undefined
    })
    expect(later.committedRound).toBeGreaterThan(status.committedRound)
    for (const c of [a, b, evil]) c.close()
  }, 120_000)
})

/**
 * Issue 12's rejoin: a relay killed while clients keep writing comes back
 * and reaches the others' stable index within 10 s, the load going on.
 * CI kills it for 5 s; STEAD_OUTAGE_S=30 runs the size.
 */
/** About 50 updates a second to `space`, one envelope each, in sequence, through `client`; `stop` ends it. */
function steadyLoad(client: TestClient, space: string, seed: number): { stop: () => void } {
  const writer = { secretKey: new Uint8Array(32).fill(seed), publicKey: publicKeyOfSync(new Uint8Array(32).fill(seed)) }
  let n = 0
  const timer = setInterval(() => {
    n++
    const id = n
    void sealEnvelope(nodeCrypto, writer, { space, seq: id, clock: clockInit(), deps: [], updates: [{ key: `k${id % 50}`, decl: acct, ops: [1] }], safe: [] }).then((env) => client.send({ type: 'submit', id, envelope: encodeEnvelope(env) }))
  }, 20)
  return { stop: () => clearInterval(timer) }
}

describe('a relay back from an outage under load', () => {
  let cluster: TestCluster
  const outageMs = Number(process.env['STEAD_OUTAGE_S'] ?? 5) * 1000
  afterAll(async () => cluster?.stopAll())

  it(`rejoins after ${outageMs / 1000} s down and reaches the others' stable index within 10 s while the load goes on`, async () => {
    cluster = await TestCluster.create(4, { spaces: { load: {} }, openSpaces: false })
    // Peers hold 64 frames for it (about a second of this load) and keep every round: it catches up by
    // asking for the blocks it missed (the range path), not from what they queued, nor from a checkpoint.
    await cluster.startAll(() => ['--peer-queue-frames', '64'])
    const client = await TestClient.connect(cluster.relays[0]!.api, { secretKey: new Uint8Array(32).fill(43), publicKey: publicKeyOfSync(new Uint8Array(32).fill(43)) })
    const index = async (i: number): Promise<number> => (await cluster.json<{ index: number }>(i, '/v1/spaces/load/head')).index
    let refused = 0
    const load = steadyLoad(client, 'load', 43)
    try {
      await until('the load to commit', async () => ((await index(1)) > 20 ? true : undefined), 30_000)
      const before = await index(2)
      cluster.kill(2)
      await new Promise((r) => setTimeout(r, outageMs))
      const restartedAt = Date.now()
      cluster.start(2)
      await cluster.waitHealthy(2)
      // The others' index when it came back: it must get there within 10 s, and stay with them.
      const target = Math.max(await index(0), await index(1), await index(3))
      await until(`relay 3 to reach stable index ${target}`, async () => ((await index(2)) >= target ? true : undefined), 10_000 - (Date.now() - restartedAt) + 1)
      const caughtUpMs = Date.now() - restartedAt
      const later = Math.max(await index(0), await index(1), await index(3))
      await until(`relay 3 to keep up (${later})`, async () => ((await index(2)) >= later ? true : undefined), 10_000)
      console.log(`outage ${outageMs} ms: stable index ${before} when killed, the others at ${target} when it came back; it was there ${caughtUpMs} ms after restart`)
      expect(caughtUpMs).toBeLessThanOrEqual(10_000)
      expect(cluster.relays[2]!.log).not.toContain('fetching a checkpoint')
      refused = client.messages.filter((m) => m.type === 'error').length
    } finally {
      load.stop()
      client.close()
    }
    expect(refused).toBe(0)
  }, 120_000)
})

describe('a relay back after its peers pruned the rounds it needs', () => {
  let cluster: TestCluster
  afterAll(async () => cluster?.stopAll())

  it('starts over from a checkpoint f+1 relays vouch for and reaches their stable state under load', async () => {
    // A checkpoint every 20 rounds; blocks kept for 200 rounds (the least --retain-rounds takes), snapshots every 20
    // batches, and 64 frames held for a peer that is down: what it missed is neither queued for it nor kept.
    cluster = await TestCluster.create(4, { spaces: { load: {} }, openSpaces: false, checkpointRounds: 20 })
    await cluster.startAll(() => ['--retain-rounds', '200', '--snapshot-every', '20', '--peer-queue-frames', '64'])
    const client = await TestClient.connect(cluster.relays[0]!.api, { secretKey: new Uint8Array(32).fill(44), publicKey: publicKeyOfSync(new Uint8Array(32).fill(44)) })
    const head = async (i: number) => cluster.json<{ index: number; stateHash: string }>(i, '/v1/spaces/load/head')
    const committed = async (i: number): Promise<number> => (await cluster.json<{ committedRound: number }>(i, '/v1/status')).committedRound
    const load = steadyLoad(client, 'load', 44)
    try {
      await until('the load to commit', async () => ((await head(1)).index > 20 ? true : undefined), 30_000)
      const leftAt = await committed(2)
      cluster.kill(2)
      // The others go on until none of their stores holds the rounds it needs (a peer that still
      // did would let it catch up by range).
      const keptFrom = async (i: number): Promise<number> => (await cluster.json<{ blocksKeptFrom: number }>(i, '/v1/status')).blocksKeptFrom
      await until('the others to prune the rounds it needs', async () => ((await Promise.all([0, 1, 3].map(keptFrom))).every((r) => r > leftAt + 10) ? true : undefined), 90_000)
      const restartedAt = Date.now()
      cluster.start(2)
      await cluster.waitHealthy(2)
      const target = (await head(0)).index
      await until(`relay 3 to reach stable index ${target}`, async () => ((await head(2)).index >= target ? true : undefined), 20_000)
      console.log(`relay 3 killed at round ${leftAt}, back ${Date.now() - restartedAt} ms later at stable index ${target}`)
      // Its log comes through a pipe: wait for the line rather than read it at once. (Runs that took no
      // checkpoint, one in three before, caught up from the blocks its peers had queued for it while it
      // was down and sent on reconnect: with 64 frames held, that path is closed here.)
      await until('relay 3 to log that it started over from a checkpoint', () => (cluster.relays[2]!.log.includes('started over from the checkpoint it fetched') ? true : undefined), 10_000)
      expect(cluster.relays[2]!.log).toContain('fetched a checkpoint f+1 relays vouch for')
      expect(cluster.relays[2]!.log).not.toContain('not installing it')
    } finally {
      load.stop()
    }
    // Once the load stops, every relay holds the same stable state.
    await until('the relays to agree', async () => {
      const heads = await Promise.all([0, 1, 2, 3].map(head))
      return new Set(heads.map((h) => `${h.index}:${h.stateHash}`)).size === 1 ? true : undefined
    }, 30_000)
    client.close()
  }, 180_000)
})
