import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { ReliableReplica, clockInit, sealEnvelope, type Declaration, type Envelope, type ObjectUpdate, type SafeGroup } from '@stead/core'
import { nodeCrypto } from '@stead/core/node'
import { DraftBatch } from '../src/space/drafts.ts'
import { GuardedViews, type GuardedSource } from '../src/space/guarded.ts'

const SPACE = 'g'
const KEYS = ['a', 'b', 'c'] as const
const floor: Declaration = { type: 'counter', bounds: { min: 0 } }
const users = await Promise.all(
  [0, 1, 2].map(async (n) => {
    const secretKey = new Uint8Array(32).fill(n + 1)
    return { secretKey, publicKey: await nodeCrypto.publicKeyOf(secretKey) }
  }),
)

type Event =
  | { kind: 'receive' | 'commit-unseen'; user: number; regular: Array<[number, number]>; transfer: [number, number, number] | null }
  | { kind: 'commit'; count: number }
  | { kind: 'draft'; key: number; n: number }
  | { kind: 'seal' }

const event: fc.Arbitrary<Event> = fc.oneof(
  {
    weight: 5,
    arbitrary: fc.record({
      kind: fc.constantFrom('receive' as const, 'receive' as const, 'receive' as const, 'commit-unseen' as const),
      user: fc.integer({ min: 0, max: 2 }),
      regular: fc.array(fc.tuple(fc.integer({ min: 0, max: 2 }), fc.integer({ min: -4, max: 4 })), { maxLength: 3 }),
      transfer: fc.option(fc.tuple(fc.integer({ min: 0, max: 2 }), fc.integer({ min: 0, max: 2 }), fc.integer({ min: 1, max: 4 }))),
    }),
  },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('commit' as const), count: fc.integer({ min: 0, max: 4 }) }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('draft' as const), key: fc.integer({ min: 0, max: 2 }), n: fc.integer({ min: -4, max: 4 }) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('seal' as const) }) },
)

function seal(user: number, seq: number, updates: ObjectUpdate[], safe: SafeGroup[]): Promise<Envelope> {
  return sealEnvelope(nodeCrypto, users[user] as (typeof users)[number], { space: SPACE, seq, clock: clockInit(), deps: [], updates, safe })
}

describe('guarded views', () => {
  it('kept and extended as envelopes arrive, they equal views built from scratch', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(event, { minLength: 1, maxLength: 40 }), async (events) => {
        const replica = new ReliableReplica({ space: SPACE })
        let drafts: DraftBatch[] = [new DraftBatch()]
        let tag = 0
        const source: GuardedSource = {
          replica: () => replica,
          drafts: () => drafts,
          authorId: 'me',
          declarationOf: (key) => replica.declaration(key) ?? floor,
          names: { tagOf: () => `~draft:${tag++}`, renamed: () => undefined },
        }
        const kept = new GuardedViews(source)
        const seqs = [1, 1, 1]
        for (const e of events) {
          if (e.kind === 'receive' || e.kind === 'commit-unseen') {
            const byKey = new Map<string, number[]>()
            for (const [k, n] of e.regular) if (n !== 0) byKey.set(KEYS[k] as string, [...(byKey.get(KEYS[k] as string) ?? []), n])
            const updates = [...byKey].map(([key, ops]): ObjectUpdate => ({ key, decl: floor, ops }))
            const safe: SafeGroup[] = e.transfer && e.transfer[0] !== e.transfer[1]
              ? [{ atomic: true, updates: [{ key: KEYS[e.transfer[0]] as string, decl: floor, op: -e.transfer[2] }, { key: KEYS[e.transfer[1]] as string, decl: floor, op: e.transfer[2] }] }]
              : []
            if (updates.length + safe.length === 0) continue
            const seq = seqs[e.user] as number
            seqs[e.user] = seq + 1
            const env = await seal(e.user, seq, updates, safe)
            // Committed without ever being pending here (another client's update that reached this one in a commit).
            if (e.kind === 'commit-unseen') replica.commit([env])
            else replica.receive(env)
          } else if (e.kind === 'commit') {
            replica.commit(replica.pendingEnvelopes().slice(0, e.count))
          } else if (e.kind === 'draft') {
            const batch = drafts[drafts.length - 1] as DraftBatch
            batch.regular.push({ key: KEYS[e.key] as string, decl: floor, intent: e.n })
            batch.keys.add(KEYS[e.key] as string)
          } else {
            drafts = [new DraftBatch()]
          }
          for (const key of KEYS) {
            const fresh = new GuardedViews(source).compute(key)
            const got = kept.compute(key)
            expect([...got.keys].sort()).toEqual([...fresh.keys].sort())
            for (const k of fresh.keys) {
              expect(got.views.get(k)?.value(), `view of ${k}`).toEqual(fresh.views.get(k)?.value())
              expect(got.held.get(k), `held back from ${k}`).toEqual(fresh.held.get(k))
              // Never below the floor: the invariant the views exist for.
              expect((got.views.get(k)?.value() as number | undefined) ?? 0).toBeGreaterThanOrEqual(0)
            }
          }
        }
      }),
      { numRuns: 150 },
    )
  })
})
