import { SteadError, type Declaration, type ErrorReason } from '@stead/core'
import type { HandleHost } from '../handles/handles.ts'
import { Listeners } from '../listeners.ts'
import type { DraftItem, Intent } from '../space/drafts.ts'
import type { UpdateResult } from '../types.ts'
import { Fates } from './fates.ts'
import type { LocalEdits } from './local-edits.ts'
import { Redirects, capture, type CaptureContext, type EditRecord, type RevertContext } from './records.ts'

/** @internal What an undo manager needs of its space. */
export interface UndoPort {
  /** What handles use: reads of the prospective state, and the update path. */
  readonly host: HandleHost
  /** The space's local edits, as they are made, signed and decided. */
  readonly edits: LocalEdits
  /** The space's clock (`options.clock`): what capture grouping measures. */
  now(): number
  /** Runs edits as one transaction: one envelope, subscribers told once. */
  transact(edits: () => void): Promise<unknown>
  /** Whether the space takes updates. */
  isOpen(): boolean
  /** The draft tag of an item (see DraftIds). */
  tagOf(item: DraftItem): string
  isPending(idHex: string): boolean
  hasCommitted(idHex: string): boolean
  /** An app listener threw: the space's onError says so. */
  listenerFailed(err: unknown): void
}

/** What an undo manager tracks: handles (or their keys). A map's or list's objects nested in it are tracked with it. */
export type UndoScope =
  | {
      /** The object's key. */
      readonly key: string
    }
  | string

/** How an undo manager groups edits and how much it keeps. */
export interface UndoManagerOptions {
  /**
   * Edits made less than this many milliseconds after the previous one join
   * its stack item, so typing undoes by the burst, not by the key
   * (`stopCapturing()` ends an item at once). 0 makes every edit its own
   * item. Default 500, as Yjs.
   */
  readonly captureTimeout?: number
  /** Most items the undo stack keeps: past it, the oldest are forgotten. Default 1,000. */
  readonly maxItems?: number
}

/** One undo or redo step: the edits it takes back, and what the app keeps with it. */
export class StackItem {
  /**
   * What the app keeps with the item, as Yjs's `stackItem.meta`: an editor
   * stores its selection here on `stack-item-added` and restores it on
   * `stack-item-popped`.
   */
  readonly meta = new Map<unknown, unknown>()
  /** @internal The edits, oldest first. */
  readonly records: EditRecord[] = []

  /** @internal Made by an undo manager as edits come. */
  constructor() {}

  /** The keys of the objects its edits changed. */
  get keys(): string[] {
    return [...new Set(this.records.map((r) => r.key))]
  }
}

/** A stack item added to or changed on a stack. */
export interface StackItemEvent {
  /** The item. */
  readonly stackItem: StackItem
  /** Its stack: `undo` (edits, and redone ones) or `redo` (undone ones). */
  readonly type: 'undo' | 'redo'
}

/** What became of the updates that took a popped item back. */
export interface UndoOutcome {
  /** Those that did not go through: a safe one the stable order rejected (a bounded counter's spend its rights cannot cover), or one that could not be stored. */
  readonly refused: ReadonlyArray<{
    /** The keys of the objects it would have changed (an atomic group's, all of them). */
    readonly keys: readonly string[]
    /** Why, as a SafeResult says: `invariant`, ... */
    readonly reason: ErrorReason
    /** A sentence for logs. */
    readonly detail: string
  }>
}

/** A stack item that `undo()` or `redo()` took back. */
export interface StackItemPoppedEvent extends StackItemEvent {
  /**
   * Resolves once every update that took it back is stored (a regular one)
   * or decided (a safe one), with those refused. A regular one the stable
   * order rejects later is reported by the space's `onError`.
   */
  readonly settled: Promise<UndoOutcome>
}

/** Stacks that `clear()`, or an edit (the redo stack), emptied. */
export interface StackClearedEvent {
  /** Whether the undo stack was emptied. */
  readonly undoStackCleared: boolean
  /** Whether the redo stack was emptied. */
  readonly redoStackCleared: boolean
}

