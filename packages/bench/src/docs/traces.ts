import { readFileSync } from 'node:fs'
import { gunzipSync } from 'node:zlib'

/**
 * Real editing traces (the editing-traces format by Joseph Gentle, CC BY
 * 4.0): `patches` are `[position, deleteCount, insertText]`, positions in
 * Unicode code points. A sequential trace applies them in order; a
 * concurrent one is a DAG of transactions, each applied to the document as
 * of its `parents`.
 */
export type Patch = readonly [number, number, string]

export interface SequentialTrace {
  readonly kind: 'sequential'
  readonly startContent: string
  readonly endContent: string
  readonly txns: ReadonlyArray<{ readonly patches: readonly Patch[] }>
}

export interface ConcurrentTrace {
  readonly kind: 'concurrent'
  readonly startContent: string
  readonly endContent: string
  readonly numAgents: number
  readonly txns: ReadonlyArray<{ readonly parents: readonly number[]; readonly agent: number; readonly patches: readonly Patch[] }>
}

export type Trace = SequentialTrace | ConcurrentTrace

/** Reads a trace file, gzip'd or not. */
export function loadTrace(path: string): Trace {
  const raw = readFileSync(path)
  const text = (raw[0] === 0x1f && raw[1] === 0x8b ? gunzipSync(raw) : raw).toString('utf8')
  const t = JSON.parse(text) as { kind?: string; startContent?: string; endContent: string; numAgents?: number; txns: unknown[] }
  if (!Array.isArray(t.txns) || typeof t.endContent !== 'string') throw new Error(`${path}: not an editing trace (no txns or endContent)`)
  const base = { startContent: t.startContent ?? '', endContent: t.endContent }
  return t.kind === 'concurrent' ? ({ ...base, kind: 'concurrent', numAgents: t.numAgents ?? 2, txns: t.txns } as ConcurrentTrace) : ({ ...base, kind: 'sequential', txns: t.txns } as SequentialTrace)
}

/** The first `n` transactions of a sequential trace, with the end content they give (replayed on a plain string). */
export function sliceTrace(trace: SequentialTrace, n: number): SequentialTrace {
  const txns = trace.txns.slice(0, n)
  const doc = [...trace.startContent]
  for (const txn of txns) for (const [pos, del, ins] of txn.patches) doc.splice(pos, del, ...ins)
  return { ...trace, txns, endContent: doc.join('') }
}

/** One text replica as a trace drives it: what each system under test implements. */
export interface TextReplica<Update> {
  /** Applies one patch made locally. */
  edit(pos: number, del: number, ins: string): void
  /** Ends a transaction: the updates made since the last call, to send to other replicas. */
  commit(): Update[]
  /** Applies updates another replica made. */
  receive(updates: readonly Update[]): void
  text(): string
}

/** Replays a sequential trace into one replica. */
export function replaySequential<U>(trace: SequentialTrace, replica: TextReplica<U>): void {
  if (trace.startContent) replica.edit(0, 0, trace.startContent)
  for (const txn of trace.txns) {
    for (const [pos, del, ins] of txn.patches) replica.edit(pos, del, ins)
    replica.commit()
  }
}

/**
 * Replays a concurrent trace through one replica per agent that fork and
 * merge as `parents` say: before an agent's transaction, its replica gets
 * the transactions of the transaction's history it lacks (found walking
 * back from the parents until what it holds: a replica only ever holds
 * whole histories). At the end every replica gets everything.
 */
export function replayConcurrent<U>(trace: ConcurrentTrace, make: () => TextReplica<U>): Array<TextReplica<U>> {
  const replicas = Array.from({ length: trace.numAgents }, make)
  const has = replicas.map(() => new Set<number>())
  const made: U[][] = []
  const bring = (r: number, from: readonly number[]): void => {
    const missing: number[] = []
    const seen = new Set<number>()
    const stack = [...from]
    while (stack.length) {
      const j = stack.pop() as number
      if (seen.has(j) || has[r]?.has(j)) continue
      seen.add(j)
      missing.push(j)
      stack.push(...(trace.txns[j]?.parents ?? []))
    }
    // Index order is an order that respects parents.
    for (const j of missing.sort((a, b) => a - b)) {
      ;(replicas[r] as TextReplica<U>).receive(made[j] as U[])
      has[r]?.add(j)
    }
  }
  if (trace.startContent) {
    // One replica writes the start; the others receive it.
    const first = replicas[0] as TextReplica<U>
    first.edit(0, 0, trace.startContent)
    const start = first.commit()
    for (const r of replicas.slice(1)) r.receive(start)
  }
  trace.txns.forEach((txn, i) => {
    bring(txn.agent, txn.parents)
    const replica = replicas[txn.agent] as TextReplica<U>
    for (const [pos, del, ins] of txn.patches) replica.edit(pos, del, ins)
    made[i] = replica.commit()
    has[txn.agent]?.add(i)
  })
  const all = [...trace.txns.keys()]
  replicas.forEach((_, r) => bring(r, all))
  return replicas
}
