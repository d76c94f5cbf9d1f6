/**
 * Micro-benchmarks for @stead/core on one core. A report, never a test: it
 * prints a table, writes bench/last-run.json and exits 0 whatever the numbers.
 *
 *   npm run bench -w @stead/core              # ~0.6 s per case
 *   npm run bench -w @stead/core -- --quick   # ~0.15 s per case
 *   npm run bench -w @stead/core -- --only=clock
 *
 * Each case is warmed up (which also calibrates a batch size that runs for
 * about 10-25 ms), then timed in batches until the case's time budget is
 * spent. ops/s is total ops over total timed time; ±% is the median absolute
 * deviation of the per-batch rates, relative to their median.
 */
import { writeFileSync } from 'node:fs'
import { cpus, platform, arch } from 'node:os'
import { performance } from 'node:perf_hooks'
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import {
  BoundedCounter,
  LWWRegister,
  ORSet,
  PNCounter,
  MerkleIndex,
  ReliableReplica,
  authorIdOf,
  merkleRoot,
  clockCompare,
  clockFrom,
  clockMerge,
  createWebCrypto,
  decode,
  decodeClock,
  encode,
  encodeClock,
  decodeEnvelope,
  encodeEnvelope,
  nobleCrypto,
  sealEnvelope,
  type Clock,
  type Crypto,
  type Envelope,
  type EnvelopeDraft,
  type OpContext,
  type SetOp,
  type BoundedCounterOp,
  type RegisterOp,
} from '../src/index.ts'
import { nodeCrypto } from '../src/node.ts'
import { rng } from './rng.ts'

// ---------------------------------------------------------------- options

const args = process.argv.slice(2)
if (args.includes('--help')) {
  console.log(`usage: npm run bench -w @stead/core [-- --quick] [-- --only=NAME]
  --quick      about 0.15 s per case instead of 0.6 s
  --only=NAME  only the cases whose name contains NAME`)
  process.exit(0)
}
const QUICK = args.includes('--quick')
const ONLY = args.find((a) => a.startsWith('--only='))?.slice('--only='.length)
const NO_JSON = args.includes('--no-json')
const BUDGET_MS = QUICK ? 150 : 600
const WARMUP_MS = QUICK ? 50 : 200
const MIN_BATCH_MS = 10

// A real gc between cases keeps one case's garbage from being billed to the next.
setFlagsFromString('--expose-gc')
const gc = runInNewContext('gc') as () => void

/** Results are written here so the optimizer cannot drop the work. */
let sink: unknown
function consume(v: unknown): void {
  sink = v
}

// ---------------------------------------------------------------- harness

/** Runs n operations and returns the milliseconds they took (setup may run untimed). */
type Batch = (n: number) => number | Promise<number>

interface Target {
  /** Human form, e.g. "< 20 µs" or ">= 15k/s". */
  readonly text: string
  readonly met: (r: { opsPerSec: number; usPerOp: number }) => boolean
}

interface CaseDef {
  readonly group: string
  readonly name: string
  /** Ops counted per unit of n (e.g. 10 for an envelope of 10 ops). */
  readonly opsPerUnit?: number
  /** Upper bound on n, for cases that consume a prepared pool. */
  readonly maxBatch?: number
  readonly target?: Target
  readonly batch: Batch
}

interface Result {
  group: string
  name: string
  opsPerSec: number
  usPerOp: number
  spreadPct: number
  batches: number
  ops: number
  target?: string
  met?: boolean
}

const results: Result[] = []

/** Times a plain function called n times in a loop. */
function loop(fn: () => unknown): Batch {
  return (n) => {
    let last: unknown
    const t0 = performance.now()
    for (let i = 0; i < n; i++) last = fn()
    const t = performance.now() - t0
    consume(last)
    return t
  }
}

/** Times an async function awaited n times one after another, as a client would. */
function sequential(fn: () => Promise<unknown>): Batch {
  return async (n) => {
    let last: unknown
    const t0 = performance.now()
    for (let i = 0; i < n; i++) last = await fn()
    const t = performance.now() - t0
    consume(last)
    return t
  }
}