/** The events of an undo manager, by name, as Yjs's UndoManager has them. */
export interface UndoManagerEvents {
  /** A new item on a stack, before its first edit shows (the app's selection is still the one to keep in `meta`). */
  'stack-item-added': StackItemEvent
  /** An edit joined the item on top of the undo stack (within `captureTimeout`). */
  'stack-item-updated': StackItemEvent
  /** `undo()` or `redo()` took an item back, and the prospective values show it. */
  'stack-item-popped': StackItemPoppedEvent
  /** Stacks were emptied. */
  'stack-cleared': StackClearedEvent
}

interface Applying {
  readonly type: 'undo' | 'redo'
  /** The item the updates that take the popped one back form, on the other stack. */
  item: StackItem | undefined
  readonly outcomes: Array<{ keys: readonly string[]; queued: Promise<UpdateResult> }>
  /** The drafts of the latest update queued (what `send` returns). */
  queued: readonly DraftItem[]
}

const DEFAULT_CAPTURE_TIMEOUT_MS = 500
const DEFAULT_MAX_ITEMS = 1000

/**
 * Undo and redo for one client over a set of objects, as Yjs's
 * UndoManager: `undo()` takes back this client's own edits (never another
 * user's), edits made close together (`captureTimeout`) undo as one,
 * and an editor keeps its selection in each item's `meta`.
 *
 * An undo never replays a stored inverse. Each edit keeps what it changed,
 * and undo computes, against the prospective state as it is then, ordinary
 * updates that take it back, sent like the app's own (they show at once,
 * go into one envelope, and the stable order audits them): the opposite
 * amount for a counter; for a set, the removal of the add's own tags or a
 * new add; for a register or a map field, the value before, if what this
 * client wrote is still there (else another user wrote since and their
 * value stays, as in Yjs); for text and lists, a delete of the characters
 * or elements this client inserted that still show, and new ones, placed
 * where the deleted ones lie, for what it deleted (as Yjs re-inserts); a
 * move back beside the old neighbours. An edit the stable order rejected
 * is already reversed: undo passes over it, and an item left with nothing
 * to take back is dropped for the next one. Open one with
 * `space.undoManager(handles)`.
 */
export class UndoManager {
  private readonly port: UndoPort
  private readonly scope = new Set<string>()
  private readonly captureTimeout: number
  private readonly maxItems: number
  private readonly fates: Fates
  private readonly stacks: { readonly undo: StackItem[]; readonly redo: StackItem[] } = { undo: [], redo: [] }
  private readonly events: { readonly [E in keyof UndoManagerEvents]: Listeners<UndoManagerEvents[E]> }
  private readonly capturing: CaptureContext
  private readonly reverting: RevertContext
  /** When the last edit was captured; undefined after stopCapturing (the next one starts an item). */
  private lastChange: number | undefined
  private applying: Applying | undefined
  private stopListening: (() => void) | undefined

