import type { Node } from 'prosemirror-model'
import { EditorState } from 'prosemirror-state'
import { describe, expect, it } from 'vitest'
import { defaultMarks, SchemaMarks } from '../src/marks.ts'
import { applyDelta, replaceDiff } from '../src/remote.ts'
import { steadSchema as s } from '../src/schema.ts'

const marks = new SchemaMarks(s, defaultMarks)
const p = (...parts: Node[]): Node => s.node('paragraph', null, parts)
const t = (text: string, ...markNames: Array<'strong' | 'em'>): Node => s.text(text, markNames.map((m) => s.mark(m)))
const doc = (...blocks: Node[]): Node => s.node('doc', null, blocks)
const state = (d: Node): EditorState => EditorState.create({ schema: s, doc: d })

describe("a change of the Stead text applied to the document (observe's delta)", () => {
  it('inserts with marks, a newline splits a paragraph, a delete across a newline joins two, a retain with attributes formats', () => {
    const tr = state(doc(p(t('a😀b')), p(t('cd', 'strong')))).tr
    applyDelta(
      tr,
      [
        { retain: 2 }, // after "a😀"
        { insert: 'X\nY', author: 'x', attributes: { italic: true, comment: ['c1'] } },
        { retain: 1, attributes: { bold: true } }, // "b"
        { delete: 2 }, // the newline and "c"
        { retain: 1, attributes: { bold: null, link: { href: 'https://x.test' } } }, // "d"
      ],
      marks,
    )
    const link = s.mark('link', { href: 'https://x.test' })
    expect(tr.doc.eq(doc(p(t('a😀'), t('X', 'em')), p(t('Y', 'em'), t('b', 'strong'), s.text('d', [link]))))).toBe(true)
  })

  it('refuses a delta that reaches past the text it was not made from', () => {
    const tr = state(doc(p(t('ab')))).tr
    expect(() => applyDelta(tr, [{ retain: 3 }], marks)).toThrow(RangeError)
    expect(() => applyDelta(state(doc(p(t('ab')))).tr, [{ retain: 1 }, { delete: 2 }], marks)).toThrow(RangeError)
  })

  it('rebuilding from the text replaces only what differs', () => {
    const tr = state(doc(p(t('same')), p(t('old')), p(t('tail')))).tr
    replaceDiff(tr, doc(p(t('same')), p(t('new', 'strong')), p(t('tail'))))
    expect(tr.doc.eq(doc(p(t('same')), p(t('new', 'strong')), p(t('tail'))))).toBe(true)
    expect(tr.steps).toHaveLength(1)
    const other = state(doc(p(t('same')))).tr
    replaceDiff(other, doc(p(t('same'))))
    expect(other.steps).toHaveLength(0)
  })
})
