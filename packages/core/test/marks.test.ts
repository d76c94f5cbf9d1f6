import fc from 'fast-check'
import { createHash } from 'node:crypto'
import { describe, expect, it } from 'vitest'
import { decode, encode } from '../src/codec.ts'
import { historyPatch, historyValue, leafPayload, leafPayloadOfSnapshot, restoreCrdt, validateOp, type Declaration } from '../src/crdt/index.ts'
import { MAX_MARK_TYPE_CHARS, MAX_MARK_VALUE_BYTES, type MarkExpand, type MarkValue, type TextSpan } from '../src/crdt/marks.ts'
import { CollabText, renameTextOp, resolveTextOp, textSnapshotDigest, validateTextOp, type TextOp, type TextSnapshot } from '../src/crdt/text.ts'
import type { OpContext } from '../src/crdt/types.ts'
import { applyValuePatch } from '../src/crdt/value-patch.ts'

const sha256 = (b: Uint8Array): Uint8Array => createHash('sha256').update(b).digest()

/** The digest bucket of a tag, as text.ts computes it (FNV-1a): written out here so a change to it shows. */
function bucketOf(tag: string): number {
  let h = 0x811c9dc5
  for (let i = 0; i < tag.length; i++) h = Math.imul(h ^ tag.charCodeAt(i), 0x01000193)
  return (h >>> 0) % 256
}
const TEXT: Declaration = { type: 'text', bounds: {} }

interface Made {
  readonly op: TextOp
  readonly ctx: OpContext
}

let counter = 0

/** A replica of one text: ops it makes are applied at once and logged for the others. */
class Doc {
  readonly t = new CollabText()
  readonly made: Made[] = []
  readonly name: string
  constructor(name: string) {
    this.name = name
  }

  private make(op: TextOp | undefined): void {
    if (!op) return
    const ctx = { replica: this.name, tag: `${this.name}:${counter++}` }
    this.t.apply(op, ctx)
    this.made.push({ op, ctx })
  }

  insert(index: number, text: string): this {
    this.make(this.t.insertOp(index, text))
    return this
  }

  delete(index: number, count: number): this {
    this.make(this.t.deleteOp(index, count))
    return this
  }

  /** Formats [from, to) with `type` (value null: takes it off). */
  mark(from: number, to: number, type: string, value: MarkValue = true, options: { expand?: MarkExpand; multiple?: boolean; remove?: boolean } = {}): this {
    this.make(this.t.markOp(from, to, type, value, options))
    return this
  }

  unmark(from: number, to: number, type: string): this {
    return this.mark(from, to, type, null)
  }

  /** Takes in what `other` made that this doc has not seen. */
  receive(other: Doc): this {
    for (const m of other.made) if (!this.seen.has(m.ctx.tag)) this.take(m)
    return this
  }

  private readonly seen = new Set<string>()
  private take(m: Made): void {
    this.seen.add(m.ctx.tag)
    this.t.apply(m.op, m.ctx)
  }

  spans(): TextSpan[] {
    return [...this.t.spans()]
  }
}

/**
 * Peritext's test scenario: both docs start from `initial` (and `pre`, made
 * on doc 1 and synced), make their edits concurrently, then sync. Author ids
 * order as doc 1 < doc 2, so of two concurrent marks of one type, doc 2's
 * wins (both have the same Lamport stamp).
 */
function concurrently(options: { initial?: string; pre?: (d: Doc) => void; one?: (d: Doc) => void; two?: (d: Doc) => void }): [Doc, Doc] {
  const one = new Doc('a')
  const two = new Doc('b')
  one.insert(0, options.initial ?? 'The Peritext editor')
  options.pre?.(one)
  two.receive(one)
  for (const m of one.made) (two as unknown as { seen: Set<string> }).seen.add(m.ctx.tag)
  options.one?.(one)
  options.two?.(two)
  one.receive(two)
  two.receive(one)
  expect(one.t.value()).toBe(two.t.value())
  expect(one.spans()).toEqual(two.spans())
  expect(one.t.snapshot()).toEqual(two.t.snapshot())
  return [one, two]
}

