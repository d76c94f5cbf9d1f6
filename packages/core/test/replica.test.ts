import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { clockInit } from '../src/clock.ts'
import { asGeneric, createCrdt, type AnyCrdt, type AnyOp, type CollabList, type Declaration, type PNCounter } from '../src/crdt/index.ts'
import { nodeCrypto } from '../src/crypto/node.ts'
import { authorIdOf, envelopeUnits, openEnvelopeSync, sealEnvelope, unitTagPrefix, type Envelope, type EnvelopeDraft, type ObjectUpdate, type SafeGroup } from '../src/envelope.ts'
import { decode, encode } from '../src/codec.ts'
import { AuditInvariantError, HISTORY_BYTES, ReliableReplica, StableAudit, type Decision } from '../src/replica.ts'
import { applyValuePatch } from '../src/crdt/value-patch.ts'
import { attestedDecision } from '../src/protocol.ts'
import { auditStateHash, decodeAuditState, decodeObjectProof, encodeAuditState, encodeObjectProof, objectProofHash } from '../src/state.ts'
import { SteadError } from '../src/errors.ts'
import { ChangeLog, decodeStateDelta, encodeStateDelta } from '../src/delta.ts'

const crypto = nodeCrypto
const SPACE = 'test'

async function identity(n: number) {
  const secretKey = new Uint8Array(32).fill(n + 1)
  return { secretKey, publicKey: await crypto.publicKeyOf(secretKey) }
}
const users = await Promise.all([0, 1, 2, 3].map(identity))

const counter: Declaration = { type: 'counter', bounds: { min: 0 } }
const capped: Declaration = { type: 'counter', bounds: { min: -5, max: 5 } }
const guests: Declaration = { type: 'set', bounds: { maxSize: 3 } }
const title: Declaration = { type: 'register' }
const seats: Declaration = { type: 'bounded-counter', params: { min: 0, initial: 6 } }

function seal(user: number, seq: number, parts: { updates?: ObjectUpdate[]; safe?: SafeGroup[] }): Promise<Envelope> {
  const draft: EnvelopeDraft = { space: SPACE, seq, clock: clockInit(), deps: [], updates: parts.updates ?? [], safe: parts.safe ?? [] }
  return sealEnvelope(crypto, users[user]!, draft)
}
const inc = (key: string, n: number, decl = counter): ObjectUpdate => ({ key, decl, ops: [n] })
const safeOne = (key: string, op: AnyOp, decl = counter): SafeGroup => ({ atomic: false, updates: [{ key, decl, op }] })

function committedUnits(d: Decision | undefined) {
  if (d?.kind !== 'committed') throw new Error(`expected a committed decision, got ${JSON.stringify(d && { kind: d.kind })}`)
  return d.units
}

