import {
  BoundedCounter,
  ReliableReplica,
  SteadError,
  asGeneric,
  asSigned,
  authorIdOf,
  attestedDecision,
  batchDigest,
  bytesEqual,
  clockFrom,
  clockInit,
  clockMerge,
  clockUpdate,
  createCrdt,
  decode,
  decodeAttestation,
  describeDeclaration,
  encode,
  encodeEnvelope,
  envelopeUnits,
  fromHex,
  openEnvelope,
  openEnvelopeSync,
  sameDeclaration,
  sealEnvelope,
  readAuthBytes,
  stableReadBytes,
  historyPageBytes,
  fromBase64Url,
  expect,
  toHex,
  type AnyCrdt,
  type AnyOp,
  type Clock,
  type CommitResult,
  type Crypto,
  type Declaration,
  type Envelope,
  type ErrorReason,
  type HistoryEntry,
  type ORSet,
  type RegisterValue,
  type Signed,
  type RelayMessage,
  type SetElement,
} from '@stead/core'
import { decodeCluster, encodeCluster, firstQuorum, httpBaseOf, parseClusterDescriptor, sameCluster, withTimeout, type ClusterDescriptor, type Fetch } from './cluster.ts'
import { DraftBatch, applyIntent, compileBatch, deferred, hasInvariants, type Deferred, type DraftItem } from './drafts.ts'
import { ClosedError, RejectedError, TrustError } from './errors.ts'
import { Listeners } from './listeners.ts'
import { BoundedCounterHandle, CounterHandle, RegisterHandle, SetHandle, type HandleHost, type HeldUpdate } from './handles.ts'
import { buildTransaction, type Transaction } from './transaction.ts'
import { ClientRecords, type CommitRecord } from './persist.ts'
import { CommitQuorum, type ChainPosition, type CommitCandidate } from './quorum.ts'
import type { ClientStorage, StorageChange } from './storage/types.ts'
import { RelaySessions, type SessionMember } from './sessions.ts'
import type { RelayLink, SocketFactory } from './transport.ts'
import type { ClientOptions, ClientStatus, HistoryPageOptions, SafeResult, SessionsStatus, UpdateResult, WaitOptions } from './types.ts'
import { bounded } from './wait.ts'

/** What a platform entry (browser or Node) supplies when the caller does not. */
export interface PlatformDefaults {
  storage(): ClientStorage | Promise<ClientStorage>
  crypto(): Promise<Crypto>
  connect: SocketFactory | undefined
  fetch: Fetch | undefined
}

interface Outgoing {
  readonly env: Envelope
  readonly frame: Uint8Array
  /** Safe groups in this envelope and the audit unit each one is. */
  readonly safe: Array<{ readonly unit: number; readonly items: readonly DraftItem[]; readonly waiter: Deferred<SafeResult> }>
  /** Regular items, kept to re-send them if the envelope is dropped for a gap. */
  readonly regular: readonly DraftItem[]
  /** Audit units before the first safe group: the regular operations after compaction. */
  readonly regularUnits: number
  /** Relays it was sent to, in order. */
  readonly sentTo: number[]
  lastSentAt: number
  accepted: boolean
}

type AnyHandle = CounterHandle | SetHandle | RegisterHandle | BoundedCounterHandle

/**
 * One space of a client: its objects (handles), safe transactions, waits
 * and status. Spaces of one client share its identity, storage and relay
 * sessions; see README.md for the whole API.
 */
export class Space implements SessionMember {
  readonly space: string
  private readonly replica: ReliableReplica
  private readonly records: ClientRecords
  private readonly crypto: Crypto
  private readonly identity: { secretKey: Uint8Array; publicKey: Uint8Array }
  readonly authorId: string
  private readonly options: ClientOptions
  private readonly platform: PlatformDefaults
  private readonly sessions: RelaySessions
  private readonly now: () => number
  /** Told when close() begins, with its promise (the client forgets this space and waits for it before reopening). */
  private readonly onClose: (done: Promise<void>) => void

  private quorum: CommitQuorum | undefined
  private position: ChainPosition
  private seq: number
  private clock: Clock
  /** Clocks and ids of envelopes received since this client last signed one. */
  private seenClocks: Clock[] = []
  private frontier: Uint8Array[] = []

  private drafts: DraftBatch[] = [new DraftBatch()]
  private overlay = new Map<string, AnyCrdt>()
  /** Per guarded key (cached with its overlay view): updates held back from the prospective value because they would break an invariant. */
  private heldBack = new Map<string, HeldUpdate[]>()
  /** Keys whose views were computed together (atomic groups tie them): dropping one view drops them all. */
  private joint = new Map<string, ReadonlySet<string>>()
  private draftTag = 0
  private sealing: Promise<void> = Promise.resolve()
  private sealTimer: ReturnType<typeof setTimeout> | undefined
  private readonly outbox = new Map<string, Outgoing>()
  private readonly submits = new Map<number, string>()
  private inboxWrites: StorageChange[] = []
  private inboxTimer: ReturnType<typeof setTimeout> | undefined
  private verifying = new Set<string>()

  private readonly handles = new Map<string, AnyHandle>()
  private readonly listeners = new Map<string, Set<() => void>>()
  private readonly statusListeners = new Listeners<ClientStatus>((err) => this.listenerFailed('onStatus', err))
  private readonly errorListeners = new Listeners<SteadError>()
  private readonly settledListeners = new Listeners<SettledUpdate>((err) => this.listenerFailed('onSettled', err))
  private readonly progressWaiters = new Set<() => void>()
  private applyRun: Promise<void> | undefined
  private applyAgain = false
  private problem: string | undefined
  private closed = false
  /** Set the moment close() is called: no update gets in after that. */
  private closing = false
  private closeRun: Promise<void> | undefined
  private readonly host: HandleHost

  /** Use `client.space(name)`. */
  constructor(init: {
    space: string
    options: ClientOptions
    platform: PlatformDefaults
    sessions: RelaySessions
    onClose: (done: Promise<void>) => void
    crypto: Crypto
    identity: { secretKey: Uint8Array; publicKey: Uint8Array }
    authorId: string
    records: ClientRecords
    replica: ReliableReplica
    position: ChainPosition
    seq: number
    clock: Clock
  }) {
    this.options = init.options
    this.platform = init.platform
    this.sessions = init.sessions
    this.onClose = init.onClose
    this.space = init.space
    this.crypto = init.crypto
    this.identity = init.identity
    this.authorId = init.authorId
    this.records = init.records
    this.replica = init.replica
    this.position = init.position
    this.seq = init.seq
    this.clock = init.clock
    this.now = init.options.now ?? Date.now
    this.host = this.makeHost()
  }

  // ---------------------------------------------------------------- handles

  /** A PN-Counter; `min`/`max` are invariants the stable value never breaks. The same object on every call. */
  counter(key: string, invariants: { min?: number; max?: number } = {}): CounterHandle {
    const bounds: { min?: number; max?: number } = {}
    if (invariants.min !== undefined) bounds.min = invariants.min
    if (invariants.max !== undefined) bounds.max = invariants.max
    return this.open(key, { type: 'counter', bounds }, (d) => new CounterHandle(this.host, key, d)) as CounterHandle
  }

