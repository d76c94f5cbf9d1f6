import { ClosedError, SteadError, type Presence, type TextChange, type TextDelta, type TextHandle, type UpdateResult } from '@stead/client'
import type { Node, Schema } from 'prosemirror-model'
import { TextSelection, type EditorState, type PluginKey, type Selection, type Transaction } from 'prosemirror-state'
import type { DecorationSet, EditorView } from 'prosemirror-view'
import { cursorState, type CursorState } from './cursors.ts'
import { flatLength } from './flat.ts'
import { stepOps, transactionOps, type LocalOp } from './local.ts'
import type { SchemaMarks } from './marks.ts'
import { applyDelta, docOfSpans, replaceDiff } from './remote.ts'
import { Sender } from './send.ts'

/** A document-changing transaction the plugin saw, and whether the binding made it from the Stead text (then it is not sent back). */
export interface Entry {
  readonly tr: Transaction
  readonly remote: boolean
}

/** The plugin's state: the transactions since the binding last sent (see `Shared.sentId`), and the other clients' cursors. */
export interface SyncState {
  /** Grows with each document change; the binding has sent everything up to the state whose id it recorded. */
  readonly id: number
  readonly entries: readonly Entry[]
  readonly cursors: DecorationSet
}

/** What one plugin's bindings share (one view at a time; a reconfigured view makes a new binding that carries on). */
export interface Shared {
  /** The id of the plugin state last sent: a transaction applied on it starts a new list of entries. */
  sentId: number
  /** A source of ids. */
  nextId: number
  /** The document the Stead text is known to show (undefined before the first view). */
  synced: Node | undefined
  /** The view bound now. */
  view: EditorView | undefined
}

/** What the binding works with, fixed when the plugin is made. */
export interface Context {
  readonly text: TextHandle
  readonly key: PluginKey<SyncState>
  readonly schema: Schema
  readonly marks: SchemaMarks
  readonly shared: Shared
  readonly presence: Presence | undefined
  readonly user: { readonly name: string; readonly colour: string } | undefined
  readonly cursorField: string
  readonly onError: (err: unknown) => void
}

/** The meta a transaction of the binding carries under the plugin's key. */
export interface Meta {
  /** Made from the Stead text (a remote change, or the document rebuilt): not sent back, and cursors are placed again. */
  readonly remote?: boolean
  /** Presence changed: cursors are placed again. */
  readonly cursors?: boolean
}

/**
 * Keeps one EditorView and a Stead text in step (the plugin's view). The
 * document's changes are sent in view updates, right after they are
 * applied, step by step (see stepOps); the text's changes made elsewhere
 * (other clients, other tabs, code that edits the handle, an undo
 * manager) come through `observe` and are applied as one transaction
 * flagged remote. The view must apply what is dispatched at once (as
 * EditorView's default `dispatch` does): the binding relies on the
 * document and the text agreeing between two events.
 */
export class Binding {
  private readonly view: EditorView
  private readonly ctx: Context
  private readonly sender: Sender
  /** Change events the text told while the binding was editing it: its own edits, never applied back. */
  private readonly heard: TextChange[] = []
  private sending = false
  private destroyed = false
  private resyncDue = false
  private published: CursorState | undefined
  private readonly stopText: () => void
  private readonly stopPresence: (() => void) | undefined

  /** @throws SteadError `malformed` when the plugin is already bound to another live view. */
  constructor(view: EditorView, ctx: Context) {
    const { shared } = ctx
    if (shared.view && shared.view !== view) throw new SteadError('malformed', '@stead/prosemirror: this plugin is bound to another EditorView; make one steadRichText plugin per view')
    this.view = view
    this.ctx = ctx
    this.sender = new Sender(ctx.text, ctx.marks, this.heard)
    shared.view = view
    this.stopText = ctx.text.observe((change) => this.textChanged(change))
    this.stopPresence = ctx.presence?.subscribe((change) => {
      if (!change.local) this.refreshCursors()
    })
    if (ctx.user) this.presenceUpdate({ name: ctx.user.name, colour: ctx.user.colour })
    if (shared.synced === undefined) {
      // The first view: the document shows the Stead text, whatever the state was made with (nothing of it is sent).
      shared.synced = view.state.doc
      shared.sentId = (ctx.key.getState(view.state) as SyncState).id
      this.resync()
    } else {
      this.flush()
      this.refreshCursors()
    }
    this.publishCursor()
  }

