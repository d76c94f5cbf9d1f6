import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { clockInit } from '../src/clock.ts'
import { decode, encode } from '../src/codec.ts'
import { POLICY_KEY, type Declaration } from '../src/crdt/index.ts'
import { authorIdOf } from '../src/envelope.ts'
import { nodeCrypto } from '../src/crypto/node.ts'
import { caughtUpByDelta } from './catch-up.ts'
import { openEnvelopeSync, sealEnvelope, type Envelope, type EnvelopeDraft, type ObjectUpdate, type SafeGroup } from '../src/envelope.ts'
import { attestedDecision } from '../src/protocol.ts'
import { ReliableReplica, StableAudit, type Decision } from '../src/replica.ts'

const crypto = nodeCrypto
const SPACE = 'objects'
const sha = (b: Uint8Array): Uint8Array => crypto.sha256(b)
const open = (signed: { bytes: Uint8Array; sig: Uint8Array }): Envelope => openEnvelopeSync({ sha256: sha, verify: () => true }, [signed.bytes, signed.sig])
const users = await Promise.all([0, 1, 2].map(async (n) => ({ secretKey: new Uint8Array(32).fill(n + 41), publicKey: await crypto.publicKeyOf(new Uint8Array(32).fill(n + 41)) })))

const COUNTER: Declaration = { type: 'counter', bounds: {} }
const TEXT: Declaration = { type: 'text', bounds: {} }
const DELETION: Declaration = { type: 'deletion' }
const del = (key: string): SafeGroup => ({ atomic: false, updates: [{ key, decl: DELETION, op: ['x'] }] })
const inc = (key: string, n: number): ObjectUpdate => ({ key, decl: COUNTER, ops: [n] })

function seal(user: number, seq: number, parts: { updates?: ObjectUpdate[]; safe?: SafeGroup[] }): Promise<Envelope> {
  const draft: EnvelopeDraft = { space: SPACE, seq, clock: clockInit(), deps: [], updates: parts.updates ?? [], safe: parts.safe ?? [] }
  return sealEnvelope(crypto, users[user]!, draft)
}

const statuses = (d: readonly Decision[]) => d.map((x) => (x.kind === 'committed' ? x.units.map((u) => (u.status === 'rejected' ? `rejected:${u.reason}` : 'committed')).join(',') : x.kind))