  /**
   * @internal Use `space.undoManager(scope, options)`.
   * @throws SteadError `malformed` for a scope entry that is not a handle or key, or a bad option.
   */
  constructor(port: UndoPort, scope: UndoScope | Iterable<UndoScope>, options: UndoManagerOptions = {}) {
    const { captureTimeout = DEFAULT_CAPTURE_TIMEOUT_MS, maxItems = DEFAULT_MAX_ITEMS } = options
    if (typeof captureTimeout !== 'number' || !(captureTimeout >= 0) || !Number.isFinite(captureTimeout)) throw new SteadError('malformed', `captureTimeout is a number of milliseconds of at least 0, got ${String(captureTimeout)}`)
    if (!Number.isSafeInteger(maxItems) || maxItems < 1) throw new SteadError('malformed', `maxItems is a whole number of at least 1, got ${String(maxItems)}`)
    this.port = port
    this.captureTimeout = captureTimeout
    this.maxItems = maxItems
    const report = (err: unknown): void => port.listenerFailed(err)
    this.events = { 'stack-item-added': new Listeners(report), 'stack-item-updated': new Listeners(report), 'stack-item-popped': new Listeners(report), 'stack-cleared': new Listeners(report) }
    this.fates = new Fates({ isPending: (id) => port.isPending(id), hasCommitted: (id) => port.hasCommitted(id) })
    const host = port.host
    this.capturing = { prospective: (key) => host.prospective(key), tagOf: (item) => port.tagOf(item) }
    this.reverting = {
      authorId: host.authorId(),
      prospective: (key) => host.prospective(key),
      heldBack: (key) => host.heldBack(key),
      signedId: (id) => host.signedId(id),
      spendableRights: (key, decl, kind) => host.spendableRights(key, decl, kind),
      now: () => host.now(),
      fate: (item) => this.fates.fate(item),
      prefixOf: (item) => this.fates.prefixOf(item),
      send: (key, decl, intent) => (queued(() => host.update(key, decl, intent, false)) ? this.applying?.queued[0] : undefined),
      sendGroup: (items) => queued(() => host.safeGroup(items)),
      redirects: new Redirects(),
    }
    this.addToScope(scope)
    this.stopListening = port.edits.listen({
      editing: (items, safe, origin) => this.editing(items, safe, origin),
      signed: (batch, env) => this.fates.signed(batch, env),
      decided: (decisions) => this.fates.decided(decisions),
    })
  }

  /**
   * Tracks more objects (handles or keys) from now on.
   *
   * @throws SteadError `malformed` for an entry that is not a handle or a key.
   */
  addToScope(scope: UndoScope | Iterable<UndoScope>): void {
    // One handle or key, or several (a key is a string: one key, not its characters).
    const many = typeof scope !== 'string' && scope !== null && typeof scope === 'object' && !('key' in scope) && Symbol.iterator in scope
    for (const s of many ? (scope as Iterable<UndoScope>) : [scope as UndoScope]) {
      const key = typeof s === 'string' ? s : (s as { key?: unknown } | null)?.key
      if (typeof key !== 'string' || key.length === 0) throw new SteadError('malformed', `an undo manager tracks handles or keys, got ${s === null ? 'null' : typeof s}`)
      this.scope.add(key)
    }
  }

  /** The undo stack, oldest item first. */
  get undoStack(): readonly StackItem[] {
    return this.stacks.undo
  }

  /** The redo stack, oldest item first. */
  get redoStack(): readonly StackItem[] {
    return this.stacks.redo
  }

  /** Whether `undo()` is running (its updates are being made: a subscriber hears them before it returns). */
  get undoing(): boolean {
    return this.applying?.type === 'undo'
  }

  /** Whether `redo()` is running. */
  get redoing(): boolean {
    return this.applying?.type === 'redo'
  }

  /** Whether the undo stack holds an item (one whose edits were all rejected or changed by others since undoes nothing, and is passed over). */
  canUndo(): boolean {
    return this.stacks.undo.length > 0
  }

  /** Whether the redo stack holds an item. */
  canRedo(): boolean {
    return this.stacks.redo.length > 0
  }

  /**
   * Takes back the latest item of this client's edits: the updates that do
   * it show at once, and form an item on the redo stack. Items with
   * nothing left to take back (their edits rejected by the stable order,
   * or changed since by other users) are dropped on the way. Never
   * throws: an update that could not go through is reported by
   * `stack-item-popped`'s `settled` (a bounded counter's spend past its
   * rights) or the space's `onError`.
   *
   * @returns Whether something was undone.
   */
  undo(): boolean {
    return this.pop('undo')
  }

  /**
   * Takes back the latest undo (see `undo`), forming an item on the undo
   * stack. A new edit of a tracked object empties the redo stack.
   *
   * @returns Whether something was redone.
   */
  redo(): boolean {
    return this.pop('redo')
  }

  /** Makes the next edit start a new item, however soon it comes (as Yjs's). */
  stopCapturing(): void {
    this.lastChange = undefined
  }

