/**
 * A Byzantine member relay in its own process: it speaks the mesh with a
 * member's key (that relay must be stopped: this process takes its mesh
 * address) and floods one peer with requests of one kind for `ms`
 * milliseconds, then prints what it sent and received as JSON.
 *
 *   node --conditions=@stead/source --import tsx relay/test/helpers/member-flood.ts \
 *     <cluster.json> <key.json> <as id> <target id> <kind> <ms> [rate per second, 0: as fast as the mesh takes them]
 *
 * Kinds: sync (from round 0: the whole retained history), fetch (digests
 * nobody holds), own-last-ask, head-ask, wake (envelopes of new spaces, one
 * client key: each wake starts `WAKE_SPACES` spaces).
 */
import { clockInit, encodeEnvelope, sealEnvelope } from '@stead/core'
import { nodeCrypto, publicKeyOfSync } from '@stead/core/node'
import { loadCluster, loadIdentity } from '../../src/config.ts'
import { encodeMessage, type Message } from '../../src/consensus/index.ts'
import { createLibp2pMesh } from '../../src/mesh/libp2p.ts'

const [clusterPath, keyPath, asId, targetId, kind = 'sync', ms = '3000', rateArg = '0'] = process.argv.slice(2)
if (!clusterPath || !keyPath || !asId || !targetId) throw new Error('usage: member-flood.ts <cluster.json> <key.json> <as id> <target id> <kind> <ms> [rate]')
const cluster = loadCluster(clusterPath)
const me = cluster.relays.findIndex((r) => r.id === asId)
const target = cluster.relays.findIndex((r) => r.id === targetId)
const { secretKey } = loadIdentity(keyPath)
const WAKE_SPACES = 50

let received = 0
let receivedBytes = 0
const mesh = createLibp2pMesh({
  me,
  secretKey,
  peers: cluster.relays.map((r, index) => ({ index, publicKey: r.publicKey, multiaddr: r.mesh, name: r.id })),
  listen: (cluster.relays[me] as { mesh: string }).mesh,
  minBackoffMs: 50,
  maxBackoffMs: 500,
})
mesh.onFrame((_from, frame) => {
  received++
  receivedBytes += frame.length
})
await mesh.start()
const deadline = Date.now() + 30_000
while (!mesh.connectedPeers().includes(target)) {
  if (Date.now() > deadline) throw new Error(`not connected to ${targetId} after 30 s`)
  await new Promise((r) => setTimeout(r, 50))
}

const spammer = { secretKey: new Uint8Array(32).fill(77), publicKey: publicKeyOfSync(new Uint8Array(32).fill(77)) }
let wakes = 0
async function wakeFrame(): Promise<Uint8Array> {
  const n = wakes++
  const payload = await Promise.all(
    Array.from({ length: WAKE_SPACES }, (_, i) =>
      sealEnvelope(nodeCrypto, spammer, { space: `wake-${process.pid}-${n}-${i}`, seq: 1, clock: clockInit(), deps: [], updates: [{ key: 'c', decl: { type: 'counter', bounds: {} }, ops: [1] }], safe: [] }).then(encodeEnvelope),
    ),
  )
  return encodeMessage({ kind: 'wake', payload })
}
const fixed: Record<string, Message> = {
  sync: { kind: 'sync', fromRound: 0 },
  fetch: { kind: 'fetch', digests: Array.from({ length: 64 }, (_, i) => new Uint8Array(32).fill(i + 1)) },
  'own-last-ask': { kind: 'own-last-ask' },
  'head-ask': { kind: 'head-ask', space: 'bank', fromIndex: 0, round: 0 },
}
const message = fixed[kind]
if (!message && kind !== 'wake') throw new Error(`unknown kind ${kind}`)
const frame = message ? encodeMessage(message) : undefined
const rate = Number(rateArg)
const started = Date.now()
const end = started + Number(ms)
let sent = 0
let sentBytes = 0
while (Date.now() < end) {
  // As fast as the mesh takes them (its queue stays small), or at `rate` per second.
  const due = rate > 0 ? Math.floor(((Date.now() - started) / 1000) * rate) - sent : 200
  for (let i = 0; i < due && mesh.queuedBytes() < 1024 * 1024; i++) {
    const f = frame ?? (await wakeFrame())
    mesh.send(target, f)
    sent++
    sentBytes += f.length
  }
  await new Promise((r) => setTimeout(r, rate > 0 ? 5 : 1))
}
const seconds = (Date.now() - started) / 1000
await mesh.stop()
console.log(JSON.stringify({ kind, sent, sentBytes, received, receivedBytes, seconds }))
process.exit(0)
