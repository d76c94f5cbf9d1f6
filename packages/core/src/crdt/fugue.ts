/**
 * The order of a sequence CRDT: a FugueMax tree (Weidner & Kleppmann, "The
 * Art of the Fugue", 2023), whose traversal is the sequence, kept beside a
 * list of its slots in traversal order so positions are found without
 * walking the tree.
 *
 * Every element ever inserted has a slot, visible or not (a deleted element
 * keeps its slot: later inserts are placed relative to it). A slot is a left
 * or right child of its parent; a right child also names its right origin,
 * the slot that followed it when it was made. Siblings are ordered
 * deterministically (left ones by author, right ones by their right origin's
 * position, later first, then author), so the order depends only on which
 * slots exist, never on the order they arrived in. FugueMax's rule is what
 * keeps two users' concurrent runs of typing from interleaving.
 *
 * A slot arrives before its parent or right origin when updates come out of
 * causal order (a relay's commit can order an envelope before one it
 * depends on): it waits, and is placed when the slot it needs is.
 */

/** Where a new slot goes: its parent ('' for the start), its side, and its right origin ('' for the end; right side only). */
export interface Placement {
  /** The parent slot's id, '' for the start of the sequence. */
  readonly parent: string
  /** 0: a left child of the parent, 1: a right child. */
  readonly side: 0 | 1
  /** A right child's right origin: the slot that followed the parent when it was made, '' for the end. '' for a left child. */
  readonly rightOrigin: string
}

/** One position in the sequence. `T` is what the owner keeps there. */
export interface Slot<T> {
  /** `${tag}.${k}`: the op tag that made it and its offset in that op's run ('' for the start). */
  readonly id: string
  /** The author id that made it: the tie-break among siblings. */
  readonly author: string
  readonly parent: Slot<T> | undefined
  readonly side: 0 | 1
  /** Right children only: the slot after the parent when this one was made (undefined: the end). */
  readonly rightOrigin: Slot<T> | undefined
  /** Left and right children, in traversal order; undefined while empty. */
  left: Array<Slot<T>> | undefined
  right: Array<Slot<T>> | undefined
  /** Whether the slot counts in the sequence's visible length and indexes. */
  visible: boolean
  /** What the owner keeps at this position. */
  data: T
  /** The block of the traversal list that holds this slot. */
  block: Block<T>
}

interface Block<T> {
  slots: Array<Slot<T>>
  visible: number
  /** This block's index in the list of blocks. */
  index: number
}

/** A slot that waits for its parent or right origin. */
interface Waiting<T> {
  readonly id: string
  readonly author: string
  readonly place: Placement
  readonly data: T
  readonly placed: (slot: Slot<T>) => void
}

const BLOCK = 256

/** The id of a slot: the op tag that made it and its offset in that op's run. */
export function slotId(tag: string, k: number): string {
  return `${tag}.${k}`
}

/** An op tag and offset from a slot id, or undefined if malformed. */
export function parseSlotId(id: string): { tag: string; k: number } | undefined {
  const dot = id.lastIndexOf('.')
  if (dot <= 0) return undefined
  const k = Number(id.slice(dot + 1))
  return Number.isSafeInteger(k) && k >= 0 && String(k) === id.slice(dot + 1) ? { tag: id.slice(0, dot), k } : undefined
}

/** How many of positions 0..length-1 no range `[from, from + count)` of `ranges` covers (linear in length and ranges). */
export function uncovered(ranges: ReadonlyArray<{ readonly from: number; readonly count: number }> | undefined, length: number): number {
  if (!ranges?.length) return length
  const depth = new Int32Array(length + 1)
  for (const r of ranges) {
    if (r.from >= length) continue
    depth[r.from] = (depth[r.from] as number) + 1
    const end = Math.min(r.from + r.count, length)
    depth[end] = (depth[end] as number) - 1
  }
  let n = 0
  for (let k = 0, d = 0; k < length; k++) if ((d += depth[k] as number) === 0) n++
  return n
}

