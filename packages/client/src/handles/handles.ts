import {
  SteadError,
  encode,
  validateRegisterValue,
  validateSetElement,
  type AnyCrdt,
  type AnyOp,
  type Crypto,
  type Declaration,
  type HistoryEntry,
  type LWWRegister,
  type ORSet,
  type PNCounter,
  type RegisterValue,
  type RightsKind,
  type SetElement,
} from '@stead/core'
import type { Intent } from '../space/drafts.ts'
import type { HistoryPageOptions, SafeResult, UpdateOptions, UpdateResult, WaitOptions } from '../types.ts'

/** An update held back from an object's prospective value because it would break an invariant there. */
export interface HeldUpdate {
  readonly op: AnyOp
  /** Made by this client (else received from another). */
  readonly own: boolean
}

/** An update this replica received (or made) that the stable order has not decided yet. */
export interface UndecidedUpdate {
  /** Its envelope id (hex): what `space.clockProof` and `space.compare` take. */
  readonly id: string
  /** Its author id. */
  readonly author: string
  /** Its author's sequence number (one envelope per author and seq, the relays' validators make sure). */
  readonly seq: number
}

/** What handles need from the client: reads of both states, and a way to update. */
export interface HandleHost {
  prospective(key: string): AnyCrdt | undefined
  /** Undecided updates kept out of `prospective(key)` by its invariants, in order. */
  heldBack(key: string): readonly HeldUpdate[]
  stable(key: string): AnyCrdt | undefined
  history(key: string): readonly HistoryEntry[]
  /** Updates of the object this replica holds that the stable order has not decided yet, in the order they arrived. */
  undecided(key: string): readonly UndecidedUpdate[]
  /** A page of the object's whole stable history, oldest first (from memory, else from f+1 relays). */
  historyPage(key: string, options: HistoryPageOptions): Promise<Array<{ index: number; value: unknown }>>
  update(key: string, decl: Declaration, intent: Intent, safe: boolean): Promise<UpdateResult>
  /** The caller's wait for an update: `options`, with the client's default timeout for a safe one (and why it timed out). */
  wait<T>(p: Promise<T>, options: WaitOptions | undefined, what: string, safe: boolean): Promise<T>
  /** A group of intents applied atomically in the stable order. */
  safeGroup(items: ReadonlyArray<{ key: string; decl: Declaration; intent: Intent }>): Promise<SafeResult>
  /** Calls `listener` when the object may have changed; `local` says this client's own new edit changed it. */
  subscribe(key: string, listener: (local: boolean) => void): () => void
  /** Rights of `kind` this client holds on a bounded counter that no pending update of its own has spent (Infinity toward no bound). */
  spendableRights(key: string, decl: Declaration, kind: RightsKind): number
  /** Waits until this client holds `n` rights of `kind` on a bounded counter, asking other replicas for them; false when no spend of `n` can fit (bounded by `options`, default the safe timeout). */
  acquireRights(key: string, decl: Declaration, kind: RightsKind, n: number, options: WaitOptions | undefined): Promise<boolean>
  authorId(): string
  /** Whom a space's policy sees this client as (SteadClient.userId). */
  userId(): string
  now(): number
  /** The space's name (what invitation tokens and redemptions name). */
  space(): string
  /** The client's Ed25519 and SHA-256 (invitation keys and redemptions). */
  crypto(): Crypto
  /** What an element id of an unsigned draft became once signed (`${tag}.${k}`, see DraftIds), or undefined. */
  signedId(id: string): string | undefined
}

const MAX_REGISTER_BYTES = 512 * 1024

/**
 * A register write's timestamp, a hybrid logical clock: the relays' time as
 * this client measured it (`now`: the device clock plus its offset from the
 * relays; see ClockOffset), but always later than any write this client has
 * seen on the register, so a write beats every write it saw, and a device
 * clock running fast does not make its writes win over later ones made
 * elsewhere. Ties go to the writer's author id (registerWriteWins).
 */
export function registerStamp(now: number, seen: LWWRegister | undefined): number {
  return Math.max(Math.round(now), (seen?.timestamp() ?? 0) + 1)
}

/** @internal What every object handle shares: key, declaration, subscriptions, history and sending. */
export abstract class Handle {
  protected readonly host: HandleHost
  /** The object's key in its space. */
  readonly key: string
  /** The object's type and invariants, as this handle opened it (the same on every client). */
  readonly declaration: Declaration
  /** @internal Use the space's `counter`, `set`, `register` or `boundedCounter`. */
  constructor(
    host: HandleHost,
    key: string,
    declaration: Declaration,
  ) {
    this.host = host
    this.key = key
    this.declaration = declaration
  }

