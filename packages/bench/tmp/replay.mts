import { readFileSync } from 'node:fs'
import { gunzipSync } from 'node:zlib'
import { CollabText } from '../../core/src/crdt/text.ts'
import { encode } from 'msgpackr'
const file = process.argv[2] ?? '/work/shared/data/editing-traces/automerge-paper.json.gz'
const trace = JSON.parse(gunzipSync(readFileSync(file)).toString())
const t = new CollabText()
let n = 0
const ctx = () => ({ replica: 'alice', tag: `AAAAAAAAAAAAAAAA:${n++}` })
global.gc?.()
const m0 = process.memoryUsage().heapUsed
const t0 = performance.now()
for (const txn of trace.txns) for (const [pos, del, ins] of txn.patches) {
  if (del > 0) { const op = t.deleteOp(pos, del); if (op) t.apply(op, ctx()) }
  if (ins.length) t.apply(t.insertOp(pos, ins), ctx())
}
const ms = performance.now() - t0
const ok = t.value() === trace.endContent
global.gc?.()
const mem = process.memoryUsage().heapUsed - m0
const s0 = performance.now()
const bytes = encode(t.snapshot())
const encMs = performance.now() - s0
const l0 = performance.now()
const back = CollabText.fromSnapshot({}, (await import('msgpackr')).decode(bytes))
const loadMs = performance.now() - l0
console.log(JSON.stringify({ ok, ops: n, replayMs: Math.round(ms), memMB: +(mem / 1e6).toFixed(1), encodedBytes: bytes.length, encMs: Math.round(encMs), loadMs: Math.round(loadMs), loadOk: back.value() === trace.endContent }))
