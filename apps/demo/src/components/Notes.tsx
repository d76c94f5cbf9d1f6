import { useLayoutEffect, useRef, type ChangeEvent } from 'react'
import { useText } from '@stead/react'

/** Code points in the first `units` UTF-16 units of `s` (a textarea counts units, a Stead text code points). */
function points(s: string, units: number): number {
  return [...s.slice(0, units)].length
}

/** UTF-16 units in the first `n` code points of `s`. */
function units(s: string, n: number): number {
  return [...s].slice(0, n).join('').length
}

/** Where `next` differs from `prev`: the common prefix, and how much of each follows it before the common suffix. */
function change(prev: string, next: string): { at: number; removed: number; inserted: string } {
  let at = 0
  while (at < prev.length && at < next.length && prev[at] === next[at]) at++
  let tail = 0
  while (tail < prev.length - at && tail < next.length - at && prev[prev.length - 1 - tail] === next[next.length - 1 - tail]) tail++
  return { at, removed: prev.length - at - tail, inserted: next.slice(at, next.length - tail) }
}

/**
 * Shared notes: one collaborative text. Each edit in the textarea becomes a
 * delete and an insert where it changed; the cursor is kept as anchors
 * (beside characters, not at an index), so the others' edits move it along
 * with the text around it.
 */
export function Notes() {
  const { value, stable, handle } = useText('notes', { maxLength: 20_000 })
  const area = useRef<HTMLTextAreaElement>(null)
  const shown = useRef(value)
  const caret = useRef<[string, string]>(['', ''])
  /** Where the caret's start was, in code points of what the textarea showed, when its anchors were taken. */
  const caretAt = useRef(0)

  /** Keeps the selection as anchors; only while the textarea shows the text as the handle has it (else its indexes name other characters). */
  const remember = () => {
    const el = area.current
    if (!el || el.value !== handle.value) return
    const at = (units: number) => Math.min(points(el.value, units), handle.length)
    caret.current = [handle.anchor(at(el.selectionStart)), handle.anchor(at(el.selectionEnd))]
    caretAt.current = at(el.selectionStart)
  }

  const onChange = (e: ChangeEvent<HTMLTextAreaElement>) => {
    const el = e.target
    const prev = shown.current
    const { at, removed, inserted } = change(prev, el.value)
    let from = points(prev, at)
    const count = removed > 0 ? points(prev, at + removed) - from : 0
    // Others' edits came in since the textarea was last shown: the edit was made at the caret, which its anchor
    // holds beside the same characters in the text as the handle has it now.
    if (prev !== handle.value) from = Math.max(0, Math.min(handle.position(caret.current[0]) + (from - caretAt.current), handle.length - count))
    if (count > 0) void handle.delete(from, count)
    if (inserted) void handle.insert(from, inserted)
    // Shown at once as the handle has it, the caret after the edit.
    const now = handle.value
    const caretNow = units(now, Math.min(from + [...inserted].length, [...now].length))
    shown.current = now
    if (el.value !== now) {
      el.value = now
      el.setSelectionRange(caretNow, caretNow)
    }
    remember()
  }

  // Someone else's edit (or this client's, now signed): show the text, the cursor beside the same
  // characters. The handle's value, not this render's: a render can lag behind keys typed since.
  useLayoutEffect(() => {
    const el = area.current
    const now = handle.value
    if (!el || shown.current === now) return
    const [start, end] = caret.current.map((a) => units(now, handle.position(a)))
    shown.current = now
    el.value = now
    if (document.activeElement === el) el.setSelectionRange(start as number, end as number)
  }, [value, handle])

  return (
    <section className="panel notes" data-testid="notes">
      <h2>Notes</h2>
      <textarea ref={area} aria-label="notes" data-testid="notes-text" rows={6} defaultValue={value} onChange={onChange} onSelect={remember} onKeyUp={remember} onClick={remember} placeholder="Type together: edits merge character by character" />
      <p className="hint" data-testid="notes-stable" data-synced={stable === value}>
        {stable === value ? 'stable' : 'syncing…'}
      </p>
    </section>
  )
}
