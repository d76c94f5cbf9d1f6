// @vitest-environment happy-dom
/**
 * Each counter hook returns its own state type, named after it: useCounter
 * a CounterState (with the updates its bounds hold back), useBoundedCounter
 * a BoundedCounterState (with the rights this client holds). The type-level
 * assertions fail `tsc -b` if the names are swapped again; the rendered ones
 * fail the test run.
 */
import { createClient, isSteadError, type BoundedCounterHandle, type CounterHandle, type Space, type SteadClient } from '@stead/client'
import { cleanup, render } from '@testing-library/react'
import { createElement as h } from 'react'
import { afterEach, describe, expect, expectTypeOf, it } from 'vitest'
import { SimCluster } from '@stead/sim'
import { SteadProvider, useBoundedCounter, useCounter, type BoundedCounterState, type CounterState } from '../src/index.ts'

const open: SteadClient[] = []
const clusters: SimCluster[] = []

afterEach(async () => {
  cleanup()
  for (const c of open.splice(0)) await c.close()
  for (const c of clusters.splice(0)) await c.close()
})

async function space(): Promise<Space> {
  const c = await SimCluster.start()
  clusters.push(c)
  const owner = await createClient(c.clientOptions())
  open.push(owner)
  return owner.space('bank')
}

/** Renders `hook` once inside a provider of `s` and returns what it returned (or what it threw). */
function renderHook<T>(s: Space, hook: () => T): { value?: T; error?: unknown } {
  const out: { value?: T; error?: unknown } = {}
  function Probe() {
    try {
      out.value = hook()
    } catch (err) {
      out.error = err
    }
    return null
  }
  render(h(SteadProvider, { space: s }, h(Probe)))
  return out
}

describe('counter hooks return their own state types', () => {
  it('types: useCounter → CounterState, useBoundedCounter → BoundedCounterState', () => {
    expectTypeOf(useCounter).returns.toEqualTypeOf<CounterState<CounterHandle>>()
    expectTypeOf(useBoundedCounter).returns.toEqualTypeOf<BoundedCounterState>()
    expectTypeOf<CounterState>().toHaveProperty('pending')
    expectTypeOf<CounterState['handle']>().toEqualTypeOf<CounterHandle>()
    expectTypeOf<BoundedCounterState>().toHaveProperty('rights')
    expectTypeOf<BoundedCounterState['handle']>().toEqualTypeOf<BoundedCounterHandle>()
    // A bounded counter has one bound: both do not type-check.
    expectTypeOf(useBoundedCounter).parameter(1).not.toMatchTypeOf<{ min: number; max: number; initial: number }>()
  })

  it('at run time: useCounter gives pending and a CounterHandle, useBoundedCounter gives rights and a BoundedCounterHandle', async () => {
    const s = await space()
    const counter = renderHook(s, () => useCounter('n', { min: 0 }))
    expect(counter.error).toBeUndefined()
    expect(Object.keys(counter.value ?? {}).sort()).toEqual(['handle', 'pending', 'stable', 'value'])
    expect(counter.value?.pending).toEqual([])
    expect(counter.value?.handle).toBe(s.counter('n', { min: 0 }))

    const bounded = renderHook(s, () => useBoundedCounter('seats', { min: 0, initial: 10 }))
    expect(bounded.error).toBeUndefined()
    expect(Object.keys(bounded.value ?? {}).sort()).toEqual(['handle', 'rights', 'rightsToDecrement', 'rightsToIncrement', 'stable', 'value'])
    expect(bounded.value).toMatchObject({ value: 10, stable: 10, rights: 0, rightsToDecrement: 0, rightsToIncrement: Infinity })
    expect(bounded.value?.handle).toBe(s.boundedCounter('seats', { min: 0, initial: 10 }))
  })

  it('useBoundedCounter keeps both bounds, and refuses an initial value outside them with a typed error', async () => {
    const s = await space()
    const both = renderHook(s, () => useBoundedCounter('seats', { min: 0, max: 10, initial: 5 }))
    expect(both.error).toBeUndefined()
    expect(both.value).toMatchObject({ value: 5, stable: 5, rights: 0, rightsToDecrement: 0, rightsToIncrement: 0 })
    const outside = renderHook(s, () => useBoundedCounter('tickets', { min: 0, max: 10, initial: 11 }))
    expect(isSteadError(outside.error, 'malformed')).toBe(true)
    expect((outside.error as Error).message).toBe('malformed: tickets: initial 11 is above max 10')
  })
})
