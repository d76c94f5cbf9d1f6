import { CommitAssembler, authBytes, decodeAttestation, decodeRelayMessage, encodeClientMessage, type Attestation, type ClientMessage, type RelayMessage } from '@stead/core'
import { signSync } from '@stead/core/node'
import WebSocket from 'ws'

export interface ConnectOptions {
  /** Local address to connect from (any of 127.0.0.0/8 on Linux), to act as another host. */
  readonly localAddress?: string
  /** Ping every 5 s as the SDK does (default); false makes an idle client. */
  readonly keepalive?: boolean
}

/** A bare protocol client for tests: what the SDK does, without the SDK. */
export class TestClient {
  readonly messages: RelayMessage[] = []
  readonly commits: Array<{ space: string; attestation: Attestation; bytes: Uint8Array; sig: Uint8Array }> = []
  private readonly ws: WebSocket
  private readonly waiters: Array<() => void> = []
  closed: { code: number; reason: string } | null = null
  /** Frames received, before commits sent in several frames are joined. */
  frames = 0

  private constructor(url: string, options: ConnectOptions = {}) {
    this.ws = new WebSocket(url, options.localAddress ? { localAddress: options.localAddress } : {})
    // Like the SDK, ping while quiet so the relay's idle timeout does not close the session.
    if (options.keepalive !== false) {
      const timer = setInterval(() => this.ws.readyState === WebSocket.OPEN && this.ws.send(encodeClientMessage({ type: 'ping', n: 0 })), 5000)
      timer.unref()
      this.ws.once('close', () => clearInterval(timer))
    }
    this.ws.binaryType = 'nodebuffer'
    const parts = new CommitAssembler()
    this.ws.on('message', (data: Buffer) => {
      let m = decodeRelayMessage(new Uint8Array(data))
      this.frames++
      if (m.type === 'commit' || m.type === 'commit-more') {
        const whole = parts.push(m)
        if (!whole) return
        m = whole
      }
      this.messages.push(m)
      if (m.type === 'commit') this.commits.push({ space: m.space, attestation: decodeAttestation(m.attestation.bytes), bytes: m.attestation.bytes, sig: m.attestation.sig })
      for (const w of this.waiters.splice(0)) w()
    })
    this.ws.on('close', (code, reason) => {
      this.closed = { code, reason: reason.toString() }
      for (const w of this.waiters.splice(0)) w()
    })
  }

  /** Connects and, unless told not to, answers the challenge with this key. */
  static async connect(api: string, identity?: { secretKey: Uint8Array; publicKey: Uint8Array }, options: ConnectOptions = {}): Promise<TestClient> {
    const c = new TestClient(`ws://${api}/v1/ws`, options)
    const challenge = await c.next((m) => m.type === 'challenge')
    if (identity && challenge.type === 'challenge') {
      c.send({ type: 'hello', publicKey: identity.publicKey, sig: signSync(identity.secretKey, authBytes(challenge.nonce, challenge.relayKey)) })
      await c.next((m) => m.type === 'welcome')
    }
    return c
  }

  send(m: ClientMessage): void {
    this.ws.send(encodeClientMessage(m))
  }

  private nextSubmit = 1
  /** Submits an envelope frame and waits for the relay's answer to it: `accepted` or `error`. */
  async submit(frame: Uint8Array, timeoutMs = 30_000): Promise<RelayMessage> {
    const id = this.nextSubmit++
    this.send({ type: 'submit', id, envelope: frame })
    return this.next((m) => (m.type === 'accepted' || m.type === 'error') && m.id === id, timeoutMs)
  }

  raw(bytes: Uint8Array | string): void {
    this.ws.send(bytes)
  }

  /** The first message so far (or later) that matches. */
  async next(match: (m: RelayMessage) => boolean, timeoutMs = 15_000): Promise<RelayMessage> {
    const deadline = Date.now() + timeoutMs
    for (;;) {
      const found = this.messages.find(match)
      if (found) return found
      if (this.closed) throw new Error(`socket closed (${this.closed.code} ${this.closed.reason}) before the message arrived`)
      if (Date.now() > deadline) throw new Error('timed out waiting for a relay message')
      await new Promise<void>((r) => {
        this.waiters.push(r)
        setTimeout(r, 200)
      })
    }
  }

  close(): void {
    this.ws.close()
  }

  /** Bytes sent and not yet taken by the relay (TCP backpressure shows here). */
  get buffered(): number {
    return this.ws.bufferedAmount
  }

  /** Resolves once the socket has closed (at once if it has). */
  async whenClosed(timeoutMs = 30_000): Promise<{ code: number; reason: string }> {
    const deadline = Date.now() + timeoutMs
    while (!this.closed) {
      if (Date.now() > deadline) throw new Error('timed out waiting for the socket to close')
      await new Promise<void>((r) => {
        this.waiters.push(r)
        setTimeout(r, 200)
      })
    }
    return this.closed
  }

  /** Stops reading from the socket, as a client that never reads would: the relay's sends back up. */
  stopReading(): void {
    ;(this.ws as unknown as { _socket: { pause(): void } })._socket.pause()
  }

  resumeReading(): void {
    ;(this.ws as unknown as { _socket: { resume(): void } })._socket.resume()
  }

  /** Round trip: resolves when the relay has handled everything sent before. */
  async barrier(): Promise<void> {
    const n = Math.floor(Math.random() * 1e9)
    this.send({ type: 'ping', n })
    await this.next((m) => m.type === 'pong' && m.n === n)
  }
}