  /**
   * Calls `listener` whenever the prospective or stable value may have
   * changed: this client's updates (before the update call returns),
   * other clients' updates as they arrive, commits. Read the values in the
   * listener; it gets no arguments. Returns the unsubscribe function.
   */
  subscribe(listener: () => void): () => void {
    return this.host.subscribe(this.key, listener)
  }

  /** Stable history of this object, oldest first: one entry per stable index that changed it (the latest `historyLimit`, default 1,000, kept in memory). */
  history(): Array<{
    /** The stable index of the update that changed the object (each committed envelope takes the next index). */
    index: number
    /** The object's stable value from that index on. */
    value: unknown
  }> {
    return this.host.history(this.key).map((h) => ({ index: h.index, value: h.value }))
  }

  /**
   * Updates of this object that this replica holds and the stable order
   * has not decided yet (this client's and others'), in the order they
   * arrived: who made each and its envelope id, for `space.clockProof` and
   * `space.compare`, which prove them before any order exists. An update
   * leaves the list once decided (then `history()` holds what it did).
   */
  undecided(): UndecidedUpdate[] {
    return [...this.host.undecided(this.key)]
  }

  /**
   * One page of this object's whole stable history, oldest first: the
   * `limit` (default 100, at most 1,000) latest entries before stable index
   * `before` (default: all). Served from memory when it holds them, else
   * from the relays: a page f+1 relays signed identically. Page backwards
   * with `before` = the first entry's index.
   *
   * @throws SteadError `malformed` for a bad `limit` or `before`, `unsupported` if no cluster is trusted yet or too few relays serve the same page, `timeout` (default 10 s for a page from the relays) or `aborted`; {@link ClosedError} after the space closed.
   */
  historyPage(options: HistoryPageOptions = {}): Promise<Array<{
    /** The stable index of the update that changed the object (each committed envelope takes the next index). */
    index: number
    /** The object's stable value from that index on. */
    value: unknown
  }>> {
    return this.host.historyPage(this.key, options)
  }

  protected send(intent: Intent, options?: UpdateOptions): Promise<UpdateResult> {
    const safe = options?.safe === true
    return this.host.wait(this.host.update(this.key, this.declaration, intent, safe), options, `an update of ${this.key}`, safe)
  }
}

/** The amount of an update: a positive safe integer, or a typed error naming the call. */
export function amount(n: number, what: string): number {
  if (!Number.isSafeInteger(n) || n <= 0) throw new SteadError('malformed', `${what} takes a positive safe integer, got ${n}`)
  return n
}

/** Runs a synchronous check, turning a throw into a rejected promise (updates always return promises). */
/** @internal A call whose synchronous throw becomes a rejected promise. */
export function guarded<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return fn()
  } catch (err) {
    return Promise.reject(err)
  }
}

/**
 * A PN-Counter, optionally with `min`/`max` invariants that the stable value
 * never breaks. Open it with `space.counter(key, { min, max })`.
 *
 * Reads are synchronous and local: `value` (prospective: includes this
 * device's updates at once) and `stable` (agreed by every correct replica).
 * Updates return promises: a regular update resolves `stored` once it is
 * durable on this device; with `{ safe: true }` it resolves once the stable
 * order committed or rejected it.
 */
export class CounterHandle extends Handle {
  /**
   * Prospective value: every update this client made or received, except
   * those that would cross `min`/`max` (see `pending`): it never shows a
   * value the invariants forbid.
   */
  get value(): number {
    return (this.host.prospective(this.key) as PNCounter | undefined)?.value() ?? 0
  }

  /**
   * Undecided updates held back from `value` because they would cross a
   * bound there, as signed amounts in order (`own`: made by this client).
   * The stable order decides them: they commit (and show) if the bound
   * allows it then, or are rejected with reason `invariant`.
   */
  get pending(): ReadonlyArray<{
    /** The signed amount: positive for an increment, negative for a decrement. */
    readonly amount: number
    /** Made by this client (else received from another). */
    readonly own: boolean
  }> {
    return this.host.heldBack(this.key).map((h) => ({ amount: h.op as number, own: h.own }))
  }

  /** Latest stable value. */
  get stable(): number {
    return (this.host.stable(this.key) as PNCounter | undefined)?.value() ?? 0
  }