/** The FugueMax tree and its traversal, see the module comment. */
export class FugueOrder<T> {
  private readonly byId = new Map<string, Slot<T>>()
  private readonly blocks: Array<Block<T>> = []
  /** Slots waiting for the slot whose id is the key. */
  private readonly waiting = new Map<string, Array<Waiting<T>>>()
  private readonly waitingIds = new Set<string>()
  private visibleCount = 0
  readonly start: Slot<T>

  constructor(startData: T) {
    const block: Block<T> = { slots: [], visible: 0, index: 0 }
    this.blocks.push(block)
    this.start = { id: '', author: '', parent: undefined, side: 1, rightOrigin: undefined, left: undefined, right: undefined, visible: false, data: startData, block }
    block.slots.push(this.start)
    this.byId.set('', this.start)
  }

  /** How many visible slots there are. */
  get length(): number {
    return this.visibleCount
  }

  get(id: string): Slot<T> | undefined {
    return id === '' ? undefined : this.byId.get(id)
  }

  /**
   * Adds a slot where `place` says, or keeps it waiting until the slots it
   * names exist; `placed` runs once it is in the tree. Adding an id that
   * exists (or waits) does nothing and returns false.
   */
  add(id: string, author: string, place: Placement, data: T, placed: (slot: Slot<T>) => void): boolean {
    if (this.byId.has(id) || this.isWaiting(id)) return false
    this.tryPlace({ id, author, place, data, placed })
    return true
  }

  /** Whether a slot with this id waits for another. */
  isWaiting(id: string): boolean {
    return this.waitingIds.has(id)
  }

  setVisible(slot: Slot<T>, visible: boolean): void {
    if (slot.visible === visible || slot === this.start) return
    slot.visible = visible
    const d = visible ? 1 : -1
    slot.block.visible += d
    this.visibleCount += d
  }

  /** The visible slot at `index` (0-based), or undefined. */
  at(index: number): Slot<T> | undefined {
    if (index < 0 || index >= this.visibleCount) return undefined
    let rest = index
    for (const block of this.blocks) {
      if (rest >= block.visible) {
        rest -= block.visible
        continue
      }
      for (const s of block.slots) {
        if (!s.visible) continue
        if (rest === 0) return s
        rest--
      }
    }
    return undefined
  }

  /** How many visible slots come before `slot` (its index if it is visible). */
  indexOf(slot: Slot<T>): number {
    let n = 0
    for (let b = 0; b < slot.block.index; b++) n += (this.blocks[b] as Block<T>).visible
    for (const s of slot.block.slots) {
      if (s === slot) return n
      if (s.visible) n++
    }
    throw new Error('slot not in its block')
  }

  /** The slot after `slot` in the traversal, visible or not, or undefined at the end. */
  next(slot: Slot<T>): Slot<T> | undefined {
    const i = slot.block.slots.indexOf(slot)
    if (i + 1 < slot.block.slots.length) return slot.block.slots[i + 1]
    for (let b = slot.block.index + 1; b < this.blocks.length; b++) {
      const first = (this.blocks[b] as Block<T>).slots[0]
      if (first) return first
    }
    return undefined
  }

  /** Calls `visit` for each visible slot in order (a callback, not a generator: a generator's cost per slot was 1.5x this on long texts). */
  forEachVisible(visit: (slot: Slot<T>) => void): void {
    for (const block of this.blocks) {
      if (block.visible === 0) continue
      const slots = block.slots
      for (let i = 0; i < slots.length; i++) {
        const s = slots[i] as Slot<T>
        if (s.visible) visit(s)
      }
    }
  }

  /** Calls `visit` for every placed slot in order, visible or not (the start excluded). */
  forEachSlot(visit: (slot: Slot<T>) => void): void {
    for (const block of this.blocks) {
      const slots = block.slots
      for (let i = 0; i < slots.length; i++) {
        const s = slots[i] as Slot<T>
        if (s !== this.start) visit(s)
      }
    }
  }

