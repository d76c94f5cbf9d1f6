/**
 * Yjs + y-websocket, the peer the latency report measures beside Stead on
 * the same machine, in the same run, on the same workloads: the stock
 * y-websocket server (its own process, no persistence, as `npx y-websocket`
 * runs it) and WebsocketProvider clients in this process. A counter there is
 * a number in a Y.Map (what a Yjs app would write); every write is its own
 * transaction, so its own update message.
 */
import { spawn } from 'node:child_process'
import { createRequire } from 'node:module'
import type { Socket } from 'node:net'
import { dirname, join } from 'node:path'
import WebSocket from 'ws'
import { WebsocketProvider } from 'y-websocket'
import * as Y from 'yjs'

/** One side of a workload, the same shape for Stead and Yjs clients. */
export interface CounterPeer {
  /** Adds one to the counter (a regular update). */
  bump(): void
  read(): number
  /** Calls `listener` after every change; returns the unsubscribe function. */
  subscribe(listener: () => void): () => void
  /** Bytes this peer received and sent on the wire so far (see countingSocket). */
  bytes(): { in: number; out: number }
}

/**
 * A `ws` WebSocket that counts the bytes it reads and writes on the wire
 * (WebSocket frames after any compression, as the TCP socket under it
 * counts them), updated at each message in and each send.
 */
export function countingSocket(url: string, counts: { in: number; out: number }): WebSocket {
  const ws = new WebSocket(url)
  let read = 0
  let written = 0
  const tally = () => {
    const socket = (ws as unknown as { _socket?: Socket | null })._socket
    if (!socket) return
    counts.in += socket.bytesRead - read
    counts.out += socket.bytesWritten - written
    read = socket.bytesRead
    written = socket.bytesWritten
  }
  // The handshake is not counted.
  ws.on('open', () => {
    const socket = (ws as unknown as { _socket: Socket })._socket
    read = socket.bytesRead
    written = socket.bytesWritten
  })
  ws.on('message', tally)
  const send = ws.send.bind(ws) as (data: unknown, ...rest: unknown[]) => void
  ;(ws as unknown as { send: (data: unknown, ...rest: unknown[]) => void }).send = (data, ...rest) => {
    send(data, ...rest)
    tally()
  }
  return ws
}

export interface YjsServer {
  readonly url: string
  readonly pid: number
  stop(): Promise<void>
}

/** Starts the y-websocket server on 127.0.0.1:`port` and resolves once it listens. */
export async function startYjsServer(port: number): Promise<YjsServer> {
  const require = createRequire(import.meta.url)
  const bin = join(dirname(require.resolve('y-websocket/package.json')), 'bin', 'server.js')
  const child = spawn(process.execPath, [bin], { env: { ...process.env, HOST: '127.0.0.1', PORT: String(port) }, stdio: ['ignore', 'pipe', 'pipe'] })
  await new Promise<void>((resolve, reject) => {
    let out = ''
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString()
      if (out.includes('running')) resolve()
    })
    child.stderr.on('data', (d: Buffer) => (out += d.toString()))
    child.once('exit', (code) => reject(new Error(`y-websocket server exited (${code}): ${out}`)))
  })
  return {
    url: `ws://127.0.0.1:${port}`,
    pid: child.pid as number,
    stop: () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null) return resolve()
        child.once('exit', () => resolve())
        child.kill('SIGTERM')
      }),
  }
}

/** A Yjs document synced with `room` on the server, with the WebSocket payload bytes it received and sent so far. */
export interface YjsDoc {
  readonly doc: Y.Doc
  bytes(): { in: number; out: number }
  close(): void
}

/** Opens `room` on the server as a fresh document; resolves once it synced. */
export async function yjsDoc(server: YjsServer, room: string): Promise<YjsDoc> {
  const doc = new Y.Doc()
  const counts = { in: 0, out: 0 }
  class CountingWebSocket {
    constructor(url: string) {
      return countingSocket(url, counts)
    }
  }
  const provider = new WebsocketProvider(server.url, room, doc, { WebSocketPolyfill: CountingWebSocket as unknown as typeof globalThis.WebSocket, disableBc: true })
  await new Promise<void>((resolve) => {
    if (provider.synced) return resolve()
    provider.once('sync', (synced: boolean) => synced && resolve())
  })
  return {
    doc,
    bytes: () => ({ ...counts }),
    close: () => {
      provider.destroy()
      doc.destroy()
    },
  }
}

/** A Yjs client of `room` on the server, synced before it resolves. */
export async function yjsPeer(server: YjsServer, room: string): Promise<CounterPeer & { close(): void }> {
  const { doc, bytes, close } = await yjsDoc(server, room)
  const map = doc.getMap<number>('counters')
  return {
    bump: () => map.set('n', (map.get('n') ?? 0) + 1),
    read: () => map.get('n') ?? 0,
    subscribe: (listener) => {
      map.observe(listener)
      return () => map.unobserve(listener)
    },
    bytes,
    close,
  }
}