const plain = (text: string): TextSpan => ({ text, marks: {} })
const with_ = (text: string, marks: Record<string, unknown>): TextSpan => ({ text, marks })
const bold = { bold: true }
const link = (href: string): { link: { href: string } } => ({ link: { href } })

describe("marks: the Peritext paper's examples", () => {
  it('formats a range: one span per run formatted alike', () => {
    const [d] = concurrently({ one: (d) => d.mark(4, 12, 'bold') })
    expect(d.spans()).toEqual([plain('The '), with_('Peritext', bold), plain(' editor')])
  })

  it('merges concurrent overlapping bold and italic by two users', () => {
    const [d] = concurrently({ one: (d) => d.mark(0, 12, 'bold'), two: (d) => d.mark(4, 19, 'italic') })
    expect(d.spans()).toEqual([with_('The ', bold), with_('Peritext', { bold: true, italic: true }), with_(' editor', { italic: true })])
  })

  it('merges an insert at the end of the text with a concurrent italic up to the end: the italic grows', () => {
    const [d] = concurrently({ one: (d) => d.mark(0, 12, 'bold').insert(19, ' is great!'), two: (d) => d.mark(4, 19, 'italic') })
    expect(d.spans()).toEqual([with_('The ', bold), with_('Peritext', { bold: true, italic: true }), with_(' editor is great!', { italic: true })])
  })

  it('grows bold when typing at its end, concurrently: bold and an insert at the end of the bold', () => {
    // One bolds "Peritext"; the other concurrently puts asterisks around it.
    const [d] = concurrently({ one: (d) => d.mark(4, 12, 'bold'), two: (d) => d.insert(4, '*').insert(13, '*') })
    expect(d.spans()).toEqual([plain('The *'), with_('Peritext*', bold), plain(' editor')])
  })

  it('grows bold at its end on one replica, never at its start', () => {
    const [end] = concurrently({ two: (d) => d.mark(4, 12, 'bold').insert(12, '!') })
    expect(end.spans()).toEqual([plain('The '), with_('Peritext!', bold), plain(' editor')])
    const [start] = concurrently({ two: (d) => d.mark(4, 12, 'bold').insert(4, '!') })
    expect(start.spans()).toEqual([plain('The !'), with_('Peritext', bold), plain(' editor')])
  })

  it('does not grow a link at either edge', () => {
    const href = link('https://inkandswitch.com')
    const [end] = concurrently({ two: (d) => d.mark(4, 12, 'link', href.link).insert(12, '!') })
    expect(end.spans()).toEqual([plain('The '), with_('Peritext', href), plain('! editor')])
    const [start] = concurrently({ two: (d) => d.mark(4, 12, 'link', href.link).insert(4, '!') })
    expect(start.spans()).toEqual([plain('The !'), with_('Peritext', href), plain(' editor')])
    // Concurrently too: a link and an insert at its end.
    const [both] = concurrently({ one: (d) => d.mark(4, 12, 'link', href.link), two: (d) => d.insert(12, '!') })
    expect(both.spans()).toEqual([plain('The '), with_('Peritext', href), plain('! editor')])
  })

  it('grows only the bold where a bold and a link end together', () => {
    const href = link('https://inkandswitch.com')
    const [d] = concurrently({ two: (d) => d.mark(4, 12, 'link', href.link).mark(4, 12, 'bold').insert(12, '!') })
    expect(d.spans()).toEqual([plain('The '), with_('Peritext', { ...href, ...bold }), with_('!', bold), plain(' editor')])
  })

  it('grows adjacent bold and unbold spans as each one grows', () => {
    // Bold ABCDE, unbold BCD, type F after A (bold grows) and G after D (the unbold grows, E's bold does not grow backwards).
    const [d] = concurrently({ initial: 'ABCDE', one: (d) => d.mark(0, 5, 'bold').unmark(1, 4, 'bold').insert(1, 'F').insert(5, 'G') })
    expect(d.spans()).toEqual([with_('AF', bold), plain('BCDG'), with_('E', bold)])
  })

  it('puts an insert concurrent with formatting on the side of a boundary the marks say', () => {
    // Bold "Peritext" and italic " editor"; concurrently a footnote right after "Peritext": the bold grows, the italic does not grow back.
    const [d] = concurrently({ one: (d) => d.mark(4, 12, 'bold').mark(12, 19, 'italic'), two: (d) => d.insert(12, '[1]') })
    expect(d.spans()).toEqual([plain('The '), with_('Peritext[1]', bold), with_(' editor', { italic: true })])
    const [between] = concurrently({ initial: 'AC', one: (d) => d.mark(0, 2, 'bold').unmark(1, 2, 'bold'), two: (d) => d.insert(1, 'B') })
    expect(between.spans()).toEqual([with_('AB', bold), plain('C')])
    const [before] = concurrently({ initial: 'AC', one: (d) => d.mark(0, 2, 'bold').unmark(0, 1, 'bold'), two: (d) => d.insert(1, 'B') })
    expect(before.spans()).toEqual([plain('AB'), with_('C', bold)])
  })

  it('joins concurrent adjacent bolds', () => {
    const [d] = concurrently({ initial: 'ABCDE', one: (d) => d.mark(1, 2, 'bold'), two: (d) => d.mark(2, 3, 'bold') })
    expect(d.spans()).toEqual([plain('A'), with_('BC', bold), plain('DE')])
  })

  it('merges concurrent bold and un-bold: the later op wins where they overlap, the same on every replica', () => {
    const [d] = concurrently({ one: (d) => d.mark(0, 12, 'bold'), two: (d) => d.unmark(4, 19, 'bold') })
    expect(d.spans()).toEqual([with_('The ', bold), plain('Peritext editor')])
    const [inside] = concurrently({ one: (d) => d.mark(0, 19, 'bold'), two: (d) => d.unmark(4, 12, 'bold') })
    expect(inside.spans()).toEqual([with_('The ', bold), plain('Peritext'), with_(' editor', bold)])
    const [one] = concurrently({ one: (d) => d.mark(0, 19, 'bold'), two: (d) => d.unmark(4, 5, 'bold') })
    expect(one.spans()).toEqual([with_('The ', bold), plain('P'), with_('eritext editor', bold)])
    // A mark made after another was seen wins over it whoever made it (a higher Lamport stamp), even against author order.
    const [seq, boldedByB] = concurrently({ two: (d) => d.mark(0, 19, 'bold') })
    const later = new Doc('a').receive(seq).receive(boldedByB)
    later.unmark(4, 12, 'bold')
    seq.receive(later)
    expect(seq.spans()).toEqual([with_('The ', bold), plain('Peritext'), with_(' editor', bold)])
  })

  it('keeps overlapping comments of one type with different values side by side', () => {
    const comment = { expand: 'none', multiple: true } as const
    const [d] = concurrently({ one: (d) => d.mark(0, 12, 'comment', { id: 'abc-123' }, comment), two: (d) => d.mark(4, 19, 'comment', { id: 'def-789' }, comment) })
    expect(d.spans()).toEqual([
      with_('The ', { comment: [{ id: 'abc-123' }] }),
      with_('Peritext', { comment: [{ id: 'abc-123' }, { id: 'def-789' }] }),
      with_(' editor', { comment: [{ id: 'def-789' }] }),
    ])
    // Taking one comment off leaves the other.
    d.mark(0, 19, 'comment', { id: 'abc-123' }, { ...comment, remove: true })
    expect(d.spans()).toEqual([plain('The '), with_('Peritext editor', { comment: [{ id: 'def-789' }] })])
  })

  it('picks one link when two cover the same characters, and the later on the overlap of two', () => {
    const [full] = concurrently({ one: (d) => d.mark(4, 12, 'link', { href: 'https://inkandswitch.com' }), two: (d) => d.mark(4, 12, 'link', { href: 'https://google.com' }) })
    expect(full.spans()).toEqual([plain('The '), with_('Peritext', link('https://google.com')), plain(' editor')])
    const [part] = concurrently({ one: (d) => d.mark(0, 12, 'link', { href: 'https://inkandswitch.com' }), two: (d) => d.mark(4, 19, 'link', { href: 'https://google.com' }) })
    expect(part.spans()).toEqual([with_('The ', link('https://inkandswitch.com')), with_('Peritext editor', link('https://google.com'))])
    const [ends] = concurrently({ one: (d) => d.mark(11, 12, 'link', { href: 'https://inkandswitch.com' }), two: (d) => d.mark(4, 12, 'link', { href: 'https://google.com' }) })
    expect(ends.spans()).toEqual([plain('The '), with_('Peritext', link('https://google.com')), plain(' editor')])
  })
})