  /** Calls `visit` for the slots after `slot` in order, visible or not, until it returns false. */
  forEachAfter(slot: Slot<T>, visit: (s: Slot<T>) => boolean): void {
    let i = slot.block.slots.indexOf(slot) + 1
    for (let b = slot.block.index; b < this.blocks.length; b++, i = 0) {
      const slots = (this.blocks[b] as Block<T>).slots
      for (; i < slots.length; i++) if (!visit(slots[i] as Slot<T>)) return
    }
  }

  /** Whether any slot waits for another. */
  get hasWaiting(): boolean {
    return this.waitingIds.size > 0
  }

  /**
   * An independent copy with each slot's data passed through `data`, and
   * the copy of each slot (a structural copy: linear, no placement redone).
   * Only without waiting slots: their callbacks belong to this order's owner.
   */
  copy(data: (d: T) => T): { order: FugueOrder<T>; twin: Map<Slot<T>, Slot<T>> } {
    if (this.hasWaiting) throw new Error('FugueOrder.copy: slots are waiting')
    const order = new FugueOrder<T>(data(this.start.data))
    const twin = new Map<Slot<T>, Slot<T>>([[this.start, order.start]])
    order.blocks.length = 0
    for (const b of this.blocks) {
      const block: Block<T> = { slots: [], visible: b.visible, index: b.index }
      for (const s of b.slots) {
        const c = s === this.start ? order.start : { ...s, data: data(s.data) }
        c.block = block
        block.slots.push(c)
        twin.set(s, c)
      }
      order.blocks.push(block)
    }
    const mapped = (x: Slot<T> | undefined): Slot<T> | undefined => x && (twin.get(x) as Slot<T>)
    for (const [s, c] of twin) {
      if (s === this.start) continue
      const w = c as { parent: Slot<T> | undefined; rightOrigin: Slot<T> | undefined }
      w.parent = mapped(s.parent)
      w.rightOrigin = mapped(s.rightOrigin)
      order.byId.set(c.id, c)
    }
    for (const [s, c] of twin) {
      c.left = s.left?.map((x) => twin.get(x) as Slot<T>)
      c.right = s.right?.map((x) => twin.get(x) as Slot<T>)
    }
    order.visibleCount = this.visibleCount
    return { order, twin }
  }

  /**
   * Where a slot inserted at visible `index` goes, as the one inserting it
   * sees the sequence: after the visible slot before it (the left origin),
   * as its right child if it has none, else as the left child of the slot
   * that follows it in the traversal (which then has no left children).
   */
  placementAt(index: number): Placement {
    const leftOrigin = index === 0 ? this.start : this.at(index - 1)
    if (!leftOrigin) throw new RangeError(`index ${index} is past the end (${this.visibleCount})`)
    return this.placementAfter(leftOrigin)
  }

  /** Where a slot goes to come right after `leftOrigin` (visible or not) in the traversal: see placementAt. */
  placementAfter(leftOrigin: Slot<T>): Placement {
    const rightOrigin = this.next(leftOrigin)
    if (!leftOrigin.right) return { parent: leftOrigin.id, side: 1, rightOrigin: rightOrigin?.id ?? '' }
    return { parent: (rightOrigin as Slot<T>).id, side: 0, rightOrigin: '' }
  }

  /** Whether `a` comes before `b` in the traversal. */
  before(a: Slot<T>, b: Slot<T>): boolean {
    if (a.block !== b.block) return a.block.index < b.block.index
    return a.block.slots.indexOf(a) < a.block.slots.indexOf(b)
  }

