#!/usr/bin/env node
/**
 * History report (a report, never a test): what a long history costs a
 * relay that restarts and a client that opens the space, issue 12's
 * "O(state), not O(history)". A real 4-relay cluster on loopback takes a
 * history of `--small` updates, then of `--updates`; after each, a relay
 * is killed and restarted (time to serving and to /ready, what its log
 * says it read), and a new SDK client opens the space (time until it shows
 * the stable state, bytes it downloaded against the snapshot's size).
 *
 *   npm run bench:history -- [--updates 1000000] [--small 1000] [--ops 100] [--keys 1000] [--rate 100] [--restarts 3] [--dist] [--profile-restart DIR] [--out FILE]
 *
 * An update is one counter increment on one of `--keys` objects; envelopes
 * carry `--ops` of them (on distinct objects, so none compact away), sent
 * at `--rate` envelopes per second in all. The rate matters: a restart
 * re-reads the blocks of the last 100 consensus rounds (the GC window)
 * whatever the history, so a history poured in faster than the cluster
 * makes rounds sits in a few huge blocks, all inside that window.
 * `--dist` runs the compiled relays (`npm run build` first), as installed
 * from npm: Node starts them faster than from the TypeScript sources.
 * `--profile-restart DIR` writes the CPU profile of the last restarted
 * relay (long history) into DIR.
 */
import { existsSync, writeFileSync } from 'node:fs'
import { authBytes, clockInit, decodeRelayMessage, encodeClientMessage, encodeEnvelope, sealEnvelope, type RelayMessage } from '@stead/core'
import { nodeCrypto, publicKeyOfSync, signSync } from '@stead/core/node'
import WebSocket from 'ws'
import { BenchCluster, RELAY_DIST } from './cluster.ts'
import { openSdkSpace } from './load/sdk.ts'
import { median } from './stats.ts'
import { reportArgs } from './args.ts'

const values = reportArgs(
  `usage: npm run bench:history -- [--updates 1000000] [--small 1000] [--ops 100] [--keys 1000] [--rate 100] [--restarts 3] [--dist] [--profile-restart DIR] [--out FILE]\n(what each option does: the comment at the top of packages/bench/src/history.ts)`,
  {
    updates: { type: 'string', default: '1000000' },
    small: { type: 'string', default: '1000' },
    ops: { type: 'string', default: '100' },
    keys: { type: 'string', default: '1000' },
    restarts: { type: 'string', default: '3' },
    rate: { type: 'string', default: '100' },
    dist: { type: 'boolean', default: false },
    'profile-restart': { type: 'string' },
    out: { type: 'string' },
  },
)
const [large, small, opsPerEnvelope, keys, restarts, rate] = (['updates', 'small', 'ops', 'keys', 'restarts', 'rate'] as const).map((k) => {
  const v = Number(values[k])
  if (!Number.isSafeInteger(v) || v < 1) throw new Error(`--${k} must be a whole number of at least 1`)
  return v
}) as [number, number, number, number, number, number]
if (values.dist && !existsSync(RELAY_DIST)) throw new Error(`--dist runs ${RELAY_DIST}: npm run build first`)

const SPACE = 'history'
const COUNTER = { type: 'counter' as const, bounds: {} }
const AUTHORS = 8
const WINDOW = 32

