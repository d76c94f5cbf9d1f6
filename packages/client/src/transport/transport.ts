import {
  CommitAssembler,
  authBytes,
  welcomeBytes,
  bytesEqual,
  decodeRelayMessage,
  encodeClientMessage,
  type ClientMessage,
  type Crypto,
  type HostClock,
  type HostTimer,
  type RelayMessage,
  type DeviceCertificate,
} from '@stead/core'
import { describeNetworkError, sessionUrlOf } from './cluster.ts'
import { EarlyFrames } from './early-frames.ts'

/**
 * The part of the WebSocket API the client uses. The browser's WebSocket,
 * the `ws` package's, and test fakes all fit.
 */
export interface SocketLike {
  /** Set to 'arraybuffer' by the client: frames are binary msgpack. */
  binaryType: string
  /** WebSocket ready state: 1 is open. */
  readonly readyState: number
  /** Sends one binary frame. */
  send(data: Uint8Array): void
  /** Closes the socket. */
  close(code?: number, reason?: string): void
  /** Called once the socket is open. */
  onopen: ((ev: unknown) => void) | null
  /** Called with each frame received (`data`: an ArrayBuffer or bytes). */
  onmessage: ((ev: { data: unknown }) => void) | null
  /** Called once the socket closed, whatever the cause. */
  onclose: ((ev: unknown) => void) | null
  /** Called on a socket error (a close follows). */
  onerror: ((ev: unknown) => void) | null
}

/** Opens a WebSocket to a relay's session URL (`ws://host:port/v1/ws`): `ClientOptions.connect`. */
export type SocketFactory = (url: string) => SocketLike

export interface LinkHandlers {
  /** The session is authenticated: subscribe and submit now. */
  ready(link: RelayLink): void
  message(link: RelayLink, m: RelayMessage): void
  /** The session ended (it will be retried unless the link was stopped). */
  down(link: RelayLink, why: string): void
  /** The relay proved a key other than the pinned one, or broke the protocol: never retried. */
  untrusted(link: RelayLink, why: string): void
  /** The relay is in another epoch than the client trusts (see LinkOptions.knownElsewhere): it is tried again. */
  otherEpoch?(link: RelayLink): void
  /** The relay's clock read `relayTime` while this client's read between `sentAt` and `receivedAt` (a ping's round trip). */
  clock?(link: RelayLink, relayTime: number, sentAt: number, receivedAt: number): void
}

/** A client's key pair, and its device certificate when it is a device of a user (see DeviceCertificate). */
export interface Identity {
  readonly secretKey: Uint8Array
  readonly publicKey: Uint8Array
  readonly certificate?: DeviceCertificate
}

export interface LinkOptions {
  readonly url: string
  readonly connect: SocketFactory
  readonly crypto: Crypto
  readonly identity: Identity
  /** The pinned key of relay `index` of the cluster, if there is such a relay. */
  readonly keyOf: (index: number) => Uint8Array | undefined
  /**
   * Whether a key is one the client trusts at another place: of the
   * cluster at another index, or of a committee it followed on from. A
   * relay that proves one is in another epoch than the client (it has not
   * moved on yet, or the client has not): tried again with backoff, not
   * faulty.
   */
  readonly knownElsewhere?: (key: Uint8Array) => boolean
  readonly handlers: LinkHandlers
  readonly backoff?: { readonly initialMs: number; readonly maxMs: number }
  /** For deterministic tests; defaults to Math.random. */
  readonly random?: () => number
  /** Time and timers (reconnect backoff, heartbeats, the clock measure). */
  readonly clock: HostClock
  /** Whether the device knows it has no network (no dial then); defaults to a browser's `navigator.onLine === false`. */
  readonly deviceOffline?: () => boolean
}

/** A browser's word that it has no network at all (`onLine` true only means "maybe"); false where there is no navigator. */
export function browserOffline(): boolean {
  return (globalThis as { navigator?: { onLine?: boolean } }).navigator?.onLine === false
}

const OPEN = 1

/**
 * One relay session that keeps itself alive: connect, answer the challenge
 * (proving the client's key, checking the relay's against the pinned
 * cluster), then pass messages up; on loss, reconnect with jittered
 * exponential backoff until stopped.
 */
