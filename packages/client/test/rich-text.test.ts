import 'fake-indexeddb/auto'
import { SimCluster } from '@stead/sim'
import { afterEach, describe, expect, it } from 'vitest'
import { createClient, memoryStorage, type Space, type SteadClient, type TextChange, type TextDelta } from '../src/index.node.ts'

/** Rich text on real relays in simulated time (SimCluster): TextHandle.format, spans and observe's attributes. */

const open: SteadClient[] = []
const clusters: SimCluster[] = []

afterEach(async () => {
  for (const c of open.splice(0)) await c.close()
  for (const c of clusters.splice(0)) await c.close()
})

async function client(c: SimCluster): Promise<Space> {
  const cl = await createClient({ ...c.clientOptions(), storage: memoryStorage() })
  open.push(cl)
  return cl.space('notes')
}

async function cluster(): Promise<SimCluster> {
  const c = await SimCluster.start()
  clusters.push(c)
  return c
}

/** A Quill-like document: characters with their marks, changed by deltas. */
type Doc = Array<{ ch: string; marks: Record<string, unknown> }>

function applyDelta(doc: Doc, delta: readonly TextDelta[]): Doc {
  const out: Doc = []
  let i = 0
  for (const d of delta) {
    if ('retain' in d) {
      for (const c of doc.slice(i, i + d.retain)) {
        const marks = { ...c.marks }
        for (const [k, v] of Object.entries(d.attributes ?? {})) {
          if (v === null) delete marks[k]
          else marks[k] = v
        }
        out.push({ ch: c.ch, marks })
      }
      i += d.retain
    } else if ('delete' in d) i += d.delete
    else for (const ch of d.insert) out.push({ ch, marks: { ...d.attributes } })
  }
  return [...out, ...doc.slice(i)]
}

/** Spans as a Doc, to compare with what the deltas built. */
function docOf(spans: ReadonlyArray<{ text: string; marks: Readonly<Record<string, unknown>> }>): Doc {
  return spans.flatMap((s) => [...s.text].map((ch) => ({ ch, marks: { ...s.marks } })))
}

