import {
  BoundedCounter,
  DEFAULT_LIMITS,
  SteadError,
  MAX_FRESHNESS_MS,
  MIN_FRESHNESS_MS,
  asGeneric,
  createCrdt,
  describeDeclaration,
  hasInvariants,
  envelopeUnits,
  isWellFormed,
  placementProblem,
  POLICY_KEY,
  sameDeclaration,
  validateBoundedCounterParams,
  type AnyCrdt,
  type AnyOp,
  type Decision,
  type BoundedCounterDeclaration,
  type BoundedCounterParams,
  type Declaration,
  type RightsKind,
  type Envelope,
  type ReliableReplica,
  type HistoryEntry,
  type LWWRegister,
  type RegisterValue,
  type SetElement,
  type HostClock,
  type Crypto,
  type MarkSpec,
  type PresenceBody,
} from '@stead/core'
import type { DraftIds } from './draft-ids.ts'

/** What is wrong with an object key, or null: 1 to 256 characters, no unpaired surrogate. */
function keyProblem(key: unknown): string | null {
  if (typeof key !== 'string' || key.length === 0 || key.length > DEFAULT_LIMITS.maxKeyChars) return `object keys are 1 to ${DEFAULT_LIMITS.maxKeyChars} characters, got ${JSON.stringify(key)}`
  return isWellFormed(key) ? null : `object key ${JSON.stringify(key)} has an unpaired surrogate (it would reach other replicas as another key)`
}

/** The declaration of a deletion (see `Space.delete`). */
const DELETION: Declaration = { type: 'deletion' }
import { applyIntent, type DraftBatch, type DraftItem } from './drafts.ts'
import { Batcher, type Lifecycle } from './batcher.ts'
import { ClosedError } from '../errors.ts'
import { ProspectiveViews } from './prospective-views.ts'
import { QuorumReads } from './quorum-reads.ts'
import { Presence } from './presence.ts'
import { SpaceEvents } from './space-events.ts'
import { BoundedCounterHandle } from '../handles/bounded-counter-handle.ts'
import { RightsBroker } from './rights-broker.ts'
import { CounterHandle, RegisterHandle, SetHandle, guarded, registerStamp, type HandleHost } from '../handles/handles.ts'
import { ListHandle } from '../handles/list-handle.ts'
import { MapHandle, schemaOf, type FieldKind } from '../handles/map-handle.ts'
import { TextHandle } from '../handles/text-handle.ts'
import { MembersHandle } from '../handles/members-handle.ts'
import { buildTransaction, type Transaction } from './transaction.ts'
import { LocalEdits } from '../undo/local-edits.ts'
import { UndoManager, type UndoManagerOptions, type UndoScope } from '../undo/undo-manager.ts'
import type { CausalComparison, ClockProof, ProofKind } from '../upstream/proofs.ts'
import type { ChainPosition } from '../upstream/quorum.ts'
import type { Freshness } from '../upstream/pacing.ts'
import type { ClientStatus, HistoryPageOptions, ObjectOptions, SafeResult, SessionsStatus, SettledUpdate, UpdateResult, WaitOptions } from '../types.ts'
import { DEFAULT_SAFE_TIMEOUT_MS, clockOf } from '../options.ts'
import { bounded, checkTimeout } from '../wait.ts'

export type { SettledUpdate } from '../types.ts'

/** An undecided envelope of this client, as `pendingUpdates()` lists it. */
export interface PendingUpdate {
  /** The envelope id (hex): the `id` that `onSettled` reports when it is decided. */
  readonly id: string
  /** The keys of the objects it updates. */
  readonly keys: string[]
  /** Safe groups it carries (a safe update, or one `safe(tx => …)` transaction, each). */
  readonly safe: number
  /** Regular updates it carries, after compaction (several increments of one counter are one). */
  readonly regular: number
  /** Whether a relay accepted it (else it is still being sent). */
  readonly sent: boolean
}

export type HistoryPage = Array<{ index: number; value: unknown }>

/**
 * Where a space's drafts go and where its news come from. In the tab that
 * leads (or a client without tabs) that is the relays: an outbox that signs,
 * stores and sends, and an intake that checks and applies commits
 * (`RelayUpstream`). In the other tabs it is the leader tab (`TabUpstream`).
 */
export interface Upstream {
  /**
   * Takes a draft batch that left the open drafts. Settles it through the
   * space: `batchSigned` once it is a stored envelope, or `batchFailed`.
   * Resolves when that happened (the next batch waits for it: order matters).
   */
  seal(batch: DraftBatch): Promise<void>
  /** This client's signed updates not decided yet. */
  pendingUpdates(): PendingUpdate[]
  /** Whether a relay accepted every signed update. */
  allAccepted(): boolean
  /** Whether every signed update is decided in the stable order. */
  allDecided(): boolean
  /** The stable index f+1 relays report (see `readStable`). */
  quorumIndex(timeoutMs: number): Promise<number>
  /** One object's stable value at an index of at least `atLeast`, proven against attested state (see `readStable`); undefined if no relay proved one. */
  stableObject(key: string, atLeast: number, timeoutMs: number): Promise<{ index: number; value: unknown } | undefined>
  /** A history page of `key` that f+1 relays signed alike. */
  relayHistory(key: string, before: number, limit: number): Promise<HistoryPage>
  /** How two updates relate causally, with their clock proofs (see `Space.compare`). */
  compare(a: string, b: string): Promise<CausalComparison>
  /** The clock proof of one update, of `kind`, waiting up to `waitMs` for one to exist (see `Space.clockProof`). */
  clockProof(update: string | number, kind: ProofKind, waitMs: number): Promise<ClockProof>
  /** The relay sessions' status, with the space's own problem first. */
  sessionsStatus(closed: boolean, problem: string | undefined): SessionsStatus
  /** The space closed (its drafts are sealed): stop, and write what a reopen needs. */
  close(): Promise<void>
  /** The relays' time as measured against them (register stamps), when this upstream measures it; else the device clock is used. */
  now?(): number
  /** Signs this client's presence body and sends it where the space's other clients hear it (see Presence). */
  publishPresence(body: PresenceBody): void
  /** How late others' updates may reach this client (see `Space.setFreshness`); absent where another tab follows the relays. */
  follow?(freshness: Freshness | undefined): void
}

/** Options of `Space.setFreshness`. */
export interface FreshnessOptions {
  /** How changed objects travel: each the cheaper way (`'adaptive'`, the default), or always as `'ops'` or as `'state'`. */
  readonly mode?: 'ops' | 'state' | 'adaptive'
}

type AnyHandle = CounterHandle | SetHandle | RegisterHandle | BoundedCounterHandle | TextHandle | MapHandle | ListHandle | MembersHandle

/**
 * The params of `boundedCounter`: a lower bound, an upper bound or both,
 * and the initial value. Leaving out both bounds does not type-check and
 * is refused at run time.
 */
export type BoundedCounterOptions =
  | {
      /** The lower bound the stable value never goes below. */
      readonly min: number
      /** The upper bound the stable value never goes above (optional). */
      readonly max?: number
      /** The starting value; its distances from the bounds are the pools of rights. */
      readonly initial: number
    }
  | {
      /** The upper bound the stable value never goes above. */
      readonly max: number
      /** Absent: no lower bound. */
      readonly min?: undefined
      /** The starting value; its distance from the bound is the pool of rights. */
      readonly initial: number
    }

