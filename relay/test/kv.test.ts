import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { LmdbKv, MemoryKv, type Kv, type KeyRange } from '../src/kv.ts'

type Op = { put: boolean; key: [string, number, number] }

const bytes = (n: number) => new Uint8Array([n & 255, n >> 8])
// Names with characters whose UTF-16 and UTF-8 orders differ, as space names may have.
const names = fc.constantFrom('', 'a', 'ab', 'b', 'z', '\u{1F600}', '\uFFFD', 'é', 'a\u0000')
const keys = fc.tuple(names, fc.integer({ min: -3, max: 40 }), fc.integer({ min: 0, max: 5 }))
const ranges = fc.record(
  { start: keys, end: keys, reverse: fc.boolean(), limit: fc.integer({ min: 1, max: 8 }) },
  { requiredKeys: ['reverse'] },
)

function applyAll(kv: Kv, ops: readonly Op[]): Promise<void> {
  const t = kv.table<[string, number, number]>('t')
  return kv.write(() => {
    for (const [i, op] of ops.entries()) {
      if (op.put) t.put(op.key, bytes(i))
      else t.remove(op.key)
    }
  })
}

describe('MemoryKv', () => {
  it('orders and ranges keys exactly as LMDB does', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(fc.record({ put: fc.boolean(), key: keys }), { maxLength: 60 }), fc.array(ranges, { minLength: 1, maxLength: 6 }), async (ops, queries) => {
        const lmdb = new LmdbKv(mkdtempSync(join(tmpdir(), 'stead-kv-')))
        const memory = new MemoryKv()
        try {
          await applyAll(lmdb, ops)
          await applyAll(memory, ops)
          const view = (kv: Kv, r: KeyRange<[string, number, number]>) => {
            const t = kv.table<[string, number, number]>('t')
            return { range: [...t.getRange(r)].map(({ key, value }) => [key, [...value]]), keys: [...t.getKeys(r)], first: r.start === undefined ? null : t.get(r.start) ?? null }
          }
          for (const q of [{}, ...queries]) expect(view(memory, q)).toEqual(view(lmdb, q))
        } finally {
          await lmdb.close()
        }
      }),
      { numRuns: 40 },
    )
  })

  it('resolves writes in the order issued once the disk took them, and a crash loses exactly the ones it had not', async () => {
    const done: Array<() => void> = []
    const kv = new MemoryKv((d) => done.push(d))
    const t = kv.table<number>('t')
    const resolved: number[] = []
    kv.write(() => t.put(1, bytes(1))).then(() => resolved.push(1))
    kv.write(() => {
      t.put(2, bytes(2))
      t.remove(1)
    }).then(() => resolved.push(2))
    kv.write(() => t.put(1, bytes(9))).then(() => resolved.push(3))
    // Reads see writes at once, as an LMDB reader does once they are issued and committed.
    expect([...t.getKeys()]).toEqual([1, 2])
    done[1]?.()
    await Promise.resolve()
    expect(resolved).toEqual([])
    done[0]?.()
    await new Promise((r) => setImmediate(r))
    expect(resolved).toEqual([1, 2])
    kv.crash()
    expect([...t.getRange()].map(({ key, value }) => [key, [...value]])).toEqual([[2, [2, 0]]])
    expect(kv.unwritten).toBe(0)
    expect(() => t.put(3, bytes(3))).toThrow(/outside write/)
  })
})