/** n operations, `depth` in flight at a time (Promise.all per window). */
function pipelined(fn: () => Promise<unknown>, depth: number): Batch {
  return async (n) => {
    const t0 = performance.now()
    for (let done = 0; done < n; ) {
      const k = Math.min(depth, n - done)
      const inflight: Array<Promise<unknown>> = []
      for (let j = 0; j < k; j++) inflight.push(fn())
      consume(await Promise.all(inflight))
      done += k
    }
    return performance.now() - t0
  }
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b)
  const m = s.length >> 1
  return s.length % 2 === 1 ? (s[m] as number) : ((s[m - 1] as number) + (s[m] as number)) / 2
}

async function measure(c: CaseDef): Promise<Result> {
  const cap = c.maxBatch ?? Number.MAX_SAFE_INTEGER
  // Warm up and calibrate: grow n until one batch takes MIN_BATCH_MS.
  // Warm-up counts timed time only, so untimed setup cannot cut it short.
  let n = 1
  let warm = 0
  for (;;) {
    const t = await c.batch(n)
    warm += t
    if (t >= MIN_BATCH_MS || n >= cap) {
      if (warm >= WARMUP_MS) break
    } else {
      n = Math.min(cap, t <= 0 ? n * 8 : Math.max(n * 2, Math.ceil((n * MIN_BATCH_MS * 1.5) / t)))
    }
  }
  gc()
  const rates: number[] = []
  let ops = 0
  let time = 0
  while (time < BUDGET_MS || rates.length < 5) {
    const t = await c.batch(n)
    const units = n * (c.opsPerUnit ?? 1)
    ops += units
    time += t
    rates.push((units / t) * 1000)
  }
  const med = median(rates)
  const mad = median(rates.map((r) => Math.abs(r - med)))
  const opsPerSec = (ops / time) * 1000
  const r: Result = {
    group: c.group,
    name: c.name,
    opsPerSec,
    usPerOp: 1e6 / opsPerSec,
    spreadPct: (mad / med) * 100,
    batches: rates.length,
    ops,
  }
  if (c.target) {
    r.target = c.target.text
    r.met = c.target.met(r)
  }
  gc()
  return r
}

const cases: CaseDef[] = []
function add(c: CaseDef): void {
  if (ONLY === undefined || `${c.group} ${c.name}`.includes(ONLY)) cases.push(c)
}

const underUs = (us: number): Target => ({ text: `< ${us} µs`, met: (r) => r.usPerOp < us })
const atLeast = (perSec: number): Target => ({
  text: `>= ${perSec >= 1e6 ? `${perSec / 1e6}M` : `${perSec / 1e3}k`}/s`,
  met: (r) => r.opsPerSec >= perSec,
})

// ---------------------------------------------------------------- fixtures

// Deterministic pseudo-randomness so runs compare like with like.
const rand = rng(0x5eed)
const randInt = (lo: number, hi: number): number => lo + Math.floor(rand() * (hi - lo + 1))

/** Realistic replica ids: what authorIdOf gives for a public key (16 base64url chars). */
function makeIds(count: number, salt = 'id'): string[] {
  const enc = new TextEncoder()
  return Array.from({ length: count }, (_, i) => authorIdOf(nodeCrypto, nodeCrypto.sha256(enc.encode(`${salt}-${i}`))))
}

/** A clock over `ids` with random counters. */
function makeClock(ids: readonly string[]): Clock {
  return clockFrom(ids.map((id) => [id, randInt(1, 1_000_000)]))
}

/** The entries of `c` with `k` random entries raised. */
function raised(c: Clock, k: number): Map<string, number> {
  const out = new Map(c)
  const ids = [...c.keys()]
  for (let i = 0; i < k; i++) {
    const id = ids[randInt(0, ids.length - 1)] as string
    out.set(id, (out.get(id) as number) + randInt(1, 5))
  }
  return out
}

// ---------------------------------------------------------------- 1. clocks

/**
 * Clocks as a replica holds them: each one decoded from its own wire bytes,
 * so equal ids are distinct string objects, as when a received clock is
 * compared with the local one. (String representation matters a lot to
 * string comparison; the "shared id strings" rows use the very same string
 * objects.)
 */
