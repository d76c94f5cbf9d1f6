import type { Node } from 'prosemirror-model'
import { describe, expect, it } from 'vitest'
import { blockAt, codePoints, docPos, flatIndex, flatLength } from '../src/flat.ts'
import { defaultMarks, SchemaMarks } from '../src/marks.ts'
import { docOfSpans } from '../src/remote.ts'
import { steadSchema as s } from '../src/schema.ts'

const marks = new SchemaMarks(s, defaultMarks)
const p = (...parts: Node[]): Node => s.node('paragraph', null, parts)
const t = (text: string, ...markNames: Array<'strong' | 'em'>): Node => s.text(text, markNames.map((m) => s.mark(m)))
const doc = (...blocks: Node[]): Node => s.node('doc', null, blocks)

describe('the flat text of a document (code points, a paragraph boundary is one newline)', () => {
  it('counts code points, not UTF-16 units: an emoji is one, a lone surrogate one', () => {
    expect(codePoints('a😀b')).toBe(3)
    expect(codePoints('\ud83d')).toBe(1)
    expect(codePoints('😀😀', 0, 2)).toBe(1)
  })

  it('maps every position of a document with emoji and empty paragraphs to its index and back', () => {
    // Flat text: "a😀b\n\nc😀" (code points: a 😀 b \n \n c 😀 = 7)
    const d = doc(p(t('a'), t('😀b', 'strong')), p(), p(t('c😀')))
    expect(flatLength(d)).toBe(7)
    // Inside the first paragraph: positions 1 (before a) .. 5 (end, after the 2-unit emoji and b).
    expect([1, 2, 4, 5].map((pos) => flatIndex(d, pos))).toEqual([0, 1, 2, 3])
    // Between blocks: the end of the block before; the start of the document: 0.
    expect(flatIndex(d, 0)).toBe(0)
    expect(flatIndex(d, 6)).toBe(3)
    expect(flatIndex(d, 7)).toBe(4) // inside the empty paragraph
    expect(flatIndex(d, d.content.size)).toBe(7)
    for (let i = 0; i <= 7; i++) expect(flatIndex(d, docPos(d, i))).toBe(i)
    // The newline after a block maps to that block's end; index 4 is the empty paragraph.
    expect(docPos(d, 3)).toBe(5)
    expect(docPos(d, 4)).toBe(7)
    expect(docPos(d, 5)).toBe(9)
    expect(docPos(d, 6)).toBe(10)
    expect(docPos(d, 7)).toBe(12)
    expect(blockAt(d, 3)).toBe(0)
    expect(blockAt(d, 4)).toBe(1)
    expect(() => docPos(d, 8)).toThrow(RangeError)
  })

  it('builds the document of a text from its spans: a paragraph per line, mapped marks only', () => {
    const d = docOfSpans(
      [
        { text: 'Hi ', marks: {} },
        { text: 'bold\nnext', marks: { bold: true, comment: ['c1'] } },
        { text: ' line\n', marks: { link: { href: 'https://x.test' } } },
        { text: 'link', marks: { link: { nohref: 1 }, italic: true } },
      ],
      s,
      marks,
    )
    const link = s.mark('link', { href: 'https://x.test' })
    expect(d.eq(doc(p(t('Hi '), t('bold', 'strong')), p(t('next', 'strong'), s.text(' line', [link])), p(t('link', 'em'))))).toBe(true)
    expect(docOfSpans([], s, marks).eq(doc(p()))).toBe(true)
  })
})
