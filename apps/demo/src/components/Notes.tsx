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

  const remember = () => {
    const el = area.current
    // Within the text: the textarea can hold a text others changed since, for the moment until it is shown.
    const at = (units: number) => Math.min(points(el?.value ?? '', units), handle.length)
    if (el) caret.current = [handle.anchor(at(el.selectionStart)), handle.anchor(at(el.selectionEnd))]
  }

  const onChange = (e: ChangeEvent<HTMLTextAreaElement>) => {
    const prev = shown.current
    const next = e.target.value
    const { at, removed, inserted } = change(prev, next)
    const from = points(prev, at)
    if (removed > 0) void handle.delete(from, points(prev, at + removed) - from)
    if (inserted) void handle.insert(from, inserted)
    shown.current = handle.value
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