describe('reliable replica: the audit', () => {
  it('rejects the safe decrement that breaks min 0 and reverses it prospectively (Janus, Fig. 3)', async () => {
    const r0 = new ReliableReplica({ space: SPACE })
    const r1 = new ReliableReplica({ space: SPACE })
    const init = await seal(0, 1, { updates: [inc('c', 5)] })
    for (const r of [r0, r1]) {
      r.receive(init)
      r.commit([init])
    }
    const u1 = await seal(0, 2, { updates: [inc('c', 1)] })
    const u2 = await seal(1, 1, { updates: [inc('c', 3)] })
    for (const r of [r0, r1]) [u1, u2].forEach((u) => r.receive(u))
    expect(r0.value('c')).toBe(9)
    expect(r0.stableValue('c')).toBe(5)
    const u3 = await seal(0, 3, { safe: [safeOne('c', -7)] })
    const u4 = await seal(1, 2, { safe: [safeOne('c', -4)] })
    for (const r of [r0, r1]) [u3, u4].forEach((u) => r.receive(u))
    expect(r0.value('c')).toBe(-2) // prospective may go negative for a moment

    for (const r of [r0, r1]) {
      const { decisions } = r.commit([u1, u2, u3, u4])
      expect(committedUnits(decisions[2])[0]).toEqual({ unit: 0, status: 'committed' })
      expect(committedUnits(decisions[3])[0]).toMatchObject({ unit: 0, status: 'rejected', reason: 'invariant' })
      expect(r.stableValue('c')).toBe(2)
      expect(r.value('c')).toBe(2)
      expect(r.pendingCount).toBe(0)
      expect(r.history('c').map((h) => h.value)).toEqual([5, 6, 9, 2])
    }
    expect(r0.stableSnapshot()).toEqual(r1.stableSnapshot())
  })

  it('applies an atomic group wholly or not at all', async () => {
    const r = new ReliableReplica({ space: SPACE })
    const fund = await seal(0, 1, { updates: [inc('alice', 5)] })
    const transfer = (seq: number, n: number) =>
      seal(0, seq, { safe: [{ atomic: true, updates: [{ key: 'alice', decl: counter, op: -n }, { key: 'bob', decl: counter, op: n }] }] })
    const t1 = await transfer(2, 4)
    const t2 = await transfer(3, 4)
    ;[fund, t1, t2].forEach((e) => r.receive(e))
    const { decisions } = r.commit([fund, t1, t2])
    expect(committedUnits(decisions[1])[0]!.status).toBe('committed')
    const rejected = committedUnits(decisions[2])[0]
    expect(rejected).toMatchObject({ status: 'rejected', reason: 'invariant' })
    expect(rejected?.status === 'rejected' && rejected.detail).toMatch(/^alice: /)
    expect([r.stableValue('alice'), r.stableValue('bob')]).toEqual([1, 4])
    expect([r.value('alice'), r.value('bob')]).toEqual([1, 4])
  })

  it('drops a conflicting envelope (same author and seq) and undoes it, even if it is never committed', async () => {
    const r = new ReliableReplica({ space: SPACE })
    const a = await seal(0, 1, { updates: [inc('c', 1)] })
    const b = await seal(0, 1, { updates: [inc('c', 100)] })
    expect(r.receive(a).status).toBe('applied')
    expect(r.receive(b).status).toBe('conflict')
    expect(r.value('c')).toBe(101)
    const { decisions } = r.commit([a])
    expect(decisions.map((d) => d.kind)).toEqual(['committed', 'superseded'])
    expect(decisions[1]).toMatchObject({ by: a.idHex })
    expect(r.value('c')).toBe(1)
    expect(r.commit([b]).decisions[0]).toMatchObject({ kind: 'dropped', reason: 'conflict' })
    expect(r.receive(b).status).toBe('conflict')
    expect(r.value('c')).toBe(1)
    expect(r.stableIndex).toBe(1)
  })

  it('treats a committed envelope seen again as a duplicate', async () => {
    const r = new ReliableReplica({ space: SPACE })
    const a = await seal(0, 1, { updates: [inc('c', 2)] })
    r.receive(a)
    expect(r.commit([a, a]).decisions.map((d) => d.kind)).toEqual(['committed', 'dropped'])
    expect(r.receive(a).status).toBe('duplicate')
    expect([r.value('c'), r.stableValue('c'), r.stableIndex]).toEqual([2, 2, 1])
  })

  it('holds an envelope whose predecessor is missing, then runs both in order', async () => {
    const r = new ReliableReplica({ space: SPACE })
    const e1 = await seal(0, 1, { updates: [inc('c', 1)] })
    const e2 = await seal(0, 2, { safe: [safeOne('c', -1)] })
    expect(r.commit([e2]).decisions).toEqual([])
    expect(r.value('c')).toBeUndefined() // never received, and not decided yet
    const { decisions } = r.commit([e1])
    expect(decisions.map((d) => d.kind === 'committed' && d.index)).toEqual([1, 2])
    expect([r.value('c'), r.stableValue('c')]).toEqual([0, 0])
  })

  it('drops an envelope as gap when its predecessor never comes, and reverses it', async () => {
    const r = new ReliableReplica({ space: SPACE, gapWaitCommits: 3 })
    const e2 = await seal(0, 2, { updates: [inc('c', 7)] })
    r.receive(e2)
    expect(r.value('c')).toBe(7)
    r.commit([e2])
    r.commit([])
    r.commit([])
    expect(r.value('c')).toBe(7)
    const { decisions } = r.commit([])
    expect(decisions).toMatchObject([{ kind: 'dropped', reason: 'gap' }])
    expect(r.value('c')).toBeUndefined() // nothing pending and nothing stable: the object is gone
    expect(r.pendingCount).toBe(0)
  })

  it('restarts the gap wait of a waiting envelope each time a copy of it is ordered again', async () => {
    const r = new ReliableReplica({ space: SPACE, gapWaitCommits: 3 })
    const e2 = await seal(0, 2, { updates: [inc('c', 7)] })
    r.commit([e2], 10)
    r.commit([], 12)
    // Its author resent it; a relay ordered the copy: dropped as duplicate, and the wait starts over.
    expect(r.commit([e2], 12).decisions).toMatchObject([{ kind: 'dropped', reason: 'duplicate' }])
    // Three positions after the first ordering, but not after the last: still waiting.
    expect(r.commit([], 13).decisions).toEqual([])
    expect(r.commit([], 15).decisions).toMatchObject([{ kind: 'dropped', reason: 'gap' }])
  })

  it('lets an envelope dropped as gap commit when it is ordered again (a resubmission)', async () => {
    const r = new ReliableReplica({ space: SPACE, gapWaitCommits: 1 })
    const e1 = await seal(0, 1, { updates: [inc('c', 1)] })
    const e2 = await seal(0, 2, { updates: [{ key: 'g', decl: guests, ops: [['a', 'x']] }] })
    r.receive(e2)
    expect(r.commit([e2]).decisions).toEqual([])
    expect(r.commit([]).decisions).toMatchObject([{ kind: 'dropped', reason: 'gap' }])
    expect(r.value('g')).toBeUndefined()
    const { decisions } = r.commit([e1, e2])
    expect(decisions.map((d) => d.kind)).toEqual(['committed', 'committed'])
    expect([r.value('g'), r.stableValue('g')]).toEqual([['x'], ['x']])
  })

  it("reverses another author's envelope that stays unordered too long, keeps its own, and applies the foreign one if it commits later", async () => {
    const r = new ReliableReplica({ space: SPACE, foreignWaitCommits: 3 })
    const theirs = await seal(1, 1, { updates: [inc('c', 5)] })
    const mine = await seal(0, 1, { updates: [inc('m', 2)] })
    r.receive(theirs, { expires: true })
    r.receive(mine)
    expect(r.value('c')).toBe(5)
    r.commit([], 1)
    r.commit([], 2)
    expect(r.value('c')).toBe(5)
    const expired = r.commit([], 3)
    expect(expired.decisions).toEqual([])
    expect([...expired.changed]).toContain('c')
    expect(r.isPending(theirs.idHex)).toBe(false)
    expect(r.value('c')).toBeUndefined()
    // Our own update never expires: read-your-writes until its commit.
    r.commit([], 50)
    expect(r.value('m')).toBe(2)
    // Ordered after all: applied at its commit.
    r.commit([theirs], 60)
    expect(r.value('c')).toBe(5)
    expect(r.stableValue('c')).toBe(5)
  })

  it('does not expire an envelope that is also received as our own', async () => {
    const r = new ReliableReplica({ space: SPACE, foreignWaitCommits: 1 })
    const env = await seal(0, 1, { updates: [inc('c', 1)] })
    r.receive(env, { expires: true })
    r.receive(env)
    r.commit([], 5)
    expect(r.value('c')).toBe(1)
  })

  it('fixes an object declaration at its first commit; other declarations get type-mismatch', async () => {
    const r = new ReliableReplica({ space: SPACE })
    const honest = await seal(0, 1, { updates: [inc('acct', 5)] })
    const weaker = await seal(1, 1, { updates: [inc('acct', -50, { type: 'counter', bounds: { min: -100 } })] })
    const asSet = await seal(2, 1, { updates: [{ key: 'acct', decl: guests, ops: [['a', 'x']] }] })
    // The attacker's declaration reaches this replica first.
    ;[weaker, honest, asSet].forEach((e) => r.receive(e))
    expect(r.value('acct')).toBe(-50)
    const { decisions } = r.commit([honest, weaker, asSet])
    expect(committedUnits(decisions[1])[0]).toMatchObject({ status: 'rejected', reason: 'type-mismatch' })
    expect(committedUnits(decisions[2])[0]).toMatchObject({ status: 'rejected', reason: 'type-mismatch' })
    expect(r.declaration('acct')).toEqual(counter)
    expect([r.value('acct'), r.stableValue('acct')]).toEqual([5, 5])
  })

  it('rejects updates the application validator refuses with unauthorized', async () => {
    const allowed = new Set<string>()
    const r = new ReliableReplica({
      space: SPACE,
      authorize: (author) => (allowed.has(author) ? { ok: true } : { ok: false, reason: 'unauthorized', detail: `${author} is not a member` }),
    })
    const good = await seal(0, 1, { updates: [inc('c', 1)] })
    const bad = await seal(1, 1, { updates: [inc('c', 1)] })
    allowed.add(good.authorId)
    r.receive(bad)
    const { decisions } = r.commit([good, bad])
    expect(committedUnits(decisions[1])[0]).toMatchObject({ status: 'rejected', reason: 'unauthorized' })
    expect([r.value('c'), r.stableValue('c')]).toEqual([1, 1])
  })

  it('refuses envelopes of another space', async () => {
    const r = new ReliableReplica({ space: 'other' })
    const e = await seal(0, 1, { updates: [inc('c', 1)] })
    expect(() => r.receive(e)).toThrowError(expect.objectContaining({ reason: 'malformed' }))
    expect(r.commit([e]).decisions[0]).toMatchObject({ kind: 'dropped', reason: 'malformed' })
  })
})

// ---- G2 / G4 / G5 as a property over random workloads ----

type Step = { user: number; regular: boolean; atomic: boolean; picks: Array<[number, number]> }

