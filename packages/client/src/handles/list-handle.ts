import { CollabList, SteadError, encodeDeclaration, nestedKey, validateRegisterValue, type AnyCrdt, type ListEntry, type ListOp, type RegisterValue } from '@stead/core'
import { anchorPosition, takeAnchor, type AnchorOptions } from './anchors.ts'
import { ChangeFeed, listChange, listState, type ListChange, type ListState } from './changes.ts'
import { Handle, guarded, type HandleHost } from './handles.ts'
import { plainObject, subscribeDeep, type MapHandle, type NestedOpener } from './map-handle.ts'
import type { TextHandle } from './text-handle.ts'
import type { ObjectOptions, SafeResult, UpdateOptions, UpdateResult, WaitOptions } from '../types.ts'

/** Most values one insert may carry. */
const MAX_INSERT = 10_000

/** A nested object's name: 16 random characters of [A-Za-z0-9_-]. */
function randomName(): string {
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_'
  return [...globalThis.crypto.getRandomValues(new Uint8Array(16))].map((b) => alphabet[b % 64]).join('')
}

/**
 * An ordered list, as Y.Array users know it, whose elements also move.
 * Open it with `space.list(key)`. Elements are plain values or nested
 * objects (`insertMap`, `insertText`). Two people inserting at one place
 * never interleave their runs (FugueMax); of two concurrent moves of one
 * element, one wins: an element is never duplicated or lost; a move
 * concurrent with a delete leaves the element deleted.
 */
export class ListHandle<T extends RegisterValue = RegisterValue> extends Handle {
  private readonly opener: NestedOpener
  private feed: ChangeFeed<ListState, ListChange> | undefined

  /** @internal Use `space.list(key)`. */
  constructor(host: HandleHost, key: string, declaration: ListHandle['declaration'], opener: NestedOpener) {
    super(host, key, declaration)
    this.opener = opener
  }

  /** The prospective list as plain data: nested maps as objects, texts as strings. */
  get value(): unknown[] {
    return this.plain(this.view(), (k) => this.host.prospective(k))
  }

  /** The stable list as plain data (see `value`), within `maxLength`. */
  get stable(): unknown[] {
    return this.plain(this.host.stable(this.key) as CollabList | undefined, (k) => this.host.stable(k))
  }

  /**
   * Calls `listener` whenever the list or any object nested in it may have
   * changed; `subscribe` hears the list's own elements only. Returns the
   * unsubscribe function.
   */
  subscribeDeep(listener: () => void): () => void {
    return subscribeDeep(this.host, this.key, listener)
  }

  /**
   * Calls `listener` with what changed each time the list's own elements
   * change (not what is nested in them: observe those handles): a delta
   * (retain, insert with who placed the elements, delete) from the list as
   * last told to the list now, and whether this client made it. A moved
   * element is deleted at its old place and inserted at its new one. Edits of
   * one `space.transact` come as one change. Returns the function that
   * stops it.
   */
  observe(listener: (change: ListChange) => void): () => void {
    const plain = (e: ListEntry): unknown => ('value' in e ? e.value : plainObject(nestedKey(this.key, e.name, 1, e.object), e.object, (k) => this.host.prospective(k)))
    this.feed ??= new ChangeFeed(this.host, this.key, () => listState(this.view()), (a, b, local) => listChange(a, b, local, (id) => this.host.signedId(id), plain))
    return this.feed.listen(listener)
  }

  /** Prospective length. */
  get length(): number {
    return this.view()?.length ?? 0
  }

  /**
   * An anchor for position `index` (0 to `length`, between elements): a
   * cursor, a drop target or a selection end that stays beside the same
   * element while this client and others insert, delete and move, follows
   * that element when it moves, and stays where it was once it is deleted.
   * `position(anchor)` says where it is now. A short JSON-safe string that
   * still resolves after a reload (see {@link TextHandle.anchor}). By default it
   * sticks to the element before it; `{ assoc: 'after' }` to the one after
   * it (see {@link AnchorOptions}).
   *
   * @throws SteadError `malformed` for an index that is not an integer from 0 to `length`, or an `assoc` other than 'before' and 'after'.
   */
  anchor(index: number, options?: AnchorOptions): string {
    return takeAnchor(this.host, 'l', this.key, this.view(), index, options)
  }

  /**
   * Where an anchor of this list (see `anchor`) is now (0 to `length`).
   * Before the element it sticks to reaches this client, it is the index
   * the anchor was taken at, within the list.
   *
   * @throws SteadError `malformed` for anything `anchor` did not return, and an anchor of another object.
   */
  position(anchor: string): number {
    return anchorPosition(this.host, 'l', this.key, this.view(), anchor)
  }

  /** The prospective element at `index` as plain data, or undefined. */
  get(index: number): unknown {
    return this.value[index]
  }

  /** The map held by the element at `index`, if it holds one. */
  mapAt(index: number, options: { maxKeys?: number } & ObjectOptions = {}): MapHandle | undefined {
    const e = this.view()?.value()[index]
    return e && 'object' in e && e.object[0] === 'm' ? this.opener.map(nestedKey(this.key, e.name, 1, e.object), options) : undefined
  }

  /** The text held by the element at `index`, if it holds one. */
  textAt(index: number, options: { maxLength?: number } & ObjectOptions = {}): TextHandle | undefined {
    const e = this.view()?.value()[index]
    return e && 'object' in e && e.object[0] === 't' ? this.opener.text(nestedKey(this.key, e.name, 1, e.object), options) : undefined
  }

