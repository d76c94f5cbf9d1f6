import type { SocketLike } from '@stead/client'
import { authBytes, decodeRelayMessage, encodeClientMessage, type ClientMessage, type RelayMessage } from '@stead/core'
import { publicKeyOfSync, signSync } from '@stead/core/node'

/**
 * A protocol session driven by hand, not an SDK client: it proves
 * `secretKey` on the relay's challenge, then a test sends what it likes
 * (subscribe, announce, submit, junk) and reads what the relay said. What
 * the relay sends before the welcome is kept too.
 */
export class RawSession {
  readonly received: RelayMessage[] = []
  /** Resolves once the relay welcomed the session; rejects if it closed first. */
  readonly welcomed: Promise<void>
  private readonly socket: SocketLike
  private open = true

  constructor(socket: SocketLike, secretKey: Uint8Array) {
    this.socket = socket
    const publicKey = publicKeyOfSync(secretKey)
    this.welcomed = new Promise<void>((resolve, reject) => {
      socket.onmessage = (ev) => {
        const m = decodeRelayMessage(new Uint8Array(ev.data as ArrayBuffer))
        this.received.push(m)
        if (m.type === 'challenge') this.send({ type: 'hello', publicKey, sig: signSync(secretKey, authBytes(m.nonce, m.relayKey)) })
        if (m.type === 'welcome') resolve()
      }
      socket.onclose = () => {
        this.open = false
        reject(new Error('the relay closed the session before its welcome'))
      }
    })
    // Nobody may wait on it: a test that only sends does not care.
    this.welcomed.catch(() => undefined)
  }

  get isOpen(): boolean {
    return this.open
  }

  send(m: ClientMessage): void {
    if (this.open && this.socket.readyState === 1) this.socket.send(encodeClientMessage(m))
  }

  close(): void {
    this.socket.close()
  }
}