const wire = (c: Clock): Clock => decodeClock(decode(encode(encodeClock(c))), 100_000)

for (const size of [10, 100, 1000]) {
  const ids = makeIds(size)
  const base = makeClock(ids)
  const a = wire(base)
  const equal = wire(base)
  const few = Math.max(1, Math.round(size / 100)) + 2 // 3, 3, 12 entries differ
  const after = wire(clockFrom(raised(base, few))) // a happened before `after`
  // Concurrent: a few entries ahead of a, and one behind it.
  const conc = raised(base, few)
  for (const id of ids) {
    if (conc.get(id) === base.get(id)) {
      conc.set(id, (base.get(id) as number) - 1)
      break
    }
  }
  const concurrent = wire(clockFrom(conc))
  const target = size === 1000 ? underUs(20) : undefined
  add({ group: 'clock', name: `compare ${size} equal (full scan)`, target, batch: loop(() => clockCompare(a, equal)) })
  add({ group: 'clock', name: `compare ${size} before (${few} differ)`, target, batch: loop(() => clockCompare(a, after)) })
  add({ group: 'clock', name: `compare ${size} concurrent`, batch: loop(() => clockCompare(a, concurrent)) })
  add({ group: 'clock', name: `merge ${size} (${few} differ)`, target, batch: loop(() => clockMerge(a, after)) })
  // Neither side covers the other, so the merge must build a new clock (the row above may return `after`).
  add({ group: 'clock', name: `merge ${size} concurrent (new clock)`, target, batch: loop(() => clockMerge(a, concurrent)) })
  if (size === 1000) {
    const shared = makeClock(ids)
    const sharedEqual = clockFrom(shared)
    const sharedAfter = clockFrom(raised(shared, few))
    add({ group: 'clock', name: `compare ${size} equal, shared id strings`, batch: loop(() => clockCompare(shared, sharedEqual)) })
    add({ group: 'clock', name: `merge ${size}, shared id strings`, batch: loop(() => clockMerge(shared, sharedAfter)) })
  }
  const bytes = encode(encodeClock(base))
  add({ group: 'clock', name: `decode ${size} (msgpack + decodeClock)`, batch: loop(() => decodeClock(decode(bytes), 100_000)) })
}

// ---------------------------------------------------------------- 2. envelopes

const backends: Crypto[] = [nodeCrypto, createWebCrypto(globalThis.crypto.subtle), nobleCrypto]

async function envelopeFixture(crypto: Crypto): Promise<{ seal: () => Promise<Envelope>; open: () => Promise<Envelope> }> {
  const secretKey = crypto.generateSecretKey()
  const publicKey = await crypto.publicKeyOf(secretKey)
  const [x, y, z] = makeIds(3, 'peer')
  const draft: EnvelopeDraft = {
    space: 'bench-space',
    seq: 42,
    // Other authors only: the envelope's own entry is its seq (sealEnvelope refuses it in the clock).
    clock: clockFrom([
      [x as string, 17],
      [y as string, 3],
      [z as string, 108],
    ]),
    deps: [crypto.sha256(new TextEncoder().encode('previous envelope'))],
    updates: [{ key: 'post/123/likes', decl: { type: 'counter', bounds: {} }, ops: [1] }],
    safe: [],
  }
  const identity = { secretKey, publicKey }
  const frame = encodeEnvelope(await sealEnvelope(crypto, identity, draft))
  return {
    seal: () => sealEnvelope(crypto, identity, draft),
    open: () => decodeEnvelope(crypto, frame),
  }
}

for (const crypto of backends) {
  const fx = await envelopeFixture(crypto)
  const isNode = crypto.name === 'node'
  add({ group: 'envelope', name: `seal (encode+sign) ${crypto.name}`, target: isNode ? atLeast(15_000) : undefined, batch: sequential(fx.seal) })
  add({ group: 'envelope', name: `open (verify+decode) ${crypto.name}`, target: isNode ? atLeast(6_000) : undefined, batch: sequential(fx.open) })
  if (crypto.name !== 'noble') {
    add({ group: 'envelope', name: `seal ${crypto.name} pipelined x64`, batch: pipelined(fx.seal, 64) })
    add({ group: 'envelope', name: `open ${crypto.name} pipelined x64`, batch: pipelined(fx.open, 64) })
  }
}