  /**
   * Adds `n` (default 1). Regular: shows in `value` at once and resolves
   * `stored` once durable on this device; if the stable order rejects it
   * later (`max` crossed), it is undone and the space's `onError` hears a
   * RejectedError.
   *
   * @throws SteadError `malformed` (the promise rejects) unless `n` is a positive safe integer; {@link ClosedError} after the space closed.
   */
  increment(n?: number): Promise<UpdateResult>
  /**
   * Adds `n` as a safe update: resolves once the stable order decided it,
   * `committed` with its stable index or `rejected` with the reason
   * (`invariant` when it would cross `max`).
   *
   * @throws SteadError `malformed` unless `n` is a positive safe integer, `timeout` or `aborted` as `options` say; {@link ClosedError} after the space closed.
   */
  increment(n: number, options: { safe: true } & WaitOptions): Promise<SafeResult>
  /**
   * Adds `n`, regular or safe as `options.safe` says (see the other forms).
   *
   * @throws SteadError `malformed` unless `n` is a positive safe integer, `timeout` or `aborted` as `options` say; {@link ClosedError} after the space closed.
   */
  increment(n: number, options?: UpdateOptions): Promise<UpdateResult>
  increment(n = 1, options?: UpdateOptions): Promise<UpdateResult> {
    return guarded(() => this.send(amount(n, 'increment'), options))
  }

  /**
   * Subtracts `n` (default 1). Regular: shows in `value` at once (unless it
   * would cross `min` there: then it waits in `pending`) and resolves
   * `stored` once durable on this device; if the stable order rejects it
   * later, it is undone and the space's `onError` hears a RejectedError.
   * Use the safe form when the caller must know whether it went through.
   *
   * @throws SteadError `malformed` (the promise rejects) unless `n` is a positive safe integer; {@link ClosedError} after the space closed.
   */
  decrement(n?: number): Promise<UpdateResult>
  /**
   * Subtracts `n` as a safe update: resolves once the stable order decided
   * it, `committed` with its stable index or `rejected` with the reason
   * (`invariant` when it would cross `min`: a withdrawal that does not fit).
   *
   * @throws SteadError `malformed` unless `n` is a positive safe integer, `timeout` or `aborted` as `options` say; {@link ClosedError} after the space closed.
   */
  decrement(n: number, options: { safe: true } & WaitOptions): Promise<SafeResult>
  /**
   * Subtracts `n`, regular or safe as `options.safe` says (see the other forms).
   *
   * @throws SteadError `malformed` unless `n` is a positive safe integer, `timeout` or `aborted` as `options` say; {@link ClosedError} after the space closed.
   */
  decrement(n: number, options?: UpdateOptions): Promise<UpdateResult>
  decrement(n = 1, options?: UpdateOptions): Promise<UpdateResult> {
    return guarded(() => this.send(-amount(n, 'decrement'), options))
  }
}

/**
 * An add-wins OR-Set of strings or numbers, optionally with a maximum size.
 * Open it with `space.set<T>(key, { maxSize })`. Concurrent adds and
 * deletes of one element resolve in favour of the add.
 */
export class SetHandle<T extends SetElement = SetElement> extends Handle {
  /** The prospective elements, as `values()` returns them. */
  get value(): T[] {
    return this.values()
  }

  /** The stable elements, as `stableValues()` returns them. */
  get stable(): T[] {
    return this.stableValues()
  }

  /** Prospective elements; adds that would exceed `maxSize` are held back (see `pending`). */
  values(): T[] {
    return ((this.host.prospective(this.key) as ORSet | undefined)?.value() ?? []) as T[]
  }

  /** Undecided adds held back from `values()` because the set would exceed `maxSize` there (`own`: made by this client). */
  get pending(): ReadonlyArray<{
    /** The element the add would insert. */
    readonly element: T
    /** Made by this client (else received from another). */
    readonly own: boolean
  }> {
    return this.host.heldBack(this.key).flatMap((h) => (Array.isArray(h.op) && h.op[0] === 'a' ? [{ element: h.op[1] as T, own: h.own }] : []))
  }

  /** Stable elements: agreed by every correct replica, never more than `maxSize`. */
  stableValues(): T[] {
    return ((this.host.stable(this.key) as ORSet | undefined)?.value() ?? []) as T[]
  }

  /** Whether the element is in the prospective set. */
  has(element: T): boolean {
    return (this.host.prospective(this.key) as ORSet | undefined)?.has(element) ?? false
  }

