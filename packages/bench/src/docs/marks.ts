#!/usr/bin/env node
/**
 * `npm run bench:marks`: what a text with many overlapping marks costs each
 * time its spans are computed (every change of the text, on every relay
 * for its history and on every client): `--marks` nested bold and link
 * marks (default 1,000, 4,000 and 10,000) over a `--length`-character text
 * (default 20,000), the first spans() and the one after an insert. A
 * report, never a test.
 */
import { CollabText } from '@stead/core'
import { reportArgs } from '../args.ts'

const values = reportArgs('usage: npm run bench:marks -- [--length 20000] [--marks 1000,4000,10000]', {
  length: { type: 'string', default: '20000' },
  marks: { type: 'string', default: '1000,4000,10000' },
})
const length = Number(values.length)
const counts = values.marks.split(',').map(Number)

for (const marks of counts) {
  const t = new CollabText()
  t.apply(t.insertOp(0, 'x'.repeat(length)), { replica: 'a', tag: 'i:0' })
  // Nested ranges, each one covering every boundary inside it: the most marks at once over one character.
  for (let i = 0; i < marks; i++) {
    const from = i % (length / 2)
    t.apply(t.markOp(from, length - from, i % 2 ? 'bold' : 'link', i % 2 ? true : `https://example.com/${i}`), { replica: 'a', tag: `m:${i}` })
  }
  const t0 = performance.now()
  const spans = t.spans().length
  const first = performance.now() - t0
  t.apply(t.insertOp(0, 'y'), { replica: 'a', tag: 'i:1' })
  const t1 = performance.now()
  t.spans()
  console.log(JSON.stringify({ length, marks, spans, firstMs: +first.toFixed(1), afterEditMs: +(performance.now() - t1).toFixed(1) }))
}
