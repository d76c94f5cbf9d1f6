/**
 * @stead/react: React bindings for the Stead SDK. Every hook reads a handle
 * of the client given to <SteadProvider> through useSyncExternalStore, so
 * components re-render on each prospective or stable change of what they read
 * and never tear.
 */
import { createContext, createElement, useCallback, useContext, useMemo, useRef, useSyncExternalStore, type ReactNode } from 'react'
import type { BoundedCounterHandle, ClientStatus, CounterHandle, RegisterHandle, SetHandle, Space } from '@stead/client'
import { memoSnapshot, type Subscribable } from './store.ts'

export { memoSnapshot, sameValue, type Subscribable } from './store.ts'
export type { BoundedCounterHandle, ClientStatus, CounterHandle, RegisterHandle, SetHandle, Space } from '@stead/client'

/** What an OR-Set may hold and a register may store (as the SDK declares them). */
export type SetElement = Parameters<SetHandle['add']>[0]
export type RegisterValue = Exclude<RegisterHandle['value'], undefined>

const SteadContext = createContext<Space | null>(null)

/** Makes a space (`await client.space(name)`) available to the hooks below; nest providers for several spaces. */
export function SteadProvider({ space, children }: { space: Space; children?: ReactNode }) {
  return createElement(SteadContext.Provider, { value: space }, children)
}

/** The space given to the nearest <SteadProvider>. */
export function useSpace(): Space {
  const space = useContext(SteadContext)
  if (!space) throw new Error('useSpace: no <SteadProvider space={...}> above this component')
  return space
}

/**
 * Reads `read(handle)` and re-renders when it changes. `read` may be an
 * inline function: the latest one is used, and equal results keep their
 * identity.
 */
export function useHandle<H extends Subscribable, T>(handle: H, read: (handle: H) => T): T {
  const readRef = useRef(read)
  readRef.current = read
  const getSnapshot = useMemo(() => memoSnapshot(() => readRef.current(handle)), [handle])
  const subscribe = useCallback((onChange: () => void) => handle.subscribe(onChange), [handle])
  return useSyncExternalStore(subscribe, getSnapshot, getSnapshot)
}

export interface CounterState<H> {
  /** Prospective value: includes this device's updates at once, never past a declared bound. */
  readonly value: number
  /** Stable value: agreed by every correct replica, never breaks an invariant. */
  readonly stable: number
  readonly handle: H
}

export interface BoundedState<H> extends CounterState<H> {
  /** Undecided updates held back from `value` because they would cross a bound (see CounterHandle.pending). */
  readonly pending: CounterHandle['pending']
}

/** A PN-Counter (optionally with bounds, e.g. `{ min: 0 }`). */
export function useCounter(key: string, options?: Parameters<Space['counter']>[1]): BoundedState<CounterHandle> {
  const handle = useSpace().counter(key, options)
  const snap = useHandle(handle, (h) => ({ value: h.value, stable: h.stable, pending: h.pending }))
  return { ...snap, handle }
}

/** A Bounded Counter (escrow rights). */
export function useBoundedCounter(key: string, options: Parameters<Space['boundedCounter']>[1]): CounterState<BoundedCounterHandle> {
  const handle = useSpace().boundedCounter(key, options)
  const snap = useHandle(handle, (h) => ({ value: h.value, stable: h.stable }))
  return { ...snap, handle }
}

export interface SetState<T extends SetElement> {
  /** Prospective elements (never more than a declared `maxSize`). */
  readonly values: readonly T[]
  /** Stable elements. */
  readonly stable: readonly T[]
  /** Undecided adds held back from `values` because they would exceed `maxSize`. */
  readonly pending: SetHandle<T>['pending']
  readonly handle: SetHandle<T>
}

/** An OR-Set (optionally with a `maxSize` invariant: open it with the same one everywhere). */
export function useSet<T extends SetElement = SetElement>(key: string, invariants?: Parameters<Space['set']>[1]): SetState<T> {
  const handle = useSpace().set<T>(key, invariants)
  const snap = useHandle(handle, (h) => ({ values: [...h.values()], stable: [...h.stableValues()], pending: h.pending }))
  return { ...snap, handle }
}

export interface RegisterState<T extends RegisterValue> {
  readonly value: T | undefined
  readonly stable: T | undefined
  readonly handle: RegisterHandle<T>
}

/** A last-writer-wins register. */
export function useRegister<T extends RegisterValue = RegisterValue>(key: string): RegisterState<T> {
  const handle = useSpace().register<T>(key)
  const snap = useHandle(handle, (h) => ({ value: h.value, stable: h.stable }))
  return { ...snap, handle }
}

/** The space's status: relays, pending updates, stable index. */
export function useStatus(): ClientStatus {
  const space = useSpace()
  const getSnapshot = useMemo(() => memoSnapshot(() => space.status), [space])
  const subscribe = useCallback((onChange: () => void) => space.onStatus(onChange), [space])
  return useSyncExternalStore(subscribe, getSnapshot, getSnapshot)
}