/** One author's session with a relay, submitting its envelopes in order with a few in flight. */
async function author(api: string, n: number, envelopes: number, firstSeq: number): Promise<void> {
  const secretKey = nodeCrypto.sha256(new TextEncoder().encode(`stead-history-${n}`))
  const identity = { secretKey, publicKey: publicKeyOfSync(secretKey) }
  const ws = new WebSocket(`ws://${api}/v1/ws`)
  ws.binaryType = 'nodebuffer'
  const inbox: RelayMessage[] = []
  let wake = (): void => undefined
  ws.on('message', (d: Buffer) => {
    inbox.push(decodeRelayMessage(new Uint8Array(d)))
    wake()
  })
  const next = (match: (m: RelayMessage) => boolean): Promise<RelayMessage> =>
    new Promise((resolve) => {
      const look = (): void => {
        const i = inbox.findIndex(match)
        if (i < 0) return
        wake = () => undefined
        resolve(inbox.splice(i, 1)[0] as RelayMessage)
      }
      wake = look
      look()
    })
  const challenge = await next((m) => m.type === 'challenge')
  if (challenge.type !== 'challenge') throw new Error('no challenge')
  ws.send(encodeClientMessage({ type: 'hello', publicKey: identity.publicKey, sig: signSync(secretKey, authBytes(challenge.nonce, challenge.relayKey)) }))
  await next((m) => m.type === 'welcome')
  let answered = 0
  let sent = 0
  const seal = (seq: number) =>
    sealEnvelope(nodeCrypto, identity, {
      space: SPACE,
      seq,
      clock: clockInit(),
      deps: [],
      updates: Array.from({ length: opsPerEnvelope }, (_, j) => ({ key: `k${(seq * opsPerEnvelope + j + n) % keys}`, decl: COUNTER, ops: [1] })),
      safe: [],
    })
  const started = performance.now()
  // Paced: a history made over many rounds, as a long-running space's is (see the module comment).
  const allowed = (): number => Math.min(envelopes, Math.floor(((performance.now() - started) / 1000) * (rate / AUTHORS)) + 1)
  while (answered < envelopes) {
    if (sent === answered && sent < envelopes && sent >= allowed()) await new Promise((r) => setTimeout(r, 5))
    while (sent < envelopes && sent - answered < WINDOW && sent < allowed()) {
      const id = firstSeq + sent++
      ws.send(encodeClientMessage({ type: 'submit', id, envelope: encodeEnvelope(await seal(id)) }))
    }
    if (sent === answered) continue
    const m = await next((x) => x.type === 'accepted' || x.type === 'error')
    if (m.type === 'error') throw new Error(`envelope ${String(m.id)} refused: ${m.reason} ${m.detail}`)
    answered++
  }
  ws.close()
}

async function head(cluster: BenchCluster, i: number): Promise<number> {
  const res = await fetch(`http://${cluster.relays[i]?.api}/v1/spaces/${SPACE}/head`)
  return ((await res.json()) as { index: number }).index
}

/** Brings the space's history to `updates`, one envelope of `opsPerEnvelope` at a time per author. */
async function fill(cluster: BenchCluster, updates: number, done: { envelopes: number }): Promise<void> {
  const target = Math.ceil(updates / opsPerEnvelope)
  const more = target - done.envelopes
  const t0 = Date.now()
  // Author a sends its envelopes a, a + AUTHORS, … of the whole history, numbered 1, 2, … per author.
  const count = (a: number, n: number): number => Math.floor(n / AUTHORS) + (a < n % AUTHORS ? 1 : 0)
  await Promise.all(Array.from({ length: AUTHORS }, (_, a) => author(cluster.relays[a % 4]?.api as string, a, count(a, target) - count(a, done.envelopes), count(a, done.envelopes) + 1)))
  done.envelopes += more
  while ((await head(cluster, 0)) < done.envelopes) await new Promise((r) => setTimeout(r, 200))
  const s = (Date.now() - t0) / 1000
  console.log(`history: ${done.envelopes} envelopes, ${done.envelopes * opsPerEnvelope} updates committed (${s.toFixed(1)} s for these)`)
}

async function ready(cluster: BenchCluster, i: number): Promise<void> {
  for (;;) {
    try {
      if ((await fetch(`http://${cluster.relays[i]?.api}/ready`)).status === 200) return
    } catch {
      // starting
    }
    await new Promise((r) => setTimeout(r, 20))
  }
}

interface Restart {
  readonly servingMs: number
  readonly readyMs: number
  readonly storeReadMs: number
  readonly batches: number
}