/** Refuses a handle's options that are not an object or name an option the handle does not have (it would be silently ignored). */
function checkObjectOptions(key: string, kind: string, given: unknown, own: readonly string[], usage: string): void {
  if (typeof given !== 'object' || given === null || Array.isArray(given)) throw new SteadError('malformed', `${key}: ${kind} options must be an object, got ${given === null ? 'null' : Array.isArray(given) ? 'an array' : typeof given}; call ${usage}`)
  for (const name of Object.keys(given)) {
    if (name !== 'freshness' && !own.includes(name)) {
      const hint = kind === 'counter' && name === 'initial' ? ' (a counter starts at 0: increment it, or use boundedCounter(key, { min, initial }))' : ''
      throw new SteadError('malformed', `${key}: ${kind} has no option ${name}${hint}; it takes ${[...own, 'freshness'].join(', ')}: ${usage}`)
    }
  }
}


/**
 * One space of a client: its objects (handles), safe transactions, waits
 * and status. It holds the local state every tab keeps (the replica, the
 * drafts not signed yet, prospective views); its `Upstream` does the rest.
 * Spaces of one client share its identity, storage and relay sessions; see
 * README.md for the whole API.
 */
export class Space {
  /** The space's name, as given to `client.space(name)`. */
  readonly space: string
  /** The client's author id (see `SteadClient.authorId`). */
  readonly authorId: string
  /** @internal The replica this tab reads; replaced as a whole when a tab takes over the lead. */
  replica: ReliableReplica
  /** @internal Where the replica's commit chain stands (moved by `advance`). */
  position: ChainPosition
  private upstream!: Upstream
  /** The space's settings: from the client's options, and how late others' updates may reach it (setFreshness). */
  private readonly options: { readonly historyLimit?: number; readonly safeTimeoutMs?: number; freshness?: Freshness }
  private readonly clock: HostClock
  /** Told when close() begins, with its promise (the client forgets this space and waits for it before reopening). */
  private readonly onClose: (done: Promise<void>) => void

  /** The drafts not signed yet, and when they are sealed into envelopes. */
  private readonly batcher: Batcher
  /** What handles show as `value`, kept until the replica or the drafts change underneath. */
  private readonly views: ProspectiveViews
  /** `readStable` with `quorum`, which never goes back to an older index. */
  private readonly quorumReads: QuorumReads
  /**
   * Who else is in the space now and what they show (a name, a colour, a
   * cursor), and this client's own presence: ephemeral, never ordered or
   * stored (see {@link Presence}).
   */
  readonly presence: Presence

  private readonly handles = new Map<string, AnyHandle>()
  /** Moves bounded counters' rights in the background: answers asks, claims and asks when short. */
  private readonly rights: RightsBroker
  /** Subscribers, the app's callbacks, and the waits that look again at each progress. */
  private readonly events = new SpaceEvents(
    (which, err) => this.listenerFailed(which, err),
    (key, err) => this.emitError(new SteadError('malformed', `a subscriber of ${key} threw: ${(err as Error).message}`)),
  )
  /** What `status` reports as the problem: the upstream's (setProblem), else the storage's while it fails (cleared by the next write that goes through). */
  private readonly problems: { upstream?: string | undefined; storage?: string | undefined } = {}
  private lifecycle: Lifecycle = 'open'
  private get closed(): boolean {
    return this.lifecycle === 'closed'
  }
  private closeRun: Promise<void> | undefined
  private readonly host: HandleHost
  /** This client's edits as they are made, signed and decided: what undo managers follow. */
  private readonly localEdits = new LocalEdits((err) => this.emitError(new SteadError('malformed', `an undo manager failed: ${(err as Error)?.message ?? String(err)}`)))

  /** @internal Use `client.space(name)`. */
  constructor(init: {
    space: string
    authorId: string
    /** Whom policies see (SteadClient.userId); default the author id. */
    userId?: string
    options: { readonly maxBatchOps?: number; readonly batchIntervalMs?: number; readonly historyLimit?: number; readonly safeTimeoutMs?: number; readonly presenceTtlMs?: number; readonly now?: () => number; readonly clock?: HostClock }
    onClose: (done: Promise<void>) => void
    replica: ReliableReplica
    position: ChainPosition
    /** The client's crypto (kept by the handles' host: invitations). */
    crypto: Crypto
  }) {
    this.space = init.space
    this.authorId = init.authorId
    this.options = { ...init.options }
    this.clock = clockOf(init.options)
    this.onClose = init.onClose
    this.replica = init.replica
    this.position = init.position
    this.host = this.makeHost(init.crypto, init.userId ?? init.authorId)
    this.batcher = new Batcher({
      batchIntervalMs: init.options.batchIntervalMs ?? 10,
      maxBatchOps: init.options.maxBatchOps ?? 500,
      clock: this.clock,
      port: {
        show: (items, several) => this.views.show(items, several),
        edited: (keys) => {
          this.notify(keys, false, true)
          this.emitStatus()
        },
        // Same items, another place in the order of prospective views: computed again when read.
        reordered: (key) => this.views.drop(key),
        seal: (batch) => this.upstream.seal(batch),
        lifecycle: () => this.lifecycle,
      },
    })
    this.views = new ProspectiveViews({
      replica: () => this.replica,
      drafts: () => this.batcher.shown(),
      authorId: this.authorId,
      declarationOf: (key) => this.declarationOf(key),
      names: this.draftIds,
    })
    this.presence = new Presence({
      space: this.space,
      clock: this.clock,
      ...(init.options.presenceTtlMs !== undefined ? { ttlMs: init.options.presenceTtlMs } : {}),
      out: (body) => this.upstream.publishPresence(body),
      listenerFailed: (err) => this.listenerFailed('presence', err),
    })
    this.rights = new RightsBroker({
      authorId: this.authorId,
      clock: this.clock,
      ownView: (key, decl) => this.ownRightsView(key, decl),
      prospective: (key) => {
        const crdt = this.replica.prospective(key)
        return crdt?.type === 'bounded-counter' ? (crdt as BoundedCounter) : undefined
      },
      update: (key, decl, op, safe) => this.host.update(key, decl, op, safe),
      subscribe: (key, listener) => this.events.subscribe(key, () => listener()),
      isOpen: () => this.lifecycle === 'open',
    })
    this.quorumReads = new QuorumReads({
      clock: this.clock,
      upstream: () => this.upstream,
      stableIndex: () => this.position.stableIndex,
      until: (done, options, what) => this.until(done, options, what),
      whileOpen: (p) => this.whileOpen(p),
    })
  }

  /** @internal Drafts not yet signed, oldest first; the last one is open. Read by upstreams (a new lead reseals them). */
  get drafts(): readonly DraftBatch[] {
    return this.batcher.drafts
  }

  /** @internal The ids of unsigned drafts (read by the outbox when it signs them). */
  get draftIds(): DraftIds {
    return this.batcher.ids
  }

  /** @internal Connects the space to where its drafts go; called once by the client, and again when this tab takes over the lead. */
  attach(upstream: Upstream): void {
    this.upstream = upstream
    upstream.follow?.(this.options.freshness)
  }