const OBJECTS: Array<{ key: string; decl: Declaration; op: (n: number, user: number, seq: number) => AnyOp | null; safeOnly?: boolean }> = [
  { key: 'acct:a', decl: counter, op: (n) => (n % 2 === 0 ? n + 1 : -n) },
  { key: 'acct:b', decl: counter, op: (n) => (n % 3 === 0 ? n + 2 : -n - 1) },
  { key: 'capped', decl: capped, op: (n) => (n % 2 === 0 ? 2 : -2) },
  { key: 'guests', decl: guests, op: (n) => ['a', `g${n % 5}`] },
  { key: 'title', decl: title, op: (n, user, seq) => ['s', `t${n}`, seq * 10 + user] },
  { key: 'seats', decl: seats, op: (n) => (n % 3 === 0 ? ['c', 1 + (n % 2)] : n % 3 === 1 ? ['d', 1] : ['i', 1]) },
  // Documents, with invariants that reject some edits: inserts at the start of a text and a list, map fields set and deleted.
  { key: 'doc', decl: { type: 'text', bounds: { maxLength: 6 } }, op: (n) => ['i', '', 1, '', 'xy'.slice(0, 1 + (n % 2))] },
  { key: 'todos', decl: { type: 'list', bounds: { maxLength: 4 } }, op: (n) => ['i', '', 1, '', [n]] },
  { key: 'card', decl: { type: 'map', bounds: { maxKeys: 2 } }, op: (n, user, seq) => (n % 4 === 3 ? ['x', `f${n % 3}`, seq * 10 + user] : ['s', `f${n % 3}`, n, seq * 10 + user]) },
]

const stepArb: fc.Arbitrary<Step> = fc.record({
  user: fc.integer({ min: 0, max: 2 }),
  regular: fc.boolean(),
  atomic: fc.boolean(),
  picks: fc.array(fc.tuple(fc.integer({ min: 0, max: OBJECTS.length - 1 }), fc.integer({ min: 0, max: 9 })), { minLength: 1, maxLength: 3 }),
})

async function envelopesFor(steps: Step[]): Promise<Envelope[]> {
  const seqs = [0, 0, 0, 0]
  const out: Envelope[] = []
  for (const s of steps) {
    const seq = ++seqs[s.user]!
    const updates: ObjectUpdate[] = []
    const safe: SafeGroup[] = []
    const groupItems: Array<{ key: string; decl: Declaration; op: AnyOp }> = []
    for (const [o, n] of s.picks) {
      const obj = OBJECTS[o]!
      const op = obj.op(n, s.user, seq)
      if (op === null) continue
      const isClaim = Array.isArray(op) && op[0] === 'c'
      if (s.regular && !isClaim && !updates.some((u) => u.key === obj.key)) updates.push({ key: obj.key, decl: obj.decl, ops: [op] })
      else groupItems.push({ key: obj.key, decl: obj.decl, op })
    }
    if (groupItems.length) safe.push({ atomic: s.atomic, updates: groupItems })
    out.push(await seal(s.user, seq, { updates, safe }))
  }
  return out
}

function declOf(key: string): Declaration {
  return OBJECTS.find((o) => o.key === key)?.decl ?? counter
}

function prospectiveEqualsStable(r: ReliableReplica): void {
  for (const key of r.keys()) {
    const norm = (v: unknown) => (Array.isArray(v) ? [...v].map(String).sort() : v)
    // An object with no stable state yet reads as its type's initial value.
    const stable: AnyCrdt = r.stable(key) ?? createCrdt(declOf(key))
    expect([key, norm(r.value(key))]).toEqual([key, norm(stable.value())])
  }
}

describe('reliable replica: reversing documents', () => {
  it('a list insert the audit rejects disappears prospectively even after another edit moved it (G5)', async () => {
    const decl: Declaration = { type: 'list', bounds: { maxLength: 1 } }
    // Each author's view, as it was when it edited: ops are made against views, under the envelope's tags.
    const view = createCrdt(decl) as CollabList
    const seen = (env: Envelope): void => {
      for (const unit of envelopeUnits(env)) for (const item of unit.kind === 'op' ? [unit] : unit.items) asGeneric(view).apply(item.op, { replica: env.authorId, tag: item.tag })
    }
    const first = await seal(0, 1, { updates: [{ key: 'todo', decl, ops: [view.insertOp(0, ['a'])] }] })
    seen(first)
    // Author 1 adds 'x' (past maxLength 1 once 'a' is stable), author 2 moves it in front of 'a'.
    const add = await seal(1, 1, { updates: [{ key: 'todo', decl, ops: [view.insertOp(1, ['x'])] }] })
    seen(add)
    const move = await seal(2, 1, { updates: [{ key: 'todo', decl, ops: [view.moveOp(1, 0) as AnyOp] }] })
    const r = new ReliableReplica({ space: SPACE })
    const values = (v: unknown): unknown[] => (v as Array<{ value: unknown }>).map((e) => e.value)
    for (const env of [first, add, move]) r.receive(env)
    expect(values(r.value('todo'))).toEqual(['x', 'a'])
    r.commit([first, add])
    expect(values(r.stableValue('todo'))).toEqual(['a'])
    r.commit([move])
    expect(values(r.stableValue('todo'))).toEqual(['a'])
    expect(r.value('todo')).toEqual(r.stableValue('todo'))
  })

  it('an insert placed after a rejected one waits on both paths: prospective equals stable (G5)', async () => {
    const decl: Declaration = { type: 'list', bounds: { maxLength: 2 } }
    const view = createCrdt(decl) as CollabList
    const seen = (env: Envelope): void => {
      for (const unit of envelopeUnits(env)) for (const item of unit.kind === 'op' ? [unit] : unit.items) asGeneric(view).apply(item.op, { replica: env.authorId, tag: item.tag })
    }
    const first = await seal(0, 1, { updates: [{ key: 'todo', decl, ops: [view.insertOp(0, ['a', 'b'])] }] })
    seen(first)
    // 'x' takes the list past 2 and is rejected; 'a' goes; 'y' goes after 'x', which the stable list never had.
    const add = await seal(1, 1, { updates: [{ key: 'todo', decl, ops: [view.insertOp(2, ['x'])] }] })
    seen(add)
    const del = await seal(0, 2, { updates: [{ key: 'todo', decl, ops: [view.deleteOp(0, 1) as AnyOp] }] })
    seen(del)
    const after = await seal(2, 1, { updates: [{ key: 'todo', decl, ops: [view.insertOp(2, ['y'])] }] })
    const r = new ReliableReplica({ space: SPACE })
    const values = (v: unknown): unknown[] => (v as Array<{ value: unknown }>).map((e) => e.value)
    for (const env of [first, add, del, after]) r.receive(env)
    expect(values(r.value('todo'))).toEqual(['b', 'x', 'y'])
    r.commit([first, add, del])
    r.commit([after])
    expect(values(r.stableValue('todo'))).toEqual(['b'])
    expect(r.value('todo')).toEqual(r.stableValue('todo'))
  })
})

