import { describe, expect, it } from 'vitest'
import { memoSnapshot, sameValue } from '../src/store.ts'

describe('@stead/react snapshots', () => {
  it('compares plain data structurally', () => {
    expect(sameValue({ a: 1, b: [1, 2] }, { a: 1, b: [1, 2] })).toBe(true)
    expect(sameValue({ a: 1, b: [1, 2] }, { a: 1, b: [2, 1] })).toBe(false)
    expect(sameValue([{ url: 'x', connected: true }], [{ url: 'x', connected: false }])).toBe(false)
    expect(sameValue({ a: 1 }, { a: 1, b: undefined })).toBe(false)
    expect(sameValue(NaN, NaN)).toBe(true)
    expect(sameValue(new Uint8Array([1, 2]), new Uint8Array([1, 2]))).toBe(true)
    expect(sameValue([], {})).toBe(false)
  })

  it('keeps the identity of an unchanged snapshot (what useSyncExternalStore needs)', () => {
    let state = { value: 1, stable: 0 }
    const read = memoSnapshot(() => ({ ...state }))
    const first = read()
    expect(read()).toBe(first)
    state = { value: 2, stable: 0 }
    const second = read()
    expect(second).not.toBe(first)
    expect(second).toEqual({ value: 2, stable: 0 })
    expect(read()).toBe(second)
  })
})
