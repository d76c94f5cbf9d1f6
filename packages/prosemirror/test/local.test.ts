import type { Node } from 'prosemirror-model'
import { EditorState, type Transaction } from 'prosemirror-state'
import { describe, expect, it } from 'vitest'
import { transactionOps, type LocalOp } from '../src/local.ts'
import { defaultMarks, SchemaMarks } from '../src/marks.ts'
import { steadSchema as s } from '../src/schema.ts'

const marks = new SchemaMarks(s, defaultMarks)
const p = (...parts: Node[]): Node => s.node('paragraph', null, parts)
const t = (text: string, ...markNames: Array<'strong' | 'em'>): Node => s.text(text, markNames.map((m) => s.mark(m)))
const doc = (...blocks: Node[]): Node => s.node('doc', null, blocks)

/** The edits every step of `tr` makes, with inserted text as a string. */
function opsOf(tr: Transaction): Array<Record<string, unknown>> {
  return transactionOps(tr, marks).map(show)
}

function show(op: LocalOp): Record<string, unknown> {
  return op.kind === 'insert' ? { kind: 'insert', index: op.index, text: op.units.map((u) => u.ch).join('') } : { ...op }
}

/** A flat text with its edits applied, to check that they lead where the document went. */
function applyOps(text: string, ops: Array<Record<string, unknown>>): string {
  const cps = [...text]
  for (const op of ops) {
    if (op.kind === 'delete') cps.splice(op.index as number, op.count as number)
    if (op.kind === 'insert') cps.splice(op.index as number, 0, ...(op.text as string))
  }
  return cps.join('')
}

const flat = (d: Node): string => d.children.map((b) => b.textContent).join('\n')

describe('a document change as edits of the Stead text', () => {
  const start = (): EditorState => EditorState.create({ schema: s, doc: doc(p(t('a😀a')), p(t('world', 'strong'))) })

  it('typing inserts where the step typed, after an emoji counted as one code point', () => {
    const tr = start().tr.insertText('a', 4) // after "a😀" (positions: 1 a, 2-3 emoji): between the two a's
    expect(opsOf(tr)).toEqual([{ kind: 'insert', index: 2, text: 'a' }])
  })

  it('Enter splits: a newline; Backspace at a paragraph start joins: the newline goes', () => {
    let tr = start().tr.split(5)
    expect(opsOf(tr)).toEqual([{ kind: 'insert', index: 3, text: '\n' }])
    tr = start().tr.join(6)
    expect(opsOf(tr)).toEqual([{ kind: 'delete', index: 3, count: 1 }])
  })

  it('deleting a whole first paragraph with its boundary removes its text and one newline', () => {
    const tr = start().tr.delete(0, 6)
    const ops = opsOf(tr)
    expect(applyOps('a😀a\nworld', ops)).toBe(flat(tr.doc))
    expect(ops).toEqual([{ kind: 'delete', index: 0, count: 4 }])
  })

  it('bold over a range across a paragraph boundary is one format of exactly that range', () => {
    const tr = start().tr.addMark(2, 9, s.mark('strong')) // "😀a" and "wo" (already bold) and the boundary
    expect(opsOf(tr)).toEqual([{ kind: 'format', index: 1, length: 2, marks: { bold: true } }])
    const off = start().tr.removeMark(1, 12, s.marks.strong)
    expect(opsOf(off)).toEqual([{ kind: 'format', index: 4, length: 5, marks: { bold: null } }])
  })

  it('a paste over a selection keeps the text both share and formats what changed marks', () => {
    const state = start()
    const slice = doc(p(t('a😀', 'em')), p(t('new')), p(t('wor'))).slice(1, 14)
    const tr = state.tr.replace(1, 10, slice) // replaces "a😀a" + boundary + "wor"
    const ops = opsOf(tr)
    expect(applyOps('a😀a\nworld', ops)).toBe(flat(tr.doc))
    expect(flat(tr.doc)).toBe('a😀\nnew\nworld')
    expect(ops).toEqual([
      { kind: 'format', index: 0, length: 2, marks: { italic: true } },
      // The second "a" was not pasted back.
      { kind: 'delete', index: 2, count: 1 },
      { kind: 'insert', index: 2, text: '\nnew' },
      // "wor" pasted plain over bold "wor"
      { kind: 'format', index: 7, length: 3, marks: { bold: null } },
    ])
  })

  it('a multi-step transaction gives the edits of each step on the text each step left', () => {
    const tr = start().tr.insertText('X', 1).split(3).delete(11, 13).addMark(1, 2, s.mark('em'))
    const ops = opsOf(tr)
    expect(applyOps('a😀a\nworld', ops)).toBe(flat(tr.doc))
    expect(ops).toEqual([
      { kind: 'insert', index: 0, text: 'X' },
      { kind: 'insert', index: 2, text: '\n' },
      { kind: 'delete', index: 7, count: 2 },
      { kind: 'format', index: 0, length: 1, marks: { italic: true } },
    ])
  })

  it('a change of anything but text and mapped marks makes no edit', () => {
    const state = start()
    const tr = state.tr.setNodeMarkup(0, s.nodes.paragraph)
    expect(opsOf(tr)).toEqual([])
  })
})