describe('reliable replica: properties', () => {
  it('G2, G4, G5: replicas that receive any subset in any order and commit one order agree, keep invariants, and converge; an audit-only replica (a relay) decides alike', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(stepArb, { minLength: 1, maxLength: 14 }),
        fc.array(fc.nat(), { minLength: 40, maxLength: 40 }),
        fc.integer({ min: 1, max: 5 }),
        fc.boolean(),
        async (steps, noise, batchSize, withByzantine) => {
          const honest = await envelopesFor(steps)
          const byzantine: Envelope[] = []
          if (withByzantine) {
            // User 3 equivocates on seq 1 and skips seq 3 entirely.
            byzantine.push(await seal(3, 1, { updates: [inc('acct:a', 9)] }))
            byzantine.push(await seal(3, 1, { updates: [inc('acct:a', 1)] }))
            byzantine.push(await seal(3, 2, { safe: [safeOne('acct:a', -3)] }))
            byzantine.push(await seal(3, 4, { updates: [inc('acct:b', 4)] }))
          }
          const all = [...honest, ...byzantine]
          const pick = (i: number) => noise[i % noise.length]!
          // The committed order: a deterministic shuffle with duplicates; one equivocating twin is never ordered.
          const order = all
            .filter((e, i) => !(withByzantine && e === byzantine[1] && pick(i) % 2 === 0))
            .map((e, i) => ({ e, k: pick(i * 7) % 1000 }))
            .sort((a, b) => a.k - b.k)
            .map((x) => x.e)
          order.push(...order.slice(0, pick(3) % 3))
          const batches: Envelope[][] = []
          for (let i = 0; i < order.length; i += batchSize) batches.push(order.slice(i, i + batchSize))

          const replicas = [0, 1, 2].map(() => new ReliableReplica({ space: SPACE, gapWaitCommits: 4 }))
          const histories: unknown[][] = replicas.map(() => [])
          // What relays keep: the stable path only, fed nothing but the commits.
          const auditor = new StableAudit({ space: SPACE, gapWaitCommits: 4 })
          const audited: unknown[] = []
          replicas.forEach((r, ri) => {
            // Each replica receives its own subset in its own order before the commits.
            const got = all.filter((_, i) => (pick(i + ri * 5) + ri) % 3 !== 0)
            got.sort((a, b) => ((pick(a.seq + ri) ^ a.id[0]!) % 7) - ((pick(b.seq + ri) ^ b.id[0]!) % 7))
            for (const e of got) r.receive(e)
          })
          const lastSnap = replicas.map(() => ({ index: 0, json: JSON.stringify(replicas[0]!.stableSnapshot()) }))
          for (const batch of [...batches, ...Array.from({ length: 4 }, (): Envelope[] => [])]) {
            const snaps = replicas.map((r, ri) => {
              const res = r.commit(batch)
              // The stable state changes only together with the stable index.
              const json = JSON.stringify(r.stableSnapshot())
              if (r.stableIndex === lastSnap[ri]!.index) expect(json).toBe(lastSnap[ri]!.json)
              lastSnap[ri] = { index: r.stableIndex, json }
              for (const d of res.decisions) if (d.kind !== 'superseded') histories[ri]!.push(d.kind === 'committed' ? [d.env.idHex, d.index, d.units] : [d.env.idHex, d.reason])
              // G2: every stable state satisfies every invariant.
              for (const key of r.keys()) expect(r.stable(key)?.invariantsHold() ?? true).toBe(true)
              return r.stableSnapshot()
            })
            for (const d of auditor.commit(batch).decisions) audited.push(d.kind === 'committed' ? [d.env.idHex, d.index, d.units] : d.kind === 'dropped' ? [d.env.idHex, d.reason] : ['superseded?'])
            expect(auditor.stableSnapshot()).toEqual(snaps[0])
            // G2: same stable index, same stable state.
            expect(snaps[1]).toEqual(snaps[0])
            expect(snaps[2]).toEqual(snaps[0])
          }
          // Identical decisions everywhere, whatever each replica had received.
          expect(histories[1]).toEqual(histories[0])
          expect(histories[2]).toEqual(histories[0])
          expect(audited).toEqual(histories[0])
          // The audit alone keeps no prospective state: it has no receive at all (a type error).
          expect('receive' in auditor).toBe(false)
          for (const key of replicas[0]!.keys()) expect(auditor.history(key)).toEqual(replicas[0]!.history(key))
          for (const r of replicas) {
            // G5: nothing left undecided; prospective equals stable.
            expect(r.pendingCount).toBe(0)
            prospectiveEqualsStable(r)
          }
          // G4: of the two equivocating twins at most one entered the stable history.
          if (withByzantine) {
            const committedIds = histories[0]!.filter((h) => (h as unknown[]).length === 3).map((h) => (h as unknown[])[0])
            expect(committedIds.filter((id) => id === byzantine[0]!.idHex || id === byzantine[1]!.idHex).length).toBeLessThanOrEqual(1)
            expect(committedIds).not.toContain(byzantine[3]!.idHex) // its gap never filled
          }
        },
      ),
      { numRuns: 300 },
    )
  })
})

describe('reliable replica: checkpoints', () => {
  it('a replica restored from a checkpoint (through msgpack) audits every later commit exactly like the original', async () => {
    const open = (signed: { bytes: Uint8Array; sig: Uint8Array }) => openEnvelopeSync({ sha256: (b) => nodeCrypto.sha256(b), verify: () => true }, [signed.bytes, signed.sig])
    await fc.assert(
      fc.asyncProperty(fc.array(stepArb, { minLength: 1, maxLength: 12 }), fc.array(fc.nat(), { minLength: 20, maxLength: 20 }), fc.nat(), async (steps, noise, cut) => {
        const envs = await envelopesFor(steps)
        // A shuffled order with holes, so some envelopes park behind gaps across the checkpoint.
        const order = envs.map((e, i) => ({ e, k: noise[i % noise.length]! })).sort((a, b) => a.k - b.k).map((x) => x.e)
        const batches: Envelope[][] = []
        for (let i = 0; i < order.length; i += 2) batches.push(order.slice(i, i + 2))
        batches.push([], [], [], [], [], [])
        const at = cut % batches.length
        const original = new ReliableReplica({ space: SPACE, gapWaitCommits: 4 })
        batches.slice(0, at).forEach((b, i) => original.commit(b, (i + 1) * 2))
        const restored = ReliableReplica.restore({ space: SPACE, gapWaitCommits: 4 }, decode(encode(original.checkpoint())), open)
        expect(restored.stableSnapshot()).toEqual(original.stableSnapshot())
        expect(restored.waitingCount).toBe(original.waitingCount)
        for (const key of original.keys()) {
          expect(restored.history(key)).toEqual(original.history(key))
          // Sets list elements in no particular order; the snapshot above compares them exactly.
          const norm = (v: unknown) => (Array.isArray(v) ? [...v].map(String).sort() : v)
          expect(norm(restored.value(key))).toEqual(norm(original.stableValue(key)))
        }
        batches.slice(at).forEach((b, j) => {
          const round = (at + j + 1) * 2
          const x = original.commit(b, round)
          const y = restored.commit(b, round)
          expect(y.decisions.map((d) => [d.kind, d.env.idHex])).toEqual(x.decisions.map((d) => [d.kind, d.env.idHex]))
          expect(restored.stableHash((bytes) => nodeCrypto.sha256(bytes))).toEqual(original.stableHash((bytes) => nodeCrypto.sha256(bytes)))
        })
      }),
      { numRuns: 150 },
    )
  })
})

