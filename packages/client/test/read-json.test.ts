import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { describe, expect, it } from 'vitest'
import { getJson, readJson, type Fetch } from '../src/transport/cluster.ts'

/** A body that never ends: `chunk` bytes of spaces per pull, counting pulls and whether the reader cancelled. */
function endless(chunk: number): { res: Response; pulled: () => number; cancelled: () => boolean } {
  let pulls = 0
  let cancelled = false
  const body = new ReadableStream<Uint8Array>({
    pull(controller) {
      pulls++
      controller.enqueue(new Uint8Array(chunk).fill(0x20))
    },
    cancel() {
      cancelled = true
    },
  })
  return { res: new Response(body), pulled: () => pulls, cancelled: () => cancelled }
}

describe('readJson: a response body within a budget in bytes', () => {
  it('parses a body within the budget', async () => {
    expect(await readJson(new Response(JSON.stringify({ relay: 1, sig: 'ab' })), 1024, 5000)).toEqual({ relay: 1, sig: 'ab' })
    // Multi-byte characters split across chunks decode whole.
    const bytes = new TextEncoder().encode(JSON.stringify({ v: 'héllo ✓' }))
    const split = new ReadableStream<Uint8Array>({
      start(c) {
        c.enqueue(bytes.subarray(0, 9))
        c.enqueue(bytes.subarray(9))
        c.close()
      },
    })
    expect(await readJson(new Response(split), bytes.length, 5000)).toEqual({ v: 'héllo ✓' })
  })

  it('cuts off a body that never ends once it passes the budget, and cancels it', async () => {
    const e = endless(64 * 1024)
    await expect(readJson(e.res, 1024 * 1024, 5000)).rejects.toMatchObject({ reason: 'too-large' })
    expect(e.cancelled()).toBe(true)
    // 1 MiB in 64 KiB chunks: the 17th chunk passes it (and the stream may read one ahead).
    expect(e.pulled()).toBeLessThanOrEqual(18)
  })

  it('refuses a body whose announced length is over the budget without reading it', async () => {
    const e = endless(1024)
    const res = { ok: true, status: 200, json: () => Promise.reject(new Error('not this way')), body: e.res.body, headers: new Headers({ 'content-length': String(2 ** 40) }) }
    await expect(readJson(res, 1024 * 1024, 5000)).rejects.toMatchObject({ reason: 'too-large' })
    expect(e.cancelled()).toBe(true)
    expect(e.pulled()).toBeLessThanOrEqual(1)
  })

  it('reads a body exactly at the budget, and refuses one byte more', async () => {
    const text = JSON.stringify({ pad: 'x'.repeat(100) })
    const size = new TextEncoder().encode(text).length
    expect(await readJson(new Response(text), size, 5000)).toEqual({ pad: 'x'.repeat(100) })
    await expect(readJson(new Response(text), size - 1, 5000)).rejects.toMatchObject({ reason: 'too-large' })
  })

  it('gives up on a body that drips past the deadline, and cancels it (no more bytes are read after)', async () => {
    let pulls = 0
    let cancelled = false
    const drip = new ReadableStream<Uint8Array>({
      async pull(controller) {
        pulls++
        await new Promise((r) => setTimeout(r, 20))
        controller.enqueue(Uint8Array.of(0x20))
      },
      cancel() {
        cancelled = true
      },
    })
    await expect(readJson(new Response(drip), 1024 * 1024, 200)).rejects.toThrow(/timed out/)
    // Cancelled: a stream pulls nothing after cancel() (the Streams spec), so no more bytes are read.
    expect(cancelled).toBe(true)
    expect(pulls).toBeGreaterThan(0)
  })

  it('falls back to json() for a response without a body stream (an injected fetch)', async () => {
    expect(await readJson({ ok: true, status: 200, json: async () => ({ a: 1 }) }, 1, 5000)).toEqual({ a: 1 })
  })
})

/** A relay stand-in on loopback: `answer` handles each request; `closed` resolves once the client let a request's connection go. */
async function relayStandIn(answer: (req: IncomingMessage, res: ServerResponse) => void): Promise<{ url: string; closed: Promise<void>; stop: () => Promise<void> }> {
  let onClose!: () => void
  const closed = new Promise<void>((resolve) => (onClose = resolve))
  const server = createServer((req, res) => {
    req.socket.on('close', onClose)
    answer(req, res)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  const stop = () => {
    server.closeAllConnections()
    return new Promise<void>((resolve) => server.close(() => resolve()))
  }
  return { url: `http://127.0.0.1:${port}/v1/cluster`, closed, stop }
}

const platformFetch: Fetch = (url, init) => fetch(url, init)

describe('getJson: a relay read over HTTP, aborted when the client gives up', () => {
  it('reads an answer, and an error status as undefined', async () => {
    const relay = await relayStandIn((req, res) => {
      res.writeHead(req.headers['x-fail'] ? 503 : 200, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ relay: 2 }))
    })
    try {
      expect(await getJson(platformFetch, relay.url, { maxBytes: 1024, timeoutMs: 5000 })).toEqual({ relay: 2 })
      expect(await getJson(platformFetch, relay.url, { headers: { 'x-fail': '1' }, maxBytes: 1024, timeoutMs: 5000 })).toBeUndefined()
    } finally {
      await relay.stop()
    }
  })

  // Before the request carried a signal, the caller stopped waiting at the deadline but the
  // connection stayed open for as long as the relay kept it (this test then times out).
  it('aborts a request whose answer never comes: its connection closes at the deadline', async () => {
    const relay = await relayStandIn(() => undefined)
    try {
      await expect(getJson(platformFetch, relay.url, { maxBytes: 1024, timeoutMs: 200 })).rejects.toThrow(/timed out/)
      await relay.closed
    } finally {
      await relay.stop()
    }
  })

  // Cancelling the body (readJson) lets the connection go too; the abort must not get in its way.
  it('aborts a request whose body stalls: its connection closes at the deadline', async () => {
    const relay = await relayStandIn((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' })
      res.write('{"relay":')
    })
    try {
      await expect(getJson(platformFetch, relay.url, { maxBytes: 1024, timeoutMs: 200 })).rejects.toThrow(/timed out/)
      await relay.closed
    } finally {
      await relay.stop()
    }
  })
})
