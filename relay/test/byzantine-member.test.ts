import { spawn } from 'node:child_process'
import { join, resolve } from 'node:path'
import type { EnvelopeDraft, RelayMessage } from '@stead/core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { TestClient } from './helpers/client.ts'
import { TestCluster, until } from './helpers/cluster.ts'
import { envelopes, identity, pct } from './helpers/envelopes.ts'

/**
 * Issue 51, item 3: a Byzantine member relay. Four `stead-relay` processes;
 * r4 is stopped and its key floods r1 over the mesh (helpers/member-flood.ts,
 * in its own process) while an honest client makes safe updates through r2.
 * Their commits need r1 (r4 is the one fault the cluster tolerates), so a
 * flood that stalls r1 stalls the cluster. CI floods for a few seconds;
 * STEAD_ATTACK_FULL=1 floods for 15 s, the size the red team used;
 * STEAD_ATTACK_KINDS=blocks,wake runs only those floods.
 *
 * The `blocks` flood sends messages of 500 tiny blocks signed with r4's key
 * (the last with a bad signature, so the whole message is refused after
 * every other block was verified): charged per block, only 200 blocks/s of
 * what nobody asked for are opened (the rest dropped unread).
 */
const FULL = process.env.STEAD_ATTACK_FULL === '1'
const FLOOD_MS = FULL ? 15_000 : 3_000
/** /health answers slower than this count as an outage in the figures. */
const HEALTH_TIMEOUT_MS = 5_000

const honest = identity(41)
const signed = envelopes()
const envelope = (parts: Partial<EnvelopeDraft>) => signed(honest, 'bank', parts)
const deposit = (n: number) => envelope({ updates: [{ key: 'acct', decl: { type: 'counter', bounds: { min: 0 } }, ops: [n] }] })
const withdraw = (n: number) => envelope({ safe: [{ atomic: false, updates: [{ key: 'acct', decl: { type: 'counter', bounds: { min: 0 } }, op: -n }] }] })