describe('TextHandle: rich text (Peritext marks)', () => {
  it('formats ranges, merges two users formatting concurrently, grows bold but not links at their end, and ends identical, prospective equal to stable', async () => {
    const c = await cluster()
    const a = await client(c)
    const b = await client(c)
    const ta = a.text('doc')
    const tb = b.text('doc')
    await ta.insert(0, 'The Peritext editor')
    await c.until('b sees a', () => tb.value === 'The Peritext editor')
    // Concurrently: a bolds "The Peritext", b italicises "Peritext editor" and links "editor".
    await Promise.all([ta.format(0, 12, { bold: true }), tb.format(4, 15, { italic: true }), tb.format(13, 6, { link: { href: 'https://example.com' } })])
    expect(ta.spans).toEqual([{ text: 'The Peritext', marks: { bold: true } }, { text: ' editor', marks: {} }])
    await c.until('converged', () => JSON.stringify(ta.spans) === JSON.stringify(tb.spans) && JSON.stringify(ta.stableSpans) === JSON.stringify(ta.spans) && tb.stableSpans.length === 4)
    const link = { href: 'https://example.com' }
    expect(tb.spans).toEqual([
      { text: 'The ', marks: { bold: true } },
      { text: 'Peritext', marks: { bold: true, italic: true } },
      { text: ' ', marks: { italic: true } },
      { text: 'editor', marks: { italic: true, link } },
    ])
    // Typing at the end of the bold makes bold text; at the end of the link, not linked text.
    await ta.insert(12, '!')
    await ta.insert(ta.length, '.')
    expect(ta.spans.slice(1, 2)).toEqual([{ text: 'Peritext!', marks: { bold: true, italic: true } }])
    expect(ta.spans[ta.spans.length - 1]).toEqual({ text: '.', marks: { italic: true } })
    // Null takes a mark off; several types in one call.
    await tb.format(0, 4, { bold: null, underline: true })
    await c.until('all stable', () => ta.stable === ta.value && tb.value === ta.value && JSON.stringify(ta.stableSpans) === JSON.stringify(tb.spans))
    expect(ta.spans[0]).toEqual({ text: 'The ', marks: { underline: true } })
    expect(ta.value).toBe('The Peritext! editor.')
  })

  it('keeps comments of one declared multi-valued type side by side, takes one off by value or all with null, and honours declared expand rules', async () => {
    const c = await cluster()
    const a = await client(c)
    const b = await client(c)
    const ta = a.text('doc', { marks: { comment: { expand: 'none', multiple: true }, highlight: { expand: 'both' } } })
    const tb = b.text('doc', { marks: { comment: { expand: 'none', multiple: true } } })
    await ta.insert(0, 'abcdef')
    await c.until('b sees a', () => tb.value === 'abcdef')
    await Promise.all([ta.format(0, 4, { comment: { id: 1 } }), tb.format(2, 4, { comment: { id: 2 } })])
    await c.until('converged', () => JSON.stringify(ta.spans) === JSON.stringify(tb.spans) && ta.spans.length === 3)
    expect(ta.spans).toEqual([
      { text: 'ab', marks: { comment: [{ id: 1 }] } },
      { text: 'cd', marks: { comment: [{ id: 1 }, { id: 2 }] } },
      { text: 'ef', marks: { comment: [{ id: 2 }] } },
    ])
    await ta.unformat(0, 6, 'comment', { id: 1 })
    expect(ta.spans).toEqual([{ text: 'ab', marks: {} }, { text: 'cdef', marks: { comment: [{ id: 2 }] } }])
    await ta.format(0, 6, { comment: null })
    expect(ta.spans).toEqual([{ text: 'abcdef', marks: {} }])
    // A declared type that grows at both edges.
    await ta.format(2, 2, { highlight: 'yellow' })
    await ta.insert(4, '>')
    await ta.insert(2, '<')
    expect(ta.spans).toEqual([{ text: 'ab', marks: {} }, { text: '<cd>', marks: { highlight: 'yellow' } }, { text: 'ef', marks: {} }])
    // A per-call expand rule: this bold does not grow.
    await ta.format(0, 1, { bold: true }, { expand: 'none' })
    await ta.insert(1, 'x')
    expect(ta.spans[0]).toEqual({ text: 'a', marks: { bold: true } })
    // Declaring a type otherwise on the same handle is refused.
    expect(() => a.text('doc', { marks: { comment: { expand: 'after' } } })).toThrow(/declared/)
  })

  it('refuses bad formats at once with a reason', async () => {
    const c = await cluster()
    const a = await client(c)
    const t = a.text('doc')
    await t.insert(0, 'hello')
    await expect(t.format(3, 5, { bold: true })).rejects.toMatchObject({ reason: 'malformed' })
    await expect(t.format(0, 0, { bold: true })).rejects.toMatchObject({ reason: 'malformed' })
    await expect(t.format(0, 1, {})).rejects.toMatchObject({ reason: 'malformed' })
    await expect(t.format(0, 1, { ['x'.repeat(65)]: true })).rejects.toMatchObject({ reason: 'malformed' })
    await expect(t.format(0, 1, { bold: undefined as unknown as null })).rejects.toMatchObject({ reason: 'malformed' })
    await expect(t.format(0, 1, { link: new Uint8Array(1) as unknown as null })).rejects.toMatchObject({ reason: 'malformed' })
    await expect(t.format(0, 1, { link: { href: 'x'.repeat(5000) } })).rejects.toMatchObject({ reason: 'too-large' })
    await expect(t.format(0, 1, { bold: true }, { expand: 'sideways' as never })).rejects.toMatchObject({ reason: 'malformed' })
    await expect(t.format(0, 1, Object.fromEntries(Array.from({ length: 33 }, (_, i) => [`m${i}`, true])))).rejects.toMatchObject({ reason: 'malformed' })
    expect(() => a.text('doc', { marks: { x: { expand: 'up' as never } } })).toThrow(/expand/)
    expect(t.spans).toEqual([{ text: 'hello', marks: {} }])
    // The value given is copied: changing it afterwards changes nothing.
    const href = { href: 'a' }
    await t.format(0, 2, { link: href })
    href.href = 'b'
    expect(t.spans[0]).toEqual({ text: 'he', marks: { link: { href: 'a' } } })
    // A safe format of several types is one atomic group.
    await expect(t.format(2, 3, { bold: true, italic: true }, { safe: true })).resolves.toMatchObject({ status: 'committed' })
    expect(t.stableSpans).toEqual([{ text: 'he', marks: { link: { href: 'a' } } }, { text: 'llo', marks: { bold: true, italic: true } }])
  })

  it('tells observers the marks: attributes on inserts and on retains whose marks changed, as Quill deltas; plain texts as before', async () => {
    const c = await cluster()
    const a = await client(c)
    const b = await client(c)
    const ta = a.text('doc')
    const tb = b.text('doc')
    const seen: TextChange[] = []
    let mirror: Doc = []
    ta.observe((change) => {
      seen.push(change)
      mirror = applyDelta(mirror, change.delta)
      expect(mirror).toEqual(docOf(ta.spans))
    })
    await ta.insert(0, 'Hello world')
    expect(seen[0]).toEqual({ delta: [{ insert: 'Hello world', author: a.authorId }], local: true })
    await ta.format(0, 5, { bold: true })
    expect(seen[1]).toEqual({ delta: [{ retain: 5, attributes: { bold: true } }], local: true })
    await ta.insert(5, '!')
    expect(seen[2]).toEqual({ delta: [{ retain: 5 }, { insert: '!', author: a.authorId, attributes: { bold: true } }], local: true })
    await c.until('b sees a', () => tb.value === ta.value && tb.spans.length === 2)
    await tb.format(3, 6, { bold: null, link: { href: 'h' } })
    await c.until('a sees b', () => seen.length === 4)
    expect(seen[3]).toEqual({ delta: [{ retain: 3 }, { retain: 3, attributes: { bold: null, link: { href: 'h' } } }, { retain: 3, attributes: { link: { href: 'h' } } }], local: false })
    // Typing inside a link, then deleting across marks.
    await ta.insert(7, '~')
    expect(seen[4]?.delta).toEqual([{ retain: 7 }, { insert: '~', author: a.authorId, attributes: { link: { href: 'h' } } }])
    await ta.delete(2, 4)
    expect(seen[5]?.delta).toEqual([{ retain: 2 }, { delete: 4 }])
    await c.until('stable', () => ta.stable === ta.value && tb.value === ta.value && JSON.stringify(tb.spans) === JSON.stringify(ta.spans))
    expect(mirror).toEqual(docOf(tb.spans))
  })
})
