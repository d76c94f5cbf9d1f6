import { CollabText, type OpContext, type TextOp } from '@stead/core'
import type { TextReplica } from './traces.ts'

/** A Stead text update as it travels: the op and the context every replica applies it under. */
export interface SteadUpdate {
  readonly op: TextOp
  readonly ctx: OpContext
}

let replicas = 0

/**
 * Stead's text CRDT driven by a trace: each transaction's ops are applied
 * at once with the tags an envelope would give them (`${prefix}:${n}`).
 */
export function steadText(): TextReplica<SteadUpdate> & { readonly crdt: CollabText } {
  const crdt = new CollabText()
  const author = `author${replicas++}`
  let txn = 0
  let pending: SteadUpdate[] = []
  const prefix = (): string => `${author}-${txn}`
  return {
    crdt,
    edit(pos, del, ins) {
      if (del > 0) this.apply(crdt.deleteOp(pos, del))
      if (ins.length > 0) this.apply(crdt.insertOp(pos, ins))
    },
    apply(op: TextOp | undefined): void {
      if (!op) return
      const u = { op, ctx: { replica: author, tag: `${prefix()}:${pending.length}` } }
      crdt.apply(u.op, u.ctx)
      pending.push(u)
    },
    commit() {
      const out = pending
      pending = []
      txn++
      return out
    },
    receive(updates) {
      for (const u of updates) crdt.apply(u.op, u.ctx)
    },
    text: () => crdt.value(),
  } as TextReplica<SteadUpdate> & { readonly crdt: CollabText; apply(op: TextOp | undefined): void }
}