  /** An add-wins OR-Set; `maxSize` is an invariant. */
  set<T extends SetElement = SetElement>(key: string, invariants: { maxSize?: number } = {}): SetHandle<T> {
    const bounds = invariants.maxSize === undefined ? {} : { maxSize: invariants.maxSize }
    return this.open(key, { type: 'set', bounds }, (d) => new SetHandle<T>(this.host, key, d)) as unknown as SetHandle<T>
  }

  /** A last-writer-wins register. */
  register<T extends RegisterValue = RegisterValue>(key: string): RegisterHandle<T> {
    return this.open(key, { type: 'register' }, (d) => new RegisterHandle<T>(this.host, key, d)) as unknown as RegisterHandle<T>
  }

  /** An escrow counter with exactly one bound (`min` or `max`) and an initial value whose rights start in a shared pool. */
  boundedCounter(key: string, params: { min: number; initial: number } | { max: number; initial: number }): BoundedCounterHandle {
    const p = 'min' in params && params.min !== undefined ? { min: params.min, initial: params.initial } : { max: (params as { max: number }).max, initial: params.initial }
    return this.open(key, { type: 'bounded-counter', params: p }, (d) => new BoundedCounterHandle(this.host, key, d)) as BoundedCounterHandle
  }

  private open(key: string, decl: Declaration, make: (d: Declaration) => AnyHandle): AnyHandle {
    // An open handle stays readable after close (a component may render once more); updates through it fail.
    const known = this.handles.get(key)
    if (known && sameDeclaration(known.declaration, decl)) return known
    this.assertOpen()
    if (typeof key !== 'string' || key.length === 0 || key.length > 256) throw new SteadError('malformed', 'object keys are 1 to 256 characters')
    try {
      createCrdt(decl)
    } catch (err) {
      throw new SteadError('malformed', `${key}: ${(err as Error).message}`)
    }
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
   * group. Objects not opened yet are opened with their committed
   * declaration (or no invariants).
   */
  safe(build: (tx: Transaction) => void, options?: WaitOptions): Promise<SafeResult> {
    try {
      this.assertOpen()
      const items = buildTransaction(
        {
          known: (key) => this.handles.get(key)?.declaration,
          committed: (key) => this.replica.declaration(key),
          spendableRights: (key, decl) => this.spendableRights(key, decl),
          now: this.now,
        },
        build,
      )
      return bounded(this.queueSafe(items), options, 'a safe transaction')
    } catch (err) {
      return Promise.reject(err)
    }
  }

  // ---------------------------------------------------------------- reads and status

  get status(): ClientStatus {
    const queued = this.drafts.reduce((n, d) => n + d.size, 0)
    return { ...this.sessions.statusFor(this.closed, this.problem), pending: queued + this.outbox.size, stableIndex: this.position.stableIndex }
  }

  onStatus(listener: (status: ClientStatus) => void): () => void {
    return this.statusListeners.add(listener)
  }

  /**
   * This client's updates not decided yet, one entry per signed envelope
   * (queued operations not signed yet are not listed). After a restart
   * this is how an app finds the safe updates it made before; `onSettled`
   * tells how each one ends.
   */
  pendingUpdates(): Array<{ id: string; keys: string[]; safe: number; regular: number; sent: boolean }> {
    return [...this.outbox.values()].map((o) => ({ id: o.env.idHex, keys: keysOf(o), safe: o.safe.length, regular: o.regularUnits, sent: o.sentTo.length > 0 }))
  }

  /** Called when one of this client's envelopes is decided: its safe groups' results, in order, and the stable index if it committed. */
  onSettled(listener: (update: SettledUpdate) => void): () => void {
    return this.settledListeners.add(listener)
  }

  /** Problems that have no promise to report them: regular updates the relays refused, an untrusted relay, storage failures. */
  onError(listener: (error: SteadError) => void): () => void {
    return this.errorListeners.add(listener)
  }

  /**
   * The stable value of `key`. With `quorum: true`, first asks every relay
   * for its signed stable index and waits until this replica (which only
   * advances on f+1 matching attestations) reaches the index that f+1
   * relays report, so the value includes every commit a correct relay had
   * made when the read started.
   */
  async readStable(key: string, options: { quorum?: boolean } & WaitOptions = {}): Promise<unknown> {
    this.assertOpen()
    if (options.quorum) {
      const wait = { timeoutMs: options.timeoutMs ?? 10_000, ...(options.signal ? { signal: options.signal } : {}) }
      const started = this.now()
      const target = await bounded(this.quorumIndex(wait.timeoutMs), wait, 'a quorum of relay heads')
      await this.until(() => this.position.stableIndex >= target, { ...wait, timeoutMs: Math.max(0, wait.timeoutMs - (this.now() - started)) }, `stable index ${target}`)
    }
    return this.replica.stableValue(key)
  }

  /** Signs everything queued and waits until every local update was accepted by a relay (or already decided). Default timeout 60 s. */
  async flush(options: WaitOptions = {}): Promise<void> {
    this.assertOpen()
    this.sealNow()
    await this.sealing
    await this.until(() => [...this.outbox.values()].every((o) => o.accepted), { ...options, timeoutMs: options.timeoutMs ?? 60_000 }, 'relays to accept every local update')
  }

  /** Waits until every local update is decided in the stable order (committed or rejected). Default timeout 60 s. */
  async settled(options: WaitOptions = {}): Promise<void> {
    this.assertOpen()
    this.sealNow()
    await this.sealing
    await this.until(() => this.outbox.size === 0, { ...options, timeoutMs: options.timeoutMs ?? 60_000 }, 'every local update to be decided')
  }

  /** Seals what is queued (so it is stored), closes the relay sessions and the storage. Later calls fail with ClosedError. */
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
    this.closing = true
    this.sealNow()
    await this.sealing.catch(() => undefined)
    if (this.sealTimer) clearTimeout(this.sealTimer)
    this.closed = true
    this.sessions.leave(this)
    if (this.inboxTimer) clearTimeout(this.inboxTimer)
    await this.writeInbox().catch(() => undefined)
    // Let a commit being applied finish its write, then checkpoint so the next open is quick.
    await this.applyRun
    if (this.records.sinceCheckpoint.commits > 0) await this.records.storage.write(this.records.checkpoint(this.replica.checkpoint(), this.position)).catch((err) => this.storageFailed(err))
    for (const w of this.progressWaiters) w()
    // Safe updates still undecided stay stored and are sent again by the next client on this
    // storage (pendingUpdates / onSettled); this one's promises end here.
    for (const o of this.outbox.values()) for (const s of o.safe) s.waiter.reject(new ClosedError(`space ${this.space}`))
    for (const d of this.drafts) for (const g of d.safe) g.waiter.reject(new ClosedError(`space ${this.space}`))
    this.emitStatus()
  }

  // ---------------------------------------------------------------- start

  /** Puts back what was received or sent but not decided before a restart. Called by createClient. */
  restoreQueued(inbox: readonly Envelope[], outbox: ReadonlyArray<{ env: Envelope; frame: Uint8Array }>): void {
    for (const env of inbox) this.replica.receive(env)
    for (const { env, frame } of outbox) {
      this.replica.receive(env)
      // Promises do not survive a restart; the updates do, and are sent again.
      this.outbox.set(env.idHex, outgoing(env, frame, env.safe.map(() => deferred<SafeResult>())))
    }
  }

  // ---------------------------------------------------------------- sessions (SessionMember)

