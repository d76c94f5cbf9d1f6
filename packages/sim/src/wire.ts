import type { SocketLike } from '@stead/client'
import type { SessionSocket } from '@stead/relay'

/** What a simulated connection needs of the run: its time, its seeded delays, and its event queue. */
export interface WireWorld {
  now(): number
  /** A network delay, from the run's seed. */
  delay(): number
  /** Runs `action` at `at`; `toward` is the relay a message is on its way to (the run is not idle while one is), else null. */
  schedule(at: number, toward: number | null, action: () => void): void
}

const CONNECTING = 0
const OPEN = 1
const CLOSING = 2
const CLOSED = 3

/**
 * One client's WebSocket to one relay, simulated: the SDK holds its
 * `client` end (a SocketLike, as the browser's WebSocket) and the relay's
 * session its `relay` end (a SessionSocket, as ws-socket.ts makes of ws).
 * Frames arrive in order each way after seeded delays; a paused relay end
 * holds what arrives until it resumes (TCP pushing back); a frame over the
 * relay's frame limit closes the connection with 1009, as ws does.
 */
export class Wire {
  readonly client: SocketLike
  readonly relay: SessionSocket
  private state = CONNECTING
  /** When the last frame each way arrives: a later one never overtakes it. */
  private toClientAt = 0
  private toRelayAt = 0
  private paused = false
  private readonly held: Uint8Array[] = []
  private frameLimit = Number.POSITIVE_INFINITY
  private readonly relayHandlers: { message: Array<(data: Uint8Array, isBinary: boolean) => void>; chunk: Array<() => void>; close: Array<() => void> } = { message: [], chunk: [], close: [] }
  private relayClosed = false
  private readonly world: WireWorld
  /** The relay this wire goes to. */
  readonly to: number
  /** Sees each frame as it reaches the client (for the run's counts). */
  tap: ((frame: Uint8Array) => void) | undefined

  constructor(world: WireWorld, to: number) {
    this.world = world
    this.to = to
    const client: SocketLike = {
      binaryType: 'arraybuffer',
      readyState: CONNECTING,
      send: (data) => this.fromClient(data),
      close: () => this.closeFromClient(),
      onopen: null,
      onmessage: null,
      onclose: null,
      onerror: null,
    }
    Object.defineProperty(client, 'readyState', { get: () => this.state })
    this.client = client
    const relay: SessionSocket = {
      open: false,
      send: (frame, written) => this.fromRelay(frame, written),
      close: (code, reason) => this.closeFromRelay(code, reason),
      terminate: () => this.terminate(),
      pause: () => void (this.paused = true),
      resume: () => this.resume(),
      unfinishedBytes: () => 0,
      setFrameLimit: (bytes) => void (this.frameLimit = bytes),
      onMessage: (h) => void this.relayHandlers.message.push(h),
      onChunk: (h) => void this.relayHandlers.chunk.push(h),
      onClose: (h) => void this.relayHandlers.close.push(h),
    }
    Object.defineProperty(relay, 'open', { get: () => this.state === OPEN && !this.relayClosed })
    this.relay = relay
  }

  get isOpen(): boolean {
    return this.state === OPEN
  }

  /** The connection is up: the client hears `open` (the relay's session starts right after, from the caller). */
  opened(): void {
    if (this.state !== CONNECTING) return
    this.state = OPEN
    this.client.onopen?.({})
  }

  /** Nobody answered (the relay is down): the client hears the close. */
  refused(): void {
    if (this.state === CLOSED) return
    this.state = CLOSED
    this.client.onerror?.({})
    this.client.onclose?.({ code: 1006, reason: 'connection refused' })
  }

  /** The relay's machine died: its end hears nothing more, the client hears the close after a delay. */
  cut(): void {
    if (this.state === CLOSED) return
    this.state = CLOSING
    this.relayClosed = true
    this.world.schedule(this.world.now() + this.world.delay(), null, () => this.clientClosed(1006, 'connection lost'))
  }

  /** The client's device died: the relay's end hears the connection drop after a delay; nothing reaches the client any more. */
  clientGone(): void {
    if (this.state === CLOSED) return
    this.state = CLOSED
    if (this.relayClosed) return
    this.world.schedule(this.world.now() + this.world.delay(), this.to, () => {
      if (this.relayClosed) return
      this.relayClosed = true
      this.relayHeardClose()
    })
  }

  private fromClient(data: Uint8Array): void {
    if (this.state !== OPEN) return
    const frame = Uint8Array.from(data)
    this.toRelayAt = Math.max(this.toRelayAt, this.world.now() + this.world.delay())
    this.world.schedule(this.toRelayAt, this.to, () => {
      if (this.relayClosed) return
      if (this.paused) this.held.push(frame)
      else this.deliverToRelay(frame)
    })
  }

  private deliverToRelay(frame: Uint8Array): void {
    if (frame.length > this.frameLimit) return this.closeFromRelay(1009, 'frame too large')
    for (const h of this.relayHandlers.message) h(frame, true)
    for (const h of this.relayHandlers.chunk) h()
  }

  private resume(): void {
    this.paused = false
    while (!this.paused && !this.relayClosed && this.held.length > 0) this.deliverToRelay(this.held.shift() as Uint8Array)
  }

  private fromRelay(frame: Uint8Array, written: () => void): void {
    if (this.relayClosed) return
    this.toClientAt = Math.max(this.toClientAt, this.world.now() + this.world.delay())
    this.world.schedule(this.toClientAt, null, () => {
      written()
      if (this.state !== OPEN) return
      this.tap?.(frame)
      this.client.onmessage?.({ data: frame })
    })
  }

  /** The relay closes: both ends hear it once the close reaches the client. */
  private closeFromRelay(code: number, reason: string): void {
    if (this.relayClosed) return
    this.relayClosed = true
    this.state = this.state === OPEN ? CLOSING : this.state
    this.world.schedule(Math.max(this.toClientAt, this.world.now() + this.world.delay()), null, () => {
      this.relayHeardClose()
      this.clientClosed(code, reason)
    })
  }

  private terminate(): void {
    if (this.relayClosed && this.state === CLOSED) return
    this.relayClosed = true
    this.world.schedule(this.world.now(), null, () => this.relayHeardClose())
    this.world.schedule(this.world.now() + this.world.delay(), null, () => this.clientClosed(1006, 'terminated'))
  }

  /** The client closes: the relay's end hears it after a delay, the client right then too (its close handshake). */
  private closeFromClient(): void {
    if (this.state === CLOSED || this.state === CLOSING) return
    const wasConnecting = this.state === CONNECTING
    this.state = CLOSING
    this.world.schedule(this.world.now() + this.world.delay(), wasConnecting ? null : this.to, () => {
      if (!this.relayClosed) {
        this.relayClosed = true
        this.relayHeardClose()
      }
      this.clientClosed(1000, 'closed by the client')
    })
  }

  private relayHeardClose(): void {
    const handlers = this.relayHandlers.close.splice(0)
    for (const h of handlers) h()
  }

  private clientClosed(code: number, reason: string): void {
    if (this.state === CLOSED) return
    this.state = CLOSED
    this.client.onclose?.({ code, reason })
  }
}
