#!/usr/bin/env node
/**
 * Adaptive propagation report (a report, never a test), after BENDY's
 * evaluation (SAC 2016): a Zipf-skewed stream of updates over `--objects`
 * objects commits at a relay's audit-only replica and change log
 * (`@stead/core` delta.ts), and three followers, each a client replica,
 * catch up by state deltas within a freshness bound `--freshness` δ (ms):
 * one takes every object as ops, one as state, one adaptive (state for the
 * tracker's hot objects whose ops outweigh their state, BENDY's rule). All
 * three follow the same stream side by side.
 *
 *   npm run bench:bendy -- [--objects 1000,10000,100000] [--workloads counters,sets,registers,mixed] [--rate 2000] [--seconds 5] [--freshness 500] [--zipf 0.99] [--bandwidth 1250000] [--runs 3] [--out FILE] [--charts DIR]
 *
 * Time is logical: `--rate` updates per second, one signed envelope each,
 * from 8 authors in turn, committed every 20 ms. A follower syncs as BENDY
 * schedules it: at t_u + δ − μ, where t_u is the commit time of the
 * oldest update it has not seen and μ the mean propagation time of its
 * last 5 syncs. Propagation time is measured, not modelled: the CPU of
 * building and encoding the delta at the relay and of decoding, verifying
 * (against the relay's state hash) and applying it at the follower, plus
 * the delta's bytes over a `--bandwidth` link (bytes per second; default
 * 10 Mbit/s). An update's visibility delay is from its commit to the end
 * of the sync that delivers it. Workloads: `counters` (PN-Counters, four
 * writers each to start with; an update is an increment), `sets`
 * (OR-Sets of 32 elements to start with; an update adds a new element, so
 * hot sets grow), `registers` (LWW registers of a 96-character value; an
 * update writes a new one), `mixed` (even keys registers, where state
 * pays from the second write, odd keys sets, where ops pay).
 */
import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { performance } from 'node:perf_hooks'
import {
  ChangeLog,
  StableAudit,
  authorIdOf,
  clockInit,
  createCrdt,
  decodeStateDelta,
  encodeDeclaration,
  encodeStateDelta,
  openEnvelopeSync,
  sealEnvelope,
  type AuditObject,
  type DeltaMode,
  type Declaration,
  type Envelope,
} from '@stead/core'
import { nodeCrypto, publicKeyOfSync } from '@stead/core/node'
import { reportArgs } from './args.ts'
import { Rng, zipfSampler } from './rng.ts'
import { median } from './stats.ts'
import { barChart } from './svg.ts'

const values = reportArgs(
  'usage: npm run bench:bendy -- [--objects 1000,10000,100000] [--workloads counters,sets,registers,mixed] [--rate 2000] [--seconds 5] [--freshness 500] [--zipf 0.99] [--bandwidth 1250000] [--runs 3] [--out FILE] [--charts DIR]\n(what each option does: the comment at the top of packages/bench/src/bendy.ts)',
  {
    objects: { type: 'string', default: '1000,10000,100000' },
    workloads: { type: 'string', default: 'counters,sets,registers,mixed' },
    rate: { type: 'string', default: '2000' },
    seconds: { type: 'string', default: '5' },
    freshness: { type: 'string', default: '500' },
    zipf: { type: 'string', default: '0.99' },
    bandwidth: { type: 'string', default: '1250000' },
    runs: { type: 'string', default: '3' },
    out: { type: 'string' },
    charts: { type: 'string' },
  },
)
const positive = (k: 'rate' | 'seconds' | 'freshness' | 'zipf' | 'bandwidth' | 'runs'): number => {
  const v = Number(values[k])
  if (!Number.isFinite(v) || v <= 0) throw new Error(`--${k} must be a positive number`)
  return v
}
const objectCounts = values.objects.split(',').map((x) => {
  const v = Number(x)
  if (!Number.isSafeInteger(v) || v < 2) throw new Error(`--objects takes whole numbers of at least 2, got ${x}`)
  return v
})
const WORKLOADS = ['counters', 'sets', 'registers', 'mixed'] as const
type Workload = (typeof WORKLOADS)[number]
const workloads = values.workloads.split(',').map((w) => {
  if (!(WORKLOADS as readonly string[]).includes(w)) throw new Error(`--workloads takes ${WORKLOADS.join(', ')}, got ${w}`)
  return w as Workload
})
const [rate, seconds, freshnessMs, zipf, bandwidth, runs] = (['rate', 'seconds', 'freshness', 'zipf', 'bandwidth', 'runs'] as const).map(positive) as [number, number, number, number, number, number]

