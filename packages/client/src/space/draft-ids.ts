import type { DraftItem } from './drafts.ts'

/** Eight random base-36 characters: a tab's draft tags. */
function randomTabId(): string {
  const bytes = globalThis.crypto.getRandomValues(new Uint8Array(8))
  return [...bytes].map((b) => (b % 36).toString(36)).join('')
}

/** Whether an element id names a character or element of an unsigned draft (see DraftIds). */
export function isDraftId(id: string): boolean {
  return id.startsWith('~')
}

/** Where a signed batch put each draft: the envelope op (its index among the envelope's ops) and the offset its characters start at. */
export type DraftPlaces = ReadonlyMap<string, { readonly n: number; readonly shift: number }>

/** What the ids of signed drafts are remembered for: ops made before their batch was signed may still name them. */
const MAX_SIGNED = 100_000

/**
 * The ids of unsigned drafts. Each draft item keeps one tag for its life,
 * so a view rebuilt from the drafts gives its text characters the same ids
 * (`${tag}.${k}`) every time, and an op made against the view can name
 * them. When the batch is signed, those names become the envelope's own
 * (`^n`, see compileBatch) and, for ops compiled later, the real tags
 * `${envelope prefix}:${n}`.
 */
export class DraftIds {
  /** Tags of different tabs never meet: a follower's drafts (tags included) are signed by the leading tab. */
  private readonly prefix = `~${randomTabId()}`
  private next = 0
  private readonly signed = new Map<string, { tag: string; shift: number }>()

  /** The item's own tag, kept on the item (made on first use): it travels with the item to the leading tab. */
  tagOf(item: DraftItem): string {
    return (item.tag ??= this.fresh())
  }

  /** A tag for an op nothing will name. */
  fresh(): string {
    return `${this.prefix}:${this.next++}`
  }

  /** What a draft tag became once its batch was signed, or undefined. */
  renamed(tag: string): { tag: string; shift: number } | undefined {
    return this.signed.get(tag)
  }

  /** What an element id `${draft tag}.${k}` became once its draft was signed, or undefined. */
  signedId(id: string): string | undefined {
    if (!isDraftId(id)) return undefined
    const dot = id.lastIndexOf('.')
    const to = dot > 0 ? this.signed.get(id.slice(0, dot)) : undefined
    return to && `${to.tag}.${Number(id.slice(dot + 1)) + to.shift}`
  }

  /** Records where a signed batch's drafts went: `prefix` names the envelope (see unitTagPrefix). */
  signedAs(places: DraftPlaces, prefix: string): void {
    for (const [draft, { n, shift }] of places) this.signed.set(draft, { tag: `${prefix}:${n}`, shift })
    while (this.signed.size > MAX_SIGNED) this.signed.delete(this.signed.keys().next().value as string)
  }
}