  /**
   * Adds an element. Regular: shows in `values()` at once (unless the set
   * is at `maxSize` there: then it waits in `pending`) and resolves `stored`
   * once durable on this device; if the stable order rejects it later, it
   * is undone and the space's `onError` hears a RejectedError.
   *
   * @throws SteadError `malformed` (the promise rejects) for an element that is not a finite number or a string of at most 1,024 characters; {@link ClosedError} after the space closed.
   */
  add(element: T): Promise<UpdateResult>
  /**
   * Adds an element as a safe update: resolves once the stable order
   * decided it, `committed` or `rejected` (`invariant` when the set is full).
   *
   * @throws SteadError `malformed` for a bad element, `timeout` or `aborted` as `options` say; {@link ClosedError} after the space closed.
   */
  add(element: T, options: { safe: true } & WaitOptions): Promise<SafeResult>
  /**
   * Adds an element, regular or safe as `options.safe` says (see the other forms).
   *
   * @throws SteadError `malformed` for a bad element, `timeout` or `aborted` as `options` say; {@link ClosedError} after the space closed.
   */
  add(element: T, options?: UpdateOptions): Promise<UpdateResult>
  add(element: T, options?: UpdateOptions): Promise<UpdateResult> {
    return guarded(() => this.send(['a', checkElement(element)], options))
  }

  /**
   * Removes the element as this client has seen it (an add it has not seen
   * survives: add wins). Regular: resolves `stored` once durable on this
   * device.
   *
   * @throws SteadError `malformed` (the promise rejects) for a bad element; {@link ClosedError} after the space closed.
   */
  delete(element: T): Promise<UpdateResult>
  /**
   * Removes the element as a safe update: resolves once the stable order decided it.
   *
   * @throws SteadError `malformed` for a bad element, `timeout` or `aborted` as `options` say; {@link ClosedError} after the space closed.
   */
  delete(element: T, options: { safe: true } & WaitOptions): Promise<SafeResult>
  /**
   * Removes the element, regular or safe as `options.safe` says (see the other forms).
   *
   * @throws SteadError `malformed` for a bad element, `timeout` or `aborted` as `options` say; {@link ClosedError} after the space closed.
   */
  delete(element: T, options?: UpdateOptions): Promise<UpdateResult>
  delete(element: T, options?: UpdateOptions): Promise<UpdateResult> {
    return guarded(() => this.send({ remove: checkElement(element) }, options))
  }
}

function checkElement<T extends SetElement>(e: T): T {
  const problem = validateSetElement(e)
  if (problem) throw new SteadError('malformed', problem)
  return e
}

/**
 * A last-writer-wins register. Open it with `space.register<T>(key)`.
 * Concurrent writes resolve to the one with the latest timestamp, the same
 * on every replica.
 */
export class RegisterHandle<T extends RegisterValue = RegisterValue> extends Handle {
  /** Prospective value: this client's latest write at once, or the latest write it received; undefined before any. */
  get value(): T | undefined {
    return (this.host.prospective(this.key) as LWWRegister | undefined)?.value() as T | undefined
  }

  /** Stable value: the write that wins in the stable order; undefined before any. */
  get stable(): T | undefined {
    return (this.host.stable(this.key) as LWWRegister | undefined)?.value() as T | undefined
  }

  /**
   * Writes `value`, timestamped with the relays' time (this device's clock
   * corrected by its measured offset from them) and later than anything
   * this client has seen here, so that it wins locally and a device clock
   * running fast cannot win. Regular: shows in `value` at once and
   * resolves `stored` once durable on this device.
   *
   * @throws SteadError `malformed` (the promise rejects) for a value that is not msgpack data (see `space.register`), `too-large` over 512 KiB encoded; {@link ClosedError} after the space closed.
   */
  set(value: T): Promise<UpdateResult>
  /**
   * Writes `value` as a safe update: resolves once the stable order decided it.
   *
   * @throws SteadError `malformed` or `too-large` for a bad value, `timeout` or `aborted` as `options` say; {@link ClosedError} after the space closed.
   */
  set(value: T, options: { safe: true } & WaitOptions): Promise<SafeResult>
  /**
   * Writes `value`, regular or safe as `options.safe` says (see the other forms).
   *
   * @throws SteadError `malformed` or `too-large` for a bad value, `timeout` or `aborted` as `options` say; {@link ClosedError} after the space closed.
   */
  set(value: T, options?: UpdateOptions): Promise<UpdateResult>
  set(value: T, options?: UpdateOptions): Promise<UpdateResult> {
    return guarded(() => {
      const problem = validateRegisterValue(value)
      if (problem) throw new SteadError('malformed', problem)
      const size = encode(value).length
      if (size > MAX_REGISTER_BYTES) throw new SteadError('too-large', `register value of ${size} bytes exceeds ${MAX_REGISTER_BYTES}`)
      return this.send(['s', value, registerStamp(this.host.now(), this.host.prospective(this.key) as LWWRegister | undefined)], options)
    })
  }
}
