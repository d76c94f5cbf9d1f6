import { Annotation, Transaction, type ChangeSpec, type Text, type TransactionSpec } from '@codemirror/state'
import type { EditorView } from '@codemirror/view'
import { SteadError, type TextChange, type TextDelta, type TextHandle } from '@stead/client'
import { Positions, codePoints, pieces } from './positions.ts'

/** Marks the transactions the binding dispatches to show the text: they are already in the text, so they are not sent back. */
export const fromText = Annotation.define<boolean>()

/**
 * Most code points one `TextHandle.insert` takes (the client's
 * MAX_TEXT_INSERT, which @stead/client does not export): a longer paste
 * goes in as several inserts.
 */
const MAX_INSERT = 200_000

/** What the sync tells the rest of the binding. */
export interface SyncEvents {
  /** An edit of this editor was refused by the text (the editor is set back to the text) or failed to be stored. */
  failed(err: unknown): void
  /** Every edit this editor made so far is signed and stored: anchors taken now resolve on other clients too. */
  signed(): void
}

/**
 * Keeps a CodeMirror document equal to a Stead text, both ways.
 *
 * The editor's own transactions become `delete`/`insert` calls (code points);
 * every change of the text that this binding did not make is dispatched to
 * the editor. What counts as "made by this binding" is what the text reports
 * while the binding's own calls run (`applying`), not the change's `local`
 * flag: an edit made through the handle elsewhere in this tab (a toolbar
 * button, an undo manager) or forwarded by another tab of this client is
 * local too, yet the editor does not have it.
 *
 * The text is the truth. Whenever the two may differ in a way a delta cannot
 * mend (the text refused an edit, a change arrived while CodeMirror was
 * mid-update and could not take a dispatch, the editor was created with
 * another document), the binding compares them whole and sets the editor to
 * the text (`resync`): that is the only place it reads `text.value`.
 */
export class TextSync {
  /** The binding's own `insert`/`delete` calls are running: the change they cause is already in the editor. */
  private applying = false
  /** The text reported a change while `applying`. */
  private echoed = false
  /**
   * An edit of ours went into the text without the text reporting it yet
   * (the editor was updated inside `space.transact`, which reports once, at
   * its end): the next change may mix it with others, so it is mended by a
   * whole comparison.
   */
  private echoOwed = false
  /** A whole comparison is scheduled; until it runs, the editor's positions may not be the text's. */
  private resyncDue = false
  /** The binding's view update is running: CodeMirror refuses dispatches now. */
  private updating = false
  /** This editor's edits whose promises have not settled (not yet signed and stored). */
  private unsigned = 0
  private destroyed = false
  private readonly stop: () => void

  private readonly view: EditorView
  private readonly text: TextHandle
  private readonly events: SyncEvents

  constructor(view: EditorView, text: TextHandle, events: SyncEvents) {
    this.view = view
    this.text = text
    this.events = events
    this.stop = text.observe((change) => this.changed(change))
    // CodeMirror creates plugins mid-update, where it refuses dispatches: an editor created with another document is set to the text right after.
    if (!sameText(view.state.doc, text)) this.scheduleResync()
  }

  /** Runs `body` as the binding's part of a view update (see `updating`). */
  during(body: () => void): void {
    this.updating = true
    try {
      body()
    } finally {
      this.updating = false
    }
  }

  /**
   * Sends a transaction of the editor (not one of `fromText`) to the text:
   * each change as a delete and an insert, from the last to the first, so
   * the positions of those before it (in the transaction's start document)
   * still hold.
   */
  sendLocal(tr: Transaction): void {
    // The editor is about to be set back to the text; its positions may not be the text's meanwhile.
    if (this.resyncDue || this.destroyed) return
    const doc = tr.startState.doc
    const before = Positions.of(doc)
    if (before.points !== this.text.length) return this.scheduleResync()
    const edits: Array<{ at: number; remove: number; insert: string }> = []
    let growth = 0
    tr.changes.iterChanges((fromA, toA, _fromB, _toB, inserted) => {
      const at = before.toPoints(fromA, 'down')
      const end = before.toPoints(toA, 'up')
      // The text holds code points: a change that cuts a surrogate pair replaces the whole pair.
      const head = before.splitsPair(fromA) ? doc.sliceString(fromA - 1, fromA) : ''
      const tail = before.splitsPair(toA) ? doc.sliceString(toA, toA + 1) : ''
      const insert = head + inserted.toString() + tail
      edits.push({ at, remove: end - at, insert })
      growth += codePoints(insert) - (end - at)
    })
    const expected = this.text.length + growth
    this.applying = true
    this.echoed = false
    try {
      for (let i = edits.length - 1; i >= 0; i--) {
        const { at, remove, insert } = edits[i] as { at: number; remove: number; insert: string }
        if (remove > 0) this.track(this.text.delete(at, remove))
        let next = at
        for (const piece of insert ? pieces(insert, MAX_INSERT) : []) {
          this.track(this.text.insert(next, piece))
          next += codePoints(piece)
        }
      }
    } finally {
      this.applying = false
    }
    // A refused edit (a closed space, a maxLength that holds it back) leaves the text as it was: the editor follows the text.
    if (this.text.length !== expected) this.scheduleResync()
    else if (!this.echoed) this.echoOwed = true
  }