  /**
   * Inserts `values` at `index` (0 to `length`), in order. Regular: shows
   * at once and resolves `stored` once durable on this device.
   *
   * @throws SteadError `malformed` (the promise rejects) for an index outside the list, no values, or a value that is not msgpack data; `too-large` past 10,000 values; {@link ClosedError} after the space closed.
   */
  insert(index: number, values: readonly T[]): Promise<UpdateResult>
  /**
   * Inserts as a safe update: resolves once the stable order decided it (`rejected` with `invariant` past `maxLength`).
   *
   * @throws SteadError as the regular form, and `timeout` or `aborted` as `options` say.
   */
  insert(index: number, values: readonly T[], options: { safe: true } & WaitOptions): Promise<SafeResult>
  /**
   * Inserts, regular or safe as `options.safe` says.
   *
   * @throws SteadError as the other forms.
   */
  insert(index: number, values: readonly T[], options?: UpdateOptions): Promise<UpdateResult>
  insert(index: number, values: readonly T[], options?: UpdateOptions): Promise<UpdateResult> {
    return guarded(() => {
      const view = this.view() ?? new CollabList()
      this.checkIndex(index, view.length + 1, 'insert at')
      if (!Array.isArray(values) || values.length === 0) throw new SteadError('malformed', `${this.key}: insert needs an array of at least one value`)
      if (values.length > MAX_INSERT) throw new SteadError('too-large', `${this.key}: an insert carries at most ${MAX_INSERT} values, got ${values.length}`)
      for (const v of values) {
        const problem = validateRegisterValue(v)
        if (problem) throw new SteadError('malformed', `${this.key}: ${problem}`)
      }
      return this.send(view.insertOp(index, values), options)
    })
  }

  /** Appends one value (see `insert`). */
  push(value: T, options?: UpdateOptions): Promise<UpdateResult> {
    return this.insert(this.length, [value], options)
  }

  /**
   * Inserts an element holding a new nested map at `index` and returns its
   * handle (a regular update; its outcome reaches the space's `onError`).
   *
   * @throws SteadError `malformed` for an index outside the list or bad options; {@link ClosedError} after `close()`.
   */
  insertMap(index: number, options: { maxKeys?: number } & ObjectOptions = {}): MapHandle {
    return this.insertObject(index, 'm', (key) => this.opener.map(key, options))
  }

  /** Inserts an element holding a new nested text at `index` and returns its handle (see `insertMap`). */
  insertText(index: number, options: { maxLength?: number } & ObjectOptions = {}): TextHandle {
    return this.insertObject(index, 't', (key) => this.opener.text(key, options))
  }

  /**
   * Moves the element at `from` so that it ends at index `to`. Regular:
   * shows at once.
   *
   * @throws SteadError `malformed` (the promise rejects) for an index outside the list; {@link ClosedError} after the space closed.
   */
  move(from: number, to: number): Promise<UpdateResult>
  /**
   * Moves as a safe update.
   *
   * @throws SteadError as the regular form, and `timeout` or `aborted` as `options` say.
   */
  move(from: number, to: number, options: { safe: true } & WaitOptions): Promise<SafeResult>
  /**
   * Moves, regular or safe as `options.safe` says.
   *
   * @throws SteadError as the other forms.
   */
  move(from: number, to: number, options?: UpdateOptions): Promise<UpdateResult>
  move(from: number, to: number, options?: UpdateOptions): Promise<UpdateResult> {
    return guarded(() => {
      const view = this.view() ?? new CollabList()
      this.checkIndex(from, view.length, 'move from')
      this.checkIndex(to, view.length, 'move to')
      return this.send(view.moveOp(from, to) as ListOp, options)
    })
  }

  /**
   * Deletes `count` (default 1) elements from `index`. Regular: shows at once.
   *
   * @throws SteadError `malformed` (the promise rejects) for a range outside the list or a count below 1; {@link ClosedError} after the space closed.
   */
  delete(index: number, count?: number): Promise<UpdateResult>
  /**
   * Deletes as a safe update.
   *
   * @throws SteadError as the regular form, and `timeout` or `aborted` as `options` say.
   */
  delete(index: number, count: number, options: { safe: true } & WaitOptions): Promise<SafeResult>
  /**
   * Deletes, regular or safe as `options.safe` says.
   *
   * @throws SteadError as the other forms.
   */
  delete(index: number, count?: number, options?: UpdateOptions): Promise<UpdateResult>
  delete(index: number, count = 1, options?: UpdateOptions): Promise<UpdateResult> {
    return guarded(() => {
      const view = this.view() ?? new CollabList()
      this.checkIndex(index, view.length, 'delete from')
      if (!Number.isSafeInteger(count) || count < 1 || index + count > view.length) throw new SteadError('malformed', `${this.key}: cannot delete ${String(count)} elements from ${index} of a list of ${view.length}`)
      return this.send(view.deleteOp(index, count) as ListOp, options)
    })
  }

  private insertObject<H extends Handle>(index: number, code: string, open: (key: string) => H): H {
    const view = this.view() ?? new CollabList()
    this.checkIndex(index, view.length + 1, 'insert at')
    const name = randomName()
    const handle = open(nestedKey(this.key, name, 1, [code]))
    this.send(view.insertObjectOp(index, encodeDeclaration(handle.declaration), name)).catch(() => undefined)
    return handle
  }

  private view(): CollabList | undefined {
    return this.host.prospective(this.key) as CollabList | undefined
  }

  private checkIndex(index: number, end: number, what: string): void {
    if (!Number.isSafeInteger(index) || index < 0 || index >= end) throw new SteadError('malformed', `${this.key}: cannot ${what} ${String(index)} in a list of ${this.length}`)
  }

  private plain(l: CollabList | undefined, read: (key: string) => AnyCrdt | undefined): unknown[] {
    return (l?.value() ?? []).map((e: ListEntry) => ('value' in e ? e.value : plainObject(nestedKey(this.key, e.name, 1, e.object), e.object, read)))
  }
}