describe('deleting an object', () => {
  it("takes the object's state where the order puts it: the key holds nothing, its history says null, and what comes after starts afresh under any type", async () => {
    const a = new StableAudit({ space: SPACE })
    const d = a.commit([await seal(0, 1, { updates: [inc('n', 5)] }), await seal(1, 1, { safe: [del('n')] }), await seal(0, 2, { updates: [{ key: 'n', decl: TEXT, ops: [['i', '', 1, '', 'now a text']] }] })]).decisions
    expect(statuses(d)).toEqual(['committed', 'committed', 'committed'])
    expect(a.stableValue('n')).toBe('now a text')
    expect(a.history('n').map((h) => h.value)).toEqual([5, null, 'now a text'])
    // Deleting a key that holds nothing commits too (and changes nothing).
    expect(statuses(a.commit([await seal(1, 2, { safe: [del('never')] })]).decisions)).toEqual(['committed'])
    expect(a.keys()).toEqual(['n'])
  })

  it('is a safe update of any key but a system one, and never inside another object', async () => {
    await expect(seal(0, 1, { updates: [{ key: 'n', decl: DELETION, ops: [['x']] }] })).rejects.toThrow(/must be a safe update/)
    await expect(seal(0, 1, { safe: [del(POLICY_KEY)] })).rejects.toThrow(/holds the space's policy/)
    await expect(seal(0, 1, { safe: [{ atomic: false, updates: [{ key: 'n', decl: DELETION, op: ['y'] as never }] }] })).rejects.toThrow(/deletion op/)
    await expect(seal(0, 1, { updates: [{ key: 'm', decl: { type: 'map', bounds: {}, schema: { fields: { child: { type: 'deletion' } } } } as never, ops: [] }] })).rejects.toThrow()
  })

  it('shows at once prospectively, starts what follows afresh, and settles to the stable state; a refused one gives the object back', async () => {
    const refusing = authorIdOf(crypto, users[2]!.publicKey)
    const authorize = (author: string, _key: string, decl: Declaration) => (decl.type === 'deletion' && author === refusing ? { ok: false as const, reason: 'unauthorized' as const, detail: 'may not delete' } : { ok: true as const })
    const r = new ReliableReplica({ space: SPACE, authorize })
    const first = await seal(0, 1, { updates: [inc('n', 5)] })
    r.receive(first)
    r.commit([first])
    const deletion = await seal(1, 1, { safe: [del('n')] })
    const after = await seal(0, 2, { updates: [inc('n', 2)] })
    r.receive(deletion)
    expect(r.value('n')).toBeUndefined()
    expect(r.keys()).toEqual([])
    r.receive(after)
    expect(r.value('n')).toBe(2)
    r.commit([deletion, after])
    expect(r.pendingCount).toBe(0)
    expect(r.value('n')).toBe(2)
    expect(r.stableValue('n')).toBe(2)
    // A deletion the audit refuses: shown, then the object is back as the order left it.
    const refused = await seal(2, 1, { safe: [del('n')] })
    r.receive(refused)
    expect(r.value('n')).toBeUndefined()
    expect(statuses(r.commit([refused]).decisions)).toEqual(['rejected:unauthorized'])
    expect(r.value('n')).toBe(2)
  })
})

/** A random history over two keys: increments, texts, deletions by three authors. */
type Step = { user: number; kind: 'inc' | 'text' | 'delete'; key: number; n: number }
const stepArb: fc.Arbitrary<Step> = fc.record({ user: fc.integer({ min: 0, max: 2 }), kind: fc.constantFrom('inc', 'inc', 'text', 'delete'), key: fc.integer({ min: 0, max: 1 }), n: fc.integer({ min: 1, max: 9 }) })

async function history(steps: readonly Step[]): Promise<Envelope[]> {
  const seqs = [1, 1, 1]
  const out: Envelope[] = []
  for (const s of steps) {
    const seq = (seqs[s.user] = (seqs[s.user] as number) + 1) - 1
    const key = `k${s.key}`
    if (s.kind === 'inc') out.push(await seal(s.user, seq, { updates: [inc(key, s.n)] }))
    else if (s.kind === 'text') out.push(await seal(s.user, seq, { updates: [{ key, decl: TEXT, ops: [['i', '', 1, '', 'x'.repeat(s.n)]] }] }))
    else out.push(await seal(s.user, seq, { safe: [del(key)] }))
  }
  return out
}

describe('deletions: every replica alike', () => {
  it('gives the same verdicts and state hash whatever the delivery order and batching, restores from a checkpoint, and travels in catch-up deltas', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(stepArb, { minLength: 1, maxLength: 16 }), fc.integer(), fc.nat(), async (steps, shuffleSeed, cut) => {
        const envs = await history(steps)
        const a = new StableAudit({ space: SPACE })
        const split = envs.flatMap((e) => a.commit([e]).decisions.map((d) => JSON.stringify(d.kind === 'superseded' ? d.kind : attestedDecision(d))))
        // A client that saw everything prospectively first, in another order, and commits in one batch.
        const c = new ReliableReplica({ space: SPACE })
        let seed = shuffleSeed >>> 0
        for (const e of [...envs].sort(() => ((seed = (seed * 1103515245 + 12345) >>> 0) % 3) - 1)) c.receive(e)
        expect(c.commit(envs).decisions.map((d) => JSON.stringify(d.kind === 'superseded' ? d.kind : attestedDecision(d)))).toEqual(split)
        expect(c.stableHash(sha)).toEqual(a.stableHash(sha))
        expect(c.pendingCount).toBe(0)
        for (const key of ['k0', 'k1']) expect(c.value(key)).toEqual(c.stableValue(key))
        expect(c.keys()).toEqual(a.keys())
        // From a checkpoint midway.
        const half = cut % (envs.length + 1)
        const d = new StableAudit({ space: SPACE })
        d.commit(envs.slice(0, half))
        const restored = StableAudit.restore({ space: SPACE }, decode(encode(d.checkpoint())), open)
        restored.commit(envs.slice(half))
        expect(restored.stableHash(sha)).toEqual(a.stableHash(sha))
        // A replica at the checkpoint catches up by a delta (ops and state alike).
        for (const { replica: behind } of caughtUpByDelta(SPACE, envs, half, sha, open)) {
          expect(behind.stableHash(sha)).toEqual(a.stableHash(sha))
          for (const key of ['k0', 'k1']) expect(behind.stableValue(key)).toEqual(a.stableValue(key))
        }
      }),
      { numRuns: Number(process.env.DELETION_RUNS ?? 200) },
    )
  })
})