  /** A relay session is ready: follow this space there from its stable index, and send what waits. */
  ready(link: RelayLink): void {
    if (this.closed) return
    this.quorum ??= new CommitQuorum((this.sessions.cluster as ClusterDescriptor).f)
    link.send({ type: 'subscribe', space: this.space, fromIndex: this.position.stableIndex })
    this.resubmit()
    this.emitStatus()
  }

  changed(): void {
    if (!this.closed) this.emitStatus()
  }

  tick(): void {
    this.resubmit()
  }

  error(err: SteadError): void {
    this.emitError(err)
  }

  // ---------------------------------------------------------------- updates

  private makeHost(): HandleHost {
    return {
      prospective: (key) => this.prospectiveView(key),
      heldBack: (key) => this.heldBackOf(key),
      stable: (key) => this.replica.stable(key),
      history: (key): readonly HistoryEntry[] => this.replica.history(key),
      historyPage: (key, options) => this.historyPage(key, options),
      update: (key, decl, intent, safe) => (safe ? this.queueSafe([{ key, decl, intent }]) : this.queueRegular({ key, decl, intent })),
      safeGroup: (items) => this.queueSafe(items),
      subscribe: (key, listener) => {
        let set = this.listeners.get(key)
        if (!set) this.listeners.set(key, (set = new Set()))
        set.add(listener)
        return () => set.delete(listener)
      },
      spendableRights: (key, decl) => this.spendableRights(key, decl),
      authorId: () => this.authorId,
      now: () => this.now(),
    }
  }

  private get openBatch(): DraftBatch {
    return this.drafts[this.drafts.length - 1] as DraftBatch
  }

  private queueRegular(item: DraftItem): Promise<UpdateResult> {
    this.assertOpen()
    const batch = this.openBatch
    batch.regular.push(item)
    const stored = deferred<UpdateResult>()
    batch.stored.push(stored)
    this.showDraft(batch, [item])
    return stored.promise
  }

  private queueSafe(items: readonly DraftItem[]): Promise<SafeResult> {
    this.assertOpen()
    const batch = this.openBatch
    const waiter = deferred<SafeResult>()
    batch.safe.push({ items, waiter })
    this.showDraft(batch, items)
    return waiter.promise
  }

  /** Prospective at once (G1): the new items join the overlay and subscribers hear of it before this returns. */
  private showDraft(batch: DraftBatch, items: readonly DraftItem[]): void {
    const changed = new Set<string>()
    for (const item of items) {
      batch.keys.add(item.key)
      changed.add(item.key)
      // A group is shown all or nothing: its views are recomputed together (see guardedViews).
      if (items.length > 1) continue
      const view = this.overlay.get(item.key)
      if (view && !applyIntent(view, item, this.authorId, `~draft:${this.draftTag++}`, hasInvariants(item.decl))) {
        this.heldBack.get(item.key)?.push({ op: item.intent as AnyOp, own: true })
      }
    }
    // A single item joined the overlay already: tell subscribers without dropping it.
    this.notify(changed, items.length > 1)
    this.emitStatus()
    if (batch.size >= (this.options.maxBatchOps ?? 500)) this.sealNow()
    else if (!this.sealTimer) this.sealTimer = setTimeout(() => this.sealNow(), this.options.batchIntervalMs ?? 10)
  }

  private prospectiveView(key: string): AnyCrdt | undefined {
    const cached = this.overlay.get(key)
    if (cached) return cached
    const decl = this.declarationOf(key)
    if (decl && (hasInvariants(decl) || this.tiedToGuarded(key))) return this.guardedViews(key)
    const base = this.replica.prospective(key)
    const drafted = this.drafts.some((d) => d.keys.has(key))
    if (!drafted) return base
    let view: AnyCrdt | undefined = base?.clone()
    for (const batch of this.drafts) {
      for (const item of batch.items()) {
        if (item.key !== key) continue
        view ??= createCrdt(item.decl)
        if (view.type !== item.decl.type) continue
        applyIntent(view, item, this.authorId, `~draft:${this.draftTag++}`)
      }
    }
    if (view) this.overlay.set(key, view)
    return view
  }

  private declarationOf(key: string): Declaration | undefined {
    return this.handles.get(key)?.declaration ?? this.replica.declaration(key)
  }

  /** Atomic groups (pending or drafted) that include `key`, as their items. */
  private groupsWith(key: string): Array<ReadonlyArray<{ key: string; decl: Declaration }>> {
    const out: Array<ReadonlyArray<{ key: string; decl: Declaration }>> = []
    for (const env of this.replica.pendingTouching(key)) {
      for (const unit of envelopeUnits(env)) if (unit.kind === 'group' && unit.atomic && unit.items.length > 1 && unit.items.some((i) => i.key === key)) out.push(unit.items)
    }
    for (const batch of this.drafts) for (const g of batch.safe) if (g.items.length > 1 && g.items.some((i) => i.key === key)) out.push(g.items)
    return out
  }

  /** Whether an atomic group ties `key` to an object with invariants (then its view must follow the group's fate). */
  private tiedToGuarded(key: string): boolean {
    return this.groupsWith(key).some((items) => items.some((i) => hasInvariants(i.decl)))
  }

  /**
   * Prospective views of objects with invariants, and of the objects atomic
   * groups tie to them: the stable state, then every undecided update
   * (received, signed, drafted) in the order this client has them, except
   * those that would break an invariant there, which are held back
   * (`handle.pending`) until the stable order decides. An atomic group is
   * shown all or nothing, on every object it touches. So a value an
   * invariant forbids is never shown, a transfer never shows half of itself,
   * and once nothing is pending the views are the stable state again (G5).
   */
  private guardedViews(key: string): AnyCrdt {
    // The keys atomic groups tie together, starting from `key` (bounded, to keep this cheap).
    const keys = new Set([key])
    for (const k of keys) {
      if (keys.size >= 64) break
      for (const items of this.groupsWith(k)) for (const i of items) keys.add(i.key)
    }
    const views = new Map<string, AnyCrdt>()
    const held = new Map<string, HeldUpdate[]>([...keys].map((k) => [k, []]))
    const viewOf = (k: string, decl: Declaration): AnyCrdt | undefined => {
      let v = views.get(k)
      if (!v) views.set(k, (v = this.replica.stable(k)?.clone() ?? createCrdt(this.declarationOf(k) ?? decl)))
      return v.type === decl.type ? v : undefined
    }
    type Step = { key: string; decl: Declaration; apply: (view: AnyCrdt, checked: boolean) => boolean; op: AnyOp; own: boolean }
    /** Applies a unit's steps all or nothing; holds every step back when one does not fit. */
    const unit = (steps: readonly Step[]): void => {
      const mine = steps.filter((st) => keys.has(st.key))
      if (mine.length === 0) return
      if (steps.length > 1) {
        const trial = new Map<string, AnyCrdt>()
        const fits = mine.every((st) => {
          const base = viewOf(st.key, st.decl)
          if (!base) return false
          let t = trial.get(st.key)
          if (!t) trial.set(st.key, (t = base.clone()))
          return st.apply(t, hasInvariants(st.decl))
        })
        if (fits) {
          for (const [k, t] of trial) views.set(k, t)
          return
        }
        for (const st of mine) held.get(st.key)?.push({ op: st.op, own: st.own })
        return
      }
      const st = mine[0] as Step
      const v = viewOf(st.key, st.decl)
      if (v && !st.apply(v, hasInvariants(st.decl))) held.get(st.key)?.push({ op: st.op, own: st.own })
    }
    const seen = new Set<string>()
    for (const k of keys) {
      for (const env of this.replica.pendingTouching(k)) seen.add(env.idHex)
    }
    for (const env of this.replica.pendingEnvelopes()) {
      if (!seen.has(env.idHex)) continue
      const own = env.authorId === this.authorId
      for (const u of envelopeUnits(env)) {
        const items = u.kind === 'op' ? [u] : u.items
        unit(items.map((i) => ({ key: i.key, decl: i.decl, op: i.op, own, apply: (v, checked) => (checked ? asGeneric(v).tryApply(i.op, { replica: env.authorId, tag: i.tag }).ok : (asGeneric(v).apply(i.op, { replica: env.authorId, tag: i.tag }), true)) })))
      }
    }
    const draftStep = (i: DraftItem): Step => ({ key: i.key, decl: i.decl, op: i.intent as AnyOp, own: true, apply: (v, checked) => applyIntent(v, i, this.authorId, `~draft:${this.draftTag++}`, checked) })
    for (const batch of this.drafts) {
      for (const i of batch.regular) unit([draftStep(i)])
      for (const g of batch.safe) unit(g.items.map(draftStep))
    }
    for (const k of keys) {
      const v = views.get(k) ?? this.replica.stable(k)?.clone()
      if (v) this.overlay.set(k, v)
      this.heldBack.set(k, held.get(k) ?? [])
      this.joint.set(k, keys)
    }
    return this.overlay.get(key) ?? createCrdt(this.declarationOf(key) as Declaration)
  }

