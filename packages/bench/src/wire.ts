import { execFileSync } from 'node:child_process'
import WebSocket from 'ws'

/**
 * Bytes on the wire at the clients' sockets: every WebSocket frame the
 * benchmark process sends or receives through `ws` (the protocol client and
 * the SDK's Node build both use it), counted as payload plus the RFC 6455
 * frame header (2, 4 or 10 bytes, plus the 4-byte mask on frames a client
 * sends). TCP/IP headers are not counted.
 */
export const wire = { sentFrames: 0, sentBytes: 0, recvFrames: 0, recvBytes: 0 }

function frameHeader(n: number, masked: boolean): number {
  return (n < 126 ? 2 : n < 65536 ? 4 : 10) + (masked ? 4 : 0)
}

/** The bytes of a frame as `ws` hands it over (a string, a buffer, or fragments). */
export function byteLength(data: unknown): number {
  if (typeof data === 'string') return Buffer.byteLength(data)
  if (data instanceof ArrayBuffer) return data.byteLength
  if (ArrayBuffer.isView(data)) return data.byteLength
  if (Array.isArray(data)) return data.reduce((n: number, d) => n + byteLength(d), 0)
  return 0
}

let installed = false

export function installWireCounter(): void {
  if (installed) return
  installed = true
  const proto = WebSocket.prototype as unknown as { send: (...a: unknown[]) => unknown; emit: (...a: unknown[]) => boolean }
  const send = proto.send
  proto.send = function (this: unknown, data: unknown, ...rest: unknown[]) {
    const n = byteLength(data)
    wire.sentFrames++
    wire.sentBytes += n + frameHeader(n, true)
    return send.call(this, data, ...rest)
  }
  const emit = proto.emit
  proto.emit = function (this: unknown, event: unknown, ...args: unknown[]) {
    if (event === 'message') {
      const n = byteLength(args[0])
      wire.recvFrames++
      wire.recvBytes += n + frameHeader(n, false)
    }
    return emit.call(this, event, ...args)
  }
}

export function wireSnapshot(): typeof wire {
  return { ...wire }
}

/**
 * TCP payload bytes sent between relay processes (both directions, summed
 * over sockets whose two ends belong to relay pids), from the kernel's
 * per-socket counters (`ss -tinp`). Covers the libp2p mesh (noise + yamux
 * framing included) and the plain baseline's peer WebSockets alike.
 * Returns per-socket totals keyed by endpoint, to diff two snapshots.
 */
export function meshSnapshot(relayPids: ReadonlySet<number>): Map<string, number> {
  const out = new Map<string, number>()
  let text: string
  try {
    text = execFileSync('ss', ['-tinpH', 'state', 'established'], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 })
  } catch {
    return out
  }
  // A socket is one line with its endpoints and owner, then an indented line of tcp_info.
  const sockets: Array<{ local: string; peer: string; pid: number | null; sent: number }> = []
  for (const line of text.split('\n')) {
    if (!line.trim()) continue
    if (!/^\s/.test(line)) {
      const eps = line.match(/\S+:\d+/g) ?? []
      const pid = /pid=(\d+)/.exec(line)
      sockets.push({ local: eps[0] ?? '', peer: eps[1] ?? '', pid: pid ? Number(pid[1]) : null, sent: 0 })
    } else {
      const s = sockets[sockets.length - 1]
      const m = /bytes_sent:(\d+)/.exec(line)
      if (s && m) s.sent = Number(m[1])
    }
  }
  const owner = new Map(sockets.map((s) => [s.local, s.pid]))
  for (const s of sockets) {
    if (s.pid === null || !relayPids.has(s.pid)) continue
    const peerPid = owner.get(s.peer)
    if (peerPid === undefined || peerPid === null || !relayPids.has(peerPid)) continue
    out.set(`${s.local}>${s.peer}`, s.sent)
  }
  return out
}

/** Bytes sent between two snapshots, over sockets present in both (plus new ones from zero). */
export function meshDelta(a: Map<string, number>, b: Map<string, number>): number {
  let total = 0
  for (const [k, v] of b) total += v - (a.get(k) ?? 0)
  return Math.max(0, total)
}