// ---------------------------------------------------------------- 3. CRDTs

const REPLICAS = makeIds(16, 'replica')
const ctxs: OpContext[] = Array.from({ length: 4096 }, (_, i) => ({ replica: REPLICAS[i % REPLICAS.length] as string, tag: `${REPLICAS[i % REPLICAS.length]}:${i >> 4}:0` }))
const ctxAt = (i: number): OpContext => ctxs[i & 4095] as OpContext

/** Fresh tags for ops whose tags must be unique (set adds, register writes). */
function freshCtx(i: number, round: number): OpContext {
  const replica = REPLICAS[i & 15] as string
  return { replica, tag: `${replica}:${round}:${i}` }
}

interface CrdtLike<Op> {
  apply(op: Op, ctx: OpContext): void
  tryApply(op: Op, ctx: OpContext): { ok: boolean }
  inverse(op: Op, ctx: OpContext): Op
  merge(other: never): void
}

/**
 * Op-based cases run in chunks of CHUNK ops, each on a fresh replica built
 * untimed, so the state size (and thus the per-op cost) does not depend on
 * the harness's batch size:
 * - apply: CHUNK ops from 16 replicas into a fresh replica;
 * - tryApply (the audit's path, with the invariant check), where relevant;
 * - inverse+apply: CHUNK applied ops (untimed) are undone in random order
 *   with apply(inverse(op)) (timed), as the replica reverses rejected ops.
 * Tags are built once, so their string hashes are cached.
 * Merges: "steady" merges a state into one that already holds it (an
 * anti-entropy round where little changed: every entry compared, nothing
 * new); "into fresh clone" merges into a clone of a concurrent state
 * (clone untimed), so about half the entries are new.
 */
const CHUNK = 1000
const UNDO_ORDER = (() => {
  const order = Array.from({ length: CHUNK }, (_, i) => i)
  for (let i = order.length - 1; i > 0; i--) {
    const j = randInt(0, i)
    ;[order[i], order[j]] = [order[j] as number, order[i] as number]
  }
  return order
})()

function chunked(make: () => void, timed: (k: number) => void): Batch {
  return (n) => {
    let t = 0
    for (let done = 0; done < n; done += CHUNK) {
      make()
      const t0 = performance.now()
      timed(Math.min(CHUNK, n - done))
      t += performance.now() - t0
    }
    return t
  }
}

function crdtCases<Op, C extends CrdtLike<Op> & { clone(): C }>(spec: {
  name: string
  make: () => C
  opAt: (i: number) => Op
  ctxFor: (i: number) => OpContext
  populated: () => C
  applyTarget?: Target
  tryApply?: boolean
}): void {
  const { name, make, populated } = spec
  const ops = Array.from({ length: CHUNK }, (_, i) => spec.opAt(i))
  const cx = Array.from({ length: CHUNK }, (_, i) => spec.ctxFor(i))
  let c = make()
  const fresh = (): void => {
    c = make()
  }
  add({
    group: 'crdt',
    name: `${name} apply`,
    target: spec.applyTarget,
    batch: chunked(fresh, (k) => {
      for (let i = 0; i < k; i++) c.apply(ops[i] as Op, cx[i] as OpContext)
      consume(c)
    }),
  })
  if (spec.tryApply) {
    add({
      group: 'crdt',
      name: `${name} tryApply (invariant checked)`,
      batch: chunked(fresh, (k) => {
        let rejected = 0
        for (let i = 0; i < k; i++) if (!c.tryApply(ops[i] as Op, cx[i] as OpContext).ok) rejected++
        if (rejected > 0) throw new Error(`${name}: ${rejected} ops rejected`)
        consume(c)
      }),
    })
  }
  add({
    group: 'crdt',
    name: `${name} inverse+apply`,
    batch: chunked(
      () => {
        c = make()
        for (let i = 0; i < CHUNK; i++) c.apply(ops[i] as Op, cx[i] as OpContext)
      },
      (k) => {
        for (let j = 0; j < k; j++) {
          const i = UNDO_ORDER[j] as number
          const ctx = cx[i] as OpContext
          c.apply(c.inverse(ops[i] as Op, ctx), ctx)
        }
        consume(c)
      },
    ),
  })
  const base = populated()
  const other = populated()
  other.merge(base as never)
  const target = base.clone()
  target.merge(other as never)
  add({ group: 'crdt', name: `${name} merge (steady)`, batch: loop(() => target.merge(other as never)) })
  const concurrent = populated()
  add({
    group: 'crdt',
    name: `${name} merge into fresh clone`,
    batch: (n) => {
      const targets = Array.from({ length: n }, () => base.clone())
      const t0 = performance.now()
      for (let i = 0; i < n; i++) (targets[i] as C).merge(concurrent as never)
      const t = performance.now() - t0
      consume(targets)
      return t
    },
  })
}