  /** Drops a cached view, and every view computed together with it. */
  private dropView(key: string): void {
    for (const k of this.joint.get(key) ?? [key]) {
      this.overlay.delete(k)
      this.heldBack.delete(k)
      this.joint.delete(k)
    }
  }

  /** Updates held back from `key`'s prospective value (see guardedViews). */
  private heldBackOf(key: string): readonly HeldUpdate[] {
    if (!this.overlay.has(key)) this.prospectiveView(key)
    return this.heldBack.get(key) ?? []
  }

  /** Rights of this client on a bounded counter: the stable ones, less what its undecided updates spend. */
  private spendableRights(key: string, decl: Declaration): number {
    if (decl.type !== 'bounded-counter') return 0
    const stable = this.replica.stable(key)
    const view = (stable && stable.type === 'bounded-counter' ? stable.clone() : new BoundedCounter(decl.params)) as BoundedCounter
    for (const o of this.outbox.values()) {
      for (const unit of envelopeUnits(o.env)) {
        for (const item of unit.kind === 'op' ? [unit] : unit.items) {
          if (item.key === key && sameDeclaration(item.decl, decl)) asGeneric(view).apply(item.op, { replica: this.authorId, tag: item.tag })
        }
      }
    }
    for (const batch of this.drafts) {
      for (const item of batch.items()) if (item.key === key) applyIntent(view, item, this.authorId, `~draft:${this.draftTag++}`)
    }
    return view.localRights(this.authorId)
  }

  private sealNow(): void {
    if (this.sealTimer) clearTimeout(this.sealTimer)
    this.sealTimer = undefined
    const batch = this.openBatch
    if (batch.size === 0) return
    this.drafts.push(new DraftBatch())
    this.sealing = this.sealing.then(() => this.seal(batch))
  }

  /** Signs one draft batch into an envelope, persists it, then shows it as received and sends it. */
  private async seal(batch: DraftBatch): Promise<void> {
    const done = (): void => {
      this.drafts = this.drafts.filter((d) => d !== batch)
      for (const key of batch.keys) this.dropView(key)
    }
    const { updates, safe } = compileBatch(batch, (key, e) => (this.replica.prospective(key) as ORSet | undefined)?.tagsOf?.(e) ?? [])
    if (updates.length === 0 && safe.length === 0) {
      // Everything cancelled out (e.g. +1 then -1): nothing to sign, nothing to lose.
      done()
      this.notify(batch.keys)
      for (const s of batch.stored) s.resolve({ status: 'stored' })
      return
    }
    let env: Envelope
    const seq = this.seq + 1
    const clock = boundClock(clockUpdate(this.authorId, this.clock, this.seenClocks.length <= 64 ? this.seenClocks : [clockMerge(this.clock, ...this.seenClocks)]), this.authorId)
    try {
      env = await sealEnvelope(this.crypto, this.identity, { space: this.space, seq, clock, deps: this.frontier.slice(-16), updates, safe })
      const frame = encodeEnvelope(env)
      await this.records.storage.write([this.records.outboxPut(seq, frame), this.records.author({ seq, clock: env.clock, authorId: this.authorId })])
      this.seq = seq
      this.clock = env.clock
      this.seenClocks = []
      this.frontier = [env.id]
      done()
      const received = this.replica.receive(env)
      this.outbox.set(env.idHex, outgoing(env, frame, batch.safe.map((g) => g.waiter)))
      this.notify(new Set([...batch.keys, ...received.changed]))
      for (const s of batch.stored) s.resolve({ status: 'stored' })
      this.send(env.idHex)
      this.emitStatus()
    } catch (err) {
      // Not stored: the batch never happened. Undo it locally and tell every caller.
      done()
      this.notify(batch.keys)
      const e = err instanceof SteadError ? err : new SteadError('malformed', String(err))
      for (const s of batch.stored) s.reject(e)
      for (const g of batch.safe) g.waiter.reject(e)
      this.emitStatus()
    }
  }

  // ---------------------------------------------------------------- sending

  /** Sends an envelope to the next ready relay it was not yet sent to (or any ready one). */
  private send(idHex: string): void {
    const o = this.outbox.get(idHex)
    if (!o) return
    const ready = this.sessions.links.filter((l) => l.ready && l.relay !== undefined)
    if (ready.length === 0) return
    // Each client has a home relay (spread over the cluster by author id) and walks on from
    // it: its envelopes then usually reach one block stream in sequence order, instead of
    // arriving out of order through several relays and waiting in the audit for their predecessors.
    const n = this.sessions.cluster?.relays.length ?? 1
    const home = this.homeRelay(n)
    const byDistance = [...ready].sort((a, b) => ((a.relay as number) - home + n) % n - (((b.relay as number) - home + n) % n))
    const fresh = byDistance.filter((l) => !o.sentTo.includes(l.relay as number))
    const pick = (fresh[0] ?? byDistance[o.sentTo.length % byDistance.length]) as RelayLink
    const id = this.sessions.submit(this, pick, o.frame)
    if (id === undefined) return
    this.submits.set(id, idHex)
    if (this.submits.size > 50_000) this.submits.delete(this.submits.keys().next().value as number)
    o.sentTo.push(pick.relay as number)
    o.lastSentAt = this.now()
  }

  private homeRelay(n: number): number {
    let h = 0
    for (let i = 0; i < this.authorId.length; i++) h = (h * 31 + this.authorId.charCodeAt(i)) >>> 0
    return h % n
  }

