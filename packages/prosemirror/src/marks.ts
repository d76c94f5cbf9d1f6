import { SteadError, type MarkValue } from '@stead/client'
import type { Attrs, Mark, MarkType, Schema } from 'prosemirror-model'

/**
 * How one ProseMirror mark type maps to one Stead mark type. Pass a list of
 * them as `marks` to {@link steadRichText} to sync marks of your own schema
 * (`[...defaultMarks, { mark: 'highlight', type: 'highlight' }]`); marks
 * of either side that no mapping names are left alone: never sent, never shown.
 */
export interface MarkMapping {
  /** The ProseMirror mark type, by its name in the schema (`'strong'`). */
  readonly mark: string
  /** The Stead mark type it is (`'bold'`), as `TextHandle.format` and `spans` name it. */
  readonly type: string
  /** The Stead value of a ProseMirror mark. Default: its attributes when it has any, else `true`. */
  readonly toStead?: (mark: Mark) => MarkValue
  /**
   * The ProseMirror attributes a Stead value shows as, or null when the
   * value shows no mark. Default: null for null and false, the value's
   * fields for an object, no attributes for anything else. Attributes the
   * mark type refuses (a required one missing, one its `validate` rejects)
   * show no mark either.
   */
  readonly fromStead?: (value: unknown) => Attrs | null
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v) && !(v instanceof Uint8Array)

/**
 * The mapping of {@link steadSchema}'s marks: `strong` is Stead's `bold`,
 * `em` is `italic`, `underline`, `strike` and `code` keep their names, and
 * `link` is `link` with the value `{ href }`.
 */
export const defaultMarks: readonly MarkMapping[] = Object.freeze([
  { mark: 'strong', type: 'bold' },
  { mark: 'em', type: 'italic' },
  { mark: 'underline', type: 'underline' },
  { mark: 'strike', type: 'strike' },
  { mark: 'code', type: 'code' },
  {
    mark: 'link',
    type: 'link',
    toStead: (mark: Mark): MarkValue => ({ href: String(mark.attrs.href) }),
    fromStead: (value: unknown): Attrs | null => (isRecord(value) && typeof value.href === 'string' ? { href: value.href } : null),
  },
])

/** One mapping bound to its mark type in a schema. */
interface BoundMark {
  readonly markType: MarkType
  readonly type: string
  readonly toStead: (mark: Mark) => MarkValue
  readonly fromStead: (value: unknown) => Attrs | null
}

function defaultToStead(mark: Mark): MarkValue {
  const attrs = Object.entries(mark.attrs).filter(([, v]) => v !== undefined)
  return attrs.length ? (Object.fromEntries(attrs) as MarkValue) : true
}

function defaultFromStead(value: unknown): Attrs | null {
  if (value === null || value === false || value === undefined) return null
  return isRecord(value) ? value : {}
}

/** A change of marks on some characters, as `TextHandle.format` takes it: each type's new value, null to take it off. */
export type MarkChange = Record<string, MarkValue | null>

/**
 * The mark mappings of one schema: turns Stead marks into ProseMirror marks
 * and says what changed between two sets of ProseMirror marks in Stead's
 * terms. Only the mapped marks count; the others are dropped on the way in.
 */
export class SchemaMarks {
  private readonly bound: readonly BoundMark[]
  private readonly byMarkType = new Map<MarkType, BoundMark>()
  private readonly byType = new Map<string, BoundMark>()

  /** @throws SteadError `malformed` for a mapping whose mark the schema lacks, or two mappings of one mark or one Stead type. */
  constructor(schema: Schema, mappings: readonly MarkMapping[]) {
    const bound: BoundMark[] = []
    for (const m of mappings) {
      const markType = schema.marks[m.mark]
      if (!markType) throw new SteadError('malformed', `@stead/prosemirror: the schema has no mark ${JSON.stringify(m.mark)}; map only marks the schema has (pass your own marks list)`)
      if (this.byMarkType.has(markType) || this.byType.has(m.type)) throw new SteadError('malformed', `@stead/prosemirror: mark ${m.mark} or Stead type ${m.type} is mapped twice`)
      const b: BoundMark = { markType, type: m.type, toStead: m.toStead ?? defaultToStead, fromStead: m.fromStead ?? defaultFromStead }
      bound.push(b)
      this.byMarkType.set(markType, b)
      this.byType.set(m.type, b)
    }
    this.bound = bound
  }

  /** The mapped marks among `marks` (a text node's), in the schema's order. */
  mapped(marks: readonly Mark[]): readonly Mark[] {
    return marks.every((m) => this.byMarkType.has(m.type)) ? marks : marks.filter((m) => this.byMarkType.has(m.type))
  }

  /** The ProseMirror marks Stead marks (a span's, an insert's attributes) show as. */
  fromStead(marks: Readonly<Record<string, unknown>> | undefined): readonly Mark[] {
    if (!marks) return []
    let out: readonly Mark[] = []
    for (const [type, value] of Object.entries(marks)) {
      const mark = this.markOf(type, value)
      if (mark) out = mark.addToSet(out)
    }
    return out
  }

  /** The ProseMirror mark of Stead type `type` with `value`, null if unmapped or showing none; undefined for a type no mapping names. */
  markOf(type: string, value: unknown): Mark | null | undefined {
    const b = this.byType.get(type)
    if (!b) return undefined
    const attrs = b.fromStead(value)
    if (attrs === null) return null
    try {
      return b.markType.create(attrs)
    } catch {
      // Attributes the mark type refuses (another app's value, a forged one): shown as no mark, never as a broken document.
      return null
    }
  }

  /** The ProseMirror mark type Stead type `type` maps to, if any. */
  markTypeOf(type: string): MarkType | undefined {
    return this.byType.get(type)?.markType
  }

  /** What changes Stead marks from `was` to `is` (mapped ProseMirror marks), or undefined when they show alike. */
  change(was: readonly Mark[], is: readonly Mark[]): MarkChange | undefined {
    let out: MarkChange | undefined
    for (const b of this.bound) {
      const a = b.markType.isInSet(was)
      const z = b.markType.isInSet(is)
      if (a === z || (a && z && a.eq(z))) continue
      out ??= {}
      out[b.type] = z ? b.toStead(z) : null
    }
    return out
  }
}
