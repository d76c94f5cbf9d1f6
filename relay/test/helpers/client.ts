import { authBytes, decodeAttestation, decodeRelayMessage, encodeClientMessage, type Attestation, type ClientMessage, type RelayMessage } from '@stead/core'
import { signSync } from '@stead/core/node'
import WebSocket from 'ws'

/** A bare protocol client for tests: what the SDK does, without the SDK. */
export class TestClient {
  readonly messages: RelayMessage[] = []
  readonly commits: Array<{ space: string; attestation: Attestation; bytes: Uint8Array; sig: Uint8Array }> = []
  private readonly ws: WebSocket
  private readonly waiters: Array<() => void> = []
  closed: { code: number; reason: string } | null = null

  private constructor(url: string) {
    this.ws = new WebSocket(url)
    this.ws.binaryType = 'nodebuffer'
    this.ws.on('message', (data: Buffer) => {
      const m = decodeRelayMessage(new Uint8Array(data))
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
  static async connect(api: string, identity?: { secretKey: Uint8Array; publicKey: Uint8Array }): Promise<TestClient> {
    const c = new TestClient(`ws://${api}/v1/ws`)
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
}
