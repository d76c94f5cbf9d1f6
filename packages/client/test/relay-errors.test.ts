/**
 * `status.relays[].error` says why a relay is not connected (a refused
 * connection, a session closed before the relay's welcome), also before a
 * cluster is trusted, and is cleared once the relay is connected.
 */
import { createServer } from 'node:net'
import { nodeCrypto } from '@stead/core/node'
import { SimCluster } from '@stead/sim'
import { afterEach, describe, expect, it } from 'vitest'
import { createClient, memoryStorage, type SocketLike, type SteadClient } from '../src/index.node.ts'
import { until } from './helpers/until.ts'

const open: SteadClient[] = []
const clusters: SimCluster[] = []
afterEach(async () => {
  for (const c of open.splice(0)) await c.close()
  for (const c of clusters.splice(0)) await c.close()
})

async function cluster(): Promise<SimCluster> {
  const c = await SimCluster.start()
  clusters.push(c)
  return c
}

/** A server that accepts the connection and hangs up at once, before any welcome. */
function hangingUp(): SocketLike {
  const s: SocketLike = { binaryType: 'arraybuffer', readyState: 0, send: () => undefined, close: () => undefined, onopen: null, onmessage: null, onclose: null, onerror: null }
  queueMicrotask(() => {
    ;(s as { readyState: number }).readyState = 1
    s.onopen?.({})
    ;(s as { readyState: number }).readyState = 3
    s.onclose?.({ code: 1000, reason: '' })
  })
  return s
}


/** A local port nothing listens on (it was free a moment ago). */
async function deadPort(): Promise<number> {
  const server = createServer()
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  const { port } = server.address() as { port: number }
  await new Promise((r) => server.close(r))
  return port
}

describe('status.relays[].error', () => {
  it('says "connection refused" for a URL where nothing listens, before a cluster is trusted (no cluster given)', async () => {
    const url = `ws://127.0.0.1:${await deadPort()}`
    const c = await createClient({ relays: [url], storage: memoryStorage(), crypto: nodeCrypto })
    open.push(c)
    await until('an error for the relay', () => c.status.relays[0]?.error !== undefined)
    expect(c.status.relays).toEqual([{ url, connected: false, error: 'connection refused' }])
  })

  it('says "connection refused" for a URL where nothing listens, with the cluster pinned', async () => {
    const fake = await cluster()
    const url = `ws://127.0.0.1:${await deadPort()}`
    const c = await createClient({ relays: [url], storage: memoryStorage(), crypto: nodeCrypto, cluster: fake.descriptor, backoff: { initialMs: 5, maxMs: 50 } })
    open.push(c)
    await until('an error for the relay', () => c.status.relays[0]?.error !== undefined)
    expect(c.status.relays[0]).toEqual({ url, connected: false, error: 'connection refused' })
    expect(c.status.problem).toContain('(connection refused)')
  })

  it('says "closed before welcome" for a relay that accepts and hangs up, and clears the error once the relay is connected', async () => {
    const fake = await cluster()
    let hangUp = true
    const options = fake.clientOptions()
    const connect = (url: string): SocketLike => (hangUp && url.includes('relay0.') ? hangingUp() : (options.connect as (url: string) => SocketLike)(url))
    const c = await createClient({ ...options, connect })
    open.push(c)
    await fake.until('relay 0 failing, the others connected', () => c.status.relays[0]?.error !== undefined && c.status.relays.slice(1).every((r) => r.connected))
    expect(c.status.relays[0]).toMatchObject({ connected: false, error: 'closed before welcome' })
    expect(c.status.relays.slice(1).every((r) => r.error === undefined)).toBe(true)

    hangUp = false
    await fake.until('relay 0 connected', () => c.status.relays[0]?.connected === true)
    expect(c.status.relays[0]?.error).toBeUndefined()
  })

  it('a relay that refuses connections, then comes up: error while down, none once connected', async () => {
    const fake = await cluster()
    await fake.relays[2]?.down()
    const c = await createClient(fake.clientOptions())
    open.push(c)
    await fake.until('relay 2 failing', () => c.status.relays[2]?.error !== undefined)
    expect(c.status.relays[2]?.connected).toBe(false)
    await fake.relays[2]?.up()
    await fake.until('relay 2 connected', () => c.status.relays[2]?.connected === true)
    expect(c.status.relays[2]).not.toHaveProperty('error')
  })
})