  /** Periodic: envelopes never sent, or sent long enough ago without a decision, go to another relay. */
  private resubmit(): void {
    if (this.closed) return
    const wait = this.options.resubmitAfterMs ?? 2000
    const now = this.now()
    const readyRelays = new Set(this.sessions.links.filter((l) => l.ready).map((l) => l.relay))
    for (const [idHex, o] of this.outbox) {
      const lastRelay = o.sentTo[o.sentTo.length - 1]
      const lost = lastRelay === undefined || (!o.accepted && !readyRelays.has(lastRelay))
      if (lost || now - o.lastSentAt >= wait) this.send(idHex)
    }
  }

  /** An envelope or commit of this space, or the answer to one of its submits (routed by the sessions). */
  message(link: RelayLink, m: RelayMessage): void {
    if (this.closed) return
    switch (m.type) {
      case 'envelope':
        if (m.space === this.space) void this.onEnvelope(link, m.envelope)
        return
      case 'commit':
        if (m.space === this.space) void this.onCommit(link, m)
        return
      case 'accepted': {
        const idHex = this.submits.get(m.id)
        this.submits.delete(m.id)
        const o = idHex === undefined ? undefined : this.outbox.get(idHex)
        if (o && !o.accepted) {
          o.accepted = true
          this.progress()
        }
        return
      }
      case 'error': {
        if (m.id === null) return
        const idHex = this.submits.get(m.id)
        this.submits.delete(m.id)
        if (idHex !== undefined) this.onSubmitError(idHex, m.reason, m.detail)
        return
      }
      default:
        return
    }
  }

  private onSubmitError(idHex: string, reason: ErrorReason, detail: string): void {
    const o = this.outbox.get(idHex)
    if (!o) return
    // Busy relays and lost races are worth another try (the periodic resubmit does it);
    // a refusal on the envelope's own merits is final: no relay will take it.
    if (reason === 'rate-limited' || reason === 'unauthenticated') return
    if (reason === 'conflict' && this.replica.decided(o.env) === null) return
    void this.settleOwn(o, { kind: 'refused', reason, detail })
  }

  // ---------------------------------------------------------------- receiving

  private async onEnvelope(link: RelayLink, frame: Uint8Array): Promise<void> {
    let signed
    try {
      signed = asSigned(decode(frame))
    } catch (err) {
      return link.markFaulty(`sent an undecodable envelope: ${(err as Error).message}`)
    }
    const idHex = toHex(this.crypto.sha256(signed.bytes))
    if (this.outbox.has(idHex) || this.replica.isPending(idHex) || this.verifying.has(idHex)) return
    this.verifying.add(idHex)
    let env: Envelope
    try {
      env = await openEnvelope(this.crypto, signed)
    } catch {
      // A forged envelope: the relay that certified and sent it is lying (or passed on a client's garbage).
      return link.markFaulty('sent an envelope that does not verify')
    } finally {
      this.verifying.delete(idHex)
    }
    if (this.closed || env.space !== this.space) return
    const r = this.replica.receive(env)
    if (r.status === 'duplicate' && r.changed.size === 0) return
    this.seenClocks.push(env.clock)
    this.frontier.push(env.id)
    if (this.frontier.length > 16) this.frontier.shift()
    this.inboxWrites.push(this.records.inboxPut(idHex, frame))
    this.inboxTimer ??= setTimeout(() => void this.writeInbox(), 50)
    this.notify(r.changed)
  }

  private async writeInbox(): Promise<void> {
    this.inboxTimer = undefined
    const writes = this.inboxWrites
    this.inboxWrites = []
    if (writes.length === 0) return
    // Received envelopes decided meanwhile need no record.
    const live = writes.filter((w) => this.replica.isPending(w.key[2] as string))
    if (live.length) await this.records.storage.write(live).catch((err) => this.storageFailed(err))
  }

  private async onCommit(link: RelayLink, m: Extract<RelayMessage, { type: 'commit' }>): Promise<void> {
    const relay = link.relay
    const cluster = this.sessions.cluster
    if (relay === undefined || !cluster || !this.quorum) return
    let attestation
    try {
      attestation = decodeAttestation(m.attestation.bytes)
    } catch (err) {
      return link.markFaulty(`sent a malformed attestation: ${(err as Error).message}`)
    }
    if (attestation.space !== this.space) return link.markFaulty(`attested space ${attestation.space} on a ${this.space} subscription`)
    if (CommitQuorum.stale(attestation, this.position)) return
    const key = cluster.relays[relay]?.publicKey
    if (!key || !(await this.crypto.verify(key, m.attestation.bytes, m.attestation.sig))) return link.markFaulty('sent an attestation its key did not sign')
    if (this.closed) return
    this.quorum.offer(relay, attestation, m.attestation.bytes, m.envelopes)
    this.applyCommits()
  }

  /** Applies every commit whose turn it is, one at a time (`applyRun` is the run in progress, which close awaits). */
  private applyCommits(): void {
    if (this.applyRun) {
      this.applyAgain = true
      return
    }
    this.applyRun = (async () => {
      do {
        this.applyAgain = false
        let next: CommitCandidate | undefined
        while (!this.closed && this.quorum && (next = this.quorum.next(this.position))) {
          if (!(await this.applyCommit(next))) break
        }
      } while (this.applyAgain && !this.closed)
    })()
      .catch((err: unknown) => this.storageFailed(err))
      .finally(() => {
        this.applyRun = undefined
      })
  }

  private async applyCommit(c: CommitCandidate): Promise<boolean> {
    const a = c.attestation
    let envs: Envelope[] | undefined
    let frames: readonly Uint8Array[] = []
    for (const list of c.frames.values()) {
      try {
        const opened = list.map((f) => openTrusted(this.crypto, f))
        if (bytesEqual(batchDigest((b) => this.crypto.sha256(b), opened.map((e) => e.id)), a.batch)) {
          envs = opened
          frames = list
          break
        }
      } catch {
        // That relay sent frames that are not the attested batch; another one's may be.
      }
    }
    if (!envs) return false
    const result = this.replica.commit(envs, a.round)
    const position = { stableIndex: result.stableIndex, lastRound: a.round }
    const mismatch = this.checkAgainst(result, c)
    if (mismatch) {
      // f+1 relays (one of them correct) attested a result this replica's audit did not reach.
      const err = new TrustError(`commit at round ${a.round}: ${mismatch}`)
      this.setProblem(err.message)
      this.emitError(err)
    }
    this.position = position
    const quorum = this.quorum as CommitQuorum
    for (const relay of quorum.dissenters(c)) this.sessions.linkTo(relay)?.markFaulty(`attested round ${a.round} differently from f+1 other relays`)
    quorum.prune(position)

    const record: CommitRecord = { round: a.round, attestation: c.bytes, frames }
    const changes: StorageChange[] = this.records.commit(record, position)
    // Every so often the stored commits collapse into one checkpoint, so opening stays O(state).
    const since = this.records.sinceCheckpoint
    if (since.envelopes >= (this.options.checkpointEvery ?? 1000) || since.commits >= 1000) changes.push(...this.records.checkpoint(this.replica.checkpoint(), position))
    const own: Array<{ o: Outgoing; d: CommitResult['decisions'][number] }> = []
    for (const d of result.decisions) {
      const o = this.outbox.get(d.env.idHex)
      if (o) {
        own.push({ o, d })
        if (!(d.kind === 'dropped' && d.reason === 'gap')) changes.push(this.records.outboxDelete(o.env.seq))
      } else changes.push(this.records.inboxDelete(d.env.idHex))
    }
    try {
      await this.records.storage.write(changes)
    } catch (err) {
      this.storageFailed(err)
    }
    for (const { o, d } of own) await this.settleOwn(o, d)
    this.notify(result.changed)
    this.progress()
    this.emitStatus()
    return true
  }

