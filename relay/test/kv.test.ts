import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { LmdbKv, MemoryKv, type Kv, type KeyRange, type KvKey } from '../src/store/kv.ts'

const bytes = (n: number) => new Uint8Array([n & 255, n >> 8])
// Names with characters whose UTF-16 and UTF-8 orders differ, as space names may have.
const names = fc.constantFrom('', 'a', 'ab', 'b', 'z', '\u{1F600}', '\uFFFD', 'é', 'a\u0000')
// Rounds and indexes, with the bounds RelayStore ranges over (-1, MAX_SAFE_INTEGER).
const numbers = fc.oneof(fc.integer({ min: -3, max: 40 }), fc.constantFrom(-1, 0, Number.MAX_SAFE_INTEGER, 2 ** 32, 1.5))

/** The key shapes RelayStore uses: a round, a name, [space, index, round], [space, index, round, chunk]. */
const shapes: Array<[string, fc.Arbitrary<KvKey>]> = [
  ['number', numbers],
  ['string', names],
  ['triple', fc.tuple(names, numbers, numbers)],
  ['quadruple', fc.tuple(names, numbers, numbers, fc.integer({ min: 0, max: 3 }))],
]

async function same(keys: fc.Arbitrary<KvKey>): Promise<void> {
  const ranges = fc.record({ start: keys, end: keys, reverse: fc.boolean(), limit: fc.integer({ min: 1, max: 8 }) }, { requiredKeys: ['reverse'] })
  await fc.assert(
    fc.asyncProperty(fc.array(fc.record({ put: fc.boolean(), key: keys }), { maxLength: 60 }), fc.array(ranges, { minLength: 1, maxLength: 6 }), async (ops, queries) => {
      const dir = mkdtempSync(join(tmpdir(), 'stead-kv-'))
      const lmdb = new LmdbKv(dir)
      const memory = new MemoryKv()
      try {
        for (const kv of [lmdb, memory]) {
          const t = kv.table<KvKey>('t')
          await kv.write(() => {
            for (const [i, op] of ops.entries()) {
              if (op.put) t.put(op.key, bytes(i))
              else t.remove(op.key)
            }
          })
        }
        const view = (kv: Kv, r: KeyRange<KvKey>) => {
          const t = kv.table<KvKey>('t')
          return { range: [...t.getRange(r)].map(({ key, value }) => [key, [...value]]), keys: [...t.getKeys(r)], first: r.start === undefined ? null : [...(t.get(r.start) ?? [])] }
        }
        for (const q of [{}, ...queries]) expect(view(memory, q)).toEqual(view(lmdb, q))
      } finally {
        await lmdb.close()
        rmSync(dir, { recursive: true, force: true })
      }
    }),
    { numRuns: 30 },
  )
}

describe('MemoryKv', () => {
  for (const [shape, keys] of shapes) {
    it(`orders and ranges ${shape} keys exactly as LMDB does`, () => same(keys))
  }

  it('resolves writes in the order issued once the disk took them; reads outside a write see only those, and a crash loses the others', async () => {
    const done: Array<() => void> = []
    const kv = new MemoryKv((d) => done.push(d))
    const t = kv.table<number>('t')
    const resolved: number[] = []
    const durable = () => [...t.getRange()].map(({ key, value }) => [key, [...value]])
    void kv.write(() => t.put(1, bytes(1))).then(() => resolved.push(1))
    void kv.write(() => {
      // A write sees every write issued before it.
      expect([...t.getKeys()]).toEqual([1])
      t.put(2, bytes(2))
      t.remove(1)
    }).then(() => resolved.push(2))
    void kv.write(() => {
      t.put(1, bytes(9))
      t.remove(2)
    }).then(() => resolved.push(3))
    // Outside a write, only what is on disk: nothing yet.
    expect(durable()).toEqual([])
    done[1]?.()
    await new Promise((r) => setImmediate(r))
    expect(resolved).toEqual([])
    expect(durable()).toEqual([])
    done[0]?.()
    await new Promise((r) => setImmediate(r))
    expect(resolved).toEqual([1, 2])
    expect(durable()).toEqual([[2, [2, 0]]])
    // The third (remove 2, put 1 again) is lost: the disk never took it.
    kv.crash()
    done[2]?.()
    await new Promise((r) => setImmediate(r))
    expect(resolved).toEqual([1, 2])
    expect(durable()).toEqual([[2, [2, 0]]])
    let seen: number[] = []
    const written = kv.write(() => {
      seen = [...t.getKeys()]
    })
    expect(seen).toEqual([2])
    expect(kv.unwritten).toBe(1)
    kv.flush()
    await written
    expect(kv.unwritten).toBe(0)
    expect(() => t.put(3, bytes(3))).toThrow(/outside write/)
  })

  it('keeps nothing of a write that throws', async () => {
    const kv = new MemoryKv()
    const t = kv.table<string>('t')
    await kv.write(() => t.put('a', bytes(1)))
    await expect(
      kv.write(() => {
        t.put('b', bytes(2))
        t.remove('a')
        throw new Error('abort')
      }),
    ).rejects.toThrow('abort')
    expect([...t.getKeys()]).toEqual(['a'])
    await kv.write(() => expect([...t.getKeys()]).toEqual(['a']))
  })
})
