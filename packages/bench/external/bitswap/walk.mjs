// Helia's bitswap fetching a chain of envelope-sized blocks from one peer (see run.mjs):
//   node walk.mjs <blocks> <walk|known>
// `walk`: the receiver knows only the newest block's CID and follows each block's dep (one level at a
// time, as a Merkle-DAG walk must); `known`: it asks for every CID at once. Prints one JSON line.
/* global process, console, performance, setTimeout, AbortSignal, Buffer, TextEncoder, TextDecoder */
if (!Promise.withResolvers) {
  // Node 20 lacks it; libp2p 3 needs it.
  Promise.withResolvers = function withResolvers() {
    let resolve
    let reject
    const promise = new Promise((a, b) => {
      resolve = a
      reject = b
    })
    return { promise, resolve, reject }
  }
}
const { createHelia } = await import('helia')
const { tcp } = await import('@libp2p/tcp')
const { noise } = await import('@libp2p/noise')
const { yamux } = await import('@libp2p/yamux')
const { identify } = await import('@libp2p/identify')
const { CID } = await import('multiformats/cid')
const { sha256 } = await import('multiformats/hashes/sha2')
const raw = await import('multiformats/codecs/raw')
const { MemoryBlockstore } = await import('blockstore-core')
const { MemoryDatastore } = await import('datastore-core')

const blocks = Number(process.argv[2] ?? 100)
const mode = process.argv[3] ?? 'walk'

async function node() {
  const helia = await createHelia({
    libp2p: { addresses: { listen: ['/ip4/127.0.0.1/tcp/0'] }, transports: [tcp()], connectionEncrypters: [noise()], streamMuxers: [yamux()], services: { identify: identify() }, connectionMonitor: { enabled: false } },
    blockstore: new MemoryBlockstore(),
    datastore: new MemoryDatastore(),
  })
  await helia.start()
  return helia
}

/** A block's bytes, whichever shape this blockstore returns them in. */
async function bytesOf(got) {
  const value = await got
  if (value instanceof Uint8Array) return value
  if (value && value[Symbol.asyncIterator]) {
    const parts = []
    for await (const chunk of value) parts.push(chunk instanceof Uint8Array ? chunk : chunk.subarray())
    return Buffer.concat(parts)
  }
  return value.subarray()
}

const holder = await node()
const fetcher = await node()
// A chain as Stead's envelopes make one: about 200 bytes each, naming the previous one by its hash.
const cids = []
for (let i = 0; i < blocks; i++) {
  const body = new TextEncoder().encode(JSON.stringify({ seq: i, dep: cids.at(-1)?.toString() ?? null, pad: 'x'.repeat(120) }))
  const cid = CID.createV1(raw.code, await sha256.digest(body))
  await holder.blockstore.put(cid, body)
  cids.push(cid)
}
await fetcher.libp2p.dial(holder.libp2p.getMultiaddrs()[0])
// Bitswap starts once identify says the other side speaks it.
await new Promise((r) => setTimeout(r, 300))
const options = { signal: AbortSignal.timeout(120_000) }
const started = performance.now()
if (mode === 'known') {
  await Promise.all(cids.map((cid) => bytesOf(fetcher.blockstore.get(cid, options))))
} else {
  let next = cids.at(-1)
  while (next) {
    const { dep } = JSON.parse(new TextDecoder().decode(await bytesOf(fetcher.blockstore.get(next, options))))
    next = dep ? CID.parse(dep) : undefined
  }
}
const ms = performance.now() - started
console.log(JSON.stringify({ blocks, mode, ms: Math.round(ms), perBlockMs: Number((ms / blocks).toFixed(2)) }))
await fetcher.stop()
await holder.stop()
process.exit(0)
