import type { EditorState, Extension } from '@codemirror/state'
import { ViewPlugin, keymap, type EditorView, type PluginValue, type ViewUpdate } from '@codemirror/view'
import type { TextHandle, UndoManager } from '@stead/client'
import { Positions } from './positions.ts'

/** The `meta` key under which an undo item keeps the editor's selection, as anchors of the text. */
const SELECTION = '@stead/codemirror:selection'

/** Takes the latest undo item back (see `UndoManager.undo`); true when something was undone. */
function undoCommand(manager: UndoManager): (view: EditorView) => boolean {
  return () => manager.undo()
}

/** Takes the latest undone item back (see `UndoManager.redo`). */
function redoCommand(manager: UndoManager): (view: EditorView) => boolean {
  return () => manager.redo()
}

/**
 * Keeps the selection with each undo item and puts it back when the item
 * is undone or redone (as y-codemirror does with Yjs's UndoManager): an
 * item keeps the selection the editor had just before the item's first
 * edit, as anchors beside its characters, so it lands where it belongs
 * whatever others typed since.
 */
class SelectionKeeper implements PluginValue {
  private readonly stop: Array<() => void>
  private readonly view: EditorView
  private before: EditorState
  private readonly text: TextHandle
  private readonly manager: UndoManager

  constructor(view: EditorView, manager: UndoManager, text: TextHandle) {
    this.view = view
    this.manager = manager
    this.before = view.state
    this.text = text
    this.stop = [
      manager.on('stack-item-added', ({ stackItem }) => {
        if (!view.hasFocus) return
        // The state before the latest update: an item is added while the binding (after this
        // plugin) sends the edit, so the editor already shows it; the selection to keep is the one before.
        const sel = this.before.selection.main
        const at = Positions.of(this.before.doc)
        const length = this.text.length
        const point = (unit: number): number => Math.min(at.toPoints(unit), length)
        stackItem.meta.set(SELECTION, { anchor: this.text.anchor(point(sel.anchor)), head: this.text.anchor(point(sel.head)) })
      }),
      manager.on('stack-item-popped', ({ stackItem }) => {
        const kept = stackItem.meta.get(SELECTION) as { anchor: string; head: string } | undefined
        if (!kept) return
        // The text shows the undo already; the editor does once the binding dispatched it, in this same turn.
        queueMicrotask(() => this.restore(kept))
      }),
    ]
  }

  private restore(kept: { anchor: string; head: string }): void {
    const at = Positions.of(this.view.state.doc)
    const units = (anchor: string): number => {
      try {
        return Math.min(at.toUnits(Math.min(this.text.position(anchor), at.points)), this.view.state.doc.length)
      } catch {
        return this.view.state.selection.main.head
      }
    }
    this.view.dispatch({ selection: { anchor: units(kept.anchor), head: units(kept.head) }, scrollIntoView: true })
  }

  update(update: ViewUpdate): void {
    // A caret moved without an edit ends the step being typed, as editors do: what comes next is a step of its own.
    if (update.selectionSet && !update.docChanged) this.manager.stopCapturing()
    this.before = update.startState
  }

  destroy(): void {
    for (const s of this.stop) s()
  }
}

/**
 * Undo and redo for an editor bound with {@link steadText}, over Stead's
 * undo manager (`space.undoManager(text)`): Mod-z undoes, Mod-y and
 * Mod-Shift-z redo, this user's own edits only (never another user's),
 * typing close together as one step (the manager's `captureTimeout`), and
 * each step puts the selection back where it was. Put it before other
 * keymaps that bind the same keys (CodeMirror's `historyKeymap`): use one
 * or the other.
 *
 * @param manager The text's undo manager: `space.undoManager([text])`, or one over more objects.
 * @param text The text the editor shows (the one given to {@link steadText}).
 * @returns The extension.
 * @example
 * ```ts
 * const undo = space.undoManager([text])
 * EditorState.create({ doc: text.value, extensions: [steadUndo(undo, text), steadText(text)] })
 * ```
 */
export function steadUndo(manager: UndoManager, text: TextHandle): Extension {
  return [
    keymap.of([
      { key: 'Mod-z', run: undoCommand(manager), preventDefault: true },
      { key: 'Mod-y', run: redoCommand(manager), preventDefault: true },
      { key: 'Mod-Shift-z', run: redoCommand(manager), preventDefault: true },
    ]),
    ViewPlugin.define((view) => new SelectionKeeper(view, manager, text)),
  ]
}
