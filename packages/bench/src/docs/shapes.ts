/**
 * The text shapes of the crdt-benchmarks suite, as Stead, Yjs and
 * Automerge replicas (see systems.ts) do them: B1 one user (append,
 * prepend, random inserts), B2 two users inserting at random places at once
 * then merging, B3 √N users doing so. Reports time and the encoded size of
 * the result. Part of `npm run bench:docs -- --shapes [N]`.
 */
import type { TextSystem } from './systems.ts'
import type { TextReplica } from './traces.ts'
import { rng } from '../rng.ts'

export interface ShapeResult {
  readonly system: string
  readonly shape: string
  readonly n: number
  readonly ok: boolean
  readonly ms: number
  readonly encodedBytes: number
}


/** Each of `users` replicas inserts `each` characters at random places of its own copy (one transaction each), then all merge. */
function concurrent(system: TextSystem, users: number, each: number): { replicas: Array<ReturnType<TextSystem['replica']>>; ok: boolean } {
  const replicas = Array.from({ length: users }, () => system.replica())
  const made: unknown[][] = []
  const rand = rng(users * 7919 + each)
  replicas.forEach((r) => {
    const mine: unknown[] = []
    let length = 0
    for (let i = 0; i < each; i++) {
      r.edit(Math.floor(rand() * (length + 1)), 0, String.fromCharCode(97 + (i % 26)))
      length++
      mine.push(...r.commit())
    }
    made.push(mine)
  })
  replicas.forEach((r, i) => made.forEach((m, j) => i !== j && (r as TextReplica<unknown>).receive(m)))
  const text = replicas[0]?.text()
  return { replicas, ok: replicas.every((r) => r.text() === text) && text?.length === users * each }
}

export function runShapes(system: TextSystem, n: number): ShapeResult[] {
  const out: ShapeResult[] = []
  const one = (shape: string, act: (r: ReturnType<TextSystem['replica']>) => string): void => {
    const r = system.replica()
    const t0 = performance.now()
    const expected = act(r)
    const ms = performance.now() - t0
    out.push({ system: system.name, shape, n, ok: r.text() === expected, ms: Math.round(ms), encodedBytes: r.encode().length })
  }
  one('B1.1 append one by one', (r) => {
    let s = ''
    for (let i = 0; i < n; i++) {
      const ch = String.fromCharCode(97 + (i % 26))
      r.edit(i, 0, ch)
      r.commit()
      s += ch
    }
    return s
  })
  one('B1.3 prepend one by one', (r) => {
    let s = ''
    for (let i = 0; i < n; i++) {
      const ch = String.fromCharCode(97 + (i % 26))
      r.edit(0, 0, ch)
      r.commit()
      s = ch + s
    }
    return s
  })
  one('B1.4 insert at random places', (r) => {
    const rand = rng(n)
    const chars: string[] = []
    for (let i = 0; i < n; i++) {
      const at = Math.floor(rand() * (chars.length + 1))
      const ch = String.fromCharCode(97 + (i % 26))
      r.edit(at, 0, ch)
      r.commit()
      chars.splice(at, 0, ch)
    }
    return chars.join('')
  })
  for (const [shape, users] of [
    ['B2.1 two users insert at random places at once, then merge', 2],
    ['B3.3 √N users insert at random places at once, then merge', Math.max(2, Math.round(Math.sqrt(n)))],
  ] as const) {
    const t0 = performance.now()
    const { replicas, ok } = concurrent(system, users, Math.max(1, Math.floor(n / users)))
    const ms = performance.now() - t0
    out.push({ system: system.name, shape, n, ok, ms: Math.round(ms), encodedBytes: (replicas[0] as ReturnType<TextSystem['replica']>).encode().length })
  }
  return out
}