  /**
   * How late other clients' updates may reach this one, at most `ms` after
   * they commit (BENDY's live stream); undefined (the default) for every
   * update as it comes, before it is even ordered.
   *
   * With a bound, the relay that serves this client sends instead, every
   * `ms` less the time one takes to arrive, one delta of what changed:
   * each object as its operations or as its state, whichever is smaller by
   * BENDY's rule on the most updated objects, with f+1 relays' signatures on
   * the commit it ends at (nothing is believed otherwise). A reader of a
   * busy space downloads far less (see BENCHMARKS.md); what it sees is
   * always a stable state, never a prospective one. While this client has
   * updates of its own undecided, or other tabs follow it, it follows
   * every update as before, and paces again once they are decided.
   *
   * @param ms 50 to 3,600,000, or undefined to follow every update.
   * @param options `mode`: how changed objects travel, `'adaptive'` (the default), or always as `'ops'` or as `'state'` (for comparisons).
   * @throws SteadError `malformed` for a bound or mode out of range; {@link ClosedError} after `close()`.
   * @example
   * ```ts
   * const board = await client.space('scoreboard')
   * board.setFreshness(1000) // a dashboard: at most a second behind, a fraction of the bytes
   * ```
   */
  setFreshness(ms: number | undefined, options: FreshnessOptions = {}): void {
    this.assertOpen()
    if (ms !== undefined && (!Number.isSafeInteger(ms) || ms < MIN_FRESHNESS_MS || ms > MAX_FRESHNESS_MS)) {
      throw new SteadError('malformed', `freshness must be a whole number of ms from ${MIN_FRESHNESS_MS} to ${MAX_FRESHNESS_MS}, or undefined; got ${String(ms)}`)
    }
    const mode = options.mode ?? 'adaptive'
    if (mode !== 'ops' && mode !== 'state' && mode !== 'adaptive') throw new SteadError('malformed', `freshness mode must be 'ops', 'state' or 'adaptive', got ${String(mode)}`)
    this.options.freshness = ms === undefined ? undefined : { ms, mode }
    this.upstream.follow?.(this.options.freshness)
  }

  // ---------------------------------------------------------------- handles

  /**
   * A PN-Counter (a number that clients add to and subtract from
   * concurrently; every update counts, none is lost). `min`/`max` are
   * invariants: the stable value never breaks them (an update that would is
   * rejected with `invariant`), and the prospective value never shows a
   * value they forbid (such an update waits in `pending`). The same handle
   * on every call with the same key.
   *
   * The key's type and invariants are part of the space's data: every
   * client must open a key with the same ones, and the first declaration
   * committed fixes them.
   *
   * @param key 1 to 256 characters, unique within the space.
   * @param invariants `min` and/or `max`, safe integers with `min` ≤ 0 ≤ `max` (a counter starts at 0); none by default. `freshness`: see {@link ObjectOptions}.
   * @throws SteadError `type-mismatch` if the key is open or committed as another type or with other invariants; `malformed` for a bad key or bounds; {@link ClosedError} after `close()`.
   * @example
   * ```ts
   * const account = bank.counter('acct:alice', { min: 0 })
   * await account.increment(100)                     // { status: 'stored' }: shows in account.value at once
   * const r = await account.decrement(150, { safe: true })
   * if (r.status === 'rejected') console.log(r.reason)  // 'invariant': the balance would go below 0
   * account.subscribe(() => render(account.value, account.stable))
   * ```
   */
  counter(key: string, invariants: { min?: number; max?: number } & ObjectOptions = {}): CounterHandle {
    checkObjectOptions(key, 'counter', invariants, ['min', 'max'], 'counter(key, { min, max, freshness })')
    const bounds: { min?: number; max?: number } = {}
    if (invariants.min !== undefined) bounds.min = invariants.min
    if (invariants.max !== undefined) bounds.max = invariants.max
    return this.open(key, { type: 'counter', bounds }, (d) => new CounterHandle(this.host, key, d), invariants) as CounterHandle
  }

  /**
   * An add-wins OR-Set of strings or numbers: concurrent adds and deletes of
   * one element resolve in favour of the add. `maxSize` is an invariant like
   * a counter's bounds: adds past it are held back in `pending` and rejected
   * with `invariant` if the stable order still has no room. The same handle
   * on every call with the same key.
   *
   * @param key 1 to 256 characters, unique within the space.
   * @param invariants `maxSize`; none by default. Every client must open the set with the same one. `freshness`: see {@link ObjectOptions}.
   * @throws SteadError `type-mismatch` if the key is open or committed as another type or with another `maxSize`; `malformed` for a bad key; {@link ClosedError} after `close()`.
   */
  set<T extends SetElement = SetElement>(key: string, invariants: { maxSize?: number } & ObjectOptions = {}): SetHandle<T> {
    checkObjectOptions(key, 'set', invariants, ['maxSize'], 'set(key, { maxSize, freshness })')
    const bounds = invariants.maxSize === undefined ? {} : { maxSize: invariants.maxSize }
    return this.open(key, { type: 'set', bounds }, (d) => new SetHandle<T>(this.host, key, d), invariants) as unknown as SetHandle<T>
  }

  /**
   * A last-writer-wins register: one value that any client may overwrite
   * (null, booleans, finite numbers, strings, bytes, and arrays and plain
   * objects of those, nested at most 16 deep, at most 512 KiB encoded).
   * Concurrent writes resolve to the one with the latest timestamp (the
   * writer's clock, kept later than any write it has seen), ties broken the
   * same way on every replica. The same handle on every call with the same
   * key.
   *
   * @param key 1 to 256 characters, unique within the space.
   * @param options `freshness`: see {@link ObjectOptions}.
   * @throws SteadError `type-mismatch` if the key is open or committed as another type; `malformed` for a bad key; {@link ClosedError} after `close()`.
   */
  register<T extends RegisterValue = RegisterValue>(key: string, options: ObjectOptions = {}): RegisterHandle<T> {
    checkObjectOptions(key, 'register', options, [], 'register(key, { freshness })')
    return this.open(key, { type: 'register' }, (d) => new RegisterHandle<T>(this.host, key, d), options) as unknown as RegisterHandle<T>
  }

  /**
   * An escrow counter (Bounded Counter) with a lower bound, an upper bound
   * or both, and an initial value whose rights start in a shared pool. Use
   * it where a counter's bounds must hold without a round trip for most
   * updates: seats, stock, a budget. Each client spends only rights it
   * holds (rights to decrement are the distance to `min`, rights to
   * increment the distance to `max`), so spending within them is a regular
   * update that can never break a bound; spending more claims rights from
   * the pool with a safe update first (see {@link BoundedCounterHandle}).
   * The same handle on every call with the same key.
   *
   * @param key 1 to 256 characters, unique within the space.
   * @param params `{ min, initial }`, `{ max, initial }` or `{ min, max, initial }`: the bounds and the starting value, whose distances from the bounds are the pools of rights. Every client must open it with the same ones. (`counter(key, { min, max })` keeps bounds too, by holding back updates near a bound and deciding them in the stable order instead of spending rights.) `freshness`: see {@link ObjectOptions}.
   * @throws SteadError `type-mismatch` if the key is open or committed as another type or with other params; `malformed` for a bad key or params (no bound, no `initial`, `initial` outside the bounds, numbers that are not safe integers, an unknown option); {@link ClosedError} after `close()`.
   */
  boundedCounter(key: string, params: BoundedCounterOptions & ObjectOptions): BoundedCounterHandle {
    checkObjectOptions(key, 'boundedCounter', params, ['min', 'max', 'initial'], 'boundedCounter(key, { min, initial }), boundedCounter(key, { max, initial }) or boundedCounter(key, { min, max, initial })')
    const given = params as { min?: number; max?: number; initial?: number }
    if (given.min === undefined && given.max === undefined) throw new SteadError('malformed', `${key}: boundedCounter needs a bound: boundedCounter(key, { min, initial }), { max, initial } or { min, max, initial }`)
    if (given.initial === undefined) throw new SteadError('malformed', `${key}: boundedCounter needs initial, the starting value (its distances from the bounds are the pools of rights)`)
    const p = { ...(given.min !== undefined ? { min: given.min } : {}), ...(given.max !== undefined ? { max: given.max } : {}), initial: given.initial } as BoundedCounterParams
    const problem = validateBoundedCounterParams(p)
    if (problem) throw new SteadError('malformed', `${key}: ${problem}`)
    const handle = this.open(key, { type: 'bounded-counter', params: p }, (d) => new BoundedCounterHandle(this.host, key, d), params) as BoundedCounterHandle
    this.rights.track(key, handle.declaration as BoundedCounterDeclaration)
    return handle
  }