  /** Why the local audit disagrees with an attestation, or undefined when it agrees. */
  private checkAgainst(result: CommitResult, c: CommitCandidate): string | undefined {
    const a = c.attestation
    if (result.stableIndex !== a.toIndex) return `stable index ${result.stableIndex}, attested ${a.toIndex}`
    const mine = encode(result.decisions.filter((d) => d.kind !== 'superseded').map((d) => attestedDecision(d as Exclude<typeof d, { kind: 'superseded' }>)))
    if (!bytesEqual(mine, encode(a.decisions))) return 'decisions differ'
    if (!bytesEqual(this.replica.stableHash((b) => this.crypto.sha256(b)), a.stateHash)) return 'stable state hash differs'
    return undefined
  }

  /** Resolves what waited on one of this client's envelopes once it is decided or refused. */
  private async settleOwn(
    o: Outgoing,
    d: CommitResult['decisions'][number] | { kind: 'refused'; reason: ErrorReason; detail: string },
  ): Promise<void> {
    if (d.kind === 'dropped' && d.reason === 'gap') {
      // An earlier envelope of ours was late. This one's slot is still open, so it stays
      // ours: show it again and keep sending it (relays forget ordered ids within 50
      // rounds, before the 64-round gap wait ends, so the same bytes are ordered anew).
      this.notify(this.replica.receive(o.env).changed)
      o.sentTo.length = 0
      o.accepted = false
      this.send(o.env.idHex)
      return
    }
    if (!this.outbox.delete(o.env.idHex)) return
    const results: SafeResult[] = []
    if (d.kind === 'committed') {
      for (const s of o.safe) {
        const u = d.units[s.unit]
        const result: SafeResult = u && u.status === 'rejected' ? { status: 'rejected', reason: u.reason, detail: u.detail } : { status: 'committed', index: d.index }
        results.push(result)
        s.waiter.resolve(result)
      }
      const refused = d.units.filter((u): u is Extract<typeof u, { status: 'rejected' }> => u.unit < o.regularUnits && u.status === 'rejected')
      const first = refused[0]
      if (first) this.emitError(new RejectedError(first.reason, `${refused.length} regular updates of envelope ${o.env.seq} were rejected by the audit: ${first.detail}`, o.regular.map((r) => r.key)))
    } else if (!(d.kind === 'dropped' && d.reason === 'duplicate')) {
      const reason: ErrorReason = d.kind === 'superseded' ? 'conflict' : d.reason
      const detail = d.kind === 'superseded' ? `another envelope took sequence number ${o.env.seq}` : d.detail
      // Refused outright: no commit will ever undo it prospectively, so undo it here.
      if (d.kind === 'refused') this.notify(this.replica.discard(o.env.idHex))
      for (const s of o.safe) {
        const result: SafeResult = { status: 'rejected', reason, detail }
        results.push(result)
        s.waiter.resolve(result)
      }
      if (o.regular.length) this.emitError(new RejectedError(reason, `envelope ${o.env.seq} will never commit: ${detail}`, o.regular.map((r) => r.key)))
      await this.records.storage.write([this.records.outboxDelete(o.env.seq)]).catch((err) => this.storageFailed(err))
    }
    if (!(d.kind === 'dropped' && d.reason === 'duplicate')) {
      const settled: SettledUpdate = { id: o.env.idHex, keys: keysOf(o), safe: results, ...(d.kind === 'committed' ? { index: d.index } : {}) }
      this.settledListeners.emit(() => settled)
    }
    this.progress()
  }

  // ---------------------------------------------------------------- history

  private async historyPage(key: string, options: HistoryPageOptions): Promise<Array<{ index: number; value: unknown }>> {
    this.assertOpen()
    const limit = options.limit ?? 100
    const before = options.before ?? Number.MAX_SAFE_INTEGER
    if (!Number.isInteger(limit) || limit < 1 || limit > 1000) throw new SteadError('malformed', `limit must be a whole number from 1 to 1000, got ${limit}`)
    if (!Number.isSafeInteger(before) || before < 0) throw new SteadError('malformed', `before must be a stable index, got ${before}`)
    const local = this.replica.history(key)
    const older = local.filter((e) => e.index < before)
    // Memory holds the page if the history was never cut, or if enough of it lies before `before`.
    if (local.length < (this.options.historyLimit ?? 1000) || older.length >= limit) return older.slice(-limit).map((e) => ({ index: e.index, value: e.value }))
    return bounded(this.relayHistory(key, before, limit), { timeoutMs: 10_000, ...options }, `a page of ${key}'s history`)
  }

  /** A history page that f+1 relays signed identically (at least one of them is correct). */
  private async relayHistory(key: string, before: number, limit: number): Promise<Array<{ index: number; value: unknown }>> {
    const { cluster, fetchFn, headers } = await this.relayReads()
    const path = `/v1/spaces/${encodeURIComponent(this.space)}/history/${encodeURIComponent(key)}?before=${before}&limit=${limit}`
    const agreed = await firstQuorum(
      this.options.relays.map(async (url) => {
        try {
          const res = await fetchFn(`${httpBaseOf(url)}${path}`, { headers })
          if (!res.ok) return undefined
          const p = (await res.json()) as { relay: number; entries: string; sig: string }
          const relayKey = cluster.relays[p.relay]?.publicKey
          const entries = fromBase64Url(p.entries)
          if (!relayKey || !(await this.crypto.verify(relayKey, historyPageBytes(this.space, key, before, entries), fromHex(p.sig)))) return undefined
          return { relay: p.relay, entries }
        } catch {
          return undefined
        }
      }),
      (answers) => {
        for (const a of answers) {
          const alike = new Set(answers.filter((b) => bytesEqual(a.entries, b.entries)).map((b) => b.relay))
          if (alike.size >= cluster.f + 1) return a.entries
        }
        return undefined
      },
    )
    if (!agreed) throw new SteadError('unsupported', `fewer than ${cluster.f + 1} relays served the same page of ${key}'s history`)
    const pairs = expect.array(decode(agreed, 64 * 1024 * 1024), 'history', 1000) as Array<[number, unknown]>
    return pairs.map(([index, value]) => ({ index: expect.uint(index, 'history.index'), value })).reverse()
  }

  /** What reading from the relays over HTTP needs: the trusted cluster, fetch, and this client's reader proof. */
  private async relayReads(): Promise<{ cluster: ClusterDescriptor; fetchFn: NonNullable<ClientOptions['fetch']>; headers: Record<string, string> }> {
    const cluster = this.sessions.cluster
    const fetchFn = this.options.fetch ?? this.platform.fetch
    if (!cluster) throw new SteadError('unsupported', 'no trusted cluster yet: the relays have not been reached')
    if (!fetchFn) throw new SteadError('unsupported', 'no fetch() on this platform for relay reads')
    // Proves this client's key to relays of a space with readers (others ignore it).
    const t = Date.now()
    const sig = await this.crypto.sign(this.identity.secretKey, readAuthBytes(this.space, t))
    return { cluster, fetchFn, headers: { 'x-stead-reader': `${toHex(this.identity.publicKey)}.${t}.${toHex(sig)}` } }
  }

