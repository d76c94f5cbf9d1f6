#!/usr/bin/env node
/**
 * `npm run bench:presence`: what presence costs and how fast it travels. A
 * report, never a test.
 *
 * 1. Latency: Alice types at human speed (`--keys-per-second`, default 10,
 *    for `--seconds`, default 20) and moves her cursor after each key
 *    (`presence.update`); per key, the time until Bob's presence shows the
 *    new cursor. Through a real 4-relay cluster on loopback with the SDK,
 *    and through Yjs + y-websocket's awareness (`setLocalStateField`) on
 *    the same machine, in the same run.
 * 2. Relay cost: `--clients` raw sessions (default 20) on one relay, each
 *    publishing a cursor-sized presence state `--rate` times a second
 *    (default 20) for `--seconds`; what the relay passes on per second, the
 *    bytes per message in and out, and the relay process's CPU time per
 *    message taken and per message passed on (from /proc).
 */
import { readFileSync } from 'node:fs'
import { WebsocketProvider } from 'y-websocket'
import * as Y from 'yjs'
import { encodePresence, fromHex, type RelayMessage } from '@stead/core'
import { nodeCrypto, publicKeyOfSync, signSync } from '@stead/core/node'
import { reportArgs } from '../args.ts'
import { BenchCluster, freePort } from '../cluster.ts'
import { openSdkSpace } from '../load/sdk.ts'
import { Conn } from '../load/proto.ts'
import { countingSocket, startYjsServer, type YjsServer } from '../yjs.ts'

const values = reportArgs('usage: npm run bench:presence -- [--keys-per-second 10] [--seconds 20] [--clients 20] [--rate 20]', {
  'keys-per-second': { type: 'string', default: '10' },
  seconds: { type: 'string', default: '20' },
  clients: { type: 'string', default: '20' },
  rate: { type: 'string', default: '20' },
})
const keysPerSecond = Number(values['keys-per-second'])
const seconds = Number(values.seconds)
const clients = Number(values.clients)
const rate = Number(values.rate)
if (![keysPerSecond, seconds, clients, rate].every((n) => n > 0)) throw new Error('every option takes a positive number')

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

function quantile(xs: number[], q: number): number {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.floor(q * s.length))] ?? NaN
}

/** One side of the latency run: publish a cursor, hear the other's. */
interface Cursorist {
  move(n: number): void
  /** Calls `listener` with the other side's latest cursor number whenever presence changes. */
  watch(listener: (n: number) => void): () => void
  bytes(): { in: number; out: number }
  close(): Promise<void> | void
}

async function latency(name: string, alice: Cursorist, bob: Cursorist): Promise<void> {
  const keys = Math.round(keysPerSecond * seconds)
  const movedAt = new Map<number, number>()
  const seen: number[] = []
  let last = 0
  const stop = bob.watch((n) => {
    const now = performance.now()
    for (let k = last + 1; k <= n; k++) {
      const at = movedAt.get(k)
      if (at !== undefined) seen.push(now - at)
    }
    last = Math.max(last, n)
  })
  const before = { a: alice.bytes(), b: bob.bytes() }
  const t0 = performance.now()
  for (let i = 1; i <= keys; i++) {
    await sleep(Math.max(0, t0 + i * (1000 / keysPerSecond) - performance.now()))
    movedAt.set(i, performance.now())
    alice.move(i)
  }
  const deadline = performance.now() + 10_000
  while (last < keys && performance.now() < deadline) await sleep(20)
  stop()
  const up = (alice.bytes().out - before.a.out) / keys
  const down = (bob.bytes().in - before.b.in) / keys
  console.log(`${name}: ${keys} cursor moves at ${keysPerSecond}/s; shown at the other user p50 ${quantile(seen, 0.5).toFixed(1)} ms, p90 ${quantile(seen, 0.9).toFixed(1)} ms, max ${Math.max(...seen).toFixed(1)} ms (${seen.length} of ${keys} seen; a move superseded before it arrived counts at the newer one); per move ${up.toFixed(0)} B sent by Alice, ${down.toFixed(0)} B received by Bob`)
}

async function steadCursorist(cluster: BenchCluster, name: string): Promise<Cursorist> {
  const counts = { in: 0, out: 0 }
  const relays = cluster.descriptor.relays.map((r) => `http://${r.api}`)
  const connect = (url: string) => countingSocket(url, counts) as never
  const { owner, space } = await openSdkSpace({ relays, cluster: cluster.descriptor, seed: `stead-bench-presence-${name}`, space: 'presence', options: { connect } })
  const text = space.text('doc')
  return {
    move: (n) => {
      void text.insert(0, 'x')
      space.presence.update({ name, cursor: text.anchor(1), n })
    },
    watch: (listener) =>
      space.presence.subscribe(() => {
        for (const p of space.presence.others) listener((p.state as { n?: number }).n ?? 0)
      }),
    bytes: () => ({ ...counts }),
    close: () => owner.close(),
  }
}