describe('marks across deleted characters (anchors on tombstones)', () => {
  it('keeps a bold whose edge characters were deleted: what is typed inside its old edges is bold', () => {
    // Bold "*Peritext*", delete the asterisks; concurrently type underscores just inside them.
    const [d] = concurrently({ initial: 'The *Peritext* editor', one: (d) => d.mark(4, 14, 'bold').delete(4, 1).delete(12, 1), two: (d) => d.insert(5, '_').insert(14, '_') })
    expect(d.spans()).toEqual([plain('The '), with_('_Peritext_', bold), plain(' editor')])
  })

  it('leaves a bold collapsed to nothing empty: typing where it was is plain', () => {
    const [d] = concurrently({ pre: (d) => d.mark(4, 12, 'bold').delete(4, 8), one: (d) => d.insert(4, 'x') })
    expect(d.spans()).toEqual([plain('The x editor')])
  })

  it('bolds text typed into a bold word deleted concurrently', () => {
    const [d] = concurrently({ pre: (d) => d.mark(4, 12, 'bold'), one: (d) => d.delete(4, 8), two: (d) => d.delete(5, 3).insert(5, 'ara') })
    expect(d.spans()).toEqual([plain('The '), with_('ara', bold), plain(' editor')])
  })

  it('formats nothing visible when the formatted characters are deleted concurrently', () => {
    const [d] = concurrently({ one: (d) => d.delete(4, 9), two: (d) => d.mark(5, 11, 'bold') })
    expect(d.spans()).toEqual([plain('The editor')])
  })

  it('does not grow a link whose last character was deleted (typing goes past its end, as Peritext does)', () => {
    const [d] = concurrently({ initial: 'ABCDE', one: (d) => d.mark(1, 4, 'link', { href: 'x' }).delete(1, 1).delete(2, 1).insert(2, 'F') })
    expect(d.spans()).toEqual([plain('A'), with_('C', link('x')), plain('FE')])
  })

  it('converges on links whose ends were deleted', () => {
    const [d] = concurrently({ initial: 'ABCDE', one: (d) => d.mark(2, 4, 'link', { href: 'A.com' }).delete(1, 2).delete(2, 1), two: (d) => d.mark(3, 5, 'link', { href: 'A.com' }) })
    expect(d.spans()).toEqual([plain('A'), with_('D', link('A.com'))])
  })
})