function filled<Op, C extends CrdtLike<Op>>(c: C, count: number, opAt: (i: number) => Op, ctxFor: (i: number) => OpContext): C {
  for (let i = 0; i < count; i++) c.apply(opAt(i), ctxFor(i))
  return c
}

/** Unique tags per populated state, so two states are concurrent, not copies. */
let stateSalt = 0
function saltedCtx(): (i: number) => OpContext {
  const salt = ++stateSalt
  return (i) => freshCtx(i, 1_000_000 + salt)
}

// PN-Counter: amounts of both signs from 16 replicas. Merge state: 16 replicas.
const counterOp = (i: number): number => ((i * 7) % 11) - 5 || 1
crdtCases<number, PNCounter>({
  name: 'PNCounter',
  make: () => new PNCounter({ min: -1e15, max: 1e15 }),
  opAt: counterOp,
  ctxFor: ctxAt,
  populated: () => filled(new PNCounter(), 1000, counterOp, ctxAt),
  applyTarget: atLeast(1_000_000),
  tryApply: true,
})

// OR-Set: adds of 256 distinct elements, each under its own tag. Merge
// state: 256 elements with ~4 tags each (1,000 tags), a tenth removed.
const setOp = (i: number): SetOp => ['a', `item-${i & 255}`]
crdtCases<SetOp, ORSet>({
  name: 'ORSet',
  make: () => new ORSet(),
  opAt: setOp,
  ctxFor: (i) => freshCtx(i, 0),
  populated: () => {
    const ctx = saltedCtx()
    const s = filled(new ORSet(), 1000, setOp, ctx)
    for (let e = 0; e < 256; e += 10) s.apply(['r', `item-${e}`, s.tagsOf(`item-${e}`)], ctx(5000 + e))
    return s
  },
})

// The same adds, each building its tag string as envelopeUnits does: a new
// string per op is hashed (and flattened) on first use as a key.
{
  const authors = REPLICAS.slice(0, 16)
  const addOps = Array.from({ length: 1024 }, (_, i) => setOp(i))
  let seq = 0
  let set = new ORSet()
  add({
    group: 'crdt',
    name: 'ORSet apply, tag built per op',
    batch: chunked(
      () => {
        set = new ORSet()
        seq++
      },
      (k) => {
        for (let i = 0; i < k; i++) {
          const replica = authors[i & 15] as string
          set.apply(addOps[i & 1023] as SetOp, { replica, tag: `${replica}:${seq}:${i}` })
        }
        consume(set)
      },
    ),
  })
}

// LWW-Register: writes with growing timestamps; the prospective register
// keeps every write so that any can be withdrawn. Merge state: 100 writes.
const registerOp = (i: number): RegisterOp => ['s', { text: 'hello', n: i }, 1_700_000_000_000 + i]
crdtCases<RegisterOp, LWWRegister>({
  name: 'LWWRegister',
  make: () => new LWWRegister(),
  opAt: registerOp,
  ctxFor: (i) => freshCtx(i, 0),
  populated: () => filled(new LWWRegister(), 100, registerOp, saltedCtx()),
})

