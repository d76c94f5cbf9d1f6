import { asSigned, decode, encode, toHex } from '@stead/core'
import { nodeCrypto } from '@stead/core/node'

/**
 * Envelopes a session remembers having sent early, in number and bytes. A
 * client keeps more of what each relay sent it on the socket, the same way
 * (EarlyFrames in the client), so every envelope a commit names by id is
 * still there.
 */
const SENT_EARLY_MAX = 256
const SENT_EARLY_BYTES = 1024 * 1024

/** Bytes of an envelope frame's end (its signature's) that tell it apart. */
const EARLY_KEY_BYTES = 16

/** What tells an envelope frame apart: the end of its signature, which ends the frame. */
function earlyKey(frame: Uint8Array): string {
  return Buffer.from(frame.buffer, frame.byteOffset + frame.length - EARLY_KEY_BYTES, EARLY_KEY_BYTES).toString('latin1')
}

/**
 * The envelopes one session sent its client early (the prospective feed,
 * on subscriptions with `refs`), oldest first: a commit that carries one
 * names it by id instead of sending it again.
 */
export class SentEarly {
  private readonly sent = new Map<string, { readonly idHex: string; readonly bytes: number }>()
  private bytes = 0

  /** `frame` (envelope `idHex`) went to the client. */
  remember(frame: Uint8Array, idHex: string): void {
    const key = earlyKey(frame)
    this.forget(key)
    this.sent.set(key, { idHex, bytes: frame.length })
    this.bytes += frame.length
    for (const old of this.sent.keys()) {
      if (this.sent.size <= SENT_EARLY_MAX && this.bytes <= SENT_EARLY_BYTES) break
      this.forget(old)
    }
  }

  /** Whether `frame` went to the client early and no commit named it since. */
  has(frame: Uint8Array): boolean {
    return this.sent.has(earlyKey(frame))
  }

  /** A stored chunk of a commit's envelope frames as this client gets it: those it was sent early, named by id (once). */
  refer(chunk: Uint8Array): Uint8Array {
    if (this.sent.size === 0) return chunk
    const frames = decode(chunk, chunk.length) as Uint8Array[]
    let named = 0
    const out = frames.map((frame) => {
      const key = earlyKey(frame)
      const sent = this.sent.get(key)
      if (!sent) return frame
      this.forget(key)
      const id = nodeCrypto.sha256(asSigned(decode(frame, frame.length)).bytes)
      // Another envelope whose signature ends alike (2^62 work to make one): it goes whole.
      if (toHex(id) !== sent.idHex) return frame
      named++
      return id
    })
    return named ? encode(out) : chunk
  }

  private forget(key: string): void {
    const sent = this.sent.get(key)
    if (sent === undefined) return
    this.sent.delete(key)
    this.bytes -= sent.bytes
  }
}
