/**
 * @stead/react: React bindings for the Stead SDK. Every hook reads a handle
 * of the space given to the nearest `<SteadProvider>` through
 * useSyncExternalStore, so components re-render on each prospective or
 * stable change of what they read (and only then), and never tear.
 *
 * @module @stead/react
 */
import { createContext, createElement, useCallback, useContext, useMemo, useRef, useSyncExternalStore, type ReactNode } from 'react'
import type { BoundedCounterHandle, ClientStatus, CounterHandle, Everyone, InviteOptions, ListHandle, MapHandle, MembersHandle, OpenInvitation, PolicyValue, PresencePeer, RegisterHandle, Role, SafeResult, SetHandle, Space, TextHandle, WaitOptions } from '@stead/client'
import { memoSnapshot, type Subscribable } from './store.ts'

export { memoSnapshot, sameValue, type Subscribable } from './store.ts'
export type { BoundedCounterHandle, ClientStatus, CounterHandle, Everyone, InviteOptions, ListHandle, MapHandle, MembersHandle, OpenInvitation, PolicyValue, PresencePeer, RegisterHandle, Role, SafeResult, SetHandle, Space, TextHandle } from '@stead/client'

/** What an OR-Set may hold (as the SDK declares it): strings and finite numbers. */
export type SetElement = Parameters<SetHandle['add']>[0]
/** What a register may store (as the SDK declares it): msgpack data without extensions. */
export type RegisterValue = Exclude<RegisterHandle['value'], undefined>

const SteadContext = createContext<Space | null>(null)

/**
 * Makes a space (`await client.space(name)`) available to the hooks below;
 * nest providers for several spaces (a hook reads the nearest).
 */
export function SteadProvider({ space, children }: { space: Space; children?: ReactNode }) {
  return createElement(SteadContext.Provider, { value: space }, children)
}

/**
 * The space given to the nearest `<SteadProvider>`, for what the hooks do
 * not cover (`safe`, `readStable`, `pendingUpdates`, ...).
 *
 * @throws Error when no `<SteadProvider>` is above the component.
 */
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

/** What `useCounter` returns. */
export interface CounterState<H = CounterHandle> {
  /** Prospective value: includes this device's updates at once, never past a declared bound. */
  readonly value: number
  /** Stable value: agreed by every correct replica, never breaks an invariant. */
  readonly stable: number
  /** Undecided updates held back from `value` because they would cross a bound (see CounterHandle.pending). */
  readonly pending: CounterHandle['pending']
  /** The handle, for updates (`handle.increment(5)`, `handle.decrement(3, { safe: true })`). */
  readonly handle: H
}

/**
 * @deprecated The old name of what `useCounter` returns: use {@link CounterState}.
 * (`useBoundedCounter` returns {@link BoundedCounterState}.)
 */
export type BoundedState<H = CounterHandle> = CounterState<H>

/** What `useBoundedCounter` returns. */
export interface BoundedCounterState {
  /** Prospective value: includes this device's updates at once, never past the bound. */
  readonly value: number
  /** Stable value: agreed by every correct replica, never past the bound. */
  readonly stable: number
  /** Rights this client can spend right now without a round trip toward the counter's bound (see BoundedCounterHandle.rights). */
  readonly rights: number
  /** How much this client may subtract now without a round trip (Infinity without `min`). */
  readonly rightsToDecrement: number
  /** How much this client may add now without a round trip (Infinity without `max`). */
  readonly rightsToIncrement: number
  /** The handle, for updates (`handle.decrement(1)` on a `min` counter, `handle.transfer(n, to)`). */
  readonly handle: BoundedCounterHandle
}

/**
 * A PN-Counter of the nearest space (optionally with bounds, e.g.
 * `{ min: 0 }`): its prospective and stable values and the updates held
 * back by its bounds, re-rendering on each change. Every component must
 * open a key with the same bounds.
 *
 * @throws SteadError `type-mismatch` if the key is another type or has other bounds (as `space.counter` does).
 * @example
 * ```tsx
 * function Balance() {
 *   const { value, stable, pending, handle } = useCounter('acct:main', { min: 0 })
 *   return (
 *     <p>
 *       {value} (stable {stable}{pending.length ? `, ${pending.length} held back` : ''})
 *       <button onClick={() => handle.decrement(10, { safe: true }).then((r) => alert(r.status))}>withdraw 10</button>
 *     </p>
 *   )
 * }
 * ```
 */
