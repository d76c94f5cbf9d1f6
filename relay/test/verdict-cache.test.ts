import { describe, expect, it } from 'vitest'
import { VerdictCache } from '../src/runtime/verdict-cache.ts'

describe('VerdictCache', () => {
  it('keeps verdicts within its entry and byte bounds, dropping the oldest first, and frees bytes on demand', () => {
    const c = new VerdictCache<string>(3)
    c.set('a', 'A', 10)
    c.set('b', 'B', 10)
    c.set('c', 'C', 10)
    c.set('d', 'D', 10)
    expect(c.values()).toEqual(['B', 'C', 'D'])
    expect(c.bytes).toBe(30)
    // Past the byte bound the oldest go until the new one fits.
    c.set('e', 'E', 25, 40)
    expect(c.values()).toEqual(['D', 'E'])
    expect(c.bytes).toBe(35)
    expect([c.get('e'), c.get('b')]).toEqual(['E', undefined])
    c.set('f', 'F', 5)
    c.evict(1)
    expect(c.values()).toEqual(['E', 'F'])
    expect(c.bytes).toBe(30)
  })
})
