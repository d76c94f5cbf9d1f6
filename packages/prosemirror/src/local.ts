import type { Mark, Node } from 'prosemirror-model'
import { blockAt, blockLength, blockStart, flatIndex, unitsOf, type Unit } from './flat.ts'
import type { MarkChange, SchemaMarks } from './marks.ts'

/** One edit of the Stead text that a change of the document makes, in code points of the text as the edits before it left it. */
export type LocalOp =
  | { readonly kind: 'format'; readonly index: number; readonly length: number; readonly marks: MarkChange }
  | { readonly kind: 'delete'; readonly index: number; readonly count: number }
  | { readonly kind: 'insert'; readonly index: number; readonly units: readonly Unit[] }

/** What a step map tells of the ranges a step replaced (ProseMirror's StepMap). */
export interface ChangedRanges {
  forEach(f: (oldStart: number, oldEnd: number, newStart: number, newEnd: number) => void): void
}

/** Where a change is: document positions `from` to `oldTo` before it, `from` to `newTo` after. */
interface Envelope {
  readonly from: number
  readonly oldTo: number
  readonly newTo: number
}

/** The envelope of the ranges a step map names; where it names none (a mark step), where the two documents differ; undefined when they do not. */
function envelopeOf(before: Node, after: Node, map: ChangedRanges | undefined): Envelope | undefined {
  let from = Infinity
  let oldTo = -Infinity
  let newTo = -Infinity
  map?.forEach((oldStart, oldEnd, _newStart, newEnd) => {
    from = Math.min(from, oldStart)
    oldTo = Math.max(oldTo, oldEnd)
    newTo = Math.max(newTo, newEnd)
  })
  if (from !== Infinity) return { from, oldTo, newTo }
  const start = before.content.findDiffStart(after.content)
  if (start === null) return undefined
  const end = after.content.findDiffEnd(before.content) as { a: number; b: number }
  // Repeated content lets the end come before the start: the change is at least empty at the start.
  return { from: start, oldTo: Math.max(end.b, start), newTo: Math.max(end.a, start) }
}

/** The block a position belongs to: its own, or between blocks the one before it (`before`) or after it. */
function blockOf(doc: Node, pos: number, side: 'before' | 'after'): number {
  const $pos = doc.resolve(pos)
  const k = $pos.index(0)
  if ($pos.depth > 0) return k
  return side === 'before' ? Math.max(0, k - 1) : Math.min(k, doc.childCount - 1)
}

/**
 * The edits that turn the Stead text of `before` into that of `after`, two
 * documents one step apart (`map`: the step's ranges, which say where the
 * step edited when the text alone would leave a choice: typing an 'a' after
 * an 'a'). Text outside the step's blocks is left alone; inside them the
 * edit is trimmed to what changed (pasting "abd" over "abc" replaces the
 * "c"), and marks changed on text that stays become `format` edits, one
 * per run formatted alike (a run may span a paragraph boundary).
 */