  /** Places `first`, then every slot that waited for what got placed (a loop: chains of waiting slots can be long). */
  private tryPlace(first: Waiting<T>): void {
    const queue = [first]
    for (let w = queue.pop(); w; w = queue.pop()) {
      const parent = this.byId.get(w.place.parent)
      if (!parent) {
        this.wait(w.place.parent, w)
        continue
      }
      let rightOrigin: Slot<T> | undefined
      if (w.place.side === 1 && w.place.rightOrigin !== '') {
        rightOrigin = this.byId.get(w.place.rightOrigin)
        if (!rightOrigin) {
          this.wait(w.place.rightOrigin, w)
          continue
        }
      }
      const slot: Slot<T> = { id: w.id, author: w.author, parent, side: w.place.side, rightOrigin, left: undefined, right: undefined, visible: false, data: w.data, block: this.start.block }
      this.insertIntoTree(slot)
      this.byId.set(slot.id, slot)
      w.placed(slot)
      const ready = this.waiting.get(slot.id)
      if (!ready) continue
      this.waiting.delete(slot.id)
      for (const r of ready) this.waitingIds.delete(r.id)
      queue.push(...ready)
    }
  }

  private wait(on: string, w: Waiting<T>): void {
    let list = this.waiting.get(on)
    if (!list) this.waiting.set(on, (list = []))
    list.push(w)
    this.waitingIds.add(w.id)
  }

  /** Puts a new leaf among its siblings and into the traversal list. */
  private insertIntoTree(slot: Slot<T>): void {
    const parent = slot.parent as Slot<T>
    const siblings = slot.side === 0 ? (parent.left ??= []) : (parent.right ??= [])
    let j = 0
    while (j < siblings.length && this.siblingBefore(siblings[j] as Slot<T>, slot)) j++
    siblings.splice(j, 0, slot)
    const after = siblings[j + 1]
    if (after) return this.insertBefore(leftmost(after), slot)
    if (slot.side === 0) return this.insertBefore(parent, slot)
    this.insertAfter(j > 0 ? rightmost(siblings[j - 1] as Slot<T>) : parent, slot)
  }

  /** Whether sibling `a` goes before sibling `b` (same parent, same side). */
  private siblingBefore(a: Slot<T>, b: Slot<T>): boolean {
    if (a.side === 1 && a.rightOrigin !== b.rightOrigin) {
      // FugueMax: right siblings in reverse order of their right origins (the end last of all, so first).
      if (!a.rightOrigin) return true
      if (!b.rightOrigin) return false
      return this.before(b.rightOrigin, a.rightOrigin)
    }
    if (a.author !== b.author) return a.author < b.author
    return a.id < b.id
  }

  private insertBefore(ref: Slot<T>, slot: Slot<T>): void {
    const block = ref.block
    this.insertInto(block, block.slots.indexOf(ref), slot)
  }

  private insertAfter(ref: Slot<T>, slot: Slot<T>): void {
    const block = ref.block
    this.insertInto(block, block.slots.indexOf(ref) + 1, slot)
  }

  private insertInto(block: Block<T>, at: number, slot: Slot<T>): void {
    block.slots.splice(at, 0, slot)
    slot.block = block
    if (block.slots.length < 2 * BLOCK) return
    const moved = block.slots.splice(BLOCK)
    const fresh: Block<T> = { slots: moved, visible: 0, index: block.index + 1 }
    for (const s of moved) {
      s.block = fresh
      if (s.visible) fresh.visible++
    }
    block.visible -= fresh.visible
    this.blocks.splice(block.index + 1, 0, fresh)
    for (let b = block.index + 2; b < this.blocks.length; b++) (this.blocks[b] as Block<T>).index = b
  }
}

/** The first slot of a subtree in the traversal. */
function leftmost<T>(slot: Slot<T>): Slot<T> {
  let s = slot
  while (s.left) s = s.left[0] as Slot<T>
  return s
}

/** The last slot of a subtree in the traversal. */
function rightmost<T>(slot: Slot<T>): Slot<T> {
  let s = slot
  while (s.right) s = s.right[s.right.length - 1] as Slot<T>
  return s
}