const SPACE = 'bendy'
const COMMIT_MS = 20
const AUTHORS = 8
const MODES: readonly DeltaMode[] = ['ops', 'state', 'adaptive']
const COUNTER: Declaration = { type: 'counter', bounds: {} }
const SET: Declaration = { type: 'set', bounds: {} }
const REGISTER: Declaration = { type: 'register' }
const value = (n: number): string => `value ${n} `.padEnd(96, 'x')
const sha256 = (b: Uint8Array): Uint8Array => nodeCrypto.sha256(b)
const open = (signed: { bytes: Uint8Array; sig: Uint8Array }): Envelope => openEnvelopeSync({ sha256, verify: () => true }, [signed.bytes, signed.sig])

const authors = Array.from({ length: AUTHORS }, (_, i) => {
  const secretKey = new Uint8Array(32).fill(i + 1)
  return { secretKey, publicKey: publicKeyOfSync(secretKey) }
})

function declOf(w: Workload, key: number): Declaration {
  if (w === 'mixed') return key % 2 === 0 ? REGISTER : SET
  return w === 'counters' ? COUNTER : w === 'sets' ? SET : REGISTER
}

/** The objects' starting states: counters written by four replicas, sets of 32 elements. One snapshot per type, shared. */
function startState(w: Workload, n: number): AuditObject[] {
  const counter = createCrdt(COUNTER)
  for (let r = 0; r < 4; r++) counter.apply(5 as never, { replica: authorIdOf(nodeCrypto, authors[r]!.publicKey), tag: `seed:${r}` })
  const set = createCrdt(SET)
  for (let e = 0; e < 32; e++) set.apply(['a', `starting element ${e} of this set`] as never, { replica: 'seed', tag: `seed:${e}` })
  const register = createCrdt(REGISTER)
  register.apply(['s', value(0), 0] as never, { replica: 'seed', tag: 'seed:0' })
  const snaps = { counter: counter.snapshot(), set: set.snapshot(), register: register.snapshot() }
  const keys = Array.from({ length: n }, (_, i) => ({ i, key: `o${i}` })).sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0))
  return keys.map(({ i, key }) => {
    const decl = declOf(w, i)
    return [key, encodeDeclaration(decl), snaps[decl.type as 'counter' | 'set' | 'register']]
  })
}

interface Follower {
  readonly mode: DeltaMode
  readonly replica: StableAudit
  /** Commit times of the updates it has not seen yet, oldest first. */
  unseen: number[]
  recentMu: number[]
  bytes: number
  relayMs: number
  clientMs: number
  syncs: number
  stateObjects: number
  sentObjects: number
  delays: number[]
}

interface ModeResult {
  mode: DeltaMode
  bytesPerUpdate: number
  relayUsPerUpdate: number
  clientUsPerUpdate: number
  syncs: number
  stateShare: number
  delayP50: number
  delayP99: number
  delayMax: number
  overBound: number
}