describe('a Byzantine member relay flooding a correct one (4 relay processes)', () => {
  let cluster: TestCluster
  let client: TestClient
  let nextId = 1
  let index = 0
  const api = (i: number) => cluster.relays[i]!.api

  async function submit(frame: Uint8Array): Promise<RelayMessage> {
    const id = nextId++
    client.send({ type: 'submit', id, envelope: frame })
    return client.next((m) => (m.type === 'accepted' || m.type === 'error') && m.id === id, 60_000)
  }
  /** The highest stable index of 'bank' in the commits the client got, read once per commit. */
  let read = 0
  const stableIndex = (): number => {
    for (; read < client.commits.length; read++) {
      const c = client.commits[read]!
      if (c.space === 'bank') index = Math.max(index, c.attestation.toIndex)
    }
    return index
  }
  /** One safe update through r2, until its commit reaches the client: ms, or Infinity past `timeoutMs`. */
  async function safeUpdate(timeoutMs = 30_000): Promise<number> {
    const t0 = performance.now()
    const want = stableIndex() + 1
    const reply = await submit(await withdraw(1))
    if (reply.type !== 'accepted') throw new Error(`safe update refused: ${JSON.stringify(reply)}`)
    try {
      await client.next(() => stableIndex() >= want, timeoutMs)
    } catch {
      return Infinity
    }
    return performance.now() - t0
  }
  async function healthMs(i: number): Promise<number> {
    const t0 = performance.now()
    try {
      const res = await fetch(`http://${api(i)}/health`, { signal: AbortSignal.timeout(HEALTH_TIMEOUT_MS) })
      await res.arrayBuffer()
      return res.ok ? performance.now() - t0 : HEALTH_TIMEOUT_MS
    } catch {
      return HEALTH_TIMEOUT_MS
    }
  }
  const metric = async (i: number, re: RegExp) => Number(re.exec(await (await fetch(`http://${api(i)}/metrics`)).text())?.[1] ?? 0)
  const meshRateLimited = (i: number) => metric(i, /^stead_rejected_total\{[^}]*reason="rate-limited"[^}]*source="mesh"[^}]*\} (\S+)$/m)
  const rss = async (i: number) => ((await (await fetch(`http://${api(i)}/v1/status`)).json()) as { process: { rss: number } }).process.rss

  beforeAll(async () => {
    cluster = await TestCluster.create(4, { openSpaces: true, newSpacesPerKeyPerHour: 3, spaces: { bank: {} } })
    await cluster.startAll()
    client = await TestClient.connect(api(1), honest)
    client.send({ type: 'subscribe', space: 'bank', fromIndex: 0, frames: true })
    expect(await submit(await deposit(1_000_000))).toMatchObject({ type: 'accepted' })
    // History past the relays' in-memory horizon (50 rounds), so a sync from round 0 reads the store.
    const latencies: number[] = []
    for (let i = 0; i < 60; i++) latencies.push(await safeUpdate())
    console.log(`baseline, 4 relays up: safe update p50 ${pct(latencies, 0.5).toFixed(0)} ms, p99 ${pct(latencies, 0.99).toFixed(0)} ms`)
    // r4 goes down: its key is the attacker's now, and the cluster has no fault to spare.
    cluster.kill(3)
  }, 120_000)

  afterAll(async () => {
    client?.close()
    await cluster?.stopAll()
  })

  /**
   * Runs the attacker for FLOOD_MS, measuring r1's /health and the honest
   * client's safe updates during it and for a while after, and returns the figures.
   */
  async function underFlood(kind: string) {
    const baseline: number[] = []
    for (let i = 0; i < 5; i++) baseline.push(await safeUpdate())
    const rejectedBefore = await meshRateLimited(0)
    const rssBefore = await rss(0)
    const flood = spawn(
      process.execPath,
      ['--conditions=@stead/source', '--import', 'tsx', resolve(import.meta.dirname, 'helpers/member-flood.ts'), cluster.clusterPath, join(cluster.relays[3]!.data, 'key.json'), 'r4', 'r1', kind, String(FLOOD_MS)],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    )
    let out = ''
    flood.stdout.on('data', (d: Buffer) => (out += d.toString()))
    let running = true
    const exited = new Promise<number | null>((done) => flood.on('exit', (code) => ((running = false), done(code))))
    // /health of r1 every 25 ms, from now until 3 s after the flood.
    const health: number[] = []
    let probing = true
    const prober = (async () => {
      while (probing) {
        health.push(await healthMs(0))
        await new Promise((r) => setTimeout(r, 25))
      }
    })()
    const during: number[] = []
    while (running) during.push(await safeUpdate(HEALTH_TIMEOUT_MS * 4))
    expect(await exited).toBe(0)
    const attacker = JSON.parse(out) as { sent: number; sentBytes: number; received: number; receivedBytes: number; seconds: number }
    const after: number[] = []
    for (let i = 0; i < 5; i++) after.push(await safeUpdate())
    probing = false
    await prober
    const figures = {
      kind,
      attacker,
      baselineP50: pct(baseline, 0.5),
      duringP50: pct(during, 0.5),
      duringMax: pct(during, 1),
      duringCount: during.length,
      afterP50: pct(after, 0.5),
      healthP50: pct(health, 0.5),
      healthP99: pct(health, 0.99),
      healthMax: pct(health, 1),
      rssBeforeMB: Math.round(rssBefore / 2 ** 20),
      rssAfterMB: Math.round((await rss(0)) / 2 ** 20),
      rateLimited: (await meshRateLimited(0)) - rejectedBefore,
    }
    console.log(JSON.stringify(figures))
    return figures
  }

  const only = process.env.STEAD_ATTACK_KINDS?.split(',')
  const kinds = ['sync', 'fetch', 'own-last-ask', 'head-ask', 'checkpoint-ask', 'blocks'].filter((k) => !only || only.includes(k))
  for (const kind of kinds) {
    it(`stays up and keeps committing while r4's key floods r1 with ${kind} requests`, async () => {
      const f = await underFlood(kind)
      // Up and answering /health throughout (two cores shared by four relays, the attacker and this test).
      expect(f.healthMax).toBeLessThan(HEALTH_TIMEOUT_MS)
      expect(f.healthP99).toBeLessThan(500)
      // Honest safe updates commit during the flood and after it, promptly.
      expect(f.duringCount).toBeGreaterThan(0)
      expect(f.duringMax).toBeLessThan(HEALTH_TIMEOUT_MS * 4)
      expect(f.afterP50).toBeLessThan(Math.max(1000, 4 * f.baselineP50))
      // The attacker was throttled, and told nobody: it got little back.
      expect(f.rateLimited).toBeGreaterThan(0)
    }, 120_000)
  }

  // STEAD_ATTACK_KINDS picks floods by hand (a developer's option; CI sets none, so every flood runs): like the kinds above, the wake flood is left out unless named.
  if (!only || only.includes('wake')) it('cannot start more spaces through wakes than the client key may', async () => {
    const spacesBefore = ((await (await fetch(`http://${api(0)}/v1/status`)).json()) as { spaces: number }).spaces
    const f = await underFlood('wake')
    expect(f.healthP99).toBeLessThan(500)
    expect(f.duringCount).toBeGreaterThan(0)
    expect(f.afterP50).toBeLessThan(Math.max(1000, 4 * f.baselineP50))
    expect(f.attacker.sent).toBeGreaterThan(1)
    // Every wake carried 50 envelopes of new spaces from one client key, whose quota is 3 an hour.
    await until('the wakes to be committed or dropped', async () => ((await cluster.json<{ queuedEnvelopes: number }>(0, '/v1/status')).queuedEnvelopes === 0 ? true : undefined))
    for (const i of [0, 1, 2]) {
      const spaces = (await cluster.json<{ spaces: number }>(i, '/v1/status')).spaces
      expect(spaces - spacesBefore).toBeLessThanOrEqual(3)
    }
  }, 120_000)
})