export function stepOps(before: Node, after: Node, map: ChangedRanges | undefined, marks: SchemaMarks): LocalOp[] {
  const env = envelopeOf(before, after, map)
  if (!env) return []
  let first = blockOf(before, env.from, 'before')
  let lastOld = blockOf(before, env.oldTo, 'after')
  let lastNew = blockOf(after, env.newTo, 'after')
  // The blocks outside the envelope are the same in both documents; if the counts say otherwise, compare everything.
  if (blockOf(after, env.from, 'before') !== first || before.childCount - lastOld !== after.childCount - lastNew) {
    first = 0
    lastOld = before.childCount - 1
    lastNew = after.childCount - 1
  }
  const base = blockStart(before, first)
  const was = unitsOf(before, first, lastOld, (m) => marks.mapped(m))
  const is = unitsOf(after, first, lastNew, (m) => marks.mapped(m))
  const hintFrom = flatIndex(before, env.from) - base
  const hintOldTo = flatIndex(before, env.oldTo) - base
  const hintNewTo = flatIndex(after, env.newTo) - base

  let common = 0
  while (common < was.length && common < is.length && (was[common] as Unit).ch === (is[common] as Unit).ch) common++
  // Text both keep at the start, no further than the step's edit reaches (so an 'a' typed after an 'a' goes where it was typed).
  const head = Math.max(0, Math.min(common, hintOldTo, hintNewTo))
  let tail = 0
  const most = Math.min(was.length, is.length) - head
  while (tail < most && (was[was.length - 1 - tail] as Unit).ch === (is[is.length - 1 - tail] as Unit).ch) tail++
  tail = Math.max(0, Math.min(tail, was.length - hintFrom, is.length - hintFrom))

  const ops: LocalOp[] = []
  ops.push(...formatRuns(head, base, (k) => [was[k] as Unit, is[k] as Unit], marks))
  const removed = was.length - tail - head
  if (removed > 0) ops.push({ kind: 'delete', index: base + head, count: removed })
  const inserted = is.slice(head, is.length - tail)
  if (inserted.length > 0) ops.push({ kind: 'insert', index: base + head, units: inserted })
  const wasTail = was.length - tail
  const isTail = is.length - tail
  ops.push(...formatRuns(tail, base + isTail, (k) => [was[wasTail + k] as Unit, is[isTail + k] as Unit], marks))
  return ops
}

/** What `transactionOps` reads of a transaction: its steps and the documents around them (ProseMirror's Transform). */
export interface StepsOf {
  readonly steps: ReadonlyArray<{ getMap(): ChangedRanges }>
  readonly docs: readonly Node[]
  readonly doc: Node
}

/**
 * The edits of every step of a transaction, in order. Formats of
 * consecutive steps that meet, or meet but for a paragraph boundary, are
 * one format: toggling bold over two paragraphs makes a step per paragraph
 * but is one format of the whole range, as the user made it.
 */
export function transactionOps(tr: StepsOf, marks: SchemaMarks): LocalOp[] {
  const out: LocalOp[] = []
  tr.steps.forEach((step, i) => {
    const after = tr.docs[i + 1] ?? tr.doc
    for (const op of stepOps(tr.docs[i] as Node, after, step.getMap(), marks)) {
      const last = out[out.length - 1]
      // A format last means no text changed since it ran: `after` still has its text.
      if (last?.kind === 'format' && op.kind === 'format' && JSON.stringify(last.marks) === JSON.stringify(op.marks) && meets(after, last.index + last.length, op.index)) {
        out[out.length - 1] = { ...last, length: op.index + op.length - last.index }
      } else out.push(op)
    }
  })
  return out
}

/** Whether a range that ends at flat index `end` of `doc` and one that starts at `start` meet: at once, or across one paragraph boundary. */
function meets(doc: Node, end: number, start: number): boolean {
  if (start === end) return true
  if (start !== end + 1) return false
  const k = blockAt(doc, end)
  return blockStart(doc, k) + blockLength(doc.child(k)) === end
}

/**
 * The `format` edits that take `count` characters from the marks of their
 * first unit to those of their second (`pair(k)`), at flat index `base`:
 * one per run of characters changed alike. A '\n' between two such
 * characters joins their run (it holds no marks the document shows).
 */
export function formatRuns(count: number, base: number, pair: (k: number) => readonly [{ readonly marks: readonly Mark[] | null }, { readonly marks: readonly Mark[] | null }], marks: SchemaMarks): LocalOp[] {
  const ops: LocalOp[] = []
  let run: { start: number; end: number; key: string; marks: MarkChange } | undefined
  const close = (): void => {
    if (run) ops.push({ kind: 'format', index: base + run.start, length: run.end - run.start, marks: run.marks })
    run = undefined
  }
  for (let k = 0; k < count; k++) {
    const [a, b] = pair(k)
    if (a.marks === null || b.marks === null) continue
    const change = marks.change(a.marks, b.marks)
    if (!change) {
      close()
      continue
    }
    const key = JSON.stringify(change)
    if (run && run.key === key) run.end = k + 1
    else {
      close()
      run = { start: k, end: k + 1, key, marks: change }
    }
  }
  close()
  return ops
}
