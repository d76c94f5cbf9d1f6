import { ENVELOPE_REF_BYTES, SteadError, asSigned, decode, toHex, type Crypto } from '@stead/core'

/** Early envelope frames a link keeps: more than a relay names (256, or 1 MiB, per session: SENT_EARLY_MAX in the relay's api.ts). */
const EARLY_FRAMES = 512
const EARLY_BYTES = 2 * 1024 * 1024

/**
 * The envelope frames one relay sent early (prospective feed) on one socket,
 * so that a commit naming them by id (the `refs` subscription) can be put
 * back together. Kept the way the relay keeps them (Session.sentEarly in the
 * relay's api.ts): per socket, oldest out first, forgotten once named, and
 * more of them than the relay names; commits are resolved frame by frame as
 * they arrive, so everything the relay sent before a commit is here and
 * nothing it sent after it has pushed anything out yet. Then a correct relay
 * never names a frame this does not hold.
 */
export class EarlyFrames {
  private readonly frames = new Map<string, Uint8Array>()
  private bytes = 0
  private readonly sha256: Crypto['sha256']
  constructor(sha256: Crypto['sha256']) {
    this.sha256 = sha256
  }

  /** An `envelope` message's frame (an undecodable one is left to the space, which marks its relay). */
  keep(frame: Uint8Array): void {
    let idHex: string
    try {
      idHex = toHex(this.sha256(asSigned(decode(frame)).bytes))
    } catch {
      return
    }
    this.forget(idHex)
    this.frames.set(idHex, frame)
    this.bytes += frame.length
    for (const id of this.frames.keys()) {
      if (this.frames.size <= EARLY_FRAMES && this.bytes <= EARLY_BYTES) break
      this.forget(id)
    }
  }

  /**
   * A commit's envelopes with the frames it named by id put back.
   * @throws SteadError('malformed') for an id this relay did not send on this socket.
   */
  resolve(envelopes: readonly Uint8Array[]): Uint8Array[] {
    return envelopes.map((e) => {
      if (e.length !== ENVELOPE_REF_BYTES) return e
      const idHex = toHex(e)
      const frame = this.frames.get(idHex)
      if (!frame) throw new SteadError('malformed', `named envelope ${idHex.slice(0, 12)} in a commit without having sent it on this connection`)
      this.forget(idHex)
      return frame
    })
  }

  clear(): void {
    this.frames.clear()
    this.bytes = 0
  }

  private forget(idHex: string): void {
    const frame = this.frames.get(idHex)
    if (!frame) return
    this.frames.delete(idHex)
    this.bytes -= frame.length
  }
}
