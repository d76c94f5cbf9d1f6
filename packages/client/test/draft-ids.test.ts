import { CollabText, type Declaration, type TextOp } from '@stead/core'
import { describe, expect, it } from 'vitest'
import { DraftIds } from '../src/space/draft-ids.ts'
import { DraftBatch, applyIntent, compileBatch, type DraftItem } from '../src/space/drafts.ts'

const TEXT: Declaration = { type: 'text', bounds: {} }
const none = (): string[] => []

/** Makes a text draft against `view` (as a handle does) and shows it there, as the space does. */
function draft(ids: DraftIds, view: CollabText, batch: DraftBatch, op: TextOp): DraftItem {
  const item: DraftItem = { key: 'doc', decl: TEXT, intent: op }
  applyIntent(view, item, 'me', ids)
  batch.regular.push(item)
  return item
}

describe('draft ids: text ops name the characters of unsigned drafts', () => {
  it('keeps one tag per item, unique to this tab', () => {
    const a = new DraftIds()
    const b = new DraftIds()
    const item: DraftItem = { key: 'doc', decl: TEXT, intent: ['i', '', 1, '', 'x'] }
    const tag = a.tagOf(item)
    expect(a.tagOf(item)).toBe(tag)
    // The tag travels with the item (a follower tab's item reaches the leader with it).
    expect(b.tagOf(structuredClone(item))).toBe(tag)
    expect(b.fresh().split(':')[0]).not.toBe(tag.split(':')[0])
  })

  it('merges typing into runs, names this batch\'s drafts ^n and earlier batches\' drafts by their signed tags', () => {
    const ids = new DraftIds()
    const view = new CollabText()
    const first = new DraftBatch()
    for (const [i, ch] of [...'abc'].entries()) draft(ids, view, first, view.insertOp(i, ch))
    const x = draft(ids, view, first, view.insertOp(1, 'X'))
    const one = compileBatch(first, none, ids)
    // 'abc' typed as a run is one op; 'X' names its parent in that op.
    expect(one.updates[0]?.ops).toHaveLength(2)
    expect((one.updates[0]?.ops[0] as TextOp)[4]).toBe('abc')
    const placedX = one.updates[0]?.ops[1] as readonly ['i', string, 0 | 1, string, string]
    expect([placedX[1], placedX[3]].some((ref) => ref.startsWith('^0.'))).toBe(true)
    expect(one.places.get(ids.tagOf(x))).toEqual({ n: 1, shift: 0 })
    // An op made while the first batch was being signed still names its drafts.
    const late = view.deleteOp(0, 2) as TextOp
    ids.signedAs(one.places, 'P')
    // Signed, the first batch's characters are in the view under their real tags; the late op is
    // shown (applyIntent) and compiled naming them so.
    const signed = new CollabText()
    one.updates[0]?.ops.forEach((op, n) => signed.apply(op as TextOp, { replica: 'me', tag: `P:${n}` }))
    const second = new DraftBatch()
    draft(ids, signed, second, late)
    expect(signed.value()).toBe('bc')
    const two = compileBatch(second, none, ids)
    expect(two.updates[0]?.ops[0]).toEqual(['d', [['P:0', 0, 1], ['P:1', 0, 1]]])
    // Applied as relays apply them, the envelopes give what the drafts showed.
    const t = new CollabText()
    one.updates[0]?.ops.forEach((op, n) => t.apply(op as TextOp, { replica: 'me', tag: `P:${n}` }))
    two.updates[0]?.ops.forEach((op, n) => t.apply(op as TextOp, { replica: 'me', tag: `Q:${n}` }))
    expect(t.value()).toBe('bc')
  })
})
