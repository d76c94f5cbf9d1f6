import { SteadError } from '../errors.ts'

/**
 * The change from one stable value of an object to its next, for types
 * whose values grow long (texts, lists, maps): a relay keeps an object's
 * stable history as an occasional whole value and these patches in
 * between, not a whole value per change.
 *
 * - `['s', at, removed, inserted]`: a string with `removed` UTF-16 units
 *   from `at` replaced by `inserted`;
 * - `['a', at, removed, inserted]`: an array, likewise, by elements;
 * - `['o', set, removed]`: a record with the fields of `set` (pairs) set
 *   and those of `removed` gone, its fields kept in name order.
 */
export type ValuePatch =
  | readonly ['s', number, number, string]
  | readonly ['a', number, number, readonly unknown[]]
  | readonly ['o', ReadonlyArray<readonly [string, unknown]>, readonly string[]]

/** The patch from string `before` to `after`: what lies between their common start and end. */
export function stringPatch(before: string, after: string): ValuePatch {
  const { at, removed, end } = between(before.length, after.length, (i) => before.charCodeAt(i) === after.charCodeAt(i), (i, j) => before.charCodeAt(i) === after.charCodeAt(j))
  return ['s', at, removed, after.slice(at, end)]
}

/** The patch from array `before` to `after`, elements compared with `same`. */
export function arrayPatch<T>(before: readonly T[], after: readonly T[], same: (a: T, b: T) => boolean): ValuePatch {
  const { at, removed, end } = between(before.length, after.length, (i) => same(before[i] as T, after[i] as T), (i, j) => same(before[i] as T, after[j] as T))
  return ['a', at, removed, after.slice(at, end)]
}

/** The patch from record `before` to `after`, field values compared with `same`. */
export function recordPatch<T>(before: Readonly<Record<string, T>>, after: Readonly<Record<string, T>>, same: (a: T, b: T) => boolean): ValuePatch {
  const set: Array<[string, T]> = []
  for (const [field, v] of Object.entries(after)) {
    if (!Object.hasOwn(before, field) || !same(before[field] as T, v)) set.push([field, v])
  }
  const removed = Object.keys(before).filter((field) => !Object.hasOwn(after, field))
  return ['o', set, removed]
}

/** The common start (`at`) and end of two sequences of lengths a and b: `removed` of a's go, b's from `at` to `end` come. */
function between(a: number, b: number, sameAt: (i: number) => boolean, sameFromEnd: (i: number, j: number) => boolean): { at: number; removed: number; end: number } {
  let at = 0
  while (at < a && at < b && sameAt(at)) at++
  let tail = 0
  while (tail < a - at && tail < b - at && sameFromEnd(a - 1 - tail, b - 1 - tail)) tail++
  return { at, removed: a - at - tail, end: b - tail }
}

/**
 * `value` with `patch` applied (the value a patch was made from gives the
 * value it was made to).
 *
 * @throws SteadError `malformed` if the patch does not fit the value (another shape, or out of range).
 */
export function applyValuePatch(value: unknown, patch: ValuePatch): unknown {
  const bad = (): never => {
    throw new SteadError('malformed', `a ${patch[0]} history patch does not fit the value it follows`)
  }
  switch (patch[0]) {
    case 's': {
      const [, at, removed, inserted] = patch
      if (typeof value !== 'string' || at + removed > value.length) return bad()
      return value.slice(0, at) + inserted + value.slice(at + removed)
    }
    case 'a': {
      const [, at, removed, inserted] = patch
      if (!Array.isArray(value) || at + removed > value.length) return bad()
      return [...value.slice(0, at), ...inserted, ...value.slice(at + removed)]
    }
    case 'o': {
      if (typeof value !== 'object' || value === null || Array.isArray(value)) return bad()
      const fields = new Map(Object.entries(value))
      for (const [field, v] of patch[1]) fields.set(field, v)
      for (const field of patch[2]) fields.delete(field)
      const out: Record<string, unknown> = {}
      for (const field of [...fields.keys()].sort((x, y) => (x < y ? -1 : x > y ? 1 : 0))) {
        Object.defineProperty(out, field, { value: fields.get(field), enumerable: true, writable: true, configurable: true })
      }
      return out
    }
    default:
      return bad()
  }
}
