import { parseSlotId, type FugueOrder, type Slot } from './fugue.ts'

/**
 * Which neighbour a relative position sticks to: 'before', the element
 * before it (typing there lands after that element, so the position stays
 * in front of what others type at it); 'after', the element after it (it
 * stays behind what others type at it).
 */
export type Assoc = 'before' | 'after'

/**
 * A position in a text or list held by an element instead of an index, as
 * Yjs's RelativePosition: it stays beside that element whatever others
 * insert, delete or move around it, on every replica, and beside where the
 * element was once it is deleted (a deleted element keeps its slot).
 */
export interface RelativePosition {
  /** The element's id (`${tag}.${k}`); '' for the start of the sequence ('before') or its end ('after'). */
  readonly id: string
  /** The side of the position the element is on (see {@link Assoc}). */
  readonly assoc: Assoc
}

/** Longest element id a relative position may name (as long as an op may name). */
const MAX_ID_CHARS = 128

/** What is wrong with a relative position from outside (an app's storage, a peer), or null. */
export function validateRelativePosition(p: unknown): string | null {
  if (typeof p !== 'object' || p === null) return 'a relative position is { id, assoc }'
  const { id, assoc } = p as { id?: unknown; assoc?: unknown }
  if (assoc !== 'before' && assoc !== 'after') return "a relative position's assoc is 'before' or 'after'"
  if (typeof id !== 'string' || id.length > MAX_ID_CHARS || (id !== '' && parseSlotId(id) === undefined)) return "a relative position's id is an element id or ''"
  return null
}

/**
 * The relative position of `index` (0 to the visible length) in `order`,
 * held by the visible element on its `assoc` side; `idOf` names a slot's
 * element (a list's element is not always in its own slot: it moves).
 *
 * @throws RangeError for an index that is not an integer from 0 to the length.
 */
export function relativeIn<T>(order: FugueOrder<T>, index: number, assoc: Assoc, idOf: (slot: Slot<T>) => string): RelativePosition {
  if (!Number.isSafeInteger(index) || index < 0 || index > order.length) throw new RangeError(`index ${index} is outside 0..${order.length}`)
  const slot = assoc === 'before' ? order.at(index - 1) : order.at(index)
  return { id: slot ? idOf(slot) : '', assoc }
}

/**
 * Where a relative position is now, given the slot its element holds
 * (undefined: not here, or not placed yet): just after the element for
 * 'before', just before it for 'after'; a deleted element's slot is where
 * the element was, so both are the index of the first visible slot after
 * it. The start and the end need no slot. Undefined if `slot` is.
 */
export function resolveIn<T>(order: FugueOrder<T>, pos: RelativePosition, slot: Slot<T> | undefined): number | undefined {
  if (pos.id === '') return pos.assoc === 'before' ? 0 : order.length
  if (!slot) return undefined
  const i = order.indexOf(slot)
  return pos.assoc === 'before' && slot.visible ? i + 1 : i
}