async function runOnce(w: Workload, n: number, seed: number): Promise<{ updates: number; commitBytesPerUpdate: number; modes: ModeResult[] }> {
  const rng = new Rng(seed)
  const pick = zipfSampler(n, zipf, rng)
  // Zipf ranks land on shuffled keys, so the hottest objects are not all of one type in `mixed`.
  const keyOfRank = Array.from({ length: n }, (_, i) => i)
  for (let i = n - 1; i > 0; i--) {
    const j = rng.int(0, i)
    ;[keyOfRank[i], keyOfRank[j]] = [keyOfRank[j] as number, keyOfRank[i] as number]
  }
  const start = { space: SPACE, index: 0, authors: [], waiting: [], objects: startState(w, n) }
  const relay = StableAudit.fromAuditState({ space: SPACE, historyLimit: 0 }, start, 0)
  const log = new ChangeLog({ maxBytes: 1024 * 1024 * 1024 })
  const followers: Follower[] = MODES.map((mode) => ({ mode, replica: StableAudit.fromAuditState({ space: SPACE, historyLimit: 0 }, start, 0), unseen: [], recentMu: [], bytes: 0, relayMs: 0, clientMs: 0, syncs: 0, stateObjects: 0, sentObjects: 0, delays: [] }))
  // Each replica hashes its starting state once (every object's leaf): setup, not propagation.
  for (const r of [relay, ...followers.map((f) => f.replica)]) r.stableHash(sha256)
  const seqs = new Array<number>(AUTHORS).fill(0)
  const perCommit = (rate * COMMIT_MS) / 1000
  let owed = 0
  let updates = 0
  let commitBytes = 0
  let element = 0
  for (let t = COMMIT_MS; t <= seconds * 1000; t += COMMIT_MS) {
    owed += perCommit
    const batch: Envelope[] = []
    for (; owed >= 1; owed--) {
      const a = updates % AUTHORS
      const key = keyOfRank[pick()] as number
      const decl = declOf(w, key)
      const op = decl.type === 'counter' ? rng.int(1, 10) : decl.type === 'set' ? ['a', `element ${element++} added in the run`] : ['s', value(element++), t]
      batch.push(await sealEnvelope(nodeCrypto, authors[a]!, { space: SPACE, seq: ++seqs[a]!, clock: clockInit(), deps: [], updates: [{ key: `o${key}`, decl, ops: [op as never] }], safe: [] }))
      updates++
    }
    const from = relay.stableIndex
    log.record(from, relay.commit(batch, t / COMMIT_MS))
    for (const env of batch) commitBytes += env.signed.bytes.length + env.signed.sig.length
    const hash = relay.stableHash(sha256)
    for (const f of followers) {
      for (let i = 0; i < batch.length; i++) f.unseen.push(t)
      const mu = f.recentMu.length ? f.recentMu.reduce((x, y) => x + y, 0) / f.recentMu.length : 0
      if (f.unseen.length === 0 || t < (f.unseen[0] as number) + freshnessMs - mu) continue
      sync(f, relay, log, hash, t, t / COMMIT_MS)
    }
  }
  const modes = followers.map((f): ModeResult => {
    const sorted = [...f.delays].sort((a, b) => a - b)
    const q = (p: number): number => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] ?? 0
    const seen = f.delays.length
    return {
      mode: f.mode,
      bytesPerUpdate: f.bytes / seen,
      relayUsPerUpdate: (f.relayMs * 1000) / seen,
      clientUsPerUpdate: (f.clientMs * 1000) / seen,
      syncs: f.syncs,
      stateShare: f.stateObjects / Math.max(1, f.sentObjects),
      delayP50: q(0.5),
      delayP99: q(0.99),
      delayMax: sorted[sorted.length - 1] ?? 0,
      overBound: sorted.filter((d) => d > freshnessMs).length / Math.max(1, seen),
    }
  })
  return { updates, commitBytesPerUpdate: commitBytes / updates, modes }
}

/** One sync round: the relay builds the delta since the follower's index, the follower checks and applies it. */
function sync(f: Follower, relay: StableAudit, log: ChangeLog, hash: Uint8Array, now: number, position: number): void {
  const t0 = performance.now()
  const delta = log.delta(relay, f.replica.stableIndex, f.mode)
  if (!delta) throw new Error(`the change log does not reach back to ${f.replica.stableIndex}`)
  const bytes = encodeStateDelta(delta)
  const t1 = performance.now()
  const verified = f.replica.verifyDelta(sha256, decodeStateDelta(bytes, open), hash)
  if ('problem' in verified) throw new Error(`the ${f.mode} delta did not verify: ${verified.problem}`)
  f.replica.applyDelta(sha256, verified, position)
  const t2 = performance.now()
  const mu = t2 - t0 + (bytes.length / bandwidth) * 1000
  f.recentMu.push(mu)
  if (f.recentMu.length > 5) f.recentMu.shift()
  f.bytes += bytes.length
  f.relayMs += t1 - t0
  f.clientMs += t2 - t1
  f.syncs++
  f.sentObjects += delta.objects.length
  f.stateObjects += delta.objects.filter((o) => o.mode === 'state').length
  for (const committed of f.unseen) f.delays.push(now - committed + mu)
  f.unseen = []
}