  /**
   * Collaborative text (as Y.Text): insert and delete by code point, two
   * people typing at one place never interleave, and a delete removes
   * exactly what its author saw. The same handle on every call with the
   * same key.
   *
   * @param key 1 to 256 characters, unique within the space.
   * @param options `maxLength`: the stable text never holds more code points (an insert past it is rejected with `invariant` and undone). `marks`: how app-defined mark types behave, `{ comment: { expand: 'none', multiple: true } }` (see `TextHandle.declareMarks`; local to this client, each op carries what it needs). `freshness`: see {@link ObjectOptions}.
   * @throws SteadError `type-mismatch` if the key is open or committed as another type or with another `maxLength`, or a mark type is declared otherwise on the handle already; `malformed` for a bad key or options; {@link ClosedError} after `close()`.
   */
  text(key: string, options: { maxLength?: number; marks?: Readonly<Record<string, MarkSpec>> } & ObjectOptions = {}): TextHandle {
    checkObjectOptions(key, 'text', options, ['maxLength', 'marks'], 'text(key, { maxLength, marks })')
    const bounds = options.maxLength === undefined ? {} : { maxLength: options.maxLength }
    const handle = this.open(key, { type: 'text', bounds }, (d) => new TextHandle(this.host, key, d), options) as TextHandle
    if (options.marks !== undefined) handle.declareMarks(options.marks)
    return handle
  }

  /**
   * A map of fields (as Y.Map): each field holds a plain value or a nested
   * object made in place (`map.map(field)`, `map.text(field)`,
   * `map.counter(field)`). Concurrent writes to a field resolve to the one
   * made after seeing the most (never a device clock). The same handle on
   * every call with the same key.
   *
   * @param key 1 to 256 characters, unique within the space.
   * @param options `maxKeys`: the stable map never holds more fields (a write past it is rejected with `invariant`). `schema`: what some fields hold (`{ title: { text: { maxLength: 80 } }, done: 'value' }`): a write of another kind is rejected with `type-mismatch` (the handle refuses it at once). `freshness`: see {@link ObjectOptions}.
   * @throws SteadError `type-mismatch` if the key is open or committed as another type or with another `maxKeys`; `malformed` for a bad key or options; {@link ClosedError} after `close()`.
   */
  map(key: string, options: { maxKeys?: number; schema?: Readonly<Record<string, FieldKind>> } & ObjectOptions = {}): MapHandle {
    checkObjectOptions(key, 'map', options, ['maxKeys', 'schema'], 'map(key, { maxKeys, schema })')
    const bounds = { ...(options.maxKeys === undefined ? {} : { maxKeys: options.maxKeys }), ...(options.schema ? { schema: schemaOf(options.schema) } : {}) }
    return this.open(key, { type: 'map', bounds }, (d) => new MapHandle(this.host, key, d, this), options) as MapHandle
  }

  /**
   * An ordered list (as Y.Array) whose elements also move: plain values, or
   * nested maps and texts (`insertMap`, `insertText`). Concurrent inserts at
   * one place never interleave; concurrent moves of one element never
   * duplicate or lose it. The same handle on every call with the same key.
   *
   * @param key 1 to 256 characters, unique within the space.
   * @param options `maxLength`: the stable list never holds more elements (an insert past it is rejected with `invariant`). `freshness`: see {@link ObjectOptions}.
   * @throws SteadError `type-mismatch` if the key is open or committed as another type or with another `maxLength`; `malformed` for a bad key or options; {@link ClosedError} after `close()`.
   */
  list<T extends RegisterValue = RegisterValue>(key: string, options: { maxLength?: number } & ObjectOptions = {}): ListHandle<T> {
    checkObjectOptions(key, 'list', options, ['maxLength'], 'list(key, { maxLength })')
    const bounds = options.maxLength === undefined ? {} : { maxLength: options.maxLength }
    return this.open(key, { type: 'list', bounds }, (d) => new ListHandle<T>(this.host, key, d, this), options) as unknown as ListHandle<T>
  }

  /**
   * The space's members and what they may do: the handle over its policy
   * (the system object at `$policy`), with the prospective and stable
   * policy, `roleOf(user)`, `myRole`, and `grant`, `revoke` and
   * `setEveryone`, each a safe update. The policy is undefined until one
   * is created (`client.createSpace`); until then the relays' cluster file
   * alone says who may write. See "Members and permissions" in the README.
   *
   * @throws {@link ClosedError} after `close()`.
   * @example
   * ```ts
   * const r = await space.members.grant(bobUserId, 'writer')
   * if (r.status === 'rejected') console.log(r.reason)  // 'unauthorized': this client is not an admin
   * console.log(space.members.myRole, space.members.stable?.members)
   * ```
   */
  get members(): MembersHandle {
    return this.open(POLICY_KEY, { type: 'policy' }, (d) => new MembersHandle(this.host, POLICY_KEY, d), {}) as MembersHandle
  }

  private open(key: string, decl: Declaration, make: (d: Declaration) => AnyHandle, { freshness }: ObjectOptions): AnyHandle {
    if (freshness !== undefined && (typeof freshness !== 'number' || !Number.isFinite(freshness) || freshness < 0 || freshness > MAX_FRESHNESS_MS)) {
      throw new SteadError('malformed', `${key}: freshness is a number of milliseconds from 0 to ${MAX_FRESHNESS_MS}, got ${String(freshness)}`)
    }
    const handle = this.handleOf(key, decl, make)
    if (freshness !== undefined) this.batcher.setFreshness(key, freshness)
    return handle
  }

  private handleOf(key: string, decl: Declaration, make: (d: Declaration) => AnyHandle): AnyHandle {
    // An open handle stays readable after close (a component may render once more); updates through it fail.
    const known = this.handles.get(key)
    if (known && sameDeclaration(known.declaration, decl)) return known
    this.assertOpen()
    const problem = keyProblem(key)
    if (problem) throw new SteadError('malformed', problem)
    try {
      createCrdt(decl)
    } catch (err) {
      throw new SteadError('malformed', `${key}: ${(err as Error).message}`)
    }
    // A system object's key holds nothing else (`$policy` is the space's policy: see `members`).
    const misplaced = placementProblem(key, decl, undefined as unknown as AnyOp, true)
    if (misplaced) throw new SteadError('type-mismatch', misplaced)
    const existing = this.handles.get(key)
    if (existing) {
      if (!sameDeclaration(existing.declaration, decl)) {
        throw new SteadError('type-mismatch', `${key} is already open as ${describeDeclaration(existing.declaration)}, not ${describeDeclaration(decl)}`)
      }
      return existing
    }
    // The first committed declaration fixes the object for everyone.
    const fixed = this.replica.declaration(key)
    if (fixed && !sameDeclaration(fixed, decl)) {
      throw new SteadError('type-mismatch', `${key} is ${describeDeclaration(fixed)} in space ${this.space}, not ${describeDeclaration(decl)}`)
    }
    const handle = make(decl)
    this.handles.set(key, handle)
    return handle
  }

