import { createServer } from 'node:net'
import { ConfigError } from './config.ts'

/** One socket a relay listens on, described for an operator. */
export interface Listener {
  /** What listens there, e.g. "the HTTP API of r1". */
  readonly what: string
  readonly host: string
  readonly port: number
  /** What to change to move it, e.g. `r1's "api" in the cluster file`. */
  readonly setting: string
}

export type PortState = 'free' | 'in-use' | 'not-local' | 'unresolved' | 'bad-port' | 'denied' | 'unknown'

/** A listener that could not bind, with the reason an operator acts on. */
export class ListenError extends ConfigError {
  readonly port: number
  readonly state: Exclude<PortState, 'free'>
  constructor(listener: Listener, state: Exclude<PortState, 'free'>) {
    super(listenMessage(listener, state))
    this.port = listener.port
    this.state = state
  }
}

function listenMessage(l: Listener, state: Exclude<PortState, 'free'>): string {
  const at = `${l.host}:${l.port}`
  switch (state) {
    case 'in-use':
      return `port ${l.port} (${l.what}, ${at}) is in use by another process: stop it (find it with: ss -ltnp 'sport = :${l.port}'), or change ${l.setting}`
    case 'not-local':
      return `cannot listen on ${at} (${l.what}): ${l.host} is not an address of this machine; fix ${l.setting}`
    case 'unresolved':
      return `cannot listen on ${at} (${l.what}): ${l.host} does not resolve to an address (DNS); fix ${l.setting}`
    case 'bad-port':
      return `cannot listen on ${at} (${l.what}): ${l.port} is not a port (1 to 65535); fix ${l.setting}`
    case 'denied':
      return `cannot listen on ${at} (${l.what}): permission denied (ports below 1024 need privileges); change ${l.setting}`
    case 'unknown':
      return `cannot listen on ${at} (${l.what}); check ${l.setting}`
  }
}

/** Listens on host:port for a moment and lets go: what a relay's own listener would meet there now. */
export function probePort(host: string, port: number): Promise<PortState> {
  return new Promise((done) => {
    if (!Number.isInteger(port) || port < 0 || port > 65_535) return done('bad-port')
    const server = createServer()
    server.once('error', (err: NodeJS.ErrnoException) => done(stateOf(err.code)))
    server.listen({ host, port }, () => server.close(() => done('free')))
  })
}

function stateOf(code: string | undefined): Exclude<PortState, 'free'> {
  if (code === 'EADDRINUSE') return 'in-use'
  if (code === 'EADDRNOTAVAIL') return 'not-local'
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') return 'unresolved'
  if (code === 'ERR_SOCKET_BAD_PORT') return 'bad-port'
  if (code === 'EACCES' || code === 'EPERM') return 'denied'
  return 'unknown'
}

/**
 * Whether an error is a listener failing to bind: Node's own errors carry a
 * code; libp2p wraps them (UnsupportedListenAddressesError, advising a
 * fault-tolerance setting that is no remedy here) with the code in its text.
 */
export function isListenFailure(err: unknown): boolean {
  const e = err as { code?: unknown; name?: unknown; message?: unknown } | null
  if (!e) return false
  if (typeof e.code === 'string' && /^(E(ADDRINUSE|ADDRNOTAVAIL|ACCES|PERM|NOTFOUND|AI_AGAIN)|ERR_SOCKET_BAD_PORT)$/.test(e.code)) return true
  if (e.name === 'UnsupportedListenAddressesError') return true
  return typeof e.message === 'string' && /\bE(ADDRINUSE|ADDRNOTAVAIL)\b/.test(e.message)
}

/**
 * The clear error for a listener that failed: probes the port to tell "in
 * use" from "not an address here" and the like. Undefined when the port is
 * free now (the failure was something else: keep the original error).
 */
export async function explainListenFailure(listener: Listener): Promise<ListenError | undefined> {
  const state = await probePort(listener.host, listener.port)
  return state === 'free' ? undefined : new ListenError(listener, state)
}

/** Host and port of a mesh multiaddr such as /ip4/10.0.0.1/tcp/7501 (the cluster file's form). */
export function meshHostPort(multiaddr: string): { host: string; port: number } | undefined {
  const m = /^\/ip[46]\/([^/]+)\/tcp\/(\d+)$/.exec(multiaddr)
  return m ? { host: m[1] as string, port: Number(m[2]) } : undefined
}

/** Host and port of an API address host:port (the cluster file's form). */
export function apiHostPort(api: string): { host: string; port: number } {
  const [host = '', port = ''] = api.split(':')
  return { host, port: Number(port) }
}