interface Row {
  workload: Workload
  objects: number
  updates: number
  commitBytesPerUpdate: number
  modes: ModeResult[]
}

const rows: Row[] = []
for (const w of workloads) {
  for (const n of objectCounts) {
    const all: Array<Awaited<ReturnType<typeof runOnce>>> = []
    for (let r = 0; r < runs; r++) all.push(await runOnce(w, n, 42 + r))
    const med = (f: (m: ModeResult) => number, mode: DeltaMode): number => median(all.map((x) => f(x.modes.find((m) => m.mode === mode) as ModeResult)))
    const row: Row = {
      workload: w,
      objects: n,
      updates: all[0]!.updates,
      commitBytesPerUpdate: median(all.map((x) => x.commitBytesPerUpdate)),
      modes: MODES.map((mode) => ({
        mode,
        bytesPerUpdate: med((m) => m.bytesPerUpdate, mode),
        relayUsPerUpdate: med((m) => m.relayUsPerUpdate, mode),
        clientUsPerUpdate: med((m) => m.clientUsPerUpdate, mode),
        syncs: med((m) => m.syncs, mode),
        stateShare: med((m) => m.stateShare, mode),
        delayP50: med((m) => m.delayP50, mode),
        delayP99: med((m) => m.delayP99, mode),
        delayMax: med((m) => m.delayMax, mode),
        overBound: med((m) => m.overBound, mode),
      })),
    }
    rows.push(row)
    const best = Math.min(...row.modes.filter((m) => m.mode !== 'adaptive').map((m) => m.bytesPerUpdate))
    const adaptive = row.modes.find((m) => m.mode === 'adaptive') as ModeResult
    console.log(`${w} over ${n} objects, ${row.updates} updates, δ = ${freshnessMs} ms (medians of ${runs} runs); as commits today: ${row.commitBytesPerUpdate.toFixed(0)} B per update`)
    console.log('| mode | bytes per update | relay CPU per update (µs) | client CPU per update (µs) | syncs | objects sent as state | delay p50 / p99 / max (ms) | updates over δ |')
    console.log('| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |')
    for (const m of row.modes) {
      console.log(`| ${m.mode} | ${m.bytesPerUpdate.toFixed(1)} | ${m.relayUsPerUpdate.toFixed(1)} | ${m.clientUsPerUpdate.toFixed(1)} | ${m.syncs} | ${(m.stateShare * 100).toFixed(1)}% | ${m.delayP50.toFixed(0)} / ${m.delayP99.toFixed(0)} / ${m.delayMax.toFixed(0)} | ${(m.overBound * 100).toFixed(2)}% |`)
    }
    console.log(`adaptive / best single mode, bytes: ${(adaptive.bytesPerUpdate / best).toFixed(3)}\n`)
  }
}

if (values.out) writeFileSync(values.out, JSON.stringify({ rate, seconds, freshnessMs, zipf, bandwidth, runs, rows }, null, 2) + '\n')
if (values.charts) {
  mkdirSync(values.charts, { recursive: true })
  for (const [metric, label, file] of [
    [(m: ModeResult) => m.bytesPerUpdate, 'bytes per update', 'bendy-bytes.svg'],
    [(m: ModeResult) => m.relayUsPerUpdate + m.clientUsPerUpdate, 'CPU per update, relay + client (µs)', 'bendy-cpu.svg'],
  ] as const) {
    const groups = rows.map((r) => ({ label: `${r.workload} ${r.objects >= 1000 ? `${r.objects / 1000}k` : r.objects}`, values: Object.fromEntries(r.modes.map((m) => [m.mode, metric(m)])) }))
    writeFileSync(join(values.charts, file), barChart(groups, MODES, { title: `BENDY catch-up deltas: ${label} (δ = ${freshnessMs} ms, Zipf ${zipf})`, yLabel: label }))
  }
}