// Bounded counter (min 0, initial 1e12 in the pool): each of 16 replicas
// first claims rights, then increments, decrements and transfers mix.
const bcOp = (i: number): BoundedCounterOp => {
  const k = i % 8
  if (k < 4) return ['i', 3]
  if (k < 7) return ['d', 1]
  return ['t', 1, REPLICAS[(i + 1) & 15] as string]
}
function freshBounded(): BoundedCounter {
  const c = new BoundedCounter({ min: 0, initial: 1e12 })
  for (let i = 0; i < 16; i++) c.apply(['c', 1e9], { replica: REPLICAS[i] as string, tag: `claim-${i}` })
  return c
}
crdtCases<BoundedCounterOp, BoundedCounter>({
  name: 'BoundedCounter',
  make: freshBounded,
  opAt: bcOp,
  ctxFor: ctxAt,
  populated: () => filled(freshBounded(), 1000, bcOp, ctxAt),
  tryApply: true,
})

// ---------------------------------------------------------------- 4. replica

/**
 * Envelopes of 10 counter ops from 8 authors, sealed once with node:crypto,
 * ordered round-robin so every prefix is gap-free. Each batch feeds a fresh
 * replica: receive(env) for each, and commit() every 16 envelopes (a block).
 */
async function replicaPool(count: number, shape: 'keys' | 'ops'): Promise<Envelope[]> {
  const AUTHORS = 8
  const ids: Array<{ secretKey: Uint8Array; publicKey: Uint8Array; id: string }> = []
  for (let a = 0; a < AUTHORS; a++) {
    const secretKey = nodeCrypto.generateSecretKey()
    const publicKey = await nodeCrypto.publicKeyOf(secretKey)
    ids.push({ secretKey, publicKey, id: authorIdOf(nodeCrypto, publicKey) })
  }
  const decl = { type: 'counter', bounds: { min: -1e12 } } as const
  const out: Envelope[] = []
  const prev: Array<Uint8Array | undefined> = []
  for (let i = 0; i < count; i++) {
    const a = i % AUTHORS
    const who = ids[a] as (typeof ids)[number]
    const seq = Math.floor(i / AUTHORS) + 1
    const updates =
      shape === 'keys'
        ? Array.from({ length: 10 }, (_, k) => ({ key: `counter-${(i + k) % 40}`, decl, ops: [randInt(1, 9)] }))
        : [{ key: `counter-${i % 40}`, decl, ops: Array.from({ length: 10 }, () => randInt(-3, 9) || 1) }]
    const p = prev[a]
    const env = await sealEnvelope(nodeCrypto, who, {
      space: 'bench',
      seq,
      clock: clockFrom([]),
      deps: p ? [p] : [],
      updates,
      safe: [],
    })
    prev[a] = env.id
    out.push(env)
  }
  return out
}

const REPLICA_POOL = QUICK ? 1024 : 4096

function replicaCase(name: string, shape: 'keys' | 'ops'): void {
  // Sealed on first use (untimed: the batch times itself), so --only skips it.
  let pool: Envelope[] | undefined
  add({
    group: 'replica',
    name,
    opsPerUnit: 10,
    maxBatch: REPLICA_POOL,
    batch: async (n) => {
      pool ??= await replicaPool(REPLICA_POOL, shape)
      const r = new ReliableReplica({ space: 'bench' })
      const t0 = performance.now()
      for (let i = 0; i < n; i += 16) {
        const block = pool.slice(i, Math.min(n, i + 16))
        for (const env of block) r.receive(env)
        r.commit(block)
      }
      const t = performance.now() - t0
      if (r.stableIndex !== n || r.pendingCount !== 0) throw new Error(`${r.stableIndex} committed, ${r.pendingCount} pending`)
      consume(r)
      return t
    },
  })
}

replicaCase('receive+commit, 10 keys x 1 op', 'keys')
replicaCase('receive+commit, 1 key x 10 ops', 'ops')

// ---------------------------------------------------------------- state hash (keyed Merkle tree)