  /**
   * Safe updates that commit all together or not at all, in one atomic
   * group: a transfer never shows or commits its credit without its debit.
   * `build` runs at once and only records updates (through the
   * {@link Transaction}); they show prospectively together, if they all fit
   * the invariants, and the promise resolves once the stable order decided
   * the group: `committed`, or `rejected` with the reason (nothing of it
   * applied). Objects not opened yet are opened with their committed
   * declaration (or no invariants, or those given to `tx.counter(key, …)`).
   *
   * @throws SteadError `malformed` (the promise rejects) if `build` records nothing or an amount is not a positive safe integer; `type-mismatch` if a key is another type or has other invariants; `timeout`/`aborted` as `options` say; {@link ClosedError} after `close()`.
   * @example
   * ```ts
   * const r = await bank.safe((tx) => {
   *   tx.counter('acct:alice').decrement(30)
   *   tx.counter('acct:bob').increment(30)
   * })
   * if (r.status === 'rejected') console.log(`transfer refused: ${r.reason}`)  // e.g. 'invariant': alice has less than 30
   * ```
   */
  safe(build: (tx: Transaction) => void, options?: WaitOptions): Promise<SafeResult> {
    try {
      this.assertOpen()
      const items = buildTransaction(
        {
          known: (key) => this.handles.get(key)?.declaration,
          committed: (key) => this.replica.declaration(key),
          spendableRights: (key, decl, kind) => this.spendableRights(key, decl, kind),
          // As a handle's write: the relays' time, and later than what this replica saw of the register.
          registerStamp: (key) => registerStamp(this.upstream.now?.() ?? this.clock.now(), this.replica.prospective(key) as LWWRegister | undefined),
        },
        build,
      )
      return this.waitSafe(this.localEdits.queue(items, true, () => this.queueSafe(items)), options, 'a safe transaction')
    } catch (err) {
      return Promise.reject(err)
    }
  }

  /**
   * Runs `edits` (synchronous calls on this space's handles) as one
   * transaction, as Y.Doc's `transact`: every update they make goes into one
   * envelope (so other clients and the stable order take them together),
   * and subscribers and `observe` listeners are told once, when `edits`
   * returns, with every change in one event. Edits are applied at once as
   * usual, and each edit's own promise resolves as usual. Nested calls join
   * the outer transaction. Atomicity in the stable order is what
   * `safe(tx => …)` gives: regular edits of a transaction are audited one
   * by one.
   *
   * If `edits` throws, the edits it made before stay (as in Yjs) and are sent;
   * the returned promise rejects with what it threw.
   *
   * @returns resolves `{ status: 'stored' }` once the envelope is durable on
   * this device (at once if `edits` made no update).
   * @throws SteadError (the promise rejects) `too-large` if the edits exceed
   * one envelope (10,000 operations or 1 MiB once runs of typing are
   * joined: each edit's promise rejects too, and the edits are undone);
   * {@link ClosedError} after `close()`.
   * @example
   * ```ts
   * await space.transact(() => {
   *   title.delete(0, title.length)
   *   title.insert(0, 'Q3 plan')
   *   card.set('updated', true)
   * })
   * ```
   */
  transact(edits: () => void): Promise<UpdateResult> {
    if (!this.batcher.transacting) {
      try {
        this.assertOpen()
      } catch (err) {
        return Promise.reject(err)
      }
    }
    return this.batcher.transact(edits)
  }

  /**
   * An undo manager over `scope` (a handle or key, or several; objects nested in a
   * tracked map or list are tracked with it), as Yjs's UndoManager: it
   * takes back this client's own edits only, never another user's; edits
   * made within `captureTimeout` (default 500 ms, on the client's clock)
   * undo as one; `undo()` and `redo()` send ordinary updates computed
   * against the prospective values as they are then, so they show at once
   * and the stable order audits them like any other; an edit the stable
   * order rejected is passed over. Give each editor its own manager.
   *
   * @throws SteadError `malformed` for a scope entry that is not a handle or a key, or a bad option; {@link ClosedError} after `close()`.
   * @example
   * ```ts
   * const body = notes.text('body')
   * const undo = notes.undoManager([body, notes.map('meta')])
   * undo.on('stack-item-added', ({ stackItem }) => stackItem.meta.set('cursor', body.anchor(editor.cursor)))
   * undo.on('stack-item-popped', ({ stackItem }) => (editor.cursor = body.position(stackItem.meta.get('cursor') as string)))
   * await body.insert(0, 'Hello')
   * undo.undo()   // true: body.value is '' at once
   * undo.redo()   // true: 'Hello' again
   * ```
   */
  undoManager(scope: UndoScope | Iterable<UndoScope>, options: UndoManagerOptions = {}): UndoManager {
    this.assertOpen()
    return new UndoManager(
      {
        host: this.host,
        edits: this.localEdits,
        now: () => this.clock.now(),
        transact: (edits) => this.transact(edits),
        isOpen: () => this.lifecycle === 'open',
        tagOf: (item) => this.draftIds.tagOf(item),
        isPending: (idHex) => this.replica.isPending(idHex),
        hasCommitted: (idHex) => this.replica.hasCommitted(idHex),
        listenerFailed: (err) => this.emitError(new SteadError('malformed', `an undo manager listener threw: ${(err as Error)?.message ?? String(err)}`)),
      },
      scope,
      options,
    )
  }

  // ---------------------------------------------------------------- reads and status

  /**
   * Whether this space can reach the relays, and how far it is: the shared
   * sessions' status (`online`: f+1 trusted relays connected; `problem`:
   * why not, in words an app can show), with this space's `pending` updates
   * and `stableIndex`.
   */
  get status(): ClientStatus {
    return { ...this.upstream.sessionsStatus(this.closed, this.problems.upstream ?? this.problems.storage), pending: this.batcher.queued + this.upstream.pendingUpdates().length, stableIndex: this.position.stableIndex }
  }

  /** Calls `listener` whenever {@link Space.status} may have changed. Returns the unsubscribe function. */
  onStatus(listener: (status: ClientStatus) => void): () => void {
    return this.events.status.add(listener)
  }

  /**
   * This client's updates not decided yet, one entry per signed envelope
   * (queued operations not signed yet are not listed). After a restart
   * this is how an app finds the safe updates it made before; `onSettled`
   * tells how each one ends.
   */
  pendingUpdates(): PendingUpdate[] {
    return this.upstream.pendingUpdates()
  }

  /**
   * How two updates (envelope ids, as `pendingUpdates()`, `onSettled`, a
   * regular update's `stored` result and a handle's `undecided()` name
   * them) relate causally, by their verifiable clocks (Chrono): `before`
   * when the first happened before the second (the second's author had
   * seen it), `after`, `concurrent` or `equal`. Comes with each update's
   * clock proof, which anyone holding the cluster's relay keys can check
   * with `verifyClockCertificate` from `@stead/core`, trusting no single
   * relay. Works for any update the relays can prove, committed or not,
   * whoever made it and whenever: before its commit the proof is the
   * relays' clock votes; when the answer hangs on where such an update
   * will commit, this waits for that commit (up to 30 s).
   *
   * @throws SteadError `unsupported` for an update no relay can prove: not
   * voted on yet, refused by the relays' validators, committed with a
   * clock the audit could not verify, or older than the relays keep.
   */
  async compare(a: string, b: string): Promise<CausalComparison> {
    this.assertOpen()
    return this.upstream.compare(a, b)
  }