  /** Empties the undo stack, the redo stack, or both (the default). */
  clear(clearUndoStack = true, clearRedoStack = true): void {
    const undoStackCleared = clearUndoStack && this.stacks.undo.length > 0
    const redoStackCleared = clearRedoStack && this.stacks.redo.length > 0
    if (undoStackCleared) this.empty(this.stacks.undo)
    if (redoStackCleared) this.empty(this.stacks.redo)
    if (undoStackCleared || redoStackCleared) this.events['stack-cleared'].emit(() => ({ undoStackCleared, redoStackCleared }))
  }

  /**
   * Calls `listener` on each `event` (see {@link UndoManagerEvents}); a
   * listener that throws is reported through the space's `onError`.
   * Returns the function that stops it.
   *
   * @throws SteadError `malformed` for an event it does not have.
   */
  on<E extends keyof UndoManagerEvents>(event: E, listener: (e: UndoManagerEvents[E]) => void): () => void {
    const set = this.events[event] as Listeners<UndoManagerEvents[E]> | undefined
    if (!set) throw new SteadError('malformed', `an undo manager has no event ${JSON.stringify(event)}`)
    return set.add(listener)
  }

  /** Stops tracking and forgets both stacks; the manager does nothing after. */
  destroy(): void {
    this.stopListening?.()
    this.stopListening = undefined
    this.empty(this.stacks.undo)
    this.empty(this.stacks.redo)
  }

  /** Whether edits of `key` are tracked: it is in scope, or nested in an object that is. */
  private tracks(key: string): boolean {
    if (this.scope.has(key)) return true
    // A nested object's key is its parent's, then \u0000 and its place (see nestedKey).
    for (let i = key.indexOf('\u0000'); i > 0; i = key.indexOf('\u0000', i + 1)) if (this.scope.has(key.slice(0, i))) return true
    return false
  }

  /** An update is about to be queued: what it changes is read now, and it joins an item once queued. */
  private editing(items: readonly DraftItem[], safe: boolean, origin: object | undefined): ((queued: Promise<UpdateResult> | undefined) => void) | undefined {
    // Another manager's undo is its own business (as Yjs's trackedOrigins leave it out).
    if (this.stopListening === undefined || (origin !== undefined && origin !== this) || (origin === this) !== (this.applying !== undefined)) return undefined
    if (this.applying) this.applying.queued = items
    const records = items.flatMap((item) => (this.tracks(item.key) ? (capture(item, this.capturing) ?? []) : []))
    if (records.length === 0) return undefined
    const { item: target, added } = this.targetOf()
    return (queued) => {
      if (!queued) {
        // Never queued (the space closed under it): an item begun for it goes again.
        if (added && target.records.length === 0) this.drop(target)
        return
      }
      // Several updates of one safe group (a `space.safe` transaction) are taken back together.
      const group = safe && records.length > 1 ? {} : undefined
      for (const r of records) {
        for (const item of r.items) this.fates.follow(item, safe, queued)
        if (group) r.group = group
        const last = target.records[target.records.length - 1]
        if (!last?.absorb?.(r)) target.records.push(r)
      }
      if (this.applying) this.applying.outcomes.push({ keys: [...new Set(items.map((i) => i.key))], queued })
      else if (!added) this.events['stack-item-updated'].emit(() => ({ stackItem: target, type: 'undo' }))
    }
  }

  /** The item an edit joins: while undoing or redoing, the item forming on the other stack; else the top of the undo stack within captureTimeout, or a new one. */
  private targetOf(): { item: StackItem; added: boolean } {
    const a = this.applying
    if (a) {
      if (a.item) return { item: a.item, added: false }
      a.item = new StackItem()
      this.push(a.type === 'undo' ? 'redo' : 'undo', a.item)
      return { item: a.item, added: true }
    }
    const now = this.port.now()
    const top = this.stacks.undo[this.stacks.undo.length - 1]
    const join = top !== undefined && this.lastChange !== undefined && now - this.lastChange < this.captureTimeout
    this.lastChange = now
    // A new edit: what was undone before it can no longer be redone (as in Yjs).
    this.clear(false, true)
    if (join) return { item: top, added: false }
    const item = new StackItem()
    this.push('undo', item)
    return { item, added: true }
  }

