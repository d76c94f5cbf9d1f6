import { StateEffect } from '@codemirror/state'
import { Decoration, type DecorationSet, type EditorView, type PluginValue, type ViewUpdate } from '@codemirror/view'
import type { Presence, TextHandle } from '@stead/client'
import { LocalCursor, remoteCursors, type CursorUser } from './cursors.ts'
import { TextSync, fromText, readPendingSelection } from './sync.ts'

/** Dispatched when others' presence changed: their cursors are drawn again. */
const peersChanged = StateEffect.define<null>()

/** What a binding needs besides its view (the options, checked). */
export interface BindingConfig {
  readonly text: TextHandle
  readonly presence: Presence | undefined
  readonly user: CursorUser | undefined
  readonly onError: (error: unknown) => void
}

/**
 * One editor bound to one text: the sync of the two documents, and, with
 * presence, this editor's cursor published and others' drawn. One view
 * plugin, so that within a view update the text takes the editor's edits
 * before cursors are resolved against it.
 */
export class Binding implements PluginValue {
  decorations: DecorationSet = Decoration.none
  private readonly view: EditorView
  private readonly config: BindingConfig
  private readonly sync: TextSync
  private readonly cursor: LocalCursor | undefined
  private readonly stopPresence: () => void
  /** Others' presence changed while the view could not take a dispatch: drawn at the next chance. */
  private peersDue = false
  private destroyed = false

  constructor(view: EditorView, config: BindingConfig) {
    this.view = view
    this.config = config
    this.sync = new TextSync(view, config.text, {
      failed: (err) => config.onError(err),
      signed: () => {
        if (this.cursor && this.view.hasFocus) this.cursor.publish(this.view.state, 'signed')
      },
    })
    const presence = config.presence
    if (presence) {
      this.cursor = new LocalCursor(config.text, presence, config.user, config.onError)
      this.stopPresence = presence.subscribe((change) => {
        // This client's own state (the cursor this binding publishes) is not drawn.
        if (!change.local) this.peersMoved()
      })
      this.decorations = remoteCursors(view.state.doc, config.text, presence)
      if (view.hasFocus) this.cursor.publish(view.state, 'moved')
    } else {
      this.cursor = undefined
      this.stopPresence = () => undefined
    }
  }

  update(u: ViewUpdate): void {
    this.sync.during(() => {
      for (const tr of u.transactions) if (tr.docChanged && !tr.annotation(fromText)) this.sync.sendLocal(tr)
      const presence = this.config.presence
      if (!presence || !this.cursor) return
      if (u.view.hasFocus) {
        if (u.docChanged || u.selectionSet || u.focusChanged) this.cursor.publish(u.state, 'moved')
      } else if (u.focusChanged) {
        this.cursor.clear()
      }
      // Remote anchors resolve against the text, which holds the editor's edits by now.
      const redraw = u.docChanged || this.peersDue || u.transactions.some((tr) => tr.effects.some((e) => e.is(peersChanged)))
      if (redraw) {
        this.peersDue = false
        this.decorations = remoteCursors(u.state.doc, this.config.text, presence)
      }
    })
  }

  destroy(): void {
    this.destroyed = true
    this.sync.destroy()
    this.stopPresence()
    this.cursor?.clear()
  }

  /** Others' presence changed: a transaction that only redraws their cursors. */
  private peersMoved(): void {
    if (this.destroyed) return
    // Cursors drawn anew redraw the lines they are in: with the selection the view knows of.
    readPendingSelection(this.view)
    try {
      this.view.dispatch({ effects: peersChanged.of(null) })
    } catch {
      // Mid-update (presence changed from inside another plugin or listener): drawn at the next update, or right after this one.
      if (this.peersDue) return
      this.peersDue = true
      queueMicrotask(() => {
        if (this.peersDue && !this.destroyed) this.peersMoved()
      })
    }
  }
}