  /**
   * The clock proof of one update, by its envelope id (hex) or by the
   * stable index it took (a safe update's result or an entry of an
   * object's `history()` says it; by index, only commits this client
   * applied are found): the signed envelope and a certificate, either
   * f+1 relays' signatures over the attestation that committed it with a
   * verified clock, or, before its commit (or with `{ kind: 'validators' }`),
   * ceil((N+f+1)/2) relays' votes for its clock, which also state the
   * clock's weight (`clockRank` from `@stead/core` orders by it). Hand it
   * to anyone who holds the cluster's relay keys: they check it with
   * `verifyClockCertificate`, trusting neither this client nor any single
   * relay, and read what the update did from the envelope.
   *
   * `timeoutMs` (default 0: answer at once; Infinity: for ever) waits that
   * long for a certificate that does not exist yet (an update the relays
   * are still voting on), asking them again now and then.
   *
   * @throws SteadError `unsupported` as for `compare`, once `timeoutMs`
   * passed (for 'validators': relays keep votes about ten minutes);
   * `malformed` for a bad `timeoutMs`.
   */
  async clockProof(update: string | number, options: { readonly kind?: ProofKind; readonly timeoutMs?: number } = {}): Promise<ClockProof> {
    this.assertOpen()
    checkTimeout(options.timeoutMs)
    return this.upstream.clockProof(update, options.kind ?? 'any', options.timeoutMs ?? 0)
  }

  /** Called when one of this client's envelopes is decided: its safe groups' results, in order, and the stable index if it committed. */
  onSettled(listener: (update: SettledUpdate) => void): () => void {
    return this.events.settled.add(listener)
  }

  /**
   * Calls `listener` whenever objects of the space may have changed, with
   * their keys (`local`: by this client's own edit): other clients'
   * updates as they arrive, commits, reversals, this client's edits. One
   * subscription for a whole space, to keep an index or a list of
   * documents current without a handle per object (see {@link keys}).
   */
  onChange(listener: (change: { readonly keys: ReadonlySet<string>; readonly local: boolean }) => void): () => void {
    return this.events.anyChange.add(listener)
  }

  /**
   * The keys of the space's objects this client holds (stable, received or
   * its own not yet sent), sorted, after `after`, starting with `prefix`,
   * at most `limit` (default 1,000). System objects (keys starting with
   * `$`, as the policy's `$policy`) are left out, and so are keys a
   * deletion emptied.
   */
  keys(options: { readonly prefix?: string; readonly after?: string; readonly limit?: number } = {}): string[] {
    const { prefix = '', after = '', limit = 1000 } = options
    if (!Number.isSafeInteger(limit) || limit < 0) throw new SteadError('malformed', `limit must be a whole number, got ${limit}`)
    const all = new Set<string>(this.replica.prospectiveKeys())
    // A key this client drafted: held if its drafts leave an object there (not if the last of them deletes it).
    for (const batch of this.drafts) {
      for (const key of batch.keys) {
        if (this.views.view(key) !== undefined) all.add(key)
        else all.delete(key)
      }
    }
    return [...all]
      .filter((k) => !k.startsWith('$') && k.startsWith(prefix) && k > after)
      .sort()
      .slice(0, limit)
  }

  /**
   * Deletes the object at `key`, whatever its type: a safe update, in an
   * envelope of its own. Where the stable order puts it, the object's
   * state goes on every replica (its handles show an empty object, `keys`
   * leaves it out, its history records `null` there) and an update
   * ordered after it starts the key afresh, under any declaration; the
   * updates ordered before it are gone with it. Anybody who may write the
   * space may delete. Shown at once (the key empty), resolved once
   * decided: `committed`, or `rejected` (`unauthorized`). Undo managers
   * never take a deletion back.
   *
   * @throws SteadError `malformed` (the promise rejects) for a key that is not one (1 to 256 characters) or a system key (`$…`); `timeout` or `aborted` as `options` say; {@link ClosedError} after close().
   */
  delete(key: string, options?: WaitOptions): Promise<SafeResult> {
    return guarded(() => {
      const problem = keyProblem(key)
      if (problem) throw new SteadError('malformed', `delete: ${problem}`)
      if (key.startsWith('$')) throw new SteadError('malformed', `delete: ${key} is a system object of the space; it cannot be deleted`)
      this.assertOpen()
      const item: DraftItem = { key, decl: DELETION, intent: ['x'] }
      return this.waitSafe(
        this.localEdits.queue([item], true, () => this.batcher.addSafeAlone([item])),
        options,
        `the deletion of ${key}`,
      )
    })
  }

  /**
   * Problems that have no promise to report them: regular updates the
   * relays refused or the stable order rejected ({@link RejectedError}), an
   * untrusted relay ({@link TrustError}), storage failures (`StorageError`),
   * a listener that threw.
   */
  onError(listener: (error: SteadError) => void): () => void {
    return this.events.errors.add(listener)
  }

  /**
   * The stable value of `key` (what `handle.stable` shows), read without
   * opening a handle. With `quorum: true` the read is linearizable: it
   * asks every relay for its latest attested head (signed over a fresh
   * nonce, proven by f+1 relays' signatures), takes the highest of 2f+1,
   * and waits until this replica reaches it. A replica that does not get
   * there within half a second (far behind, or back from offline) takes
   * the object's state at that index or later from one relay instead,
   * with a Merkle proof against a state hash f+1 relays attested; the
   * value may then be ahead of `handle.stable` until the replica catches
   * up, and later quorum reads here wait for at least that index. The
   * value includes every safe update whose promise resolved, on
   * any client, before the call (those resolve once 2f+1 relays attested
   * them). Use it before acting outside Stead on a value that must be
   * current (the local stable value may lag while offline).
   *
   * @returns The value as the object's type holds it: a number for counters, an array for sets, the value (or undefined) for registers, a string for texts, and for lists and maps their entries (`{ id, value }` or a nested object's `{ id, object, name }`; per field `{ value }` or `{ object, gen }`): a handle's `stable` resolves nested objects into plain data.
   * @throws SteadError `unsupported` if no cluster is trusted yet or fewer than 2f+1 relays answer with a proven head, `timeout` (default 10 s with `quorum`) or `aborted`; {@link ClosedError} after `close()`.
   */
  async readStable(key: string, options: { quorum?: boolean } & WaitOptions = {}): Promise<unknown> {
    this.assertOpen()
    if (options.quorum) {
      const proven = await this.quorumReads.read(key, options)
      if (proven) return proven.value
    }
    return this.replica.stableValue(key)
  }

  /**
   * Signs everything queued and waits until every local update was accepted
   * by a relay (or already decided). Default timeout 60 s.
   *
   * @throws SteadError `timeout` or `aborted` (the updates keep their place); {@link ClosedError} if the space closes first.
   */
  async flush(options: WaitOptions = {}): Promise<void> {
    this.assertOpen()
    await this.batcher.sealAll()
    await this.until(() => this.upstream.allAccepted(), { ...options, timeoutMs: options.timeoutMs ?? 60_000 }, 'relays to accept every local update')
  }

  /**
   * Waits until every local update is decided in the stable order
   * (committed or rejected). Default timeout 60 s.
   *
   * @throws SteadError `timeout` or `aborted` (the updates keep their place); {@link ClosedError} if the space closes first.
   */
  async settled(options: WaitOptions = {}): Promise<void> {
    this.assertOpen()
    await this.batcher.sealAll()
    await this.until(() => this.upstream.allDecided(), { ...options, timeoutMs: options.timeoutMs ?? 60_000 }, 'every local update to be decided')
  }

  /**
   * Seals what is queued (so it is stored), leaves the relay sessions and
   * checkpoints the space; the client's other spaces go on. Later calls on
   * this space fail with ClosedError; `client.space(name)` opens it again.
   */
  close(): Promise<void> {
    if (!this.closeRun) {
      this.closeRun = this.shutDown()
      this.onClose(this.closeRun)
    }
    return this.closeRun
  }