export function useCounter(key: string, options?: Parameters<Space['counter']>[1]): CounterState<CounterHandle> {
  const handle = useSpace().counter(key, options)
  const snap = useHandle(handle, (h) => ({ value: h.value, stable: h.stable, pending: h.pending }))
  return { ...snap, handle }
}

/**
 * A Bounded Counter (escrow rights) of the nearest space: its prospective
 * and stable values and the rights this client holds, re-rendering on each change; spend through
 * `handle.decrement` (toward `min`) or `handle.increment` (toward `max`).
 *
 * @param options `{ min, initial }`, `{ max, initial }` or `{ min, max, initial }`, the same everywhere (see `space.boundedCounter`).
 * @throws SteadError `type-mismatch` if the key is another type or has other params; `malformed` for bad params.
 */
export function useBoundedCounter(key: string, options: Parameters<Space['boundedCounter']>[1]): BoundedCounterState {
  const handle = useSpace().boundedCounter(key, options)
  const snap = useHandle(handle, (h) => ({ value: h.value, stable: h.stable, rights: h.rights, rightsToDecrement: h.rightsToDecrement, rightsToIncrement: h.rightsToIncrement }))
  return { ...snap, handle }
}

/** What `useSet` returns. */
export interface SetState<T extends SetElement> {
  /** Prospective elements (never more than a declared `maxSize`). */
  readonly values: readonly T[]
  /** Stable elements. */
  readonly stable: readonly T[]
  /** Undecided adds held back from `values` because they would exceed `maxSize`. */
  readonly pending: SetHandle<T>['pending']
  /** The handle, for updates (`handle.add(x)`, `handle.delete(x)`). */
  readonly handle: SetHandle<T>
}

/**
 * An OR-Set of the nearest space (optionally with a `maxSize` invariant:
 * open it with the same one everywhere): its prospective and stable
 * elements and the adds held back by `maxSize`, re-rendering on each
 * change.
 *
 * @throws SteadError `type-mismatch` if the key is another type or has another `maxSize`.
 */
export function useSet<T extends SetElement = SetElement>(key: string, invariants?: Parameters<Space['set']>[1]): SetState<T> {
  const handle = useSpace().set<T>(key, invariants)
  const snap = useHandle(handle, (h) => ({ values: [...h.values()], stable: [...h.stableValues()], pending: h.pending }))
  return { ...snap, handle }
}

/** What `useRegister` returns. */
export interface RegisterState<T extends RegisterValue> {
  /** Prospective value: this device's latest write at once; undefined before any. */
  readonly value: T | undefined
  /** Stable value: the write that wins in the stable order; undefined before any. */
  readonly stable: T | undefined
  /** The handle, for updates (`handle.set(v)`). */
  readonly handle: RegisterHandle<T>
}

/**
 * A last-writer-wins register of the nearest space: its prospective and
 * stable values, re-rendering on each change.
 *
 * @throws SteadError `type-mismatch` if the key is another type.
 */
export function useRegister<T extends RegisterValue = RegisterValue>(key: string, options?: Parameters<Space['register']>[1]): RegisterState<T> {
  const handle = useSpace().register<T>(key, options)
  const snap = useHandle(handle, (h) => ({ value: h.value, stable: h.stable }))
  return { ...snap, handle }
}

/** What `useText` returns. */
export interface TextState {
  /** Prospective text: this device's edits at once. */
  readonly value: string
  /** Stable text. */
  readonly stable: string
  /** Prospective text with its formatting marks (see `TextHandle.spans`): a format re-renders too. */
  readonly spans: TextHandle['spans']
  /** The handle, for edits (`handle.insert(i, 'x')`, `handle.delete(i, n)`, `handle.format(i, n, { bold: true })`). */
  readonly handle: TextHandle
}

/**
 * A collaborative text of the nearest space: its prospective and stable
 * text, re-rendering on each change.
 *
 * @throws SteadError `type-mismatch` if the key is another type or has another `maxLength`.
 */
export function useText(key: string, options?: Parameters<Space['text']>[1]): TextState {
  const handle = useSpace().text(key, options)
  const snap = useHandle(handle, (h) => ({ value: h.value, stable: h.stable, spans: h.spans }))
  return { ...snap, handle }
}