async function yjsCursorist(server: YjsServer, name: string): Promise<Cursorist> {
  const doc = new Y.Doc()
  const counts = { in: 0, out: 0 }
  class CountingWebSocket {
    constructor(url: string) {
      return countingSocket(url, counts)
    }
  }
  const provider = new WebsocketProvider(server.url, 'presence', doc, { WebSocketPolyfill: CountingWebSocket as unknown as typeof globalThis.WebSocket, disableBc: true })
  await new Promise<void>((resolve) => (provider.synced ? resolve() : provider.once('sync', (ok: boolean) => ok && resolve())))
  const text = doc.getText('doc')
  const awareness = provider.awareness
  return {
    move: (n) => {
      text.insert(0, 'x')
      awareness.setLocalStateField('cursor', { name, at: Y.relativePositionToJSON(Y.createRelativePositionFromTypeIndex(text, 1)), n })
    },
    watch: (listener) => {
      const onChange = () => {
        for (const [id, state] of awareness.getStates()) if (id !== doc.clientID) listener((state.cursor as { n?: number } | undefined)?.n ?? 0)
      }
      awareness.on('change', onChange)
      return () => awareness.off('change', onChange)
    },
    bytes: () => ({ ...counts }),
    close: () => {
      provider.destroy()
      doc.destroy()
    },
  }
}

/** utime + stime of a process, in ms (Linux /proc; clock ticks of 10 ms). */
function cpuMs(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? []
  return (Number(fields[11]) + Number(fields[12])) * 10
}

async function relayCost(cluster: BenchCluster): Promise<void> {
  const relay = cluster.descriptor.relays[0] as { api: string; publicKey: string }
  const pid = cluster.pids()[0]?.pid as number
  const received = { messages: 0, bytes: 0 }
  const conns: Array<{ conn: Conn; secret: Uint8Array }> = []
  for (let i = 0; i < clients; i++) {
    const secret = nodeCrypto.sha256(new TextEncoder().encode(`stead-bench-presence-raw-${i}`))
    const conn = await Conn.open(`ws://${relay.api}/v1/ws`, 0, fromHex(relay.publicKey), { secretKey: secret, publicKey: publicKeyOfSync(secret) }, (_c, m: RelayMessage) => {
      if (m.type !== 'presence') return
      received.messages++
      received.bytes += m.signed.bytes.length + 64 + 40
    })
    conn.send({ type: 'subscribe', space: 'presence-load', fromIndex: 0, frames: false })
    conns.push({ conn, secret })
  }
  await sleep(500)
  const sent = { messages: 0, bytes: 0 }
  let seq = 1000
  const publishOnce = () => {
    seq += 2
    for (const { conn, secret } of conns) {
      const body = { space: 'presence-load', seq, ttlMs: 30_000, state: { name: 'user', colour: '#3366cc', cursor: { anchor: 't<1x2y3z:42:AbCdEfGhIjKlMnOp:3.0', head: 't<1x2y3z:42:AbCdEfGhIjKlMnOp:3.0' } } }
      const bytes = encodePresence(body)
      const leaveBytes = encodePresence({ ...body, seq: seq + 1, state: null })
      const m = { type: 'presence' as const, space: 'presence-load', signed: { bytes, sig: signSync(secret, bytes) }, leave: { bytes: leaveBytes, sig: signSync(secret, leaveBytes) } }
      conn.send(m)
      sent.messages++
      sent.bytes += bytes.length + leaveBytes.length + 128 + 30
    }
  }
  const before = { cpu: cpuMs(pid), received: { ...received } }
  const t0 = performance.now()
  const ticks = Math.round(seconds * rate)
  for (let i = 0; i < ticks; i++) {
    await sleep(Math.max(0, t0 + (i * 1000) / rate - performance.now()))
    publishOnce()
  }
  await sleep(500)
  const elapsed = (performance.now() - t0) / 1000
  const cpu = cpuMs(pid) - before.cpu
  const passed = received.messages - before.received.messages
  console.log(
    `relay cost: ${clients} sessions on one relay, each publishing ${rate}/s for ${seconds} s: ${(sent.messages / elapsed).toFixed(0)} presence messages/s taken (${(sent.bytes / sent.messages).toFixed(0)} B each with its leave signed ahead), ${(passed / elapsed).toFixed(0)}/s passed on (${(received.bytes / Math.max(1, received.messages)).toFixed(0)} B each; ${((passed / (sent.messages * (clients - 1))) * 100).toFixed(1)}% of what fan-out asks); relay CPU ${((cpu / elapsed / 1000) * 100).toFixed(0)}% of a core, ${((cpu * 1000) / sent.messages).toFixed(0)} µs per message taken, ${((cpu * 1000) / Math.max(1, passed)).toFixed(1)} µs per message passed on`,
  )
  for (const { conn } of conns) conn.ws.close()
}

const cluster = await BenchCluster.start({ kind: 'stead', n: 4 })
const yjs = await startYjsServer(await freePort())
try {
  const [sa, sb] = [await steadCursorist(cluster, 'alice'), await steadCursorist(cluster, 'bob')]
  await latency('stead (4 relays)', sa, sb)
  await sa.close()
  await sb.close()
  const [ya, yb] = [await yjsCursorist(yjs, 'alice'), await yjsCursorist(yjs, 'bob')]
  await latency('yjs + y-websocket awareness', ya, yb)
  ya.close()
  yb.close()
  await relayCost(cluster)
} finally {
  await yjs.stop()
  await cluster.stop()
}