export class RelayLink {
  readonly url: string
  /** The relay's index in the cluster, as its challenge claims it (not proven until its welcome). */
  relay: number | undefined
  /** The index this URL's relay proved it holds the key of (a signed welcome; only another one changes it); what blame and votes go by. */
  provenRelay: number | undefined
  ready = false
  /** Set when the relay was caught misbehaving; the link stays down. */
  faulty: string | undefined
  lastError: string | undefined
  /** When the relay last sent anything (Date.now() of the injected clock): a session that goes quiet is dead. */
  lastHeard = 0
  /** Where the relay helps clients sync peer to peer (its `welcome` said), if it does. */
  peerAddresses: readonly string[] = []
  /** The nonce this session's hello asked the relay to sign. */
  private helloNonce: Uint8Array | undefined
  /** The socket a challenge came on: a second one on it is a lie. */
  private challenged: SocketLike | undefined
  private pings = 0
  /** The latest ping sent on this session and when (the injected clock): its pong measures the relay's clock. */
  private lastPing: { n: number; at: number } | undefined
  /** Joins commits that arrive in several frames. */
  private readonly commits = new CommitAssembler()
  /** What the relay sent early on the current socket, for commits that name it by id. */
  private readonly early: EarlyFrames
  private socket: SocketLike | undefined
  private socketError: string | undefined
  private stopped = false
  private attempt = 0
  private timer: HostTimer | undefined
  private readonly options: LinkOptions

  constructor(options: LinkOptions) {
    this.options = options
    this.url = options.url
    this.early = new EarlyFrames((b) => options.crypto.sha256(b))
  }

  start(): void {
    if (this.stopped || this.faulty || this.socket) return
    // The device says it has no network: a dial could only fail, and a browser prints each failure in red.
    // The 'online' event restarts the link (RelaySessions follows it); until then, look again after the backoff.
    if ((this.options.deviceOffline ?? browserOffline)()) {
      this.lastError = 'this device is offline'
      this.retry()
      return
    }
    let socket: SocketLike
    try {
      socket = this.options.connect(sessionUrlOf(this.url))
    } catch (err) {
      this.lastError = (err as Error).message
      this.retry()
      return
    }
    this.socket = socket
    this.commits.reset()
    this.early.clear()
    socket.binaryType = 'arraybuffer'
    socket.onmessage = (ev) => {
      if (this.socket !== socket) return
      const bytes = toBytes(ev.data)
      if (!bytes) return this.markFaulty('sent a non-binary frame')
      let m: RelayMessage
      try {
        m = decodeRelayMessage(bytes)
      } catch (err) {
        return this.markFaulty(`sent an undecodable message: ${(err as Error).message}`)
      }
      void this.onMessage(socket, m)
    }
    // Why this socket failed, if it said (an error event, or the relay's session-level error).
    this.socketError = undefined
    socket.onclose = () => {
      if (this.socket !== socket) return
      this.socket = undefined
      const was = this.ready
      this.ready = false
      this.lastError = was ? 'connection closed' : (this.socketError ?? 'closed before welcome')
      this.options.handlers.down(this, this.lastError)
      this.retry()
    }
    socket.onerror = (ev) => {
      if (this.socket === socket) this.lastError = this.socketError = describeNetworkError(ev)
    }
  }

  /** Sends if the session is ready; false otherwise (the caller retries later). */
  send(m: ClientMessage): boolean {
    const s = this.socket
    if (!this.ready || !s || s.readyState !== OPEN) return false
    try {
      s.send(encodeClientMessage(m))
      return true
    } catch {
      return false
    }
  }

  stop(): void {
    this.stopped = true
    this.timer?.cancel()
    this.drop()
  }

  /** Closes the current session at once and reconnects with backoff (used after a relay's error, to test reconnects, and by `reconnect()`). */
  restart(): void {
    if (this.stopped || this.faulty) return
    this.timer?.cancel()
    this.timer = undefined
    this.drop()
    this.attempt = 0
    this.start()
  }

  /** Closes the session and waits (with backoff) before trying again: the network is known to be down. */
  pause(): void {
    if (this.stopped || this.faulty) return
    this.drop()
    if (!this.timer) this.retry()
  }

  private drop(): void {
    const s = this.socket
    this.socket = undefined
    if (this.ready) {
      this.ready = false
      this.options.handlers.down(this, 'closed by the client')
    }
    if (s) {
      s.onopen = s.onmessage = s.onclose = null
      // Not null: closing a socket that is still connecting makes `ws` emit an error
      // ("closed before the connection was established"), which with no listener is thrown.
      s.onerror = () => undefined
      try {
        s.close()
      } catch {
        // already closed
      }
    }
  }

  markFaulty(why: string): void {
    if (this.faulty) return
    this.faulty = why
    this.lastError = why
    this.timer?.cancel()
    this.drop()
    this.options.handlers.untrusted(this, why)
  }

  /**
   * Keeps a ready session honest: pings when it has been quiet for
   * `pingAfterMs`, and drops it (to reconnect) when nothing at all came back
   * for `deadAfterMs`. A vanished network otherwise looks connected until
   * TCP gives up, which can take minutes.
   */
  heartbeat(now: number, pingAfterMs: number, deadAfterMs: number): void {
    if (!this.ready) return
    const quiet = now - this.lastHeard
    if (quiet >= deadAfterMs) {
      this.lastError = `no answer from the relay for ${Math.round(quiet / 1000)} s`
      this.restart()
    } else if (quiet >= pingAfterMs) this.ping()
  }

