/**
 * The list and map shapes of the crdt-benchmarks suite for Stead, Yjs and
 * Automerge: B1 one user (list: append, insert at random places; map: set
 * N keys), B2 two users at once then merged (list: random inserts; map:
 * both set the same keys), B3 √N users at once then merged. Reports time
 * and the encoded size of the result. Part of `npm run bench:docs -- --shapes`.
 */
import * as A from '@automerge/automerge'
import { CollabList, CollabMap, type ListOp, type MapOp, type OpContext } from '@stead/core'
import { pack } from 'msgpackr'
import * as Y from 'yjs'
import type { ShapeResult } from './shapes.ts'
import { yjsUpdates } from './systems.ts'
import { rng } from '../rng.ts'

/** One replica of a list and a map, whatever the system. */
interface Collections {
  insert(index: number, value: number): void
  set(key: string, value: number): void
  /** Ends a transaction: the updates since the last call. */
  commit(): unknown[]
  receive(updates: readonly unknown[]): void
  list(): unknown[]
  map(): Record<string, unknown>
  encode(): Uint8Array
}

interface System {
  readonly name: string
  replica(): Collections
}

let authors = 0

const stead: System = {
  name: 'stead',
  replica() {
    const author = `a${authors++}`
    const list = new CollabList()
    const map = new CollabMap()
    let txn = 0
    let out: Array<{ kind: 'l' | 'm'; op: ListOp | MapOp; ctx: OpContext }> = []
    const ctx = (): OpContext => ({ replica: author, tag: `${author}-${txn}:${out.length}` })
    return {
      insert(index, value) {
        const u = { kind: 'l' as const, op: list.insertOp(index, [value]), ctx: ctx() }
        list.apply(u.op as ListOp, u.ctx)
        out.push(u)
      },
      set(key, value) {
        const u = { kind: 'm' as const, op: ['s', key, value, map.nextStamp()] as MapOp, ctx: ctx() }
        map.apply(u.op as MapOp, u.ctx)
        out.push(u)
      },
      commit() {
        const done = out
        out = []
        txn++
        return done
      },
      receive(us) {
        for (const u of us as typeof out) (u.kind === 'l' ? list : map).apply(u.op as never, u.ctx)
      },
      list: () => list.value().map((e) => ('value' in e ? e.value : null)),
      map: () => Object.fromEntries(Object.entries(map.value()).map(([k, e]) => [k, 'value' in e ? e.value : null])),
      encode: () => pack([list.snapshot(), map.snapshot()]) as Uint8Array,
    }
  },
}

const yjs: System = {
  name: 'yjs',
  replica() {
    const doc = new Y.Doc()
    const list = doc.getArray<number>('l')
    const map = doc.getMap<number>('m')
    const updates = yjsUpdates(doc)
    return {
      insert: (index, value) => list.insert(index, [value]),
      set: (key, value) => map.set(key, value),
      commit: () => updates.take(),
      receive: (us) => updates.receive(us),
      list: () => list.toArray(),
      map: () => map.toJSON(),
      encode: () => Y.encodeStateAsUpdate(doc),
    }
  },
}

function automerge(): System {
  const base = A.from({ l: [] as number[], m: {} as Record<string, number> })
  return {
    name: 'automerge',
    replica() {
      let doc = A.clone(base)
      let todo: Array<(d: { l: number[]; m: Record<string, number> }) => void> = []
      return {
        insert: (index, value) => void todo.push((d) => (d.l as unknown as A.List<number>).insertAt(index, value)),
        set: (key, value) => void todo.push((d) => (d.m[key] = value)),
        commit() {
          if (!todo.length) return []
          const run = todo
          todo = []
          doc = A.change(doc, (d) => run.forEach((f) => f(d)))
          const last = A.getLastLocalChange(doc)
          return last ? [last] : []
        },
        receive(us) {
          ;[doc] = A.applyChanges(doc, us as Uint8Array[])
        },
        list: () => [...doc.l],
        map: () => ({ ...doc.m }),
        encode: () => A.save(doc),
      }
    },
  }
}


/** `users` replicas each make `each` edits on their own copy (one transaction each), then all exchange everything; whether they agree and hold every element. */
function together(system: System, users: number, each: number, edit: (r: Collections, i: number, rand: () => number, length: number) => void, size: (r: Collections) => number, expected: number): { r: Collections; ok: boolean } {
  const replicas = Array.from({ length: users }, () => system.replica())
  const made: unknown[][] = replicas.map((r, u) => {
    const rand = rng(u * 31 + each)
    const mine: unknown[] = []
    // Before they merge, a replica holds only its own edits: its list's length is how many it made.
    for (let i = 0; i < each; i++) {
      edit(r, i, rand, i)
      mine.push(...r.commit())
    }
    return mine
  })
  replicas.forEach((r, i) => made.forEach((m, j) => i !== j && r.receive(m)))
  const first = replicas[0] as Collections
  const same = replicas.every((r) => JSON.stringify(r.list()) === JSON.stringify(first.list()) && JSON.stringify(r.map()) === JSON.stringify(first.map()))
  return { r: first, ok: same && size(first) === expected }
}

export function runCollectionShapes(n: number): ShapeResult[] {
  const out: ShapeResult[] = []
  for (const system of [stead, yjs, automerge()]) {
    const time = (shape: string, act: () => { r: Collections; ok: boolean }): void => {
      const t0 = performance.now()
      const { r, ok } = act()
      out.push({ system: system.name, shape, n, ok, ms: Math.round(performance.now() - t0), encodedBytes: r.encode().length })
    }
    const listLength = (r: Collections) => r.list().length
    const mapSize = (r: Collections) => Object.keys(r.map()).length
    time('list B1.1 append one by one', () => together(system, 1, n, (r, i, _, len) => r.insert(len, i), listLength, n))
    time('list B1.4 insert at random places', () => together(system, 1, n, (r, i, rand, len) => r.insert(Math.floor(rand() * (len + 1)), i), listLength, n))
    time('list B2.1 two users insert at random places, then merge', () => together(system, 2, n / 2, (r, i, rand, len) => r.insert(Math.floor(rand() * (len + 1)), i), listLength, n))
    const users = Math.max(2, Math.round(Math.sqrt(n)))
    time(`list B3.3 ${users} users insert at random places, then merge`, () => together(system, users, Math.floor(n / users), (r, i, rand, len) => r.insert(Math.floor(rand() * (len + 1)), i), listLength, users * Math.floor(n / users)))
    time('map B1 set N keys', () => together(system, 1, n, (r, i) => r.set(`k${i}`, i), mapSize, n))
    time('map B2 two users set the same keys, then merge', () => together(system, 2, n / 2, (r, i) => r.set(`k${i}`, i), mapSize, n / 2))
    time(`map B3 ${users} users set the same key, then merge`, () => together(system, users, 20, (r, i) => r.set('k', i), mapSize, 1))
  }
  return out
}