describe('mark ops', () => {
  it('takes an expand rule per op: before, both, none, after', () => {
    const grown = (expand: MarkExpand): TextSpan[] => {
      const d = new Doc('a').insert(0, 'abc').mark(1, 2, 'x', 1, { expand })
      return d.insert(2, '>').insert(1, '<').spans()
    }
    expect(grown('after')).toEqual([plain('a<'), with_('b>', { x: 1 }), plain('c')])
    expect(grown('before')).toEqual([plain('a'), with_('<b', { x: 1 }), plain('>c')])
    expect(grown('both')).toEqual([plain('a'), with_('<b>', { x: 1 }), plain('c')])
    expect(grown('none')).toEqual([plain('a<'), with_('b', { x: 1 }), plain('>c')])
    // At the text's edges: a mark growing before its start takes in what is typed at the very start.
    const edges = new Doc('a').insert(0, 'ab').mark(0, 2, 'x', 1, { expand: 'both' }).insert(0, '<').insert(3, '>')
    expect(edges.spans()).toEqual([with_('<ab>', { x: 1 })])
  })

  it('undoes every mark op exactly with its inverse, and applies it again', () => {
    const d = new Doc('a').insert(0, 'hello world').mark(0, 5, 'bold').mark(3, 8, 'link', { href: 'h' })
    const before = d.t.snapshot()
    const spans = d.spans()
    for (const m of [d.made[1], d.made[2]] as Made[]) {
      const inv = d.t.inverse(m.op, m.ctx)
      d.t.apply(inv, m.ctx)
      expect(d.spans()).not.toEqual(spans)
      d.t.apply(d.t.inverse(inv, m.ctx), m.ctx)
      expect(d.spans()).toEqual(spans)
      expect(d.t.snapshot()).toEqual(before)
    }
    const bare = new Doc('a').insert(0, 'hello')
    const snap = bare.t.snapshot()
    bare.mark(0, 2, 'bold')
    const m = bare.made[1] as Made
    bare.t.apply(bare.t.inverse(m.op, m.ctx), m.ctx)
    expect(bare.t.snapshot()).toEqual(snap)
    expect(bare.spans()).toEqual([plain('hello')])
  })

  it('refuses malformed marks with a reason, and the withdrawal form from the wire', () => {
    const a: [string, 0 | 1] = ['x:1.0', 0]
    const good = ['m', 'bold', true, a, ['', 1], 1, 0]
    expect(validateTextOp(good)).toBeNull()
    const bad: Array<[unknown[], RegExp]> = [
      [['m', 'bold', true, a, ['', 1], 1], /a mark is/],
      [['m', '', true, a, ['', 1], 1, 0], /mark type/],
      [['m', 'x'.repeat(MAX_MARK_TYPE_CHARS + 1), true, a, ['', 1], 1, 0], /mark type/],
      [['m', 7, true, a, ['', 1], 1, 0], /mark type/],
      [['m', 'bold', true, a, ['', 1], 1, 3], /mark kind/],
      [['m', 'c', null, a, ['', 1], 1, 1], /names its value/],
      [['m', 'bold', 'x'.repeat(MAX_MARK_VALUE_BYTES), a, ['', 1], 1, 0], /at most/],
      [['m', 'bold', new Uint8Array(2), a, ['', 1], 1, 0], /JSON data/],
      [['m', 'bold', Number.NaN, a, ['', 1], 1, 0], /finite/],
      [['m', 'bold', JSON.parse('{"__proto__": 1}'), a, ['', 1], 1, 0], /__proto__/],
      [['m', 'bold', [[[[[[[[[[1]]]]]]]]]], a, ['', 1], 1, 0], /nested/],
      [['m', 'bold', true, ['x:1.0', 2], ['', 1], 1, 0], /anchor/],
      [['m', 'bold', true, ['nodot', 0], ['', 1], 1, 0], /anchor/],
      [['m', 'bold', true, 'x:1.0', ['', 1], 1, 0], /anchor/],
      [['m', 'bold', true, a, ['', 1], -1, 0], /stamp/],
      [['m', 'bold', true, a, ['', 1], 1.5, 0], /stamp/],
      [['M', 'bold', true, a, ['', 1], 1, 0], /unknown text op/],
    ]
    const t = new CollabText()
    for (const [op, reason] of bad) {
      expect(validateTextOp(op)).toMatch(reason)
      expect(validateOp(TEXT, op)).toMatch(reason)
      if (op[0] === 'm') {
        const r = t.tryApply(op as unknown as TextOp, { replica: 'r', tag: 'r:1' })
        expect(r.ok).toBe(false)
        if (!r.ok) expect(r.reason).toBe('malformed')
      }
    }
    expect(t.hasMarks).toBe(false)
    // A stamp far ahead of any seen would win every later mark: clock-ahead.
    const ahead = t.tryApply(['m', 'bold', true, a, ['', 1], 2_000_000, 0], { replica: 'r', tag: 'r:2' })
    expect(ahead.ok ? undefined : ahead.reason).toBe('clock-ahead')
    expect(t.tryApply(good as unknown as TextOp, { replica: 'r', tag: 'r:3' }).ok).toBe(true)
    expect(() => t.markOp(0, 0, 'bold', true)).toThrow(RangeError)
  })

  it('names characters of its own envelope (^n) and renames draft ids like the other text ops', () => {
    const op: TextOp = ['m', 'bold', true, ['^0.1', 0], ['~d:3.0', 1], 1, 0]
    expect(resolveTextOp(op, { replica: 'r', tag: 'abc:4' })).toEqual(['m', 'bold', true, ['abc:0.1', 0], ['~d:3.0', 1], 1, 0])
    expect(renameTextOp(op, (tag) => (tag === '~d:3' ? { tag: 'e:1', shift: 2 } : undefined))).toEqual(['m', 'bold', true, ['^0.1', 0], ['e:1.2', 1], 1, 0])
  })

  it('waits for the characters it is anchored to, as an insert does (out of causal order)', () => {
    const a = new Doc('a').insert(0, 'hello').mark(1, 3, 'bold')
    const b = new CollabText()
    b.apply((a.made[1] as Made).op, (a.made[1] as Made).ctx)
    expect(b.spans()).toEqual([])
    b.apply((a.made[0] as Made).op, (a.made[0] as Made).ctx)
    expect(b.spans()).toEqual(a.spans())
  })
})

