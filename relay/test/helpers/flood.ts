/**
 * A hostile client in its own process (so the test that measures the relay
 * is not slowed by it): opens `connections` sessions to a relay and sends
 * distinct submits with broken signatures as fast as the relay takes them
 * for `ms` milliseconds, then prints the error reasons it got as JSON.
 *
 *   node --conditions=@stead/source --import tsx relay/test/helpers/flood.ts <api host:port> <connections> <ms>
 */
import { clockInit, encodeClientMessage, encodeEnvelope, sealEnvelope } from '@stead/core'
import { nodeCrypto, publicKeyOfSync } from '@stead/core/node'
import { TestClient } from './client.ts'

const [api, connections = '4', ms = '4000'] = process.argv.slice(2)
if (!api) throw new Error('usage: flood.ts <api> [connections] [ms]')
const who = (n: number) => ({ secretKey: new Uint8Array(32).fill(n), publicKey: publicKeyOfSync(new Uint8Array(32).fill(n)) })
const template = encodeEnvelope(
  await sealEnvelope(nodeCrypto, who(99), { space: 'flood', seq: 1, clock: clockInit(), deps: [], updates: [{ key: 'c', decl: { type: 'counter', bounds: {} }, ops: [1] }], safe: [] }),
)
// Built before the flood, so this process spends its time sending, not encoding.
const frames = Array.from({ length: 40_000 }, (_, k) => {
  const frame = template.slice()
  // A different byte of the signature each time: distinct frames, each a failed verification.
  frame[frame.length - 1 - (k % 64)]! ^= 1 + (k % 7)
  frame[frame.length - 33]! ^= (k >> 6) & 0xff
  return encodeClientMessage({ type: 'submit', id: k, envelope: frame })
})
const clients = await Promise.all(Array.from({ length: Number(connections) }, (_, i) => TestClient.connect(api, who(100 + i))))
const end = Date.now() + Number(ms)
let sent = 0
await Promise.all(
  clients.map(async (c) => {
    while (Date.now() < end && !c.closed) {
      // The relay stops reading a flooder: what it did not take waits here.
      for (let i = 0; i < 100 && c.buffered < 4 * 1024 * 1024; i++) c.raw(frames[sent++ % frames.length] as Uint8Array)
      await new Promise((res) => setTimeout(res, 1))
    }
  }),
)
const started = end - Number(ms)
const reasons: Record<string, number> = {}
for (const c of clients) for (const m of c.messages) if (m.type === 'error') reasons[m.reason] = (reasons[m.reason] ?? 0) + 1
for (const c of clients) c.close()
console.log(JSON.stringify({ sent, reasons, seconds: (Date.now() - started) / 1000 }))
process.exit(0)
