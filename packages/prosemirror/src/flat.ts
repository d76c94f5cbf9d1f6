import type { Mark, Node } from 'prosemirror-model'

/**
 * The flat text of a document and positions in it. A Stead text is one
 * string; the document is blocks of text. Block k's text follows block
 * k-1's after one '\n', and indexes count code points (an emoji is one,
 * where a ProseMirror text node counts two UTF-16 units). Only text nodes
 * hold characters: another inline node (none in steadSchema) counts none.
 */

/** Code points of the blocks, by node: nodes are immutable and shared between documents, so most lookups after an edit hit. */
const blockLengths = new WeakMap<Node, number>()
/** Flat index of each block's start, by document. */
const blockStarts = new WeakMap<Node, readonly number[]>()

const isHigh = (c: number): boolean => c >= 0xd800 && c <= 0xdbff
const isLow = (c: number): boolean => c >= 0xdc00 && c <= 0xdfff

/** Code points in `s[from..to)` (a lone surrogate counts one, as `[...s]` does). */
export function codePoints(s: string, from = 0, to = s.length): number {
  let n = 0
  for (let i = from; i < to; i++) {
    if (isHigh(s.charCodeAt(i)) && i + 1 < to && isLow(s.charCodeAt(i + 1))) i++
    n++
  }
  return n
}

/** The UTF-16 offset in `s` of its code point `points`. */
function unitsFor(s: string, points: number): number {
  let i = 0
  for (let n = 0; n < points && i < s.length; n++) i += isHigh(s.charCodeAt(i)) && i + 1 < s.length && isLow(s.charCodeAt(i + 1)) ? 2 : 1
  return i
}

/** Code points of one block's text. */
export function blockLength(block: Node): number {
  let n = blockLengths.get(block)
  if (n === undefined) {
    n = 0
    block.forEach((child) => {
      if (child.isText) n = (n as number) + codePoints(child.text as string)
    })
    blockLengths.set(block, n)
  }
  return n
}

function startsOf(doc: Node): readonly number[] {
  let starts = blockStarts.get(doc)
  if (!starts) {
    const s: number[] = []
    let at = 0
    doc.forEach((block) => {
      s.push(at)
      at += blockLength(block) + 1
    })
    starts = s
    blockStarts.set(doc, starts)
  }
  return starts
}

/** Flat index where block `k` of `doc` starts. */
export function blockStart(doc: Node, k: number): number {
  return startsOf(doc)[k] as number
}

/** Code points of the flat text of `doc`: its blocks' and one '\n' between each two. */
export function flatLength(doc: Node): number {
  const k = doc.childCount - 1
  return k < 0 ? 0 : blockStart(doc, k) + blockLength(doc.child(k))
}

/** The code points of `block`'s text before its content offset `offset`. */
function pointsBefore(block: Node, offset: number): number {
  let n = 0
  let at = 0
  for (let i = 0; i < block.childCount && at < offset; i++) {
    const child = block.child(i)
    if (child.isText) n += codePoints(child.text as string, 0, Math.min(child.nodeSize, offset - at))
    at += child.nodeSize
  }
  return n
}

/**
 * The flat index of document position `pos`. Inside a block: its start
 * plus the code points before `pos`. Between blocks: the end of the block
 * before (the '\n' comes after it), or 0 before the first.
 */
export function flatIndex(doc: Node, pos: number): number {
  const $pos = doc.resolve(pos)
  const k = $pos.index(0)
  if ($pos.depth === 0) return k === 0 ? 0 : blockStart(doc, k - 1) + blockLength(doc.child(k - 1))
  return blockStart(doc, k) + pointsBefore(doc.child(k), pos - $pos.start(1))
}

/** Index of the block that holds flat index `index` (the earlier one at a '\n'). */
export function blockAt(doc: Node, index: number): number {
  const starts = startsOf(doc)
  let lo = 0
  let hi = starts.length - 1
  // The last block whose start is at or before index.
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1
    if ((starts[mid] as number) <= index) lo = mid
    else hi = mid - 1
  }
  return lo
}

/**
 * The document position of flat index `index` (0 to flatLength), always
 * inside a block: the end of a block for the '\n' after it.
 *
 * @throws RangeError for an index outside the text.
 */
export function docPos(doc: Node, index: number): number {
  if (!Number.isInteger(index) || index < 0 || index > flatLength(doc)) throw new RangeError(`flat index ${index} outside a text of ${flatLength(doc)}`)
  const k = blockAt(doc, index)
  let pos = 1
  for (let i = 0; i < k; i++) pos += doc.child(i).nodeSize
  const block = doc.child(k)
  let left = index - blockStart(doc, k)
  for (let i = 0; i < block.childCount && left > 0; i++) {
    const child = block.child(i)
    if (!child.isText) {
      pos += child.nodeSize
      continue
    }
    const text = child.text as string
    const units = unitsFor(text, left)
    pos += units
    left -= codePoints(text, 0, units)
  }
  return pos
}

/** One code point of a flat text with its (mapped) marks, or a '\n' between blocks (marks null). */
export interface Unit {
  readonly ch: string
  readonly marks: readonly Mark[] | null
}

const NEWLINE: Unit = Object.freeze({ ch: '\n', marks: null })

/** The flat text of blocks `from` to `to` (inclusive) of `doc`, as units; `mapped` keeps the marks that sync. */
export function unitsOf(doc: Node, from: number, to: number, mapped: (marks: readonly Mark[]) => readonly Mark[]): Unit[] {
  const out: Unit[] = []
  for (let k = from; k <= to; k++) {
    if (k > from) out.push(NEWLINE)
    doc.child(k).forEach((child) => {
      if (!child.isText) return
      const marks = mapped(child.marks)
      for (const ch of child.text as string) out.push({ ch, marks })
    })
  }
  return out
}