  private async shutDown(): Promise<void> {
    this.lifecycle = 'closing'
    this.presence.close()
    this.rights.close()
    await this.batcher.close()
    this.lifecycle = 'closed'
    await this.upstream.close()
    this.events.progress()
    // Safe updates still undecided stay stored and are sent again by the next client on this
    // storage (pendingUpdates / onSettled); this one's promises end here.
    for (const d of this.drafts) for (const g of d.safe) g.waiter.reject(new ClosedError(`space ${this.space}`))
    this.emitStatus()
  }

  // ---------------------------------------------------------------- updates

  private makeHost(crypto: Crypto, userId: string): HandleHost {
    return {
      prospective: (key) => this.ofHandleType(key, this.views.view(key)),
      heldBack: (key) => this.views.heldBack(key),
      stable: (key) => this.ofHandleType(key, this.replica.stable(key)),
      history: (key): readonly HistoryEntry[] => this.replica.history(key),
      undecided: (key) => this.replica.pendingTouching(key).map((env) => ({ id: env.idHex, author: env.authorId, seq: env.seq })),
      historyPage: (key, options) => this.historyPage(key, options),
      update: (key, decl, intent, safe) => {
        const item: DraftItem = { key, decl, intent }
        return this.localEdits.queue([item], safe, () => (safe ? this.queueSafe([item]) : this.queueRegular(item)))
      },
      wait: (p, options, what, safe) => (safe ? this.waitSafe(p, options, what) : bounded(this.clock, p, options, what)),
      safeGroup: (items) => this.localEdits.queue(items, true, () => this.queueSafe(items)),
      subscribe: (key, listener) => this.events.subscribe(key, listener),
      spendableRights: (key, decl, kind) => this.spendableRights(key, decl, kind),
      acquireRights: (key, decl, kind, n, options) => {
        const stop = new AbortController()
        const p = this.rights.acquire(key, decl as BoundedCounterDeclaration, kind, n, stop.signal)
        return bounded(this.clock, p, { timeoutMs: this.options.safeTimeoutMs ?? 60_000, ...options }, `rights to spend ${n} on ${key}`).finally(() => stop.abort())
      },
      authorId: () => this.authorId,
      userId: () => userId,
      // Register stamps: the relays' time when the upstream measured it, so a fast device clock does not win.
      now: () => this.upstream.now?.() ?? this.clock.now(),
      signedId: (id) => this.draftIds.signedId(id),
      space: () => this.space,
      crypto: () => crypto,
    }
  }

  private queueRegular(item: DraftItem): Promise<UpdateResult> {
    this.assertOpen()
    const stored = this.batcher.addRegular(item)
    // Showing it put it in the view's held-back list when it cannot apply now: say so rather than a plain `stored`.
    if (!hasInvariants(item.decl) || !this.views.heldBack(item.key).some((h) => h.own && h.op === item.intent)) return stored
    const held: UpdateResult = { status: 'held', reason: 'invariant', detail: `${item.key}: held back, it would break ${describeDeclaration(item.decl)} now; the stable order decides it` }
    return stored.then((r) => (r.status === 'stored' ? held : r))
  }

  private queueSafe(items: readonly DraftItem[]): Promise<SafeResult> {
    this.assertOpen()
    return this.batcher.addSafe(items)
  }

  /**
   * @internal Updates another tab of this client made (this tab leads): they join the
   * open draft like this tab's own, and `request` names them when their
   * envelope is announced. Returns the promises of the safe groups.
   */
  queueForwarded(request: string, regular: readonly DraftItem[], safe: ReadonlyArray<readonly DraftItem[]>): Array<Promise<SafeResult>> {
    this.assertOpen()
    return this.batcher.addForwarded(request, regular, safe)
  }

  /** `crdt` if it is of the type `key`'s handle was opened with; else nothing (a key deleted and written again as another type). */
  private ofHandleType(key: string, crdt: AnyCrdt | undefined): AnyCrdt | undefined {
    const d = this.handles.get(key)?.declaration
    return crdt && d && crdt.type !== d.type ? undefined : crdt
  }

  private declarationOf(key: string): Declaration | undefined {
    return this.handles.get(key)?.declaration ?? this.replica.declaration(key)
  }

  /** Rights of `kind` this client holds on a bounded counter as it may spend them: see ownRightsView (Infinity toward no bound). */
  private spendableRights(key: string, decl: Declaration, kind: RightsKind): number {
    if (decl.type !== 'bounded-counter') return 0
    return this.ownRightsView(key, decl).spendable(this.authorId, kind)
  }

  /**
   * A bounded counter as this client may spend from it: the stable state,
   * plus this client's own updates not decided yet (others' are not its to
   * count on), but for its claims: a claim may lose a race for the pool, and
   * a spend counting on it would then be refused.
   */
  private ownRightsView(key: string, decl: BoundedCounterDeclaration): BoundedCounter {
    return this.views.ownView(key, () => this.computeOwnRightsView(key, decl))
  }

  private computeOwnRightsView(key: string, decl: BoundedCounterDeclaration): BoundedCounter {
    const stable = this.replica.stable(key)
    const view = (stable && stable.type === 'bounded-counter' ? stable.clone() : new BoundedCounter(decl.params)) as BoundedCounter
    for (const env of this.replica.pendingTouching(key)) {
      if (env.authorId !== this.authorId) continue
      for (const unit of envelopeUnits(env)) {
        for (const item of unit.kind === 'op' ? [unit] : unit.items) {
          if (item.key === key && sameDeclaration(item.decl, decl) && !isClaim(item.op)) asGeneric(view).apply(item.op, { replica: this.authorId, tag: item.tag })
        }
      }
    }
    for (const batch of this.batcher.shown()) {
      for (const item of batch.items()) if (item.key === key && !isClaim(item.intent)) applyIntent(view, item, this.authorId, this.draftIds)
    }
    return view
  }

  /**
   * @internal A draft batch became a stored envelope (`env`), or cancelled out
   * (undefined): it leaves the drafts, the envelope joins the replica in
   * the same step (so no value flickers), and regular updates resolve.
   */
  batchSigned(batch: DraftBatch, env: Envelope | undefined): void {
    this.dropDraft(batch)
    const changed = new Set(batch.keys)
    if (env) for (const key of this.replica.receive(env).changed) changed.add(key)
    this.localEdits.signed(batch, env)
    this.notify(changed)
    for (const s of batch.stored) s.resolve(env ? { status: 'stored', update: env.idHex } : { status: 'stored' })
    this.emitStatus()
  }

  /** @internal A draft batch could not be stored: it never happened. Undo it locally and tell every caller. */
  batchFailed(batch: DraftBatch, err: unknown): void {
    this.dropDraft(batch)
    this.notify(batch.keys)
    const e = err instanceof SteadError ? err : new SteadError('malformed', String(err))
    for (const s of batch.stored) s.reject(e)
    for (const g of batch.safe) g.waiter.reject(e)
    this.emitStatus()
  }

  private dropDraft(batch: DraftBatch): void {
    this.batcher.remove(batch)
    for (const key of batch.keys) this.views.drop(key)
  }

  /** @internal The replica's audit decided envelopes (a commit): undo managers learn which of this client's edits took effect. */
  decided(decisions: readonly Decision[]): void {
    this.localEdits.decided(decisions)
  }

  /** @internal The replica took a commit, snapshot or delta: its chain stands at `position` now. */
  advance(position: ChainPosition): void {
    this.position = position
  }

