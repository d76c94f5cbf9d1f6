import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { clockInit, encodeEnvelope, sealEnvelope, toHex } from '@stead/core'
import { nodeCrypto, publicKeyOfSync } from '@stead/core/node'
import pino from 'pino'
import { afterEach, describe, expect, it } from 'vitest'
import { generateIdentity, parseCluster } from '../src/config.ts'
import type { Mesh } from '../src/mesh/types.ts'
import { RelayNode } from '../src/node.ts'
import type { WriteBatch } from '../src/store.ts'

const author = { secretKey: new Uint8Array(32).fill(7), publicKey: publicKeyOfSync(new Uint8Array(32).fill(7)) }
const deposit = (seq: number) =>
  sealEnvelope(nodeCrypto, author, { space: 's', seq, clock: clockInit(), deps: [], updates: [{ key: 'k', decl: { type: 'counter' as const, bounds: {} }, ops: [1] }], safe: [] }).then(encodeEnvelope)

async function until(what: string, check: () => boolean): Promise<void> {
  const end = Date.now() + 10_000
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 2))
  }
}

const nodes: RelayNode[] = []
afterEach(async () => {
  for (const n of nodes.splice(0)) await n.stop()
})

describe('the relay event loop', () => {
  it('speaks to peers only once what it decided is on disk, and goes on taking events meanwhile', async () => {
    const id = generateIdentity()
    const cluster = parseCluster({ f: 0, relays: [{ id: 'solo', publicKey: toHex(id.publicKey), mesh: '/ip4/127.0.0.1/tcp/1', api: '127.0.0.1:1' }], openSpaces: true })
    const spoken: string[] = []
    const mesh: Mesh = {
      start: async () => undefined,
      stop: async () => undefined,
      send: () => spoken.push('send'),
      broadcast: () => spoken.push('broadcast'),
      onFrame: () => undefined,
      connectedPeers: () => [],
      queuedBytes: () => 0,
    }
    const node = new RelayNode({ cluster, me: 0, secretKey: id.secretKey, dataDir: mkdtempSync(join(tmpdir(), 'stead-node-')), mesh, logger: pino({ level: 'silent' }) })
    nodes.push(node)
    await node.start()
    await until('the start-up write', () => spoken.length === 0)
    // A disk that takes its time: each write is done at once but reported only when the test says so.
    const store = (node as unknown as { store: { write(w: WriteBatch): Promise<void> } }).store
    const write = store.write.bind(store)
    const held: Array<() => void> = []
    store.write = (w) => {
      const done = write(w)
      return new Promise((ok) => held.push(() => void done.then(ok)))
    }
    node.submit(await deposit(1))
    await until('the first block written', () => held.length === 1)
    expect(spoken).toEqual([])
    node.submit(await deposit(2))
    await until('a second write while the first is on its way', () => held.length === 2)
    expect(spoken).toEqual([])
    // Released out of order: the second drain's messages still wait for the first write.
    held[1]?.()
    await new Promise((r) => setTimeout(r, 20))
    expect(spoken).toEqual([])
    held[0]?.()
    await until('the blocks broadcast', () => spoken.length > 0)
    expect(new Set(spoken)).toEqual(new Set(['broadcast']))
    store.write = write
  })
})