describe('marks in snapshots, digests and history', () => {
  it('round-trips through snapshots (and their wire bytes), clones and merges', () => {
    const d = new Doc('a').insert(0, 'The Peritext editor').mark(4, 12, 'bold').mark(0, 19, 'comment', { id: 'c', by: ['x'] }, { multiple: true }).delete(0, 1)
    const snap = d.t.snapshot()
    expect(snap).toHaveLength(3)
    const restored = CollabText.fromSnapshot({}, decode(encode(snap)) as TextSnapshot)
    expect(restored.spans()).toEqual(d.spans())
    expect(restored.snapshot()).toEqual(snap)
    expect(restoreCrdt(TEXT, snap).snapshot()).toEqual(snap)
    expect(d.t.clone().spans()).toEqual(d.spans())
    const merged = new CollabText()
    merged.merge(d.t)
    expect(merged.spans()).toEqual(d.spans())
    expect(merged.digest(sha256)).toEqual(d.t.digest(sha256))
    // A clone is independent.
    const copy = d.t.clone()
    copy.apply(copy.markOp(0, 3, 'italic', true), { replica: 'q', tag: 'q:1' })
    expect(d.spans()).not.toEqual(copy.spans())
    expect(CollabText.fromSnapshot({}, d.t.snapshot()).spans()).toEqual(d.spans())
  })

  it('decodes texts stored before marks existed, and hashes them as before', () => {
    const d = new Doc('a').insert(0, 'plain').delete(1, 1)
    const snap = d.t.snapshot()
    expect(snap).toHaveLength(2)
    const restored = CollabText.fromSnapshot({}, decode(encode(snap)) as TextSnapshot)
    expect(restored.value()).toBe('pain')
    expect(restored.spans()).toEqual([plain('pain')])
    // A bucket without marks hashes as [runs, pending], as before marks existed; an empty marks list changes nothing.
    expect(textSnapshotDigest(snap, sha256)).toEqual(d.t.digest(sha256))
    expect(textSnapshotDigest([...snap, []], sha256)).toEqual(d.t.digest(sha256))
    const [runs, pending] = snap
    const one = [runs, pending]
    expect(d.t.digest(sha256)).toEqual(sha256(encode(['text', Array.from({ length: 256 }, (_, b) => (b === bucketOf((d.made[0] as Made).ctx.tag) ? sha256(encode(one)) : null))])))
  })

  it('gives texts that differ only in marks different digests, and the digest of a snapshot equals the live one after every op', () => {
    const a = new Doc('a').insert(0, 'hello world')
    const b = new Doc('b').receive(a)
    expect(b.t.digest(sha256)).toEqual(a.t.digest(sha256))
    a.mark(0, 5, 'bold')
    b.receive(a)
    expect(b.t.digest(sha256)).toEqual(a.t.digest(sha256))
    const c = new Doc('c').receive(a)
    c.mark(0, 5, 'bold', 'other value')
    expect(c.t.digest(sha256)).not.toEqual(a.t.digest(sha256))
    expect(leafPayload(TEXT, c.t, sha256)).toEqual(leafPayloadOfSnapshot(['t', null], c.t.snapshot(), sha256))
    expect(leafPayload(TEXT, c.t, sha256)).not.toEqual(leafPayload(TEXT, a.t, sha256))
    // Withdrawing the mark gives the text's digest without it again.
    const m = c.made[c.made.length - 1] as Made
    c.t.apply(c.t.inverse(m.op, m.ctx), m.ctx)
    expect(c.t.digest(sha256)).toEqual(a.t.digest(sha256))
    expect(textSnapshotDigest(c.t.snapshot(), sha256)).toEqual(c.t.digest(sha256))
    // Garbage never crashes the snapshot digest.
    for (const junk of [null, 5, [[1], [2], 3], [[], [], [null, 4]], [[[]], [[]], [[]]]]) expect(textSnapshotDigest(junk, sha256)).toBeInstanceOf(Uint8Array)
  })

  it('keeps spans in the history once a text has marks, patched from one to the next', () => {
    const d = new Doc('a').insert(0, 'hello')
    const v0 = historyValue(TEXT, d.t)
    expect(v0).toBe('hello')
    d.mark(0, 2, 'bold')
    const v1 = historyValue(TEXT, d.t)
    expect(v1).toEqual([with_('he', bold), plain('llo')])
    // From a string to spans no patch fits: the value is kept whole.
    expect(historyPatch(TEXT, v0, v1)).toBeUndefined()
    d.insert(5, '!').mark(3, 5, 'italic')
    const v2 = historyValue(TEXT, d.t)
    const patch = historyPatch(TEXT, v1, v2)
    expect(patch?.[0]).toBe('a')
    expect(applyValuePatch(decode(encode(v1)), decode(encode(patch)) as NonNullable<typeof patch>)).toEqual(v2)
    expect(historyPatch(TEXT, 'ab', 'abc')).toEqual(['s', 2, 0, 'c'])
  })
})

