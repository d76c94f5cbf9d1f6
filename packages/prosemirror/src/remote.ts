import type { TextDelta, TextSpan } from '@stead/client'
import { Fragment, type Mark, type Node, type NodeType, type Schema } from 'prosemirror-model'
import type { Transaction } from 'prosemirror-state'
import { docPos } from './flat.ts'
import type { SchemaMarks } from './marks.ts'

/** The block type of the flat text: the first block the schema's top node takes. */
export function blockType(schema: Schema): NodeType {
  const type = schema.topNodeType.contentMatch.defaultType
  if (!type || !type.isTextblock || !type.contentMatch.matchType(schema.nodes.text as NodeType)) {
    throw new RangeError(`the schema's ${schema.topNodeType.name} node must hold text blocks (doc > paragraph+ > text)`)
  }
  return type
}

/** The document a Stead text with marks (`spans`) shows as: a block per line, the mapped marks. */
export function docOfSpans(spans: readonly TextSpan[], schema: Schema, marks: SchemaMarks): Node {
  const block = blockType(schema)
  const blocks: Node[][] = [[]]
  for (const span of spans) {
    const shown = marks.fromStead(span.marks)
    span.text.split('\n').forEach((part, i) => {
      if (i > 0) blocks.push([])
      if (part) (blocks[blocks.length - 1] as Node[]).push(schema.text(part, shown))
    })
  }
  // Fragment.from joins neighbouring text nodes with the same marks (spans differing only in unmapped marks).
  return schema.topNodeType.create(null, blocks.map((b) => block.create(null, Fragment.from(b))))
}

/**
 * Applies a Stead text change (a delta from the text the document shows)
 * to `tr`: inserts with their marks ('\n' splits a block), deletes (across
 * a '\n' joins two), marks changed on retained text. Marks of '\n' are not
 * shown: a boundary has none.
 *
 * @throws RangeError for a delta that reaches past the document's text (it was not made from it).
 */
export function applyDelta(tr: Transaction, delta: readonly TextDelta[], marks: SchemaMarks): void {
  let at = 0
  for (const step of delta) {
    if ('retain' in step) {
      if (step.attributes) formatRange(tr, at, at + step.retain, step.attributes, marks)
      at += step.retain
      docPos(tr.doc, at)
    } else if ('delete' in step) {
      tr.delete(docPos(tr.doc, at), docPos(tr.doc, at + step.delete))
    } else {
      const shown = marks.fromStead(step.attributes)
      let pos = docPos(tr.doc, at)
      step.insert.split('\n').forEach((part, i) => {
        if (i > 0) {
          tr.split(pos)
          // Past the end of one block and the start of the next.
          pos += 2
        }
        if (part) {
          tr.insert(pos, tr.doc.type.schema.text(part, shown))
          pos += part.length
        }
      })
      at += [...step.insert].length
    }
  }
}

/** Sets or takes off the mapped marks of `attributes` (a type's new value, null for off) on flat range [from, to). */
function formatRange(tr: Transaction, from: number, to: number, attributes: Readonly<Record<string, unknown>>, marks: SchemaMarks): void {
  const start = docPos(tr.doc, from)
  const end = docPos(tr.doc, to)
  for (const [type, value] of Object.entries(attributes)) {
    const mark: Mark | null | undefined = marks.markOf(type, value)
    if (mark === undefined) continue
    if (mark) tr.addMark(start, end, mark)
    else {
      const markType = marks.markTypeOf(type)
      if (markType) tr.removeMark(start, end, markType)
    }
  }
}

/** Replaces what differs between `tr.doc` and `target` (the document the Stead text shows) with `target`'s content there. */
export function replaceDiff(tr: Transaction, target: Node): void {
  const start = tr.doc.content.findDiffStart(target.content)
  if (start === null) return
  const end = tr.doc.content.findDiffEnd(target.content) as { a: number; b: number }
  let endA = end.a
  let endB = end.b
  // Repeated content lets the ends overlap the start: move both past it.
  const overlap = start - Math.min(endA, endB)
  if (overlap > 0) {
    endA += overlap
    endB += overlap
  }
  tr.replace(start, endA, target.slice(start, endB))
}