  /** Pings the relay: keeps the session alive, and its pong carries the relay's clock. */
  private ping(): void {
    const n = this.pings++
    if (this.send({ type: 'ping', n })) this.lastPing = { n, at: this.now() }
  }

  private now(): number {
    return this.options.clock.now()
  }

  private async onMessage(socket: SocketLike, m: RelayMessage): Promise<void> {
    this.lastHeard = this.now()
    if (m.type === 'challenge') {
      // One challenge per socket: a relay that proved one index cannot then answer as another, nor
      // challenge again while its welcome is being checked (the second would take the link's index).
      if (this.ready) return this.markFaulty(`sent a second challenge (as relay ${m.relay}) after its welcome as relay ${String(this.provenRelay)}`)
      if (this.challenged === socket) return this.markFaulty(`sent a second challenge (as relay ${m.relay}) after one as relay ${String(this.relay)}`)
      this.challenged = socket
      const pinned = this.options.keyOf(m.relay)
      if (!pinned || !bytesEqual(pinned, m.relayKey)) {
        if (this.options.knownElsewhere?.(m.relayKey)) {
          this.lastError = `in another epoch than this client (it says it is relay ${m.relay}); trying again`
          this.drop()
          if (!this.timer) this.retry()
          this.options.handlers.otherEpoch?.(this)
          return
        }
        return this.markFaulty(`claims to be relay ${m.relay} with a key the pinned cluster does not have there`)
      }
      this.relay = m.relay
      const { secretKey, publicKey, certificate } = this.options.identity
      const sig = await this.options.crypto.sign(secretKey, authBytes(m.nonce, m.relayKey))
      if (this.socket !== socket) return
      // The relay signs this nonce in its welcome: naming the pinned key is not holding it.
      this.helloNonce = globalThis.crypto.getRandomValues(new Uint8Array(32))
      socket.send(encodeClientMessage({ type: 'hello', publicKey, sig, nonce: this.helloNonce, ...(certificate ? { device: certificate } : {}) }))
      return
    }
    if (m.type === 'welcome') {
      if (m.relay !== this.relay) return this.markFaulty(`welcomed as relay ${m.relay} after a challenge from relay ${String(this.relay)}`)
      const pinned = this.options.keyOf(m.relay)
      const nonce = this.helloNonce
      this.helloNonce = undefined
      const proven = pinned && nonce && m.sig && (await this.options.crypto.verify(pinned, welcomeBytes(nonce, this.options.identity.publicKey, m.relay), m.sig))
      if (this.socket !== socket) return
      if (!proven) return this.markFaulty(`did not prove it holds relay ${m.relay}'s key (its welcome ${m.sig ? 'signature does not verify' : 'is unsigned'})`)
      this.ready = true
      this.provenRelay = m.relay
      this.peerAddresses = m.peers ?? []
      this.attempt = 0
      this.lastError = undefined
      this.lastPing = undefined
      this.options.handlers.ready(this)
      // At once, not only when the session goes quiet: register writes want the relays' time from the start.
      this.ping()
      return
    }
    if (m.type === 'pong') {
      const ping = this.lastPing
      // Only the pong of the latest ping times a round trip; relays that predate the clock send none.
      if (ping && ping.n === m.n && m.time !== undefined && this.provenRelay !== undefined) {
        this.lastPing = undefined
        this.options.handlers.clock?.(this, m.time, ping.at, this.lastHeard)
      }
      return
    }
    if (m.type === 'error' && m.id === null) {
      // Session-level: remember why; rate limits and auth timeouts close the socket themselves.
      this.lastError = this.socketError = `${m.reason}: ${m.detail}`
    }
    if (!this.ready && m.type !== 'error') return
    if (m.type === 'envelope') this.early.keep(m.envelope)
    if (m.type === 'commit' || m.type === 'commit-more') {
      let whole
      try {
        whole = this.commits.push({ ...m, envelopes: this.early.resolve(m.envelopes) })
      } catch (err) {
        return this.markFaulty(`sent a broken commit: ${(err as Error).message}`)
      }
      if (whole) this.options.handlers.message(this, whole)
      return
    }
    this.options.handlers.message(this, m)
  }

  private retry(): void {
    if (this.stopped || this.faulty) return
    const { initialMs, maxMs } = this.options.backoff ?? { initialMs: 250, maxMs: 10_000 }
    const base = Math.min(maxMs, initialMs * 2 ** this.attempt++)
    const delay = base / 2 + (this.options.random ?? Math.random)() * (base / 2)
    this.timer = this.options.clock.setTimer(delay, () => {
      this.timer = undefined
      this.start()
    })
  }
}

function toBytes(data: unknown): Uint8Array | undefined {
  if (data instanceof Uint8Array) return data
  if (data instanceof ArrayBuffer) return new Uint8Array(data)
  if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength)
  return undefined
}