const sha = (b: Uint8Array): Uint8Array => nodeCrypto.sha256(b)
for (const keys of [1, 100, 10_000, 100_000]) {
  // Built on first use (untimed), so --only skips it: what a commit costs per object it changed.
  let tree: { index: MerkleIndex; leaves: Map<string, Uint8Array> } | undefined
  add({
    group: 'state-hash',
    name: `one key of ${keys.toLocaleString('en')} changed, new root`,
    batch: (n) => {
      if (!tree) {
        const leaves = new Map<string, Uint8Array>()
        const index = new MerkleIndex()
        for (let i = 0; i < keys; i++) {
          leaves.set(`obj:${i}`, sha(encode(i)))
          index.touch(`obj:${i}`)
        }
        index.rootOf(sha, (k) => leaves.get(k))
        tree = { index, leaves }
      }
      const { index, leaves } = tree
      const t0 = performance.now()
      for (let i = 0; i < n; i++) {
        const key = `obj:${i % keys}`
        leaves.set(key, sha(encode([i, key])))
        index.touch(key)
        consume(index.rootOf(sha, (k) => leaves.get(k)))
      }
      return performance.now() - t0
    },
  })
}
{
  const entries: Array<[string, Uint8Array]> = Array.from({ length: 10_000 }, (_, i) => [`obj:${i}`, sha(encode(i))])
  add({ group: 'state-hash', name: 'root of 10,000 keys from scratch (a verifier)', batch: loop(() => merkleRoot(sha, entries)) })
}

// ---------------------------------------------------------------- run + report

const started = new Date()
const meta = {
  date: started.toISOString(),
  node: process.version,
  v8: process.versions.v8,
  cpu: cpus()[0]?.model ?? 'unknown',
  cores: cpus().length,
  platform: `${platform()} ${arch()}`,
  quick: QUICK,
  budgetMs: BUDGET_MS,
}
console.log(`@stead/core benchmarks${QUICK ? ' (--quick)' : ''}`)
console.log(`date  ${meta.date}`)
console.log(`node  ${meta.node} (V8 ${meta.v8}), ${meta.platform}`)
console.log(`cpu   ${meta.cpu} (${meta.cores} logical cores; single-threaded JS, one core)`)
console.log('')

const fmtOps = (x: number): string =>
  x >= 1e6 ? `${(x / 1e6).toFixed(2)}M` : x >= 1e3 ? `${(x / 1e3).toFixed(1)}k` : x.toFixed(0)
const fmtUs = (x: number): string => (x >= 100 ? x.toFixed(0) : x >= 1 ? x.toFixed(2) : x.toFixed(3))
const nameWidth = Math.max(...cases.map((c) => c.group.length + c.name.length + 1), 20)
const header = `${'case'.padEnd(nameWidth)}  ${'ops/s'.padStart(9)}  ${'µs/op'.padStart(9)}  ${'±%'.padStart(5)}  target`
console.log(header)
console.log('-'.repeat(header.length + 14))

let lastGroup = ''
const failed: string[] = []
for (const c of cases) {
  if (lastGroup !== '' && c.group !== lastGroup) console.log('')
  lastGroup = c.group
  const label = `${c.group} ${c.name}`.padEnd(nameWidth)
  let r: Result
  try {
    r = await measure(c)
  } catch (err) {
    // A report, not a test: note the broken case and carry on.
    failed.push(`${c.group} ${c.name}`)
    console.log(`${label}  failed: ${(err as Error).message}`)
    continue
  }
  results.push(r)
  const verdict = r.target ? `${r.target} ${r.met ? 'ok' : 'MISSED'}` : ''
  console.log(`${label}  ${fmtOps(r.opsPerSec).padStart(9)}  ${fmtUs(r.usPerOp).padStart(9)}  ${r.spreadPct.toFixed(1).padStart(5)}  ${verdict}`)
}

console.log('')
console.log('Notes: async cases await each op in turn unless "pipelined" (64 in flight). node:crypto signs and')
console.log('verifies synchronously on the main thread; WebCrypto runs on libuv\'s threadpool, so its pipelined')
console.log('figures may use more than one core. replica ops/s counts counter ops (10 per envelope).')
const missed = results.filter((r) => r.met === false)
console.log(missed.length === 0 ? 'all targets met' : `targets missed: ${missed.map((r) => `${r.group} ${r.name}`).join('; ')}`)

if (!NO_JSON) {
  const file = new URL('./last-run.json', import.meta.url)
  writeFileSync(file, `${JSON.stringify({ meta, results, failed }, null, 2)}\n`)
  console.log(`results written to ${file.pathname}`)
}
void sink
