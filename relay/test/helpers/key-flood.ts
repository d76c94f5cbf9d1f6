/**
 * Honest-looking clients that flood a relay with valid safe updates, in their
 * own process (so the test that measures the relay is not slowed by it):
 * `keys` client keys, one session each, each submitting its own signed safe
 * updates (in space `flood`) in sequence order as fast as the relay takes them for `ms`
 * milliseconds. Prints what was accepted and refused as JSON.
 *
 *   node --conditions=@stead/source --import tsx relay/test/helpers/key-flood.ts <api host:port> <keys> <ms> <envelopes per key>
 */
import { clockInit, encodeClientMessage, encodeEnvelope, sealEnvelope } from '@stead/core'
import { nodeCrypto, publicKeyOfSync } from '@stead/core/node'
import { TestClient } from './client.ts'

const [api, keys = '8', ms = '4000', perKey = '3000'] = process.argv.slice(2)
if (!api) throw new Error('usage: key-flood.ts <api> [keys] [ms] [envelopes per key]')
const who = (n: number) => ({ secretKey: new Uint8Array(32).fill(n), publicKey: publicKeyOfSync(new Uint8Array(32).fill(n)) })
// Signed before the flood, so this process spends its time sending.
const streams = await Promise.all(
  Array.from({ length: Number(keys) }, async (_, k) => {
    const me = who(150 + k)
    const frames: Uint8Array[] = []
    for (let seq = 1; seq <= Number(perKey); seq++) {
      const env = await sealEnvelope(nodeCrypto, me, { space: 'flood', seq, clock: clockInit(), deps: [], updates: [], safe: [{ atomic: false, updates: [{ key: `flood-${k}`, decl: { type: 'counter', bounds: { min: 0 } }, op: 1 }] }] })
      frames.push(encodeClientMessage({ type: 'submit', id: seq, envelope: encodeEnvelope(env) }))
    }
    return { me, frames }
  }),
)
const clients = await Promise.all(streams.map((s) => TestClient.connect(api, s.me)))
const started = Date.now()
const end = started + Number(ms)
let sent = 0
await Promise.all(
  clients.map(async (c, k) => {
    const frames = (streams[k] as { frames: Uint8Array[] }).frames
    let next = 0
    // Sending stops when the frames run out; the session stays open to the end, so the relay takes what is buffered.
    while (Date.now() < end && !c.closed) {
      // The relay stops reading a client past its rate: what it did not take waits here.
      for (let i = 0; i < 50 && c.buffered < 1024 * 1024 && next < frames.length; i++, sent++) c.raw(frames[next++] as Uint8Array)
      await new Promise((res) => setTimeout(res, 1))
    }
  }),
)
const replies: Record<string, number> = {}
for (const c of clients) for (const m of c.messages) if (m.type === 'accepted' || m.type === 'error') replies[m.type === 'error' ? m.reason : m.type] = (replies[m.type === 'error' ? m.reason : m.type] ?? 0) + 1
for (const c of clients) c.close()
console.log(JSON.stringify({ sent, replies, seconds: (Date.now() - started) / 1000 }))
process.exit(0)
