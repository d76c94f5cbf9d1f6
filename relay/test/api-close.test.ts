import { mkdtempSync } from 'node:fs'
import { connect, type Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { toHex } from '@stead/core'
import pino from 'pino'
import { afterEach, describe, expect, it } from 'vitest'
import { CLOSE_GRACE_MS } from '../src/api/server.ts'
import { generateIdentity, parseCluster } from '../src/process/config.ts'
import { runRelay, type RunningRelay } from '../src/process/relay.ts'
import { freePort, until } from './helpers/cluster.ts'

const UPGRADE = 'GET /v1/ws HTTP/1.1\r\nHost: relay\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n'

/** One relay in this process (N = 1), its API on a free port. */
async function soloRelay(): Promise<{ relay: RunningRelay; port: number }> {
  const dir = mkdtempSync(join(tmpdir(), 'stead-api-close-'))
  const id = generateIdentity()
  const port = await freePort()
  const cluster = parseCluster({ f: 0, relays: [{ id: 'solo', publicKey: toHex(id.publicKey), mesh: `/ip4/127.0.0.1/tcp/${await freePort()}`, api: `127.0.0.1:${port}` }], openSpaces: true })
  const relay = await runRelay({ cluster, id: 'solo', secretKey: id.secretKey, dataDir: join(dir, 'data'), logger: pino({ level: 'silent' }) })
  return { relay, port }
}

/** A raw TCP connection to the API, and everything it has received so far. */
async function rawConnection(port: number): Promise<{ socket: Socket; received: () => string; ended: () => boolean }> {
  const socket = connect(port, '127.0.0.1')
  await new Promise((ok) => socket.once('connect', ok))
  let data = ''
  let ended = false
  socket.on('data', (d: Buffer) => (data += d.toString('latin1')))
  socket.on('error', () => undefined)
  socket.on('close', () => (ended = true))
  return { socket, received: () => data, ended: () => ended }
}

/** Stops the relay, resolving to how long it took. */
async function timedStop(relay: RunningRelay): Promise<number> {
  const t0 = performance.now()
  await relay.stop()
  return performance.now() - t0
}

/**
 * A relay's API closes (a stop, or a move to the relay's next epoch)
 * within a bound whatever its clients do: a relay that sat in its old epoch
 * for 70 s, its API waiting for one connection, is what the epoch load test
 * (packages/client/test/epochs-relays.test.ts) caught.
 */
describe('a relay API that closes', () => {
  let relay: RunningRelay | undefined
  afterEach(async () => {
    await relay?.stop().catch(() => undefined)
    relay = undefined
  })

  it('answers a session asked for once it takes no more (a client asking again as its session closed) with 503, and closes at once', async () => {
    const solo = await soloRelay()
    relay = solo.relay
    // Connected before the close, so the connection is accepted; the upgrade comes once the WebSocket
    // server has stopped taking sessions (it removes its listener as the close begins).
    const late = await rawConnection(solo.port)
    const server = solo.relay.api.server
    const stopping = timedStop(solo.relay)
    await until('the WebSocket server to stop taking sessions', () => (server.listenerCount('upgrade') <= 1 ? true : undefined), 5_000, 1)
    late.socket.write(UPGRADE)
    await until('an answer', () => (late.received().length > 0 ? true : undefined), 5_000, 10)
    expect(late.received()).toMatch(/^HTTP\/1\.1 503 /)
    expect(await stopping).toBeLessThan(CLOSE_GRACE_MS)
    relay = undefined
  })

  it('cuts a session whose client never reads again (nor answers the close) after CLOSE_GRACE_MS', async () => {
    const solo = await soloRelay()
    relay = solo.relay
    // A session whose client went quiet after the handshake: it will not answer the close frame (ws would wait 30 s).
    const quiet = await rawConnection(solo.port)
    quiet.socket.write(UPGRADE)
    await until('the session', () => (quiet.received().startsWith('HTTP/1.1 101') ? true : undefined), 5_000, 10)
    quiet.socket.pause()
    const ms = await timedStop(solo.relay)
    relay = undefined
    expect(ms).toBeGreaterThanOrEqual(CLOSE_GRACE_MS - 50)
    expect(ms).toBeLessThan(CLOSE_GRACE_MS + 3_000)
    // Reading again, it finds its connection closed.
    quiet.socket.resume()
    await until('the quiet client cut off', () => (quiet.ended() ? true : undefined), 5_000, 10)
  })
})