describe('reliable replica: history', () => {
  it('reports every stable value objects took in a commit, several of one key too, whatever it keeps in memory (none with historyLimit 0)', async () => {
    const kept = new ReliableReplica({ space: SPACE })
    const none = new StableAudit({ space: SPACE, historyLimit: 0 })
    const batch = [await seal(0, 1, { updates: [inc('c', 2)] }), await seal(1, 1, { updates: [inc('c', 3), inc('d', 1)] }), await seal(0, 2, { updates: [inc('c', 1)] })]
    const expected = [
      { key: 'c', index: 1, value: 2 },
      { key: 'c', index: 2, value: 5 },
      { key: 'd', index: 2, value: 1 },
      { key: 'c', index: 3, value: 6 },
    ]
    expect(kept.commit(batch).history).toEqual(expected)
    expect(none.commit(batch).history).toEqual(expected)
    expect(kept.history('c').map((h) => h.value)).toEqual([2, 5, 6])
    expect(none.history('c')).toEqual([])
    expect(none.commit([]).history).toEqual([])
  })
})

describe('reliable replica: audit state (what attestations hash, what bootstrap starts from)', () => {
  const sha = (b: Uint8Array) => nodeCrypto.sha256(b)
  const open = (signed: { bytes: Uint8Array; sig: Uint8Array }) => openEnvelopeSync({ sha256: sha, verify: () => true }, [signed.bytes, signed.sig])
  const attested = (r: { decisions: readonly Decision[] }) => encode(r.decisions.filter((d) => d.kind !== 'superseded').map((d) => attestedDecision(d as Exclude<Decision, { kind: 'superseded' }>)))

  it('the kept hash equals the hash from scratch after every commit, and a replica started from the served state audits every later commit exactly like the original', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(stepArb, { minLength: 1, maxLength: 12 }), fc.array(fc.nat(), { minLength: 24, maxLength: 24 }), fc.nat(), async (steps, noise, cut) => {
        const envs = await envelopesFor(steps)
        // Twins (same author and seq, other content) and repeats, so duplicates and conflicts are decided on both sides of the cut.
        const twins = await Promise.all(envs.filter((_, i) => noise[i % noise.length]! % 3 === 0).map((e) => seal(users.findIndex((u) => authorIdOf(nodeCrypto, u.publicKey) === e.authorId), e.seq, { updates: [inc('twin', 1)] })))
        const repeats = envs.filter((_, i) => noise[(i + 7) % noise.length]! % 4 === 0)
        const all = [...envs, ...twins, ...repeats]
        const order = all.map((e, i) => ({ e, k: noise[i % noise.length]! + i / 1000 })).sort((a, b) => a.k - b.k).map((x) => x.e)
        const batches: Envelope[][] = []
        for (let i = 0; i < order.length; i += 2) batches.push(order.slice(i, i + 2))
        batches.push([], [], [], [], [], [])
        const at = cut % batches.length
        const original = new StableAudit({ space: SPACE, gapWaitCommits: 4 })
        batches.slice(0, at).forEach((b, i) => {
          original.commit(b, (i + 1) * 2)
          expect(original.stableHash(sha)).toEqual(auditStateHash(sha, original.auditState()))
        })
        const served = decodeAuditState(encodeAuditState(original.auditState()), open)
        expect(auditStateHash(sha, served)).toEqual(original.stableHash(sha))
        const started = ReliableReplica.fromAuditState({ space: SPACE, gapWaitCommits: 4 }, served, at * 2)
        expect(started.stableHash(sha)).toEqual(original.stableHash(sha))
        expect(started.stableIndex).toBe(original.stableIndex)
        batches.slice(at).forEach((b, j) => {
          const round = (at + j + 1) * 2
          const x = original.commit(b, round)
          const y = started.commit(b, round)
          expect(y.decisions.map((d) => [d.kind, d.env.seq, (d as { reason?: string }).reason])).toEqual(x.decisions.map((d) => [d.kind, d.env.seq, (d as { reason?: string }).reason]))
          expect(attested(y)).toEqual(attested(x))
          expect(y.stableIndex).toBe(x.stableIndex)
          expect(started.stableHash(sha)).toEqual(original.stableHash(sha))
          expect(original.stableHash(sha)).toEqual(auditStateHash(sha, original.auditState()))
        })
      }),
      { numRuns: 150 },
    )
  })

  it('the hash covers every part of the state: objects, sequence numbers, recent ids, parked envelopes and when they parked', async () => {
    const r = new StableAudit({ space: SPACE })
    r.commit([await seal(0, 1, { updates: [inc('c', 2)] }), await seal(1, 1, { updates: [inc('d', 1)] }), await seal(1, 3, { updates: [inc('d', 1)] })], 5)
    const state = r.auditState()
    expect(state.waiting).toHaveLength(1)
    const hash = auditStateHash(sha, state)
    expect(r.stableHash(sha)).toEqual(hash)
    const a0 = state.authors[0]!
    const o0 = state.objects[0]!
    const w0 = state.waiting[0]!
    const other = await seal(1, 4, { updates: [inc('d', 1)] })
    const tampered = [
      { ...state, index: state.index + 1 },
      { ...state, objects: [[o0[0], o0[1], [['x', 9, 0]]], ...state.objects.slice(1)] as typeof state.objects },
      { ...state, authors: [[a0[0], a0[1] + 1, a0[2]], ...state.authors.slice(1)] as typeof state.authors },
      { ...state, authors: [[a0[0], a0[1], [[1, '0'.repeat(64)]]], ...state.authors.slice(1)] as typeof state.authors },
      { ...state, waiting: [] },
      { ...state, waiting: [{ env: w0.env, since: w0.since + 1 }] },
      { ...state, waiting: [{ env: other, since: w0.since }] },
    ]
    for (const t of tampered) expect(auditStateHash(sha, t)).not.toEqual(hash)
  })

  it('proves one object against the state hash: its state, or its absence; a changed state, index or part proves nothing', async () => {
    const r = new StableAudit({ space: SPACE })
    r.commit([await seal(0, 1, { updates: [inc('c', 2)] }), await seal(1, 1, { updates: [inc('d', 1)] }), await seal(1, 3, { updates: [inc('d', 1)] })], 5)
    const hash = r.stableHash(sha)
    const proof = decodeObjectProof(encodeObjectProof(r.objectProof(sha, 'c')))
    expect(proof.object).toBeDefined()
    expect(objectProofHash(sha, proof)).toEqual({ hash })
    const absent = decodeObjectProof(encodeObjectProof(r.objectProof(sha, 'nobody')))
    expect(absent.object).toBeUndefined()
    expect(objectProofHash(sha, absent)).toEqual({ hash })
    const [decl, snap] = proof.object!
    const wrong = [
      { ...proof, object: [decl, [['x', 9, 0]]] as const },
      { ...proof, object: undefined },
      { ...absent, object: [decl, snap] as const },
    ]
    for (const p of wrong) expect(objectProofHash(sha, p)).toHaveProperty('problem')
    const moved = [{ ...proof, index: proof.index + 1 }, { ...proof, authorsRoot: sha(proof.authorsRoot) }, { ...proof, parked: sha(proof.parked) }, { ...proof, key: 'd' }]
    for (const p of moved) {
      const h = objectProofHash(sha, p)
      if ('hash' in h) expect(h.hash).not.toEqual(hash)
    }
    expect(() => decodeObjectProof(encode(['stead/object-proof/v1', SPACE, 0, 'c', null, [], [], new Uint8Array(3), new Uint8Array(32), null]))).toThrow(SteadError)
  })

  it('proves a text, a list and a map (with a nested text) against the state hash, and refuses a tampered one', async () => {
    const r = new StableAudit({ space: SPACE })
    const text: Declaration = { type: 'text', bounds: {} }
    const e1 = await seal(0, 1, {
      updates: [
        { key: 'doc', decl: text, ops: [['i', '', 1, '', 'Hello'], ['i', '^0.4', 1, '', ' world']] },
        { key: 'todos', decl: { type: 'list', bounds: {} }, ops: [['i', '', 1, '', ['milk', 'eggs']]] },
        { key: 'card', decl: { type: 'map', bounds: {} }, ops: [['s', 'title', 'Plan', 1], ['o', 'notes', ['t', null], 2, 1]] },
      ],
    })
    const e2 = await seal(1, 1, { updates: [{ key: 'doc', decl: text, ops: [['d', [[`${unitTagPrefix(e1.id)}:0`, 0, 1]]]] }] })
    r.commit([e1, e2], 5)
    expect(r.stableValue('doc')).toBe('ello world')
    const hash = r.stableHash(sha)
    for (const key of ['doc', 'todos', 'card']) {
      const proof = decodeObjectProof(encodeObjectProof(r.objectProof(sha, key)))
      expect(proof.object).toBeDefined()
      expect(objectProofHash(sha, proof)).toEqual({ hash })
    }
    const proof = decodeObjectProof(encodeObjectProof(r.objectProof(sha, 'doc')))
    const [decl, snap] = proof.object!
    const runs = (snap as unknown[][])[0] as unknown[][]
    // The same runs with one character changed: the bucketed digest must tell.
    const forged = [[...runs.slice(0, -1), (runs[runs.length - 1] as unknown[]).map((x) => (x === ' world' ? ' wOrld' : x))], (snap as unknown[])[1]]
    expect(JSON.stringify(forged)).not.toBe(JSON.stringify(snap))
    expect(objectProofHash(sha, { ...proof, object: [decl, forged] as unknown as typeof proof.object })).not.toEqual({ hash })
  })

  it('keeps at most HISTORY_BYTES of a long text\'s values in memory, and with historyPatches reports each change as a patch of the one before', async () => {
    const r = new ReliableReplica({ space: SPACE, historyPatches: true })
    const text: Declaration = { type: 'text', bounds: {} }
    const long = 'x'.repeat(200_000)
    const first = await seal(0, 1, { updates: [{ key: 'doc', decl: text, ops: [['i', '', 1, '', long]] }] })
    const changes = [...r.commit([first], 1).history]
    for (let i = 2; i <= 40; i++) changes.push(...r.commit([await seal(0, i, { updates: [{ key: 'doc', decl: text, ops: [['i', '', 1, '', 'y']] }] })], i).history)
    const h = r.history('doc')
    // 400 kB a value: 20 fit in 8 MiB; the newest are kept.
    expect(h.length).toBe(Math.floor(HISTORY_BYTES / (2 * 200_020)))
    expect(h[h.length - 1]?.index).toBe(40)
    expect((h[h.length - 1]?.value as string).length).toBe(200_039)
    expect(changes[0]!.patch).toBeUndefined()
    for (let i = 1; i < changes.length; i++) {
      const c = changes[i]!
      expect(c.patch?.base).toBe(changes[i - 1]!.index)
      expect(applyValuePatch(changes[i - 1]!.value, c.patch!.patch)).toBe(c.value)
      expect(encode(c.patch).length).toBeLessThan(40)
    }
  })

  it('checks every commit: with verifyStateHash, a stable state changed under the audit stops it with an AuditInvariantError', async () => {
    const sha = (b: Uint8Array) => nodeCrypto.sha256(b)
    const r = new StableAudit({ space: SPACE, verifyStateHash: sha })
    r.commit([await seal(0, 1, { updates: [inc('a', 1), inc('b', 1)] })], 1)
    // What a bug (or bad memory) could do: the stable counter changes without a commit.
    ;(r.stable('a') as PNCounter).apply(5, { replica: 'x', tag: 'x:1' })
    const next = await seal(0, 2, { updates: [inc('b', 1)] })
    expect(() => r.commit([next], 2)).toThrow(AuditInvariantError)
    // Without it, the incremental hash goes on unaware: what the simulator's relays now check.
    const unchecked = new StableAudit({ space: SPACE })
    unchecked.commit([await seal(0, 1, { updates: [inc('a', 1), inc('b', 1)] })], 1)
    ;(unchecked.stable('a') as PNCounter).apply(5, { replica: 'x', tag: 'x:1' })
    expect(() => unchecked.commit([next], 2)).not.toThrow()
  })

  it('refuses a served state of another space or of the wrong shape (its content is vouched for by the hash)', () => {
    const r = new ReliableReplica({ space: SPACE })
    expect(() => ReliableReplica.fromAuditState({ space: 'other' }, r.auditState(), 0)).toThrow(/space/)
    expect(() => decodeAuditState(encode(['stead/snapshot/v2', SPACE, -1, [], [], []]), open)).toThrow(SteadError)
    expect(() => decodeAuditState(encode({ not: 'a snapshot' }), open)).toThrow(SteadError)
    expect(() => decodeAuditState(encode(['stead/snapshot/v2', SPACE, 1, [['a', 1, [[1, 'short id']]]], [], []]), open)).toThrow(SteadError)
  })

  it('refuses a served state whose authors or objects repeat a key or are out of order (the hash treats them as sets)', async () => {
    const r = new StableAudit({ space: SPACE })
    r.commit([await seal(0, 1, { updates: [inc('c', 2), inc('d', 1)] }), await seal(1, 1, { updates: [inc('d', 1)] })], 5)
    const s = r.auditState()
    expect(s.authors).toHaveLength(2)
    expect(s.objects).toHaveLength(2)
    const served = (x: typeof s) => decodeAuditState(encodeAuditState(x), open)
    expect(auditStateHash(sha, served(s))).toEqual(r.stableHash(sha))
    // A forged extra record for an author, placed before the real one, or a list reordered.
    const forged = [s.authors[0]![0], 7, []] as const
    for (const bad of [
      { ...s, authors: [forged, ...s.authors] },
      { ...s, authors: [...s.authors].reverse() },
      { ...s, objects: [s.objects[0]!, ...s.objects] },
      { ...s, objects: [...s.objects].reverse() },
    ]) {
      expect(() => served(bad as typeof s)).toThrow(/sorted by key without repeats/)
    }
    // The hash alone cannot tell: a reordered list hashes alike, and one with a repeat is refused outright.
    expect(auditStateHash(sha, { ...s, authors: [...s.authors].reverse() })).toEqual(r.stableHash(sha))
    expect(() => auditStateHash(sha, { ...s, authors: [forged, ...s.authors] })).toThrow(/appears twice/)
  })
})