// ---------------------------------------------------------------- properties

const editArb = fc.record({
  replica: fc.integer({ min: 0, max: 2 }),
  kind: fc.constantFrom('ins', 'ins', 'del', 'mark', 'mark', 'unmark'),
  at: fc.nat(),
  len: fc.integer({ min: 1, max: 4 }),
  text: fc.string({ minLength: 1, maxLength: 3, unit: fc.constantFrom('a', 'b', '😀') }),
  type: fc.constantFrom('bold', 'link', 'comment', 'x'),
  value: fc.constantFrom<MarkValue>(true, 1, 'v', { href: 'h' }),
  expand: fc.constantFrom<MarkExpand>('after', 'before', 'both', 'none'),
  sync: fc.boolean(),
})

type Edit = typeof editArb extends fc.Arbitrary<infer E> ? E : never

/** Three replicas edit concurrently, sometimes taking in what the others made. */
function history(edits: readonly Edit[]): { made: Made[]; replicas: CollabText[] } {
  const replicas = [new CollabText(), new CollabText(), new CollabText()]
  const seen = replicas.map(() => 0)
  const made: Made[] = []
  let n = 0
  for (const e of edits) {
    const t = replicas[e.replica] as CollabText
    const me = `r${e.replica}`
    if (e.sync) {
      for (const m of made.slice(seen[e.replica])) if (m.ctx.replica !== me) t.apply(m.op, m.ctx)
      seen[e.replica] = made.length
    }
    const len = t.length
    let op: TextOp | undefined
    if (e.kind === 'ins') op = t.insertOp(e.at % (len + 1), e.text)
    else if (len === 0) op = undefined
    else if (e.kind === 'del') op = t.deleteOp(e.at % len, e.len)
    else {
      const from = e.at % len
      const to = Math.min(len, from + e.len)
      const multiple = e.type === 'comment'
      op = t.markOp(from, to, e.type, e.kind === 'unmark' && !multiple ? null : e.value, { expand: e.expand, multiple, remove: e.kind === 'unmark' })
    }
    if (!op) continue
    const ctx = { replica: me, tag: `${me}:${n++}` }
    t.apply(op, ctx)
    made.push({ op, ctx })
  }
  return { made, replicas }
}