  // ---------------------------------------------------------------- quorum reads

  private async quorumIndex(timeoutMs: number): Promise<number> {
    const { cluster, fetchFn, headers } = await this.relayReads()
    // Done at 2f+1 valid heads (or when every relay answered or gave up): a slow relay delays nobody.
    const heads = await firstQuorum(
      this.options.relays.map(async (url) => {
        try {
          const res = await withTimeout(fetchFn(`${httpBaseOf(url)}/v1/spaces/${encodeURIComponent(this.space)}/head`, { headers }), timeoutMs)
          if (!res.ok) return undefined
          const h = (await res.json()) as { relay: number; index: number; stateHash: string; sig: string }
          const key = cluster.relays[h.relay]?.publicKey
          if (!key || !Number.isSafeInteger(h.index)) return undefined
          const hash = fromHex(h.stateHash)
          if (!(await this.crypto.verify(key, stableReadBytes(this.space, h.index, hash), fromHex(h.sig)))) return undefined
          return { relay: h.relay, index: h.index, hash }
        } catch {
          return undefined
        }
      }),
      (answers, done) => {
        const distinct = [...new Map(answers.map((h) => [h.relay, h])).values()]
        return distinct.length >= 2 * cluster.f + 1 || done ? distinct : undefined
      },
    )
    const valid = heads ?? []
    if (valid.length < cluster.f + 1) throw new SteadError('unsupported', `only ${valid.length} relays answered a quorum read; it needs ${cluster.f + 1}`)
    // The (f+1)-th highest index: at least one correct relay reached it, so it will be attested.
    const indexes = valid.map((h) => h.index).sort((x, y) => y - x)
    return indexes[cluster.f] as number
  }

  // ---------------------------------------------------------------- plumbing

  /**
   * Resolves once `done()` holds, checked whenever the client makes
   * progress; rejects with ClosedError when the client closes, `timeout` or
   * `aborted` as `options` say. Nothing is left behind when it ends.
   */
  private until(done: () => boolean, options: WaitOptions, what: string): Promise<void> {
    if (done()) return Promise.resolve()
    if (this.closed) return Promise.reject(new ClosedError(`space ${this.space}`))
    let check: () => void = () => undefined
    const met = new Promise<void>((resolve, reject) => {
      check = () => {
        if (this.closed) reject(new ClosedError(`space ${this.space}`))
        else if (done()) resolve()
      }
      this.progressWaiters.add(check)
    })
    return bounded(met, options, what).finally(() => this.progressWaiters.delete(check))
  }

  private progress(): void {
    for (const w of [...this.progressWaiters]) w()
  }

  /** Tells subscribers of `keys`; `stale` drops their cached prospective views (the replica or the drafts changed underneath). */
  private notify(keys: Iterable<string>, stale = true): void {
    for (const key of keys) {
      if (stale) this.dropView(key)
      for (const l of this.listeners.get(key) ?? []) {
        try {
          l()
        } catch (err) {
          this.emitError(new SteadError('malformed', `a subscriber of ${key} threw: ${(err as Error).message}`))
        }
      }
    }
  }

  private emitStatus(): void {
    this.statusListeners.emit(() => this.status)
  }

  private emitError(err: SteadError): void {
    this.errorListeners.emit(() => err)
  }

  private setProblem(p: string): void {
    this.problem = p
    this.emitStatus()
  }

  private storageFailed(err: unknown): void {
    const e = err instanceof SteadError ? err : new SteadError('unsupported', String(err))
    this.setProblem(`storage failed: ${e.message}`)
    this.emitError(e)
  }

  private assertOpen(): void {
    if (this.closed || this.closing) throw new ClosedError(`space ${this.space}`)
  }

  /** An app callback threw: the client goes on, and says so through onError. */
  private listenerFailed(what: string, err: unknown): void {
    this.emitError(new SteadError('malformed', `an ${what} listener threw: ${(err as Error)?.message ?? String(err)}`))
  }
}

/** One of this client's envelopes, decided. */
export interface SettledUpdate {
  /** The envelope id (hex), as listed by `pendingUpdates()`. */
  readonly id: string
  readonly keys: readonly string[]
  /** One result per safe group it carried, in the order they were made. */
  readonly safe: readonly SafeResult[]
  /** The stable index it took, when it committed. */
  readonly index?: number
}

function keysOf(o: Outgoing): string[] {
  return [...new Set([...o.regular.map((r) => r.key), ...o.safe.flatMap((s) => s.items.map((i) => i.key))])]
}

/**
 * Opens an envelope without checking its signature again: for frames this
 * client stored after verifying them, and for frames bound by f+1 relays'
 * attestations (whose batch digest covers exactly these payload bytes).
 */
function openTrusted(crypto: Crypto, frame: Uint8Array | Signed): Envelope {
  return openEnvelopeSync({ sha256: (b) => crypto.sha256(b), verify: () => true }, frame instanceof Uint8Array ? decode(frame) : frame)
}

/** The outbox entry of a signed envelope: its safe groups (always atomic, one unit each) follow its regular ops. */
function outgoing(env: Envelope, frame: Uint8Array, waiters: ReadonlyArray<Deferred<SafeResult>>): Outgoing {
  const regularUnits = env.updates.reduce((n, u) => n + u.ops.length, 0)
  return {
    env,
    frame,
    safe: env.safe.map((g, i) => ({
      unit: regularUnits + i,
      items: g.updates.map((u) => ({ key: u.key, decl: u.decl, intent: u.op })),
      waiter: waiters[i] ?? deferred<SafeResult>(),
    })),
    regular: env.updates.flatMap((u) => u.ops.map((op) => ({ key: u.key, decl: u.decl, intent: op }))),
    regularUnits,
    sentTo: [],
    lastSentAt: 0,
    accepted: false,
  }
}

/**
 * A clock names every author this client has heard from; in a busy space that
 * would make every envelope grow with the number of writers. Past 256
 * entries keep this author's own and the most advanced others: the clock
 * stays monotone for this author, and only loses causal detail about
 * authors it heard from least (nothing in the audit depends on it).
 */
function boundClock(c: Clock, self: string): Clock {
  if (c.size <= MAX_CLOCK_ENTRIES) return c
  const others = [...c].filter(([id]) => id !== self).sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1))
  return clockFrom([[self, c.get(self) ?? 0], ...others.slice(0, MAX_CLOCK_ENTRIES - 1)])
}

const MAX_CLOCK_ENTRIES = 256



// ---------------------------------------------------------------- createClient

/** Builds a client: restores its state from storage, then connects in the background. */
/**
 * A signed-in user: one identity, one storage, one session per relay, and
 * any number of spaces sharing them (`space(name)`).
 */
export class SteadClient {
  readonly authorId: string
  /** Spaces open or opening, by name. */
  private readonly spaces = new Map<string, Promise<Space>>()
  private readonly opened = new Map<string, Space>()
  /** Spaces whose close() is still writing: reopening one waits for it. */
  private readonly closing = new Map<string, Promise<void>>()
  private closeRun: Promise<void> | undefined
  private readonly statusListeners = new Listeners<SessionsStatus>((err) => this.emitError(new SteadError('malformed', `an onStatus listener threw: ${(err as Error)?.message ?? String(err)}`)))
  private readonly errorListeners = new Listeners<SteadError>()
  private closed = false
  private readonly sessions: RelaySessions

