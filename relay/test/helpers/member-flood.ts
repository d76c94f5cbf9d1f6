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
 * client key: each wake starts `WAKE_SPACES` spaces), blocks (`blocks` messages
 * of `BLOCKS_PER_MESSAGE` tiny blocks signed with the member's key, for rounds
 * a little ahead of the target's, whose ancestors nobody holds; the last of
 * each has a bad signature, so that the code before issue 51's per-block
 * budget verified every other block of it and then refused the whole message,
 * every time it came).
 */
import { clockInit, encodeEnvelope, sealEnvelope } from '@stead/core'
import { nodeCrypto, publicKeyOfSync } from '@stead/core/node'
import { loadCluster, loadIdentity } from '../../src/process/config.ts'
import { committeeOf } from '../../src/process/config.ts'
import { decodeMessage, encodeMessage, signBlock, type Block, type Message } from '../../src/consensus/index.ts'
import { relayCrypto } from '../../src/runtime/node.ts'
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
/** The highest round of the target's pushed blocks seen. */
let targetRound = 0
const committee = committeeOf(cluster)
const mesh = createLibp2pMesh({
  me,
  secretKey,
  peers: cluster.relays.map((r, index) => ({ index, publicKey: r.publicKey, multiaddr: r.mesh, name: r.id })),
  listen: (cluster.relays[me] as { mesh: string }).mesh,
  minBackoffMs: 50,
  maxBackoffMs: 500,
})
mesh.onFrame((from, frame) => {
  received++
  receivedBytes += frame.length
  if (kind !== 'blocks' || from !== target) return
  try {
    const m = decodeMessage(relayCrypto, committee, frame)
    if (m.kind === 'block') targetRound = Math.max(targetRound, m.block.header.round)
  } catch {
    // not ours to judge
  }
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
  'checkpoint-ask': { kind: 'checkpoint-ask' },
}
const BLOCKS_PER_MESSAGE = 500
const BLOCK_POOL = 8
/** `blocks` messages of tiny blocks by this member for rounds just ahead of the target's (see the header). */
async function blockPool(): Promise<Uint8Array[]> {
  const seen = Date.now() + 5_000
  while (!targetRound && Date.now() < seen) await new Promise((r) => setTimeout(r, 20))
  const base = targetRound + 2
  let nonce = 0
  const fake = (): Uint8Array => {
    const d = new Uint8Array(32)
    new DataView(d.buffer).setUint32(0, ++nonce)
    d[31] = 0xee
    return d
  }
  return Array.from({ length: BLOCK_POOL }, () => {
    const blocks: Block[] = Array.from({ length: BLOCKS_PER_MESSAGE }, (_, i) => {
      const round = base + (i % 8)
      const ancestors = [{ round: round - 1, author: me, digest: fake() }, ...cluster.relays.flatMap((_r, a) => (a === me ? [] : [{ round: round - 1, author: a, digest: fake() }]))]
      return signBlock(relayCrypto, secretKey, { round, author: me, ancestors, payload: [] })
    })
    const last = blocks[blocks.length - 1] as Block
    const sig = Uint8Array.from(last.signed.sig)
    sig[0] = (sig[0] as number) ^ 0xff
    blocks[blocks.length - 1] = { ...last, signed: { bytes: last.signed.bytes, sig } }
    return encodeMessage({ kind: 'blocks', blocks })
  })
}
const pool = kind === 'blocks' ? await blockPool() : []
const message = fixed[kind]
if (!message && kind !== 'wake' && kind !== 'blocks') throw new Error(`unknown kind ${kind}`)
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
    const f = frame ?? (kind === 'blocks' ? (pool[sent % pool.length] as Uint8Array) : await wakeFrame())
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
