import * as A from '@automerge/automerge'
import { CollabText } from '@stead/core'
import { pack, unpack } from 'msgpackr'
import * as Y from 'yjs'
import { steadText } from './stead.ts'
import type { TextReplica } from './traces.ts'

/** A text system under test: replicas a trace drives, and its encoded form and how to load it. */
export interface TextSystem {
  readonly name: string
  replica(): TextReplica<unknown> & { encode(): Uint8Array }
  /** Loads an encoded document and returns its text. */
  load(bytes: Uint8Array): string
}

/** Stead's CollabText; encoded as its snapshot in msgpack (what a relay stores and a client loads). */
export const stead: TextSystem = {
  name: 'stead',
  replica() {
    const r = steadText()
    return Object.assign(r, { encode: () => pack(r.crdt.snapshot()) as Uint8Array })
  },
  load: (bytes) => CollabText.fromSnapshot({}, unpack(bytes) as ReturnType<CollabText['snapshot']>).value(),
}

/** Yjs (Y.Text), one transaction per trace transaction; encoded with encodeStateAsUpdate. */
/** A Y.Doc's own updates since the last `take`, and a way to apply another replica's: Yjs's side of a benchmark's replica. */
export function yjsUpdates(doc: Y.Doc): { take(): Uint8Array[]; receive(us: readonly unknown[]): void } {
  let updates: Uint8Array[] = []
  doc.on('update', (u: Uint8Array, origin: unknown) => {
    if (origin !== 'remote') updates.push(u)
  })
  return {
    take() {
      const out = updates
      updates = []
      return out
    },
    receive(us) {
      for (const u of us as readonly Uint8Array[]) Y.applyUpdate(doc, u, 'remote')
    },
  }
}

export const yjs: TextSystem = {
  name: 'yjs',
  replica() {
    const doc = new Y.Doc()
    const text = doc.getText('t')
    const updates = yjsUpdates(doc)
    let patches: Array<readonly [number, number, string]> = []
    return {
      edit: (pos, del, ins) => void patches.push([pos, del, ins]),
      commit() {
        doc.transact(() => {
          for (const [pos, del, ins] of patches) {
            if (del > 0) text.delete(pos, del)
            if (ins.length > 0) text.insert(pos, ins)
          }
        })
        patches = []
        return updates.take()
      },
      receive: (us) => updates.receive(us),
      text: () => text.toString(),
      encode: () => Y.encodeStateAsUpdate(doc),
    }
  },
  load(bytes) {
    const doc = new Y.Doc()
    Y.applyUpdate(doc, bytes)
    return doc.getText('t').toString()
  },
}

/** Automerge (text in a document field), one change per trace transaction; encoded with save(). */
export function automerge(): TextSystem {
  // Every replica forks one base document, so their `t` fields are the same object.
  const base = A.from({ t: '' }) as A.Doc<{ t: string }>
  return {
    name: 'automerge',
    replica() {
      let doc = A.clone(base)
      let patches: Array<readonly [number, number, string]> = []
      return {
        edit: (pos, del, ins) => void patches.push([pos, del, ins]),
        commit() {
          if (patches.length === 0) return []
          const todo = patches
          patches = []
          doc = A.change(doc, (d) => {
            for (const [pos, del, ins] of todo) A.splice(d, ['t'], pos, del, ins)
          })
          const last = A.getLastLocalChange(doc)
          return last ? [last] : []
        },
        receive(changes) {
          ;[doc] = A.applyChanges(doc, changes as Uint8Array[])
        },
        text: () => doc.t,
        encode: () => A.save(doc),
      }
    },
    load: (bytes) => (A.load(bytes) as A.Doc<{ t: string }>).t,
  }
}