async function restart(cluster: BenchCluster, nodeArgs: readonly string[] = []): Promise<Restart> {
  const i = 3
  const r = cluster.relays[i] as { log: string }
  cluster.crash(i)
  r.log = ''
  const t0 = performance.now()
  await cluster.restart(i, nodeArgs)
  const servingMs = performance.now() - t0
  await ready(cluster, i)
  const readyMs = performance.now() - t0
  const line = r.log.split('\n').find((l) => l.includes('recovered from store'))
  const parsed = line ? (JSON.parse(line) as { ms: number; batches: number }) : { ms: NaN, batches: NaN }
  return { servingMs, readyMs, storeReadMs: parsed.ms, batches: parsed.batches }
}

interface Opening {
  readonly shownMs: number
  readonly downloaded: number
  readonly snapshot: number
}

/** A new SDK client opens the space: how long until it shows the stable state, and what it downloaded. */
async function open(cluster: BenchCluster, envelopes: number, n: number): Promise<Opening> {
  let downloaded = 0
  let snapshot = 0
  const t0 = performance.now()
  const { owner, space } = await openSdkSpace({
    relays: cluster.descriptor.relays.map((r) => `http://${r.api}`),
    cluster: cluster.descriptor,
    seed: `stead-history-reader-${n}-${envelopes}`,
    space: SPACE,
    options: {
      fetch: async (url, init) => {
        const res = await fetch(url, init)
        const text = await res.text()
        downloaded += text.length
        if (url.endsWith('/snapshot') && res.ok) snapshot = Buffer.from((JSON.parse(text) as { state: string }).state, 'base64url').length
        return { ok: res.ok, status: res.status, json: async () => JSON.parse(text) as unknown }
      },
      connect: (url) => {
        const ws = new WebSocket(url)
        ws.addEventListener('message', (e) => (downloaded += (e.data as ArrayBuffer | Buffer).byteLength))
        return ws as never
      },
    },
  })
  while (space.status.stableIndex < envelopes) await new Promise((r) => setTimeout(r, 5))
  const shownMs = performance.now() - t0
  await owner.close()
  return { shownMs, downloaded, snapshot }
}

const cluster = await BenchCluster.start({ kind: 'stead', n: 4, logLevel: 'info', dist: values.dist })
const report: Record<string, { updates: number; restarts: Restart[]; openings: Opening[] }> = {}
try {
  console.log(`history: 4 relays${values.dist ? ' (compiled)' : ' (from source)'}, ${opsPerEnvelope} updates per envelope on ${keys} counters, ${AUTHORS} authors, ${new Date().toISOString()}`)
  const done = { envelopes: 0 }
  for (const updates of [small, large]) {
    await fill(cluster, updates, done)
    const runs: Restart[] = []
    const openings: Opening[] = []
    for (let k = 0; k < restarts; k++) {
      // The last restart with the long history, profiled if asked (written when the cluster stops).
      const profile = values['profile-restart'] && updates === large && k === restarts - 1 ? ['--cpu-prof', `--cpu-prof-dir=${values['profile-restart']}`] : []
      runs.push(await restart(cluster, profile))
      openings.push(await open(cluster, done.envelopes, k))
    }
    report[String(updates)] = { updates: done.envelopes * opsPerEnvelope, restarts: runs, openings }
    const m = (xs: number[]) => `${median(xs).toFixed(0)} (${Math.min(...xs).toFixed(0)}-${Math.max(...xs).toFixed(0)})`
    console.log(
      `  ${done.envelopes * opsPerEnvelope} updates: restart to serving ${m(runs.map((r) => r.servingMs))} ms, to ready ${m(runs.map((r) => r.readyMs))} ms (store read ${m(runs.map((r) => r.storeReadMs))} ms, ${m(runs.map((r) => r.batches))} batches replayed); new client shows the stable state after ${m(openings.map((o) => o.shownMs))} ms, downloading ${m(openings.map((o) => o.downloaded))} B for a ${m(openings.map((o) => o.snapshot))} B snapshot`,
    )
  }
  if (values.out) writeFileSync(values.out, JSON.stringify(report, null, 2))
} finally {
  await cluster.stop()
  process.exit(0)
}