  /** @internal Takes a replica rebuilt elsewhere (this tab took over the lead and restored from storage): every view is recomputed. */
  adopt(replica: ReliableReplica, position: ChainPosition, changed?: ReadonlySet<string>): void {
    const keys = changed && replica === this.replica ? changed : new Set([...this.replica.keys(), ...replica.keys(), ...this.events.subscribedKeys()])
    this.replica = replica
    this.position = position
    this.notify(keys)
    this.progress()
    this.emitStatus()
  }

  // ---------------------------------------------------------------- history

  private async historyPage(key: string, options: HistoryPageOptions): Promise<HistoryPage> {
    this.assertOpen()
    const limit = options.limit ?? 100
    const before = options.before ?? Number.MAX_SAFE_INTEGER
    if (!Number.isInteger(limit) || limit < 1 || limit > 1000) throw new SteadError('malformed', `limit must be a whole number from 1 to 1000, got ${limit}`)
    if (!Number.isSafeInteger(before) || before < 0) throw new SteadError('malformed', `before must be a stable index, got ${before}`)
    const local = this.replica.history(key)
    const older = local.filter((e) => e.index < before)
    // Memory holds the page if the history was never cut (by the limit, or by starting from a snapshot), or if enough of it lies before `before`.
    const whole = local.length < (this.options.historyLimit ?? 1000) && this.replica.historyStart === 0
    if (whole || older.length >= limit) return older.slice(-limit).map((e) => ({ index: e.index, value: e.value }))
    const wait = { timeoutMs: 10_000, ...options }
    return bounded(this.clock, this.upstream.relayHistory(key, before, limit), wait, `a page of ${key}'s history`)
  }

  // ---------------------------------------------------------------- plumbing

  /** `p`, or ClosedError as soon as the space closes. */
  private whileOpen<T>(p: Promise<T>): Promise<T> {
    let check: () => void = () => undefined
    let stop: () => void = () => undefined
    const closed = new Promise<never>((_, reject) => {
      check = () => {
        if (this.closed) reject(new ClosedError(`space ${this.space}`))
      }
      stop = this.events.onProgress(check)
      check()
    })
    return Promise.race([p, closed]).finally(() => stop())
  }

  /**
   * Resolves once `done()` holds, checked whenever the client makes
   * progress; rejects with ClosedError when the client closes, `timeout` or
   * `aborted` as `options` say. Nothing is left behind when it ends.
   */
  private until(done: () => boolean, options: WaitOptions, what: string): Promise<void> {
    if (done()) return Promise.resolve()
    if (this.closed) return Promise.reject(new ClosedError(`space ${this.space}`))
    let stop: () => void = () => undefined
    const met = new Promise<void>((resolve, reject) => {
      stop = this.events.onProgress(() => {
        if (this.closed) reject(new ClosedError(`space ${this.space}`))
        else if (done()) resolve()
      })
    })
    return bounded(this.clock, met, options, what).finally(() => stop())
  }

  /**
   * The wait of a safe update or group: `options.timeoutMs`, else the
   * client's `safeTimeoutMs` (default 60 s; Infinity waits for ever). A
   * timeout says what the update is missing; the update itself goes on.
   */
  private waitSafe<T>(p: Promise<T>, options: WaitOptions | undefined, what: string): Promise<T> {
    const timeoutMs = options?.timeoutMs ?? this.options.safeTimeoutMs ?? DEFAULT_SAFE_TIMEOUT_MS
    const wait = bounded(this.clock, p, { ...options, timeoutMs }, what, () => this.whyUndecided())
    // As the update's own promise: a fire-and-forget safe update that times out or is closed must not
    // take the app down as an unhandled rejection (whoever awaits it still sees the rejection).
    wait.catch(() => undefined)
    return wait
  }

  /** Why a safe update is not decided yet, for its timeout's message: the quorum, which relays are down and why, and that it may still commit. */
  private whyUndecided(): string {
    const s = this.closed ? undefined : this.upstream.sessionsStatus(false, undefined)
    const down = (s?.relays ?? []).filter((r) => !r.connected)
    const named = down.slice(0, 5).map((r) => `${r.relay ? `${r.relay} ` : ''}${r.url} (${r.faulty ? `faulty: ${r.faulty}` : (r.error ?? 'connecting')})`)
    const relays = down.length ? `; down: ${named.join(', ')}${down.length > named.length ? ` and ${down.length - named.length} more` : ''}` : ''
    const connected = (s?.relays.length ?? 0) - down.length
    const state = !s
      ? 'the space closed'
      : !s.trusted
        ? `no quorum: no cluster trusted yet (${s.problem ?? 'asking the relays'})`
        : !s.online
          ? `no quorum: ${s.problem ?? `${connected} of ${s.relays.length} relays connected`}`
          : `connected to ${connected} of ${s.relays.length} relays, but the cluster has not committed it yet (its relays need 2f+1 of them up and reaching each other)`
    return `${state}${relays}. The update is not lost: it stays pending (pendingUpdates()) and may still commit (onSettled); pass timeoutMs: Infinity to wait for ever`
  }

  /** @internal A relay accepted one of this client's envelopes `ms` after it was sent: feeds the freshness deadlines' estimate of propagation time. */
  observeAccepted(ms: number): void {
    this.batcher.observeAccepted(ms)
  }

  /** @internal Something waits may be waiting for happened (an acceptance, a commit, a decision). */
  progress(): void {
    this.events.progress()
  }

  /**
   * @internal Tells subscribers of `keys`; `stale` drops their cached prospective views (the
   * replica or the drafts changed underneath); `local`: this client's own new edits changed them.
   */
  notify(keys: Iterable<string>, stale = true, local = false): void {
    const changed = new Set(keys)
    for (const key of changed) {
      if (stale) this.views.drop(key)
      this.events.changed(key, local)
    }
    if (changed.size > 0) this.events.anyChange.emit(() => ({ keys: changed, local }))
  }

  /** @internal */
  emitStatus(): void {
    this.events.status.emit(() => this.status)
  }

  /** @internal */
  emitError(err: SteadError): void {
    this.events.errors.emit(() => err)
  }

  /** @internal */
  emitSettled(update: SettledUpdate): void {
    this.events.settled.emit(() => update)
  }

  /** @internal A problem `status` reports from now on (undefined: it is over). */
  setProblem(p: string | undefined): void {
    this.problems.upstream = p
    this.emitStatus()
  }

  /** @internal Storage failed under this space: say so in `status` (until a write goes through again) and `onError`. */
  storageFailed(err: unknown): void {
    const e = err instanceof SteadError ? err : new SteadError('unsupported', String(err))
    this.problems.storage = `storage failed: ${e.message}`
    this.emitStatus()
    this.emitError(e)
  }

  /** @internal A write went through: a storage failure reported before is over (a full disk was cleared, say). */
  storageWorks(): void {
    if (this.problems.storage === undefined) return
    this.problems.storage = undefined
    this.emitStatus()
  }

  private assertOpen(): void {
    if (this.lifecycle !== 'open') throw new ClosedError(`space ${this.space}`)
  }

  /** An app callback threw: the client goes on, and says so through onError. */
  private listenerFailed(what: 'onStatus' | 'onSettled' | 'onChange' | 'presence', err: unknown): void {
    this.emitError(new SteadError('malformed', `${what === 'presence' ? 'a presence' : `an ${what}`} listener threw: ${(err as Error)?.message ?? String(err)}`))
  }
}

/** Whether an op or intent claims rights from a bounded counter's pool. */
function isClaim(op: unknown): boolean {
  return Array.isArray(op) && op[0] === 'c'
}
