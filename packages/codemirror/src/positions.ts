import type { Text } from '@codemirror/state'

/**
 * CodeMirror counts positions in UTF-16 code units, a Stead text in code
 * points (an emoji is one): the two differ by one for each surrogate pair
 * before a position. A document's pairs are found once, in one pass, and
 * then every conversion is a binary search; a document without any (most
 * of them) converts as the identity.
 */
export class Positions {
  /** UTF-16 offset of each surrogate pair's high half, ascending. */
  private readonly pairs: readonly number[]
  /** Length of the document in UTF-16 code units. */
  private readonly units: number

  private constructor(pairs: readonly number[], units: number) {
    this.pairs = pairs
    this.units = units
  }

  /** The positions of `doc` (cached: a Text is immutable and each edit makes a new one). */
  static of(doc: Text): Positions {
    let found = cache.get(doc)
    if (!found) {
      found = new Positions(surrogatePairs(doc), doc.length)
      cache.set(doc, found)
    }
    return found
  }

  /** Length of the document in code points. */
  get points(): number {
    return this.units - this.pairs.length
  }

  /**
   * The code point index of UTF-16 position `unit`. A position inside a
   * surrogate pair (which CodeMirror's own commands never make) counts as
   * the start of its code point with `round` 'down', the end with 'up'.
   */
  toPoints(unit: number, round: 'down' | 'up' = 'down'): number {
    // Each pair wholly before `unit` is two code units and one code point; one `unit` splits counts as its start or its end.
    const before = countBelow(this.pairs, unit)
    const inside = before > 0 && this.pairs[before - 1] === unit - 1
    return unit - before + (inside && round === 'up' ? 1 : 0)
  }

  /** The UTF-16 position of code point index `point` (0 to `points`). */
  toUnits(point: number): number {
    // Pair j starts at code point pairs[j] - j, ascending in j: count the pairs that start before `point`.
    let lo = 0
    let hi = this.pairs.length
    while (lo < hi) {
      const mid = (lo + hi) >>> 1
      if ((this.pairs[mid] as number) - mid < point) lo = mid + 1
      else hi = mid
    }
    return point + lo
  }

  /** Whether UTF-16 position `unit` falls between the two halves of a surrogate pair. */
  splitsPair(unit: number): boolean {
    const before = countBelow(this.pairs, unit)
    return before > 0 && this.pairs[before - 1] === unit - 1
  }
}

const cache = new WeakMap<Text, Positions>()

/** How many of the ascending `values` are below `limit`. */
function countBelow(values: readonly number[], limit: number): number {
  let lo = 0
  let hi = values.length
  while (lo < hi) {
    const mid = (lo + hi) >>> 1
    if ((values[mid] as number) < limit) lo = mid + 1
    else hi = mid
  }
  return lo
}

const SURROGATE = /[\uD800-\uDFFF]/

/** The UTF-16 offsets of the surrogate pairs of `doc` (a lone half is a code point of its own, as the string iterator counts it). */
function surrogatePairs(doc: Text): number[] {
  const pairs: number[] = []
  let offset = 0
  // Lines come whole (a pair never spans two), and the line breaks between them as "\n".
  for (const it = doc.iter(); !it.next().done; ) {
    const chunk = it.value
    if (SURROGATE.test(chunk)) {
      for (let i = 0; i < chunk.length - 1; i++) {
        if (isHigh(chunk.charCodeAt(i)) && isLow(chunk.charCodeAt(i + 1))) {
          pairs.push(offset + i)
          i++
        }
      }
    }
    offset += chunk.length
  }
  return pairs
}

function isHigh(c: number): boolean {
  return c >= 0xd800 && c <= 0xdbff
}

function isLow(c: number): boolean {
  return c >= 0xdc00 && c <= 0xdfff
}

/** How many code points `s` holds, as TextHandle counts them (`[...s].length`, without the array). */
export function codePoints(s: string): number {
  let n = s.length
  for (let i = 0; i < s.length - 1; i++) {
    if (isHigh(s.charCodeAt(i)) && isLow(s.charCodeAt(i + 1))) {
      n--
      i++
    }
  }
  return n
}

/** `s` cut into pieces of at most `max` code points, never inside a surrogate pair. */
export function pieces(s: string, max: number): string[] {
  if (s.length <= max) return [s]
  const out: string[] = []
  let start = 0
  let points = 0
  for (let i = 0; i < s.length; i++) {
    if (points === max) {
      out.push(s.slice(start, i))
      start = i
      points = 0
    }
    if (isHigh(s.charCodeAt(i)) && isLow(s.charCodeAt(i + 1))) i++
    points++
  }
  out.push(s.slice(start))
  return out
}
