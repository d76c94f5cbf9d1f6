import type { TextHandle, UndoManager } from '@stead/client'
import { Plugin, TextSelection, type EditorState } from 'prosemirror-state'
import type { EditorView } from 'prosemirror-view'
import { docPos, flatIndex, flatLength } from './flat.ts'

/** The `meta` key under which an undo item keeps the editor's selection, as anchors of the text. */
const SELECTION = '@stead/prosemirror:selection'

/** Which of undo and redo a key press asks for, if either: Mod-z, Mod-y, Mod-Shift-z (Mod: Cmd on a Mac, Ctrl elsewhere). */
function wanted(event: KeyboardEvent): 'undo' | 'redo' | undefined {
  if (!(event.ctrlKey || event.metaKey) || event.altKey) return undefined
  const key = event.key.toLowerCase()
  if (key === 'z') return event.shiftKey ? 'redo' : 'undo'
  if (key === 'y' && !event.shiftKey) return 'redo'
  return undefined
}

/**
 * Undo and redo for an editor bound with {@link steadRichText}, over
 * Stead's undo manager (`space.undoManager([text])`): Mod-z undoes, Mod-y
 * and Mod-Shift-z redo, this user's own edits only (typing, paragraphs,
 * formatting), never another user's; typing close together is one step
 * (the manager's `captureTimeout`), and moving the caret ends a step. Put it before steadRichText in the
 * plugins. Each step keeps the selection the editor had just before it, as anchors beside the characters, and puts
 * it back on undo and redo wherever others' edits moved those characters.
 * The keys are taken from the browser even when there is nothing to undo
 * (its own undo of the editable DOM would fight the binding). Use it
 * instead of prosemirror-history: the binding's own transactions carry
 * `addToHistory: false`, so that history would know only this editor's
 * keystrokes.
 *
 * @param manager The text's undo manager.
 * @param text The text the editor shows (the one given to {@link steadRichText}).
 * @returns The plugin.
 */
export function steadUndo(manager: UndoManager, text: TextHandle): Plugin {
  return new Plugin({
    props: {
      handleKeyDown(_view, event) {
        const which = wanted(event)
        if (!which) return false
        if (which === 'undo') manager.undo()
        else manager.redo()
        return true
      },
    },
    view(view) {
      // The state before the latest transaction: an item is added while the binding (after this
      // plugin) sends the edit, so the view already shows it; the selection to keep is the one before.
      let before: EditorState = view.state
      const stop = [
        manager.on('stack-item-added', ({ stackItem }) => {
          if (!view.hasFocus()) return
          const { doc, selection } = before
          const length = text.length
          const at = (pos: number): string => text.anchor(Math.min(flatIndex(doc, pos), length))
          stackItem.meta.set(SELECTION, { anchor: at(selection.anchor), head: at(selection.head) })
        }),
        manager.on('stack-item-popped', ({ stackItem }) => {
          const kept = stackItem.meta.get(SELECTION) as { anchor: string; head: string } | undefined
          // The text shows the undo already; the editor does once the binding dispatched it, in this same turn.
          if (kept) queueMicrotask(() => restore(view, text, kept))
        }),
      ]
      return {
        update: (now, previous) => {
          // A caret moved without an edit ends the step being typed, as editors do: what comes next is a step of its own.
          if (previous.doc.eq(now.state.doc) && !previous.selection.eq(now.state.selection)) manager.stopCapturing()
          before = previous
        },
        destroy: () => stop.forEach((s) => s()),
      }
    },
  })
}

function restore(view: EditorView, text: TextHandle, kept: { anchor: string; head: string }): void {
  if (view.isDestroyed) return
  const doc = view.state.doc
  const pos = (anchor: string): number | undefined => {
    try {
      return docPos(doc, Math.min(text.position(anchor), flatLength(doc)))
    } catch {
      return undefined
    }
  }
  const anchor = pos(kept.anchor)
  const head = pos(kept.head)
  if (anchor === undefined || head === undefined) return
  view.dispatch(view.state.tr.setSelection(TextSelection.create(doc, anchor, head)).scrollIntoView())
}
