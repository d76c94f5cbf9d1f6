import type { TextChange, TextHandle, TextSpan, UpdateResult } from '@stead/client'
import type { Mark } from 'prosemirror-model'
import type { Unit } from './flat.ts'
import { formatRuns, type LocalOp } from './local.ts'
import type { SchemaMarks } from './marks.ts'

/** Most code points one `insert` carries (TextHandle refuses more: MAX_TEXT_INSERT); a longer paste goes in pieces. */
export const INSERT_CHUNK = 200_000

/**
 * Makes edits of the document on the Stead text. `heard` collects the
 * change events the text tells while an edit runs (observe tells this
 * client's edits before the edit call returns): an insert's event says the
 * marks its characters took (those of its neighbours, as Peritext grows
 * them), which a `format` then corrects to the marks the editor gave them
 * (bold typed after bold text with bold toggled off).
 */
export class Sender {
  private readonly text: TextHandle
  private readonly marks: SchemaMarks
  private readonly heard: TextChange[]

  constructor(text: TextHandle, marks: SchemaMarks, heard: TextChange[]) {
    this.text = text
    this.marks = marks
    this.heard = heard
  }

  /** Makes `ops` in order; returns the promises of every edit (they resolve once stored on this device). */
  send(ops: readonly LocalOp[]): Promise<UpdateResult>[] {
    const done: Promise<UpdateResult>[] = []
    for (const op of ops) {
      if (op.kind === 'format') done.push(this.text.format(op.index, op.length, op.marks))
      else if (op.kind === 'delete') done.push(this.text.delete(op.index, op.count))
      else this.insert(op.index, op.units, done)
    }
    return done
  }

  private insert(index: number, units: readonly Unit[], done: Promise<UpdateResult>[]): void {
    for (let from = 0; from < units.length; from += INSERT_CHUNK) {
      const chunk = units.slice(from, from + INSERT_CHUNK)
      const at = index + from
      this.heard.length = 0
      done.push(this.text.insert(at, chunk.map((u) => u.ch).join('')))
      const took = this.insertedMarks(chunk.length) ?? this.marksFromSpans(at, chunk.length)
      const fixes = formatRuns(chunk.length, at, (k) => [{ marks: took[k] ?? [] }, chunk[k] as Unit], this.marks)
      done.push(...this.send(fixes))
    }
  }

  /** The marks of the `count` characters just inserted, from the change event the insert told; undefined if it told none that fits. */
  private insertedMarks(count: number): Array<readonly Mark[]> | undefined {
    const out: Array<readonly Mark[]> = []
    for (const change of this.heard) {
      for (const step of change.delta) {
        if (!('insert' in step)) continue
        const marks = this.marks.fromStead(step.attributes)
        for (const _ of step.insert) out.push(marks)
      }
    }
    return out.length === count ? out : undefined
  }

  /** The marks of characters [index, index + count) read from the text's spans (a pass over the text: only when no event told them). */
  private marksFromSpans(index: number, count: number): Array<readonly Mark[]> {
    const out: Array<readonly Mark[]> = []
    let at = 0
    for (const span of this.text.spans as readonly TextSpan[]) {
      const marks = this.marks.fromStead(span.marks)
      for (const _ of span.text) {
        if (at >= index && at < index + count) out.push(marks)
        at++
      }
      if (at >= index + count) break
    }
    return out
  }
}