  /** Stops listening to the text; scheduled work does nothing from now on. */
  destroy(): void {
    this.destroyed = true
    this.stop()
  }

  /** A change of the text (any, including the binding's own). */
  private changed(change: TextChange): void {
    if (this.destroyed) return
    if (this.applying) {
      this.echoed = true
      return
    }
    if (this.echoOwed || this.resyncDue) {
      this.echoOwed = false
      return this.resync()
    }
    const changes = toChangeSpecs(this.view.state.doc, change.delta)
    if (changes === undefined) return this.resync()
    if (!this.dispatch({ changes })) this.scheduleResync()
  }

  /** Dispatches what the text holds already; false if CodeMirror is mid-update (a dispatch from inside another plugin or listener) and refused it. */
  private dispatch(spec: TransactionSpec): boolean {
    if (this.updating) return false
    readPendingSelection(this.view)
    try {
      this.view.dispatch({
        ...spec,
        // Not the user's edit: kept out of CodeMirror's undo history (its history() then maps over it, undoing only the user's own edits).
        annotations: [fromText.of(true), Transaction.remote.of(true), Transaction.addToHistory.of(false)],
      })
      return true
    } catch {
      // The only dispatch CodeMirror refuses with a valid spec is one during an update; the whole comparison after it mends the editor.
      return false
    }
  }

  private scheduleResync(): void {
    if (this.resyncDue || this.destroyed) return
    this.resyncDue = true
    queueMicrotask(() => {
      this.resyncDue = false
      if (!this.destroyed) this.resync()
    })
  }

  /** Sets the editor to the text: one change from the first to the last character where they differ. */
  private resync(): void {
    if (this.updating) return this.scheduleResync()
    const has = this.view.state.doc.toString()
    const want = this.text.value
    if (has === want) return
    const { from, to, insert } = difference(has, want)
    if (!this.dispatch({ changes: { from, to, insert } })) {
      this.events.failed(new SteadError('unsupported', '@stead/codemirror: the editor could not be set to the text: CodeMirror refused the dispatch (an update was in progress)'))
    }
  }

  private track(p: Promise<unknown>): void {
    this.unsigned++
    const settled = (): void => {
      this.unsigned--
      if (this.unsigned === 0 && !this.destroyed) this.events.signed()
    }
    p.then(settled, (err: unknown) => {
      settled()
      if (!this.destroyed) this.events.failed(err)
    })
  }
}

/** Whether the editor's document is the text. */
function sameText(doc: Text, text: TextHandle): boolean {
  return Positions.of(doc).points === text.length && doc.toString() === text.value
}

/**
 * A text change as CodeMirror changes of `doc` (the text before it, in
 * UTF-16), or undefined if it does not fit `doc` (the two differ).
 */
export function toChangeSpecs(doc: Text, delta: readonly TextDelta[]): ChangeSpec[] | undefined {
  const pos = Positions.of(doc)
  const changes: ChangeSpec[] = []
  // Code points into the text as it was: every step reads from there.
  let at = 0
  for (const step of delta) {
    if ('retain' in step) {
      at += step.retain
    } else if ('delete' in step) {
      if (at + step.delete > pos.points) return undefined
      changes.push({ from: pos.toUnits(at), to: pos.toUnits(at + step.delete) })
      at += step.delete
    } else {
      if (at > pos.points) return undefined
      changes.push({ from: pos.toUnits(at), insert: step.insert })
    }
  }
  return at > pos.points ? undefined : changes
}

/** The one replacement that turns `a` into `b`: their common start and end kept, never cutting a surrogate pair. */
export function difference(a: string, b: string): { from: number; to: number; insert: string } {
  let start = 0
  while (start < a.length && start < b.length && a.charCodeAt(start) === b.charCodeAt(start)) start++
  if (start > 0 && isHigh(a.charCodeAt(start - 1))) start--
  let end = 0
  while (end < a.length - start && end < b.length - start && a.charCodeAt(a.length - 1 - end) === b.charCodeAt(b.length - 1 - end)) end++
  if (end > 0 && isLow(a.charCodeAt(a.length - end))) end--
  return { from: start, to: a.length - end, insert: b.slice(start, b.length - end) }
}

function isHigh(c: number): boolean {
  return c >= 0xd800 && c <= 0xdbff
}

function isLow(c: number): boolean {
  return c >= 0xdc00 && c <= 0xdfff
}

/**
 * Makes the view read a selection the browser changed but has not told it
 * of yet: a caret moved by a click or a key (the browser's selectionchange
 * event comes later, as a task of its own). A transaction dispatched before
 * that event finds the page's selection elsewhere than the one CodeMirror
 * read last, and CodeMirror puts its own back: the user's caret would jump
 * back to where it was when another's change or cursor came in, and the
 * next key land there. The view reads the selection on that event, so it is
 * told now.
 */
export function readPendingSelection(view: EditorView): void {
  if (view.hasFocus) view.dom.ownerDocument.dispatchEvent(new Event('selectionchange'))
}