function shuffle<T>(items: readonly T[], seed: number): T[] {
  const out = [...items]
  let s = seed >>> 0
  for (let i = out.length - 1; i > 0; i--) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0
    const j = s % (i + 1)
    ;[out[i], out[j]] = [out[j] as T, out[i] as T]
  }
  return out
}

describe('marks laws (property tests)', () => {
  it('converges: every delivery order, causal or not, gives the same spans, snapshot and digest', () => {
    fc.assert(
      fc.property(fc.array(editArb, { maxLength: 40 }), fc.array(fc.nat(), { minLength: 3, maxLength: 3 }), (edits, seeds) => {
        const { made, replicas } = history(edits)
        const reference = new CollabText()
        for (const m of made) reference.apply(m.op, m.ctx)
        // The three replicas take in what they missed, in their own order.
        replicas.forEach((t, i) => {
          const applied = new Set<string>()
          for (const m of made) if (m.ctx.replica === `r${i}`) applied.add(m.ctx.tag)
          for (const m of shuffle(made, seeds[i] as number)) if (!applied.has(m.ctx.tag)) t.apply(m.op, m.ctx)
        })
        for (const t of [...replicas, ...seeds.map((seed) => {
          const fresh = new CollabText()
          for (const m of shuffle(made, seed)) fresh.apply(m.op, m.ctx)
          return fresh
        })]) {
          expect(t.value()).toBe(reference.value())
          expect(t.spans()).toEqual(reference.spans())
          expect(t.snapshot()).toEqual(reference.snapshot())
          expect(t.digest(sha256)).toEqual(reference.digest(sha256))
        }
        expect(reference.spans().map((s) => s.text).join('')).toBe(reference.value())
        expect(textSnapshotDigest(reference.snapshot(), sha256)).toEqual(reference.digest(sha256))
      }),
      { numRuns: 300 },
    )
  })

  it('inverse of each op cancels it: spans and snapshot as before, and applying it again restores it', () => {
    fc.assert(
      fc.property(fc.array(editArb, { maxLength: 30 }), fc.nat(), (edits, pick) => {
        const { made } = history(edits)
        if (made.length === 0) return
        const t = new CollabText()
        const m = made[pick % made.length] as Made
        for (const x of made) if (x !== m) t.apply(x.op, x.ctx)
        const without = t.spans()
        const withoutSnap = m.op[0] === 'm' ? t.snapshot() : undefined
        t.apply(m.op, m.ctx)
        const withIt = t.spans()
        t.apply(t.inverse(m.op, m.ctx), m.ctx)
        if (m.op[0] === 'm') {
          expect(t.spans()).toEqual(without)
          expect(t.snapshot()).toEqual(withoutSnap)
        }
        t.apply(m.op, m.ctx)
        expect(t.spans()).toEqual(withIt)
      }),
      { numRuns: 300 },
    )
  })

  it('merge joins marks as it joins characters: commutative and equal to applying every op', () => {
    fc.assert(
      fc.property(fc.array(editArb, { maxLength: 30 }), (edits) => {
        const { replicas, made } = history(edits)
        const [a, b, c] = replicas as [CollabText, CollabText, CollabText]
        const ab = a.clone()
        ab.merge(b)
        const ba = b.clone()
        ba.merge(a)
        expect(ab.snapshot()).toEqual(ba.snapshot())
        ab.merge(c)
        const all = new CollabText()
        for (const m of made) all.apply(m.op, m.ctx)
        expect(ab.spans()).toEqual(all.spans())
        expect(ab.digest(sha256)).toEqual(all.digest(sha256))
      }),
      { numRuns: 200 },
    )
  })
})
