import { CollabText, SteadError, type TextOp } from '@stead/core'
import { anchorPosition, takeAnchor, type AnchorOptions } from './anchors.ts'
import { ChangeFeed, textChange, textState, type TextChange, type TextState } from './changes.ts'
import { Handle, guarded } from './handles.ts'
import type { SafeResult, UpdateOptions, UpdateResult, WaitOptions } from '../types.ts'

/** Most code points one insert may carry (an envelope holds at most 1 MiB). */
export const MAX_TEXT_INSERT = 200_000

/**
 * Collaborative text, as Y.Text users know it. Open it with
 * `space.text(key)`. Positions count Unicode code points (an emoji is one);
 * two people typing at one place never interleave (FugueMax), and a
 * delete removes exactly the characters its author saw.
 */
export class TextHandle extends Handle {
  private feed: ChangeFeed<TextState, TextChange> | undefined

  /** Prospective text: this client's edits at once, and every edit it received. */
  get value(): string {
    return this.view()?.value() ?? ''
  }

  /** Stable text: as every correct replica has it in the stable order, within `maxLength`. */
  get stable(): string {
    return (this.host.stable(this.key) as CollabText | undefined)?.value() ?? ''
  }

  /** Prospective length in code points. */
  get length(): number {
    return this.view()?.length ?? 0
  }

  /**
   * An anchor for code point position `index` (0 to `length`): a cursor or
   * a selection end that stays beside the same character while this client
   * and others edit, as Yjs's relative positions, and beside where it was
   * once that character is deleted. `position(anchor)` says where it is
   * now. It is a short JSON-safe string that still resolves after a
   * reload: keep it in localStorage or a presence state (others resolve an
   * anchor beside a character typed here once that edit is signed: share
   * anchors taken after its `stored`). By default it sticks to the
   * character before it; `{ assoc: 'after' }` sticks to the one after it,
   * so what anyone types at it lands in front of it (see
   * {@link AnchorOptions}).
   *
   * @throws SteadError `malformed` for an index that is not an integer from 0 to `length`, or an `assoc` other than 'before' and 'after'.
   */
  anchor(index: number, options?: AnchorOptions): string {
    return takeAnchor(this.host, 't', this.key, this.view(), index, options)
  }

  /**
   * Where an anchor of this text (see `anchor`) is now, in code points (0
   * to `length`). Before the character it sticks to reaches this client
   * (another client's anchor, sent ahead of its edit), it is the index the
   * anchor was taken at, within the text. Anchors of earlier versions (''
   * and a bare character id) still work.
   *
   * @throws SteadError `malformed` for anything `anchor` did not return, and an anchor of another object.
   */
  position(anchor: string): number {
    return anchorPosition(this.host, 't', this.key, this.view(), anchor)
  }

  /**
   * Calls `listener` with what changed each time the prospective text
   * changes: a delta (retain, insert with its author, delete; code points,
   * as Y.Text's and Quill's) from the text as last told to the text now,
   * and whether this client made it. An editor applies it instead of
   * diffing. Edits of one `space.transact` come as one change. Returns the
   * function that stops it.
   *
   * Each change costs a pass over the text while any listener is on
   * (median 7 ms for a 100,000-character text on one core of the 2-core
   * test machine), so observe long texts only where an editor needs it.
   */
  observe(listener: (change: TextChange) => void): () => void {
    this.feed ??= new ChangeFeed(this.host, this.key, () => textState(this.view()), (a, b, local) => textChange(a, b, local, (id) => this.host.signedId(id), this.view()))
    return this.feed.listen(listener)
  }

  /** The prospective text. */
  override toString(): string {
    return this.value
  }

  /**
   * Inserts `text` at code point `index` (0 to `length`). Regular: shows
   * in `value` at once and resolves `stored` once durable on this device.
   *
   * @throws SteadError `malformed` (the promise rejects) for an index outside the text or an empty or non-string text, `too-large` over 200,000 code points; {@link ClosedError} after the space closed.
   */
  insert(index: number, text: string): Promise<UpdateResult>
  /**
   * Inserts `text` as a safe update: resolves once the stable order decided it (`rejected` with `invariant` past `maxLength`).
   *
   * @throws SteadError as the regular form, and `timeout` or `aborted` as `options` say.
   */
  insert(index: number, text: string, options: { safe: true } & WaitOptions): Promise<SafeResult>
  /**
   * Inserts `text`, regular or safe as `options.safe` says (see the other forms).
   *
   * @throws SteadError as the other forms.
   */
  insert(index: number, text: string, options?: UpdateOptions): Promise<UpdateResult>
  insert(index: number, text: string, options?: UpdateOptions): Promise<UpdateResult> {
    return guarded(() => {
      if (typeof text !== 'string' || text.length === 0) throw new SteadError('malformed', `${this.key}: insert needs a non-empty string`)
      const view = this.view() ?? new CollabText()
      this.checkIndex(index, view.length, 'insert at')
      const points = [...text].length
      if (points > MAX_TEXT_INSERT) throw new SteadError('too-large', `${this.key}: an insert carries at most ${MAX_TEXT_INSERT} code points, got ${points}; split it`)
      return this.send(view.insertOp(index, text), options)
    })
  }

  /**
   * Deletes `count` (at least 1) code points from `index`. Regular: shows
   * at once and resolves `stored` once durable on this device.
   *
   * @throws SteadError `malformed` (the promise rejects) for a range outside the text or a count below 1; {@link ClosedError} after the space closed.
   */
  delete(index: number, count: number): Promise<UpdateResult>
  /**
   * Deletes as a safe update: resolves once the stable order decided it.
   *
   * @throws SteadError as the regular form, and `timeout` or `aborted` as `options` say.
   */
  delete(index: number, count: number, options: { safe: true } & WaitOptions): Promise<SafeResult>
  /**
   * Deletes, regular or safe as `options.safe` says (see the other forms).
   *
   * @throws SteadError as the other forms.
   */
  delete(index: number, count: number, options?: UpdateOptions): Promise<UpdateResult>
  delete(index: number, count: number, options?: UpdateOptions): Promise<UpdateResult> {
    return guarded(() => {
      const view = this.view() ?? new CollabText()
      this.checkIndex(index, view.length, 'delete from')
      if (!Number.isSafeInteger(count) || count < 1 || index + count > view.length) {
        throw new SteadError('malformed', `${this.key}: cannot delete ${String(count)} code points from ${index} of a text of ${view.length}`)
      }
      return this.send(view.deleteOp(index, count) as TextOp, options)
    })
  }

  private view(): CollabText | undefined {
    return this.host.prospective(this.key) as CollabText | undefined
  }

  private checkIndex(index: number, length: number, what: string): void {
    if (!Number.isSafeInteger(index) || index < 0 || index > length) throw new SteadError('malformed', `${this.key}: cannot ${what} ${String(index)} in a text of ${length} code points`)
  }
}