describe('reliable replica: catching up by state delta (BENDY: an object as its ops or its state)', () => {
  const sha = (b: Uint8Array) => nodeCrypto.sha256(b)
  const open = (signed: { bytes: Uint8Array; sig: Uint8Array }) => openEnvelopeSync({ sha256: sha, verify: () => true }, [signed.bytes, signed.sig])
  const modes = ['ops', 'state', 'adaptive'] as const

  it('a replica behind applies the delta in every mode and then holds, hashes and audits exactly what the relay does', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(stepArb, { minLength: 1, maxLength: 14 }), fc.array(fc.nat(), { minLength: 24, maxLength: 24 }), fc.nat(), fc.nat(), async (steps, noise, cut, hot) => {
        const envs = await envelopesFor(steps)
        const repeats = envs.filter((_, i) => noise[(i + 7) % noise.length]! % 4 === 0)
        const order = [...envs, ...repeats].map((e, i) => ({ e, k: noise[i % noise.length]! + i / 1000 })).sort((a, b) => a.k - b.k).map((x) => x.e)
        const batches: Envelope[][] = []
        for (let i = 0; i < order.length; i += 2) batches.push(order.slice(i, i + 2))
        batches.push([], [], [])
        const at = cut % batches.length
        // The relay: an audit-only replica whose change log sees every commit. hotObjects 0..2 so that
        // adaptive mixes ops and state; periodOps small so periods turn over.
        const relay = new StableAudit({ space: SPACE, gapWaitCommits: 4 })
        const log = new ChangeLog({ hotObjects: hot % 3, periodOps: 3 })
        const behind = modes.map(() => new ReliableReplica({ space: SPACE, gapWaitCommits: 4 }))
        batches.forEach((b, i) => {
          const from = relay.stableIndex
          log.record(from, relay.commit(b, (i + 1) * 2))
          if (i < at) for (const r of behind) r.commit(b, (i + 1) * 2)
        })
        // Envelopes the followers hold undecided: some get decided inside the delta.
        for (const r of behind) for (const e of order) r.receive(e, { expires: true })
        const round = batches.length * 2
        modes.forEach((mode, m) => {
          const r = behind[m]!
          const delta = log.delta(relay, r.stableIndex, mode)!
          expect(delta).toBeDefined()
          const wire = decodeStateDelta(encodeStateDelta(delta), open)
          if (mode !== 'adaptive') expect(wire.objects.every((o) => o.mode === mode)).toBe(true)
          const verified = r.verifyDelta(sha, wire, relay.stableHash(sha))
          if ('problem' in verified) throw new Error(verified.problem)
          const decided = r.applyDelta(sha, verified, round)
          expect(r.stableIndex).toBe(relay.stableIndex)
          expect(r.stableHash(sha)).toEqual(relay.stableHash(sha))
          expect(r.stableHash(sha)).toEqual(auditStateHash(sha, r.auditState()))
          // Canonical snapshots (a set's value() lists elements in the order this replica saw them).
          for (const key of relay.keys()) expect(r.stableObject(key)).toEqual(relay.stableObject(key))
          // Every envelope the relay committed or dropped left the pending set; the rest stayed.
          for (const e of decided) expect(r.isPending(e.idHex)).toBe(false)
          expect(r.pendingEnvelopes().every((e) => !r.decided(e))).toBe(true)
          // Once everything is decided, prospective equals stable (G5).
          for (const key of r.keys()) if (r.pendingTouching(key).length === 0) expect(r.value(key)).toEqual(r.stableValue(key))
        })
        // And it audits later commits exactly like the relay.
        const more = await envelopesFor(steps.map((s) => ({ ...s, user: 3 })))
        const x = relay.commit(more, round + 2)
        for (const r of behind) {
          const y = r.commit(more, round + 2)
          expect(y.decisions.map((d) => [d.kind, d.env.seq])).toEqual(x.decisions.map((d) => [d.kind, d.env.seq]))
          expect(r.stableHash(sha)).toEqual(relay.stableHash(sha))
        }
      }),
      { numRuns: 100 },
    )
  })

  it('refuses a delta that leads elsewhere and changes nothing: a dropped op, a wrong state, a missing author, a changed end', async () => {
    const relay = new StableAudit({ space: SPACE })
    const log = new ChangeLog()
    const r = new ReliableReplica({ space: SPACE })
    const first = [await seal(0, 1, { updates: [inc('c', 2)] })]
    for (const x of [relay, r]) x.commit(first, 1)
    const later = [await seal(0, 2, { updates: [inc('c', 3)] }), await seal(1, 1, { updates: [inc('d', 1)] }), await seal(1, 2, { updates: [inc('c', 4)] })]
    log.record(1, relay.commit(later, 2))
    const hash = relay.stableHash(sha)
    const before = r.stableHash(sha)
    const ops = log.delta(relay, 1, 'ops')!
    const state = log.delta(relay, 1, 'state')!
    const c = ops.objects.find((o) => o.key === 'c')!
    if (c.mode !== 'ops') throw new Error('ops mode')
    const wrong = [
      { ...ops, objects: ops.objects.map((o) => (o.key === 'c' ? { ...c, ops: c.ops.slice(1) } : o)) },
      { ...state, objects: state.objects.map((o) => (o.key === 'c' && o.mode === 'state' ? { ...o, snapshot: createCrdt(counter).snapshot() } : o)) },
      { ...ops, authors: ops.authors.slice(1) },
      { ...ops, toIndex: ops.toIndex + 1 },
      { ...ops, objects: ops.objects.filter((o) => o.key !== 'd') },
      { ...ops, objects: ops.objects.map((o) => (o.key === 'c' ? { ...c, ops: [...c.ops, c.ops[0]!] } : o)) },
    ]
    for (const d of wrong) {
      expect(r.verifyDelta(sha, d, hash)).toHaveProperty('problem')
      expect(r.stableHash(sha)).toEqual(before)
    }
    // A delta that does not start where the replica is proves nothing either.
    expect(r.verifyDelta(sha, { ...ops, fromIndex: 0 }, hash)).toHaveProperty('problem')
    const ok = r.verifyDelta(sha, ops, hash)
    if ('problem' in ok) throw new Error(ok.problem)
    r.applyDelta(sha, ok, 2)
    expect(r.stableHash(sha)).toEqual(hash)
    expect(r.stableValue('c')).toBe(9)
    // The log cannot serve from before what it kept, nor from inside a commit.
    expect(log.delta(relay, 0)).toBeUndefined()
    expect(log.delta(relay, 2)).toBeUndefined()
    expect(log.delta(relay, relay.stableIndex)!.objects).toEqual([])
  })

  it('sends only the recent records the range added, and the receiver slides its window of each author past them', async () => {
    const relay = new StableAudit({ space: SPACE })
    const r = new ReliableReplica({ space: SPACE })
    const log = new ChangeLog()
    const envs: Envelope[] = []
    for (let seq = 1; seq <= 300; seq++) envs.push(await seal(0, seq, { updates: [inc(`k${seq % 7}`, 1)] }))
    for (const x of [relay, r]) x.commit(envs.slice(0, 10), 1)
    log.record(10, relay.commit(envs.slice(10), 2))
    const delta = log.delta(relay, 10, 'ops')!
    // The window keeps 256: the ops of seqs 11..44 travel with their author and tag in full.
    expect(delta.authors.map((a) => [a[1], a[2].length])).toEqual([[300, 256]])
    const ok = r.verifyDelta(sha, decodeStateDelta(encodeStateDelta(delta), open), relay.stableHash(sha))
    if ('problem' in ok) throw new Error(ok.problem)
    r.applyDelta(sha, ok, 2)
    expect(r.stableHash(sha)).toEqual(relay.stableHash(sha))
    expect(r.stableHash(sha)).toEqual(auditStateHash(sha, r.auditState()))
    // Duplicates and conflicts are told apart as by the relay: seq 50 left the window, seq 60 did not.
    const again = await seal(0, 301, { updates: [inc('k1', 1)] })
    for (const x of [relay, r]) expect(x.commit([envs[59]!, again], 3).decisions.map((d) => d.kind)).toEqual(['dropped', 'committed'])
    expect(r.stableHash(sha)).toEqual(relay.stableHash(sha))
  })

  it('names the objects changed after an index, or nothing when the log does not reach back or it would read past a bound', async () => {
    const relay = new StableAudit({ space: SPACE })
    const log = new ChangeLog()
    const first = [await seal(0, 1, { updates: [inc('a', 1)] })]
    log.record(0, relay.commit(first, 1))
    const mid = relay.stableIndex
    log.record(mid, relay.commit([await seal(0, 2, { updates: [inc('b', 1), inc('c', 1)] }), await seal(1, 1, { updates: [inc('b', 2)] })], 2))
    expect(log.changedKeys(0)?.sort()).toEqual(['a', 'b', 'c'])
    expect(log.changedKeys(mid)?.sort()).toEqual(['b', 'c'])
    expect(log.changedKeys(relay.stableIndex)).toEqual([])
    // Three ops after `mid`: a bound of two is passed.
    expect(log.changedKeys(mid, 2)).toBeUndefined()
    expect(log.changedKeys(mid, 3)?.sort()).toEqual(['b', 'c'])
    expect(new ChangeLog().changedKeys(0)).toBeUndefined()
  })

  it('packs authors\' records on the wire (ids as bytes, clock authors by place), still reads the unpacked form, and refuses a place it does not carry', async () => {
    const relay = new StableAudit({ space: SPACE })
    const log = new ChangeLog()
    const envs: Envelope[] = []
    for (let seq = 1; seq <= 20; seq++) for (const user of [0, 1, 2]) envs.push(await seal(user, seq, { updates: [inc(`k${seq % 3}`, 1)] }))
    log.record(0, relay.commit(envs, 2))
    const delta = log.delta(relay, 0, 'ops')!
    const packed = encodeStateDelta(delta)
    const back = decodeStateDelta(packed, open)
    expect(back.authors).toEqual(delta.authors)
    // The same delta with every record as the state carries it (tag v1, as relays before the packing sent it).
    const raw = decode(packed) as unknown[]
    const v1 = encode(['stead/delta/v1', raw[1], raw[2], raw[3], delta.authors, raw[5], raw[6]])
    expect(decodeStateDelta(v1, open).authors).toEqual(delta.authors)
    expect(packed.length).toBeLessThan(v1.length * 0.7)
    // A clock that names author 9 of 3.
    const authors = raw[4] as Array<[string, number, unknown[][]]>
    const lying = authors.map(([id, seq, recent]) => [id, seq, recent.map((r) => [r[0], r[1], r[2], r[3], [9, 1], r[5]])])
    expect(() => decodeStateDelta(encode([raw[0], raw[1], raw[2], raw[3], lying, raw[5], raw[6]]), open)).toThrow(/author 9/)
  })

  it('a jump past another author\'s envelope wait expires it, as the commits skipped would have', async () => {
    const relay = new StableAudit({ space: SPACE })
    const r = new ReliableReplica({ space: SPACE, foreignWaitCommits: 10 })
    const log = new ChangeLog()
    const unordered = await seal(1, 1, { updates: [inc('c', 5)] })
    r.receive(unordered, { expires: true })
    expect(r.value('c')).toBe(5)
    log.record(0, relay.commit([await seal(0, 1, { updates: [inc('d', 1)] })], 20))
    const ok = r.verifyDelta(sha, log.delta(relay, 0)!, relay.stableHash(sha))
    if ('problem' in ok) throw new Error(ok.problem)
    // Not decided (it never committed), but past its wait at round 20: it leaves the prospective state.
    expect(r.applyDelta(sha, ok, 20)).toEqual([])
    expect(r.isPending(unordered.idHex)).toBe(false)
    expect(r.value('c')).toBeUndefined()
    expect(r.value('d')).toBe(1)
    // One that committed in the range and is past its wait too is reported decided (its inbox record goes).
    const late = await seal(2, 1, { updates: [inc('e', 2)] })
    r.receive(late, { expires: true })
    log.record(relay.stableIndex, relay.commit([late], 40))
    const next = r.verifyDelta(sha, log.delta(relay, r.stableIndex)!, relay.stableHash(sha))
    if ('problem' in next) throw new Error(next.problem)
    expect(r.applyDelta(sha, next, 40).map((e) => e.idHex)).toEqual([late.idHex])
    expect(r.stableValue('e')).toBe(2)
  })

  it('malformed delta bytes get typed errors', () => {
    for (const bad of [encode(['stead/delta/v0']), encode(['stead/delta/v1', SPACE, 3, 2, [], [], []]), encode(['stead/delta/v1', SPACE, 0, 1, [], [], [['b', 0, 0, []], ['a', 0, 0, []]]]), encode(['stead/delta/v1', SPACE, 0, 1, [], [], [['a', 0, 2, []]]])]) {
      expect(() => decodeStateDelta(bad, open)).toThrow(SteadError)
    }
  })
})
