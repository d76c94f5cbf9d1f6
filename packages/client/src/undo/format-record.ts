import { canonicalMarkValue, type CollabText, type MarkAnchor, type MarkOp, type MarkValue } from '@stead/core'
import type { DraftItem } from '../space/drafts.ts'
import { present, type EditRecord, type RevertContext } from './records.ts'

/** One character a format covered, and what its type showed there before. */
interface Before {
  readonly id: string
  /** The type's value before (undefined: none); for a multi-valued type, whether it held the op's value. */
  readonly value: MarkValue | undefined
  readonly had: boolean
}

/** Where a mark anchor (the gap before or after a character, or an end of the text) is in `text` now. */
function gapAt(text: CollabText, [id, side]: MarkAnchor): number | undefined {
  if (id === '') return side === 0 ? 0 : text.length
  const at = text.indexOfId(id)
  return at === undefined ? undefined : at + side
}

/**
 * A format (a mark op): taken back by formatting each character it covered
 * as it was before, with new mark ops (the wire takes no `M`): a type set
 * or cleared is set back to its earlier value on each run of characters
 * that had the same one, or cleared where there was none; a value added to
 * a multi-valued type (a comment) is removed where it was not before, a
 * value removed is added back where it was. Characters deleted since are
 * left out (those an undo made again stand for them); what others formatted since on those characters is
 * overwritten, as Yjs's undo of a format does.
 */
export class TextFormat implements EditRecord {
  readonly key: string
  readonly groupable = true
  readonly items: DraftItem[]
  group?: object
  private readonly op: MarkOp
  private readonly before: readonly Before[]

  constructor(item: DraftItem, op: MarkOp, before: readonly Before[]) {
    this.key = item.key
    this.items = [item]
    this.op = op
    this.before = before
  }

  /** The record of `op` about to show on `text`, from what the text shows now; undefined if it covers nothing. */
  static capture(item: DraftItem, op: MarkOp, text: CollabText): TextFormat | undefined {
    const from = gapAt(text, op[3])
    const to = gapAt(text, op[4])
    if (from === undefined || to === undefined || to <= from) return undefined
    const ids = text.visibleIds().slice(from, to)
    const type = op[1]
    const wanted = op[6] === 0 ? undefined : canonicalMarkValue(op[2])
    const before: Before[] = []
    let at = 0
    for (const span of text.spans()) {
      const len = [...span.text].length
      for (let i = Math.max(at, from); i < Math.min(at + len, to); i++) {
        const shown = span.marks[type] as MarkValue | undefined
        const had = wanted !== undefined && Array.isArray(shown) && (shown as readonly MarkValue[]).some((v) => canonicalMarkValue(v) === wanted)
        before.push({ id: ids[i - from] as string, value: shown, had })
      }
      at += len
      if (at >= to) break
    }
    return new TextFormat(item, op, before)
  }

  revert(ctx: RevertContext): boolean {
    const item = this.items[0] as DraftItem
    const type = this.op[1]
    const kind = this.op[6]
    const runs: Array<{ from: number; to: number; value: MarkValue | undefined }> = []
    let text = ctx.prospective(this.key) as CollabText | undefined
    if (!text) return false
    for (const b of this.before) {
      // What this client set on a multi-valued type comes off only where it was not before, and back only where it was.
      if (kind === 1 && b.had) continue
      if (kind === 2 && !b.had) continue
      // The character as the text names it now: signed, or what an undo made again in its place.
      const shown = text
      const id = present(this.key, b.id, (i) => shown.indexOfId(i) !== undefined, ctx)
      const at = id === undefined ? undefined : text.indexOfId(id)
      if (at === undefined) continue
      const value = kind === 0 ? b.value : this.op[2]
      const last = runs[runs.length - 1]
      if (last && last.to === at && (kind !== 0 || canonicalMarkValue(last.value ?? null) === canonicalMarkValue(value ?? null))) last.to = at + 1
      else runs.push({ from: at, to: at + 1, value })
    }
    let sent = false
    for (const run of runs) {
      text = ctx.prospective(this.key) as CollabText
      const op =
        kind === 0
          ? text.markOp(run.from, run.to, type, run.value ?? null, { remove: run.value === undefined })
          : text.markOp(run.from, run.to, type, run.value as MarkValue, { multiple: true, remove: kind === 1 })
      sent = ctx.send(this.key, item.decl, op) !== undefined || sent
    }
    return sent
  }
}