  /** After each view update: sends the document's new changes, then publishes the cursor if this client moved it. */
  update(prevState: EditorState): void {
    if (this.destroyed) return
    const sent = this.flush()
    // Another's change too: text typed at the caret leaves the published anchor standing after it.
    const changed = !prevState.selection.eq(this.view.state.selection) || prevState.doc !== this.view.state.doc
    if (sent || changed) this.publishCursor()
  }

  destroy(): void {
    if (this.destroyed) return
    this.destroyed = true
    this.stopText()
    this.stopPresence?.()
    if (this.ctx.shared.view === this.view) this.ctx.shared.view = undefined
    if (this.published) this.presenceUpdate({ [this.ctx.cursorField]: null })
  }

  /**
   * Sends what changed in the document since it last matched the text:
   * step by step when the plugin saw each transaction from that document,
   * else (a state the app replaced) as the difference from the text's.
   * Returns whether it sent anything.
   */
  private flush(): boolean {
    const { shared, key } = this.ctx
    const state = key.getState(this.view.state) as SyncState
    const doc = this.view.state.doc
    if (state.id === shared.sentId && doc === shared.synced) return false
    let ops: LocalOp[][] = []
    if (state.id !== shared.sentId && chained(state.entries, shared.synced, doc)) {
      for (const { tr, remote } of state.entries) if (!remote) ops.push(transactionOps(tr, this.ctx.marks))
    } else {
      ops = [stepOps(this.textDoc(), doc, undefined, this.ctx.marks)]
    }
    shared.sentId = state.id
    shared.synced = doc
    const done = this.send(ops.flat())
    if (this.ctx.text.length !== flatLength(doc)) this.scheduleResync()
    if (done.length) void Promise.allSettled(done).then(() => this.publishCursor(true))
    return done.length > 0
  }

  private send(ops: readonly LocalOp[]): Promise<UpdateResult>[] {
    if (ops.length === 0) return []
    this.sending = true
    let done: Promise<UpdateResult>[]
    try {
      done = this.sender.send(ops)
    } finally {
      this.sending = false
      this.heard.length = 0
    }
    for (const p of done) {
      p.catch((err: unknown) => {
        // The text refused an edit: show the text as it is, and say why.
        this.scheduleResync()
        this.ctx.onError(err)
      })
    }
    return done
  }

  private textChanged(change: TextChange): void {
    if (this.sending) {
      this.heard.push(change)
      return
    }
    if (this.destroyed) return
    this.applyText(change.delta)
  }

  /** Applies a change of the text made elsewhere, as one transaction; rebuilds the changed part from the text if the delta does not fit. */
  private applyText(delta: readonly TextDelta[]): void {
    const before = this.view.state.doc
    readPendingSelection(this.view)
    if (before !== this.ctx.shared.synced || this.view.state.doc !== before) {
      // Changes of the document not sent before this change came: the delta was not made from this document.
      this.resync()
      return
    }
    const tr = this.view.state.tr
    try {
      applyDelta(tr, delta, this.ctx.marks)
      if (flatLength(tr.doc) !== this.ctx.text.length) throw new RangeError('the delta left another length than the text has')
    } catch {
      this.resync()
      return
    }
    this.dispatchRemote(tr)
  }

  /** Makes the document show the text as it is (after sending what the document has that the text lacks). */
  private resync(): void {
    this.resyncDue = false
    if (this.destroyed) return
    readPendingSelection(this.view)
    this.flush()
    const tr = this.view.state.tr
    replaceDiff(tr, this.textDoc())
    this.dispatchRemote(tr)
  }

  /** A resync once the current update is over (never a dispatch inside a view update). */
  private scheduleResync(): void {
    if (this.resyncDue) return
    this.resyncDue = true
    queueMicrotask(() => {
      if (this.resyncDue) this.resync()
    })
  }

  private dispatchRemote(tr: Transaction): void {
    keepCaretLeft(this.view.state.selection, tr)
    const meta: Meta = { remote: true }
    this.view.dispatch(tr.setMeta(this.ctx.key, meta).setMeta('addToHistory', false))
    // The view applied it (and the plugin recorded it as remote): the text and the document agree again.
    this.flush()
  }