  /** Use `createClient`. */
  constructor(
    private readonly init: {
      options: ClientOptions
      platform: PlatformDefaults
      storage: ClientStorage
      crypto: Crypto
      identity: { secretKey: Uint8Array; publicKey: Uint8Array }
      authorId: string
      cluster: ClusterDescriptor | undefined
    },
  ) {
    this.authorId = init.authorId
    const { options, platform } = init
    this.sessions = new RelaySessions({
      relays: options.relays,
      crypto: init.crypto,
      identity: init.identity,
      cluster: init.cluster,
      connect: options.connect ?? platform.connect,
      fetch: options.fetch ?? platform.fetch,
      ...(options.backoff ? { backoff: options.backoff } : {}),
      ...(options.heartbeat ? { heartbeat: options.heartbeat } : {}),
      tickMs: Math.max(50, Math.min(500, (options.resubmitAfterMs ?? 2000) / 4)),
      now: options.now ?? Date.now,
      pin: (cluster) => init.storage.write([clusterRecord(cluster)]),
      error: (err) => this.emitError(err),
      changed: () => this.emitStatus(),
    })
  }

  /** Starts trust and the relay sessions. Called by createClient. */
  start(): void {
    this.sessions.start()
  }

  /**
   * A space of this client, opened on first use: its stored state is
   * restored (so the first read is right), then it follows the relays. The
   * same Space on every call until it is closed.
   */
  space(name: string): Promise<Space> {
    if (this.closed) return Promise.reject(new ClosedError())
    if (typeof name !== 'string' || name.length === 0 || name.length > 128) return Promise.reject(new SteadError('malformed', `a space name is 1 to 128 characters, got ${JSON.stringify(name)}`))
    let open = this.spaces.get(name)
    if (!open) {
      const closing = this.closing.get(name)
      open = closing ? closing.then(() => this.openSpace(name)) : this.openSpace(name)
      this.spaces.set(name, open)
      const mine = open
      open.catch(() => {
        if (this.spaces.get(name) === mine) this.spaces.delete(name)
      })
    }
    return open
  }

  /** A space began to close: forget it (a later space(name) opens a new one once this close is done). */
  private spaceClosing(name: string, space: Space, done: Promise<void>): void {
    if (this.opened.get(name) === space) {
      this.opened.delete(name)
      this.spaces.delete(name)
    }
    this.closing.set(name, done)
    void done.finally(() => {
      if (this.closing.get(name) === done) this.closing.delete(name)
    })
  }

  /** The relay sessions every space shares: online once f+1 trusted relays are connected. */
  get status(): SessionsStatus {
    return this.sessions.statusFor(this.closed)
  }

  onStatus(listener: (status: SessionsStatus) => void): () => void {
    return this.statusListeners.add(listener)
  }

  /** Trust problems (a relay with a wrong key or serving another cluster); every open space's `onError` hears of them too. */
  onError(listener: (error: SteadError) => void): () => void {
    return this.errorListeners.add(listener)
  }

  /** Closes every space, the relay sessions and the storage. Later calls fail with ClosedError. */
  close(): Promise<void> {
    this.closeRun ??= this.shutDown()
    return this.closeRun
  }

  private async shutDown(): Promise<void> {
    this.closed = true
    const spaces = await Promise.allSettled([...this.spaces.values()])
    await Promise.allSettled(spaces.map((s) => (s.status === 'fulfilled' ? s.value.close() : undefined)))
    await Promise.allSettled([...this.closing.values()])
    this.sessions.close()
    await this.init.storage.close()
    this.emitStatus()
  }

  private async openSpace(name: string): Promise<Space> {
    const { options, platform, storage, crypto, identity, authorId } = this.init
    const records = new ClientRecords(storage, name)
    const restored = await records.restore()
    const trusted = (frame: Uint8Array): Envelope => openTrusted(crypto, frame)
    const replicaOptions = { space: name, ...(options.historyLimit ? { historyLimit: options.historyLimit } : {}) }
    const replica =
      restored.checkpoint === undefined
        ? new ReliableReplica(replicaOptions)
        : ReliableReplica.restore(replicaOptions, restored.checkpoint, (signed) => openTrusted(crypto, signed))
    // Replaying the attested commits after the checkpoint rebuilds the stable state exactly (gap timers included).
    for (const c of restored.commits) replica.commit(c.frames.map(trusted), c.round)
    if (this.closed) throw new ClosedError()
    const space = new Space({
      space: name,
      options,
      platform,
      sessions: this.sessions,
      onClose: (done) => this.spaceClosing(name, space, done),
      crypto,
      identity,
      authorId,
      records,
      replica,
      position: restored.position,
      // The stored sequence is this identity's unless it names another author.
      seq: restored.author.authorId === undefined || restored.author.authorId === authorId ? Math.max(restored.author.seq, replica.nextSeq(authorId) - 1) : replica.nextSeq(authorId) - 1,
      clock: restored.author.authorId === undefined || restored.author.authorId === authorId ? restored.author.clock : clockInit(),
    })
    space.restoreQueued(
      restored.inbox.map(trusted),
      restored.outbox.map((frame) => ({ env: trusted(frame), frame })),
    )
    this.opened.set(name, space)
    this.sessions.join(space)
    return space
  }

  private emitStatus(): void {
    this.statusListeners.emit(() => this.status)
  }

  private emitError(err: SteadError): void {
    this.errorListeners.emit(() => err)
  }
}

/** Where a client keeps what all its spaces share; '' is no space's name. */
const IDENTITY_KEY = ['', 'identity'] as const
const CLUSTER_KEY = ['', 'cluster'] as const

function clusterRecord(c: ClusterDescriptor): StorageChange {
  return { key: CLUSTER_KEY, value: encodeCluster(c) }
}

export async function createClientWith(options: ClientOptions, platform: PlatformDefaults): Promise<SteadClient> {
  if (!options || !Array.isArray(options.relays) || options.relays.length === 0) throw new SteadError('malformed', 'createClient needs at least one relay URL')
  for (const url of options.relays) httpBaseOf(url)
  const given = options.cluster === undefined ? undefined : parseClusterDescriptor(options.cluster, 'options.cluster')
  const crypto = options.crypto ?? (await platform.crypto())
  const storage = await (options.storage ?? platform.storage())
  try {
    const [storedKey, storedCluster] = await Promise.all([storage.load(IDENTITY_KEY), storage.load(CLUSTER_KEY)])
    const restoredCluster = storedCluster && decodeCluster(storedCluster)
    const secretKey = options.identity?.secretKey ?? storedKey ?? crypto.generateSecretKey()
    const publicKey = await crypto.publicKeyOf(secretKey)
    const pins: StorageChange[] = []
    if (!storedKey || !bytesEqual(storedKey, secretKey)) pins.push({ key: IDENTITY_KEY, value: secretKey })
    if (given && !(restoredCluster && sameCluster(restoredCluster, given))) pins.push(clusterRecord(given))
    if (pins.length) await storage.write(pins)
    const client = new SteadClient({
      options,
      platform,
      storage,
      crypto,
      identity: { secretKey, publicKey },
      authorId: authorIdOf(crypto, publicKey),
      cluster: given ?? restoredCluster,
    })
    client.start()
    return client
  } catch (err) {
    // Nothing opened on it survives a failed start.
    await storage.close().catch(() => undefined)
    throw err
  }
}
