import { describe, expect, it } from 'vitest'
import { SpaceQuota } from '../src/runtime/space-quota.ts'

describe('SpaceQuota', () => {
  it('charges each live space to its starter, up to the quota, and frees a deleted one', () => {
    const q = new SpaceQuota(2)
    expect(q.admits('alice')).toBe(true)
    q.start('a', 'alice')
    q.start('b', 'alice')
    expect(q.held('alice')).toBe(2)
    expect(q.admits('alice')).toBe(false)
    expect(q.admits('bob')).toBe(true)
    expect(() => q.start('c', 'alice')).toThrowError(/holds 2 spaces/)
    expect(() => q.start('a', 'bob')).toThrowError(/started twice/)
    q.free('a')
    expect(q.starterOf('a')).toBeUndefined()
    expect(q.held('alice')).toBe(1)
    expect(q.admits('alice')).toBe(true)
    // A space charged to nobody (listed in the file, or older than the quota) frees nothing.
    q.free('listed')
    expect(q.held('alice')).toBe(1)
    q.free('b')
    expect(q.held('alice')).toBe(0)
  })

  it('moves a space to whoever else creates its policy, even past their quota', () => {
    const q = new SpaceQuota(1)
    q.start('a', 'ursula')
    q.start('m', 'mallory')
    q.transfer('a', 'mallory')
    expect([q.held('ursula'), q.held('mallory'), q.starterOf('a')]).toEqual([0, 2, 'mallory'])
    expect(q.admits('ursula')).toBe(true)
    expect(q.admits('mallory')).toBe(false)
    // Its own starter, or a space charged to nobody: nothing moves.
    q.transfer('a', 'mallory')
    q.transfer('listed', 'ursula')
    expect([q.held('ursula'), q.held('mallory')]).toEqual([0, 2])
    q.free('a')
    expect(q.held('mallory')).toBe(1)
  })

    it('restores what records hold, and forgets everything on clear', () => {
    const q = new SpaceQuota(1)
    q.restore('a', 'alice')
    q.restore('b', 'alice')
    expect(q.held('alice')).toBe(2)
    expect(q.admits('alice')).toBe(false)
    expect(() => q.restore('a', 'alice')).toThrowError(/restored twice/)
    q.clear()
    expect(q.held('alice')).toBe(0)
    expect(q.starterOf('b')).toBeUndefined()
  })

  it('refuses a quota that is not a whole number of at least 1', () => {
    for (const bad of [0, -1, 1.5, Number.NaN]) expect(() => new SpaceQuota(bad)).toThrowError(RangeError)
  })
})