  private refreshCursors(): void {
    if (this.destroyed || !this.ctx.presence) return
    // Redrawn decorations make the view write its selection into the page, so it must have read the browser's first.
    readPendingSelection(this.view)
    const meta: Meta = { cursors: true }
    this.view.dispatch(this.view.state.tr.setMeta(this.ctx.key, meta))
  }

  /** The document the text shows now. */
  private textDoc(): Node {
    return docOfSpans(this.ctx.text.spans, this.ctx.schema, this.ctx.marks)
  }

  /**
   * Puts this client's selection in presence as anchors of the text, if
   * they changed. Called after local changes and again once they are
   * stored: anchors taken right after typing name unsigned characters that
   * only this client can resolve; taken again after `stored`, they name the
   * signed ones everyone can.
   */
  private publishCursor(stored = false): void {
    if (this.destroyed || !this.ctx.presence || this.view.state.doc !== this.ctx.shared.synced) return
    let cursor: CursorState
    try {
      cursor = cursorState(this.ctx.text, this.view.state.doc, this.view.state.selection)
    } catch {
      // The text and the document disagree for a moment (a resync is due): the next update publishes.
      return
    }
    if (this.published && this.published.anchor === cursor.anchor && this.published.head === cursor.head) return
    // What others show still is where this caret is (typing at a caret leaves its anchor beside the same
    // character): no message. One that resolves elsewhere (another's text typed at the caret, which the
    // editor puts after it) is published again.
    // Not once the edits are stored: then the anchors are taken again to name signed characters.
    if (!stored && this.published && this.resolvesTo(this.published, cursor)) return
    this.published = cursor
    this.presenceUpdate({ [this.ctx.cursorField]: { anchor: cursor.anchor, head: cursor.head } })
  }

  /** Whether the published anchors stand where the new ones do (and so where the selection is). */
  private resolvesTo(published: CursorState, now: CursorState): boolean {
    const { text } = this.ctx
    try {
      return text.position(published.anchor) === text.position(now.anchor) && text.position(published.head) === text.position(now.head)
    } catch {
      return false
    }
  }

  private presenceUpdate(fields: Record<string, { anchor: string; head: string } | string | null>): void {
    try {
      this.ctx.presence?.update(fields)
    } catch (err) {
      // A closed space shows nothing any more: nothing to publish or withdraw.
      if (!(err instanceof ClosedError)) this.ctx.onError(err)
    }
  }
}

/**
 * Makes the view read a selection the browser changed but has not told it
 * of yet (a caret moved by a key: the browser's selectionchange event
 * comes later, as a task of its own). A transaction dispatched before it
 * would write the view's older selection back into the page, and the
 * user's caret would jump back to where it was: Ctrl-Home, another's
 * change, Shift-End would select from the old place. Any transaction the
 * binding dispatches does: another's change, and also another's cursor
 * drawn anew (Shift-End, then Bob's caret moves: the selection is lost
 * and Ctrl-B bolds nothing). The view reads the
 * selection on that event, so it is told now.
 */
function readPendingSelection(view: EditorView): void {
  if (view.hasFocus()) view.dom.ownerDocument.dispatchEvent(new Event('selectionchange'))
}

/** Whether `entries` lead from `from` to `to`, each transaction starting where the one before ended. */
function chained(entries: readonly Entry[], from: Node | undefined, to: Node): boolean {
  let doc = from
  for (const { tr } of entries) {
    if (tr.before !== doc) return false
    doc = tr.doc
  }
  return doc === to
}

/**
 * Maps the user's selection through another client's change so that text
 * inserted exactly at a caret lands after it (and at a selection's edges,
 * outside it): the caret stays beside what this user typed last. Mapped the
 * default way, it would move past the other's first character, and both
 * typing at one place would interleave key by key, although the text
 * itself never interleaves two runs typed at one place.
 */
function keepCaretLeft(before: Selection, tr: Transaction): void {
  if (!(before instanceof TextSelection) || tr.steps.length === 0) return
  const forward = before.anchor <= before.head
  const from = tr.mapping.map(before.from, before.empty ? -1 : 1)
  const to = before.empty ? from : Math.max(from, tr.mapping.map(before.to, -1))
  const $from = tr.doc.resolve(from)
  const $to = tr.doc.resolve(to)
  // Only where text can be (the default mapping already handles a caret pushed out of its paragraph).
  if (!$from.parent.inlineContent || !$to.parent.inlineContent) return
  tr.setSelection(TextSelection.between(forward ? $from : $to, forward ? $to : $from))
}