/** What `useMap` returns. */
export interface MapState {
  /** The prospective map as plain data, nested objects included. */
  readonly value: Readonly<Record<string, unknown>>
  /** The stable map as plain data. */
  readonly stable: Readonly<Record<string, unknown>>
  /** The handle, for edits (`handle.set(f, v)`, `handle.map(f)`, `handle.text(f)`). */
  readonly handle: MapHandle
}

/**
 * A map of the nearest space, nested objects included: its prospective and
 * stable values as plain data, re-rendering when it or anything nested in
 * it changes.
 *
 * @throws SteadError `type-mismatch` if the key is another type or has another `maxKeys`.
 */
export function useMap(key: string, options?: Parameters<Space['map']>[1]): MapState {
  const handle = useSpace().map(key, options)
  const snap = useHandle(deep(handle), () => ({ value: handle.value, stable: handle.stable }))
  return { ...snap, handle }
}

/** What `useList` returns. */
export interface ListState<T> {
  /** The prospective list as plain data, nested objects included. */
  readonly value: readonly T[]
  /** The stable list as plain data. */
  readonly stable: readonly T[]
  /** The handle, for edits (`handle.insert(i, [v])`, `handle.move(a, b)`, `handle.delete(i)`). */
  readonly handle: ListHandle
}

/**
 * A list of the nearest space, nested objects included: its prospective
 * and stable values as plain data, re-rendering when it or anything nested
 * in it changes.
 *
 * @throws SteadError `type-mismatch` if the key is another type or has another `maxLength`.
 */
export function useList<T = unknown>(key: string, options?: Parameters<Space['list']>[1]): ListState<T> {
  const handle = useSpace().list(key, options)
  const snap = useHandle(deep(handle), () => ({ value: handle.value as T[], stable: handle.stable as T[] }))
  return { ...snap, handle }
}

const deepViews = new WeakMap<object, Subscribable>()

/** The handle seen through its deep subscription (one view per handle, so hooks keep their identity). */
function deep(handle: MapHandle | ListHandle): Subscribable {
  let view = deepViews.get(handle)
  if (!view) deepViews.set(handle, (view = { subscribe: (listener: () => void) => handle.subscribeDeep(listener) }))
  return view
}

/**
 * The nearest space's status (`space.status`): `online`, each relay,
 * `pending` updates, `stableIndex`, and `problem` (why it is not online,
 * in words to show), re-rendering on each change.
 */
export function useStatus(): ClientStatus {
  const space = useSpace()
  const getSnapshot = useMemo(() => memoSnapshot(() => space.status), [space])
  const subscribe = useCallback((onChange: () => void) => space.onStatus(onChange), [space])
  return useSyncExternalStore(subscribe, getSnapshot, getSnapshot)
}


/** What `usePresence` returns. */
export interface PresenceState {
  /** What this client shows the space's other clients (null: nothing). */
  readonly state: RegisterValue | null
  /** The other clients present now, each with its author id, state and when it was last heard. */
  readonly others: readonly PresencePeer[]
  /** Shows a new state (see `space.presence.set`; throws `too-large` past 4 KiB). */
  readonly set: (state: RegisterValue | null) => void
  /** Changes some fields of the state, keeping the rest (see `space.presence.update`). */
  readonly update: (fields: Readonly<Record<string, RegisterValue>>) => void
}

/**
 * Who is in the nearest space now and what they show (`space.presence`),
 * re-rendering when someone comes, moves, leaves or goes quiet, and when
 * this client's own state changes. Presence is ephemeral: it is never
 * ordered or stored.
 */
export function usePresence(): PresenceState {
  const space = useSpace()
  const presence = space.presence
  const getSnapshot = useMemo(() => memoSnapshot(() => ({ state: presence.state, others: presence.others })), [presence])
  const subscribe = useCallback((onChange: () => void) => presence.subscribe(onChange), [presence])
  const snapshot = useSyncExternalStore(subscribe, getSnapshot, getSnapshot)
  const set = useCallback((state: RegisterValue | null) => presence.set(state), [presence])
  const update = useCallback((fields: Readonly<Record<string, RegisterValue>>) => presence.update(fields), [presence])
  return useMemo(() => ({ ...snapshot, set, update }), [snapshot, set, update])
}

