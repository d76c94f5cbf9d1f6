import { readFileSync } from 'node:fs'
import type { IncomingMessage, Server } from 'node:http'
import type { Socket } from 'node:net'
import type { Duplex } from 'node:stream'
import { addressKey } from './address.ts'
import { Shares } from './shares.ts'

/** Limits on the client API's TCP connections (see ApiLimits). */
export interface ConnectionLimits {
  /** Connections at once, in all (also held below the process's descriptor limit, see connectionCap). */
  readonly maxHttpConnections: number
  /** Connections at once from one address (an IPv6 one by its /64). */
  readonly maxHttpConnectionsPerAddress: number
  /** A connection that has not sent a whole request's head (or a TLS handshake's worth and then one) by then is closed. */
  readonly firstRequestMs: number
}

/** Descriptors kept for everything else a relay opens: the store, the mesh, the peer port, logs, and a few probes. */
const FD_HEADROOM = 2048

/** The process's soft limit on open files (Linux: /proc/self/limits), or undefined when it cannot be read. */
export function openFilesLimit(): number | undefined {
  try {
    const line = readFileSync('/proc/self/limits', 'utf8').split('\n').find((l) => l.startsWith('Max open files'))
    const soft = line?.slice('Max open files'.length).trim().split(/\s+/)[0]
    const n = Number(soft)
    return Number.isSafeInteger(n) && n > 0 ? n : undefined
  } catch {
    return undefined
  }
}

/** `max`, held a headroom below the descriptor limit `fds` (a quarter of it, at most FD_HEADROOM): accept never fails with EMFILE. */
export function connectionCap(max: number, fds: number | undefined): number {
  if (fds === undefined) return max
  return Math.max(16, Math.min(max, fds - Math.min(FD_HEADROOM, Math.floor(fds / 4))))
}

interface Conn {
  readonly who: string
  timer: NodeJS.Timeout | undefined
}

/** What {@link guardConnections} counts. */
export interface ConnectionCounts {
  readonly open: number
  /** Connections that have not sent a request yet. */
  readonly silent: number
  readonly cap: number
}

/** The connections {@link guardConnections} holds: what it counts, and a way to end them all. */
export interface GuardedConnections {
  counts(): ConnectionCounts
  /** Destroys every connection still open (the API is closing and gave them time enough). */
  destroyAll(): void
}

/**
 * Caps the raw TCP connections of an HTTP server, per address and in all,
 * and closes a connection that sends no request within `firstRequestMs`.
 * Over the address's cap a new connection is closed at once; at the total
 * cap the oldest connection that has not sent a request yet makes room,
 * else the newest of the address holding the most, if it holds more than
 * the newcomer's address would (else the new one is closed): neither silent
 * connections nor busy ones from a few addresses can keep a probe or a
 * client of another address out.
 * `refused` is called for every connection closed by these limits.
 */
export function guardConnections(server: Server, limits: ConnectionLimits, refused: (why: 'per-address' | 'total' | 'silent') => void): GuardedConnections {
  const cap = connectionCap(limits.maxHttpConnections, openFilesLimit())
  const conns = new Map<Socket, Conn>()
  /** Connections that have not sent a request yet, oldest first. */
  const silent = new Set<Socket>()
  const perAddress = new Shares<Socket>()
  const spoke = (socket: Socket): void => {
    const raw = conns.has(socket) ? socket : ((socket as unknown as { _parent?: Socket })._parent ?? socket)
    const c = conns.get(raw)
    if (!c || !silent.delete(raw)) return
    if (c.timer) clearTimeout(c.timer)
    c.timer = undefined
  }
  server.on('connection', (socket: Socket) => {
    socket.on('error', () => undefined)
    const who = addressKey(socket.remoteAddress)
    const n = perAddress.count(who)
    if (n >= limits.maxHttpConnectionsPerAddress) {
      refused('per-address')
      return void socket.destroy()
    }
    if (conns.size >= cap) {
      const heaviest = perAddress.heaviest()
      const victim = (silent.values().next().value as Socket | undefined) ?? (heaviest && heaviest.count > n + 1 ? [...perAddress.itemsOf(heaviest.who)].pop() : undefined)
      refused('total')
      if (!victim) return void socket.destroy()
      victim.destroy()
      // Its 'close' comes later: forget it now, so the count makes room at once.
      forget(victim)
    }
    const c: Conn = { who, timer: undefined }
    conns.set(socket, c)
    silent.add(socket)
    perAddress.add(who, socket)
    c.timer = setTimeout(() => {
      refused('silent')
      socket.destroy()
      forget(socket)
    }, limits.firstRequestMs)
    c.timer.unref()
    socket.once('close', () => forget(socket))
  })
  const forget = (socket: Socket): void => {
    const c = conns.get(socket)
    if (!c) return
    conns.delete(socket)
    silent.delete(socket)
    if (c.timer) clearTimeout(c.timer)
    perAddress.delete(c.who, socket)
  }
  server.on('request', (req: IncomingMessage) => spoke(req.socket))
  server.on('upgrade', (req: IncomingMessage, socket: Duplex) => {
    spoke(req.socket)
    // With any 'upgrade' listener, Node hands every upgrade request to the listeners instead of answering it
    // as a request. This one alone left (the WebSocket server stops taking sessions when the API closes, and
    // clients whose sessions it closed ask again at once): nobody would answer, and the connection would hold
    // the close up until it timed out (a relay moving to its next epoch sat in the old one for 70 s).
    if (server.listenerCount('upgrade') === 1) socket.end(NO_SESSIONS, () => socket.destroy())
  })
  return {
    counts: () => ({ open: conns.size, silent: silent.size, cap }),
    destroyAll: () => {
      for (const socket of [...conns.keys()]) {
        socket.destroy()
        forget(socket)
      }
    },
  }
}

/** The answer to a WebSocket upgrade once the API takes no more sessions. */
const NO_SESSIONS = 'HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\ncontent-length: 0\r\n\r\n'
