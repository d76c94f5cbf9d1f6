import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { FugueOrder, type Placement } from '../src/crdt/fugue.ts'

interface Made {
  readonly id: string
  readonly author: string
  readonly place: Placement
}

/**
 * FugueMax's order computed from its definition, independently of
 * FugueOrder's blocked traversal list: the tree walked recursively (left
 * children, the node, right children), left siblings by author then id,
 * right siblings by right origin (later first, the end first of all), then
 * author and id. A right origin always lies outside its sibling's subtree,
 * so positions from the previous walk settle the comparison; walking again
 * until nothing moves reaches the order.
 */
function referenceOrder(made: readonly Made[]): string[] {
  const kids = new Map<string, { left: Made[]; right: Made[] }>()
  for (const m of made) {
    let k = kids.get(m.place.parent)
    if (!k) kids.set(m.place.parent, (k = { left: [], right: [] }))
    ;(m.place.side === 0 ? k.left : k.right).push(m)
  }
  let pos = new Map<string, number>()
  const byAuthor = (a: Made, b: Made): number => (a.author !== b.author ? (a.author < b.author ? -1 : 1) : a.id < b.id ? -1 : 1)
  const walk = (id: string, out: string[]): void => {
    const k = kids.get(id)
    for (const l of [...(k?.left ?? [])].sort(byAuthor)) walk(l.id, out)
    if (id !== '') out.push(id)
    const right = [...(k?.right ?? [])].sort((a, b) => {
      const ra = a.place.rightOrigin
      const rb = b.place.rightOrigin
      if (ra !== rb) {
        if (ra === '') return -1
        if (rb === '') return 1
        return (pos.get(rb) ?? 0) - (pos.get(ra) ?? 0)
      }
      return byAuthor(a, b)
    })
    for (const r of right) walk(r.id, out)
  }
  let order: string[] = []
  for (let round = 0; round <= made.length + 1; round++) {
    const next: string[] = []
    walk('', next)
    const settled = next.every((id, i) => order[i] === id) && order.length === next.length
    order = next
    pos = new Map(order.map((id, i) => [id, i]))
    if (settled) break
  }
  return order
}

function traversal(o: FugueOrder<null>): string[] {
  const out: string[] = []
  for (let s = o.next(o.start); s; s = o.next(s)) out.push(s.id)
  return out
}

type Step = { kind: 'ins'; who: number; at: number } | { kind: 'del'; who: number; at: number } | { kind: 'sync'; who: number; from: number }

const steps = fc.array(
  fc.oneof(
    { weight: 4, arbitrary: fc.record({ kind: fc.constant('ins' as const), who: fc.nat(3), at: fc.nat(2) }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant('del' as const), who: fc.nat(3), at: fc.nat(2) }) },
    { weight: 4, arbitrary: fc.record({ kind: fc.constant('sync' as const), who: fc.nat(3), from: fc.nat(3) }) },
  ),
  { minLength: 12, maxLength: 40 },
)

/** Four replicas inserting where they see fit, deleting, and syncing with each other now and then (slots delivered last first, so many wait). */
function play(script: readonly Step[]): { made: Made[]; replicas: Array<FugueOrder<null>> } {
  const replicas = [0, 1, 2, 3].map(() => new FugueOrder<null>(null))
  const known = replicas.map(() => [] as Made[])
  const has = replicas.map(() => new Set<string>())
  const made: Made[] = []
  const give = (r: number, m: Made): void => {
    if (has[r]?.has(m.id)) return
    has[r]?.add(m.id)
    known[r]?.push(m)
    replicas[r]?.add(m.id, m.author, m.place, null, (slot) => replicas[r]?.setVisible(slot, true))
  }
  for (const [n, s] of script.entries()) {
    const o = replicas[s.who] as FugueOrder<null>
    if (s.kind === 'ins') {
      const m = { id: `${s.who}:${n}`, author: `r${s.who}`, place: o.placementAt(Math.min(s.at, o.length)) }
      made.push(m)
      give(s.who, m)
    } else if (s.kind === 'del') {
      const slot = o.at(Math.min(s.at, o.length - 1))
      if (slot) o.setVisible(slot, false)
    } else {
      for (const m of [...(known[s.from] ?? [])].reverse()) give(s.who, m)
    }
  }
  for (const r of [0, 1, 2, 3]) for (const m of [...made].reverse()) give(r, m)
  return { made, replicas }
}

// Each of these mutations of FugueOrder fails the property test below: right siblings ordered
// by author only (plain Fugue), by earlier right origin first, with the end origin last (either
// branch), and a slot put before its next sibling instead of before that sibling's leftmost descendant.
describe('FugueOrder against FugueMax from its definition', () => {
  it('orders every slot as the recursive FugueMax walk does, on every replica, whatever the delivery order', () => {
    fc.assert(
      fc.property(steps, (script) => {
        const { made, replicas } = play(script)
        const expected = referenceOrder(made)
        for (const o of replicas) expect(traversal(o)).toEqual(expected)
      }),
      { numRuns: 400 },
    )
  })

  it('puts right siblings with different right origins in FugueMax order (later origin first), not by author as plain Fugue does', () => {
    // C; then A and B typed at the start at once (left children of C: A, B, C). One replica
    // sees A and B and types x after A (right origin B); another sees only A and types y
    // after A (right origin C). FugueMax: y (its origin is further right) comes first.
    const o = new FugueOrder<null>(null)
    const add = (id: string, author: string, place: Placement): void => void o.add(id, author, place, null, (s) => o.setVisible(s, true))
    add('C', 'a', { parent: '', side: 1, rightOrigin: '' })
    add('A', 'a', { parent: 'C', side: 0, rightOrigin: '' })
    add('B', 'b', { parent: 'C', side: 0, rightOrigin: '' })
    add('x', 'c', { parent: 'A', side: 1, rightOrigin: 'B' })
    add('y', 'd', { parent: 'A', side: 1, rightOrigin: 'C' })
    expect(traversal(o)).toEqual(['A', 'y', 'x', 'B', 'C'])
  })
})