/** What `useMembers` returns. */
export interface MembersState {
  /** The prospective policy (`{ members, everyone }`): this client's changes at once; undefined while the space has none. */
  readonly value: PolicyValue | undefined
  /** The stable policy, the one updates are checked against; undefined while the space has none. */
  readonly stable: PolicyValue | undefined
  /** This client's role in the prospective policy, if it names this client. */
  readonly myRole: Role | undefined
  /** Gives a user (by `client.userId`) a role: a safe update (see `MembersHandle.grant`). */
  readonly grant: (user: string, role: Role, options?: WaitOptions) => Promise<SafeResult>
  /** Takes a user's role away: a safe update (see `MembersHandle.revoke`). */
  readonly revoke: (user: string, options?: WaitOptions) => Promise<SafeResult>
  /** Sets what anybody may do: a safe update (see `MembersHandle.setEveryone`). */
  readonly setEveryone: (everyone: Everyone, options?: WaitOptions) => Promise<SafeResult>
  /** The open invitations (key, role, expires, left) of the prospective policy. */
  readonly invitations: readonly OpenInvitation[]
  /** Opens an invitation and resolves with its token once committed (see `MembersHandle.invite`). */
  readonly invite: (role: Role, options?: InviteOptions) => Promise<string>
  /** Closes an invitation, by token or key: a safe update (see `MembersHandle.closeInvitation`). */
  readonly closeInvitation: (tokenOrKey: string, options?: WaitOptions) => Promise<SafeResult>
  /** Sets how much stable history relays keep (`{ entries, days }`): a safe update (see `MembersHandle.setRetention`). */
  readonly setRetention: (retention: { readonly entries?: number; readonly days?: number }, options?: WaitOptions) => Promise<SafeResult>
  /** Deletes the space for good: a safe update (see `MembersHandle.deleteSpace`); `value.deleted` then says so. */
  readonly deleteSpace: (options?: WaitOptions) => Promise<SafeResult>
  /** The handle (`space.members`), for `roleOf`, `history()` and the rest. */
  readonly handle: MembersHandle
}

/**
 * The members of a space and what they may do (`space.members`): the
 * prospective and stable policy, this client's role, its open
 * invitations, and the actions that change them, re-rendering on each
 * change (a grant shows at once, then settles, or is reversed if the
 * stable order rejects it). `space` defaults to the nearest
 * `<SteadProvider>`'s. Joining with a token is the client's
 * (`client.join(token)`).
 *
 * @throws Error when no space is given and no `<SteadProvider>` is above the component.
 * @example
 * ```tsx
 * function Members({ invitee }: { invitee: string }) {
 *   const { value, myRole, grant, invite, invitations } = useMembers()
 *   return (
 *     <div>
 *       <ul>{Object.entries(value?.members ?? {}).map(([user, role]) => <li key={user}>{user}: {role}</li>)}</ul>
 *       {myRole === 'admin' && <button onClick={() => grant(invitee, 'writer').then((r) => alert(r.status))}>add</button>}
 *       {myRole === 'admin' && <button onClick={() => invite('writer').then((token) => navigator.clipboard.writeText(`https://app.example/join#${token}`))}>copy an invitation link ({invitations.length} open)</button>}
 *     </div>
 *   )
 * }
 * ```
 */
export function useMembers(space?: Space): MembersState {
  const nearest = useContext(SteadContext)
  const s = space ?? nearest
  if (!s) throw new Error('useMembers: give it a space, or put a <SteadProvider space={...}> above this component')
  const handle = s.members
  const snap = useHandle(handle, (h) => ({ value: h.value, stable: h.stable, myRole: h.myRole, invitations: h.invitations }))
  const grant = useCallback((user: string, role: Role, options?: WaitOptions) => handle.grant(user, role, options), [handle])
  const revoke = useCallback((user: string, options?: WaitOptions) => handle.revoke(user, options), [handle])
  const setEveryone = useCallback((everyone: Everyone, options?: WaitOptions) => handle.setEveryone(everyone, options), [handle])
  const invite = useCallback((role: Role, options?: InviteOptions) => handle.invite(role, options), [handle])
  const closeInvitation = useCallback((tokenOrKey: string, options?: WaitOptions) => handle.closeInvitation(tokenOrKey, options), [handle])
  const setRetention = useCallback((retention: { readonly entries?: number; readonly days?: number }, options?: WaitOptions) => handle.setRetention(retention, options), [handle])
  const deleteSpace = useCallback((options?: WaitOptions) => handle.deleteSpace(options), [handle])
  return useMemo(
    () => ({ ...snap, grant, revoke, setEveryone, invite, closeInvitation, setRetention, deleteSpace, handle }),
    [snap, grant, revoke, setEveryone, invite, closeInvitation, setRetention, deleteSpace, handle],
  )
}