  private push(type: 'undo' | 'redo', item: StackItem): void {
    const stack = this.stacks[type]
    stack.push(item)
    if (stack.length > this.maxItems) stack.shift()
    this.events['stack-item-added'].emit(() => ({ stackItem: item, type }))
  }

  /** Takes back the top item of a stack, passing over items with nothing left to take back. */
  private pop(type: 'undo' | 'redo'): boolean {
    if (this.stopListening === undefined || this.applying || !this.port.isOpen()) return false
    const stack = this.stacks[type]
    this.lastChange = undefined
    while (stack.length > 0) {
      const item = stack.pop() as StackItem
      const applying: Applying = { type, item: undefined, outcomes: [], queued: [] }
      this.applying = applying
      let sent = false
      try {
        // One transaction: one envelope, subscribers told once, and everything shown before the popped event.
        this.port.edits.as(this, () => this.port.transact(() => (sent = this.revert(item)))).catch(() => undefined)
      } catch (err) {
        this.port.listenerFailed(err)
      } finally {
        this.applying = undefined
      }
      if (!sent) continue
      this.events['stack-item-popped'].emit(() => ({ stackItem: item, type, settled: outcomeOf(applying.outcomes) }))
      return true
    }
    return false
  }

  /**
   * Sends what takes `item` back, its latest edit first; whether anything
   * was sent. The edits of one safe group go back in one safe atomic group
   * (a transfer's debit and credit commit together or not at all), when
   * each of them can.
   */
  private revert(item: StackItem): boolean {
    let sent = false
    const records = item.records
    for (let i = records.length - 1; i >= 0; ) {
      const group = (records[i] as EditRecord).group
      let first = i
      while (group && first > 0 && records[first - 1]?.group === group) first--
      const members = records.slice(first, i + 1).reverse()
      i = first - 1
      if (group && members.every((m) => m.groupable)) sent = this.revertAtomically(members) || sent
      else for (const m of members) sent = m.revert(this.reverting) || sent
    }
    return sent
  }

  /** Takes `records` back (in that order) in one safe atomic group. */
  private revertAtomically(records: readonly EditRecord[]): boolean {
    const group: Array<{ key: string; decl: Declaration; intent: Intent }> = []
    const collect: RevertContext = {
      ...this.reverting,
      send: (key, decl, intent) => {
        const item: DraftItem = { key, decl, intent }
        group.push(item)
        return item
      },
      sendGroup: (items) => {
        group.push(...items)
        return true
      },
    }
    for (const r of records) r.revert(collect)
    return group.length > 0 && queued(() => this.port.host.safeGroup(group))
  }

  private drop(item: StackItem): void {
    for (const stack of [this.stacks.undo, this.stacks.redo]) {
      const i = stack.indexOf(item)
      if (i >= 0) stack.splice(i, 1)
    }
  }

  private empty(stack: StackItem[]): void {
    stack.length = 0
  }
}

/** Queues with `queue`; whether it was queued (a space closing under an undo refuses it). */
function queued(queue: () => Promise<UpdateResult>): boolean {
  try {
    queue().catch(() => undefined)
    return true
  } catch {
    return false
  }
}

/** What `settled` of a popped item resolves to, once every update that took it back is stored or decided. */
function outcomeOf(outcomes: ReadonlyArray<{ keys: readonly string[]; queued: Promise<UpdateResult> }>): Promise<UndoOutcome> {
  const refused = outcomes.map(({ keys, queued }) =>
    queued.then(
      (r) => (r.status === 'rejected' ? { keys, reason: r.reason, detail: r.detail } : undefined),
      (err: unknown) => ({ keys, reason: err instanceof SteadError ? err.reason : ('malformed' as ErrorReason), detail: err instanceof Error ? err.message : String(err) }),
    ),
  )
  return Promise.all(refused).then((list) => ({ refused: list.filter((r) => r !== undefined) }))
}
