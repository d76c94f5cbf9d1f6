import { SteadError, type HostClock, type HostTimer } from '@stead/core'
import { Bucket, type Rate } from '../runtime/bucket.ts'

/** Bytes a throttled session may hold received and not yet handled (what its socket delivered before it paused). */
const MAX_BACKLOG_BYTES = 8 * 1024 * 1024

/** What a session's inbound side needs of the session and of the relay's sessions as a whole. */
export interface InboundHost {
  readonly clock: HostClock
  /** The relay-wide rate every session's messages also take from. */
  readonly shared: Bucket
  /** Bytes received and held, over all sessions: told each change. */
  held(deltaBytes: number): void
  /** Whether replies are piling up towards the client: its messages wait until they drain. */
  repliesPiled(): boolean
  /** Whether the session is closed: nothing more is handled. */
  isClosed(): boolean
  /** Handles one message now. */
  handle(data: Uint8Array, isBinary: boolean): void
  /** Stops and restarts reading the socket (TCP pushes back on the sender meanwhile). */
  pause(): void
  resume(): void
  /** A message that cannot even wait: the session answers it with this error. */
  refuse(err: SteadError): void
}

/**
 * A session's rate limits by messages and bytes, its own and the relay's
 * as a whole: over the rate, the session stops reading its socket and
 * handles what it already received as the buckets refill. Nothing is
 * dropped unless a client outruns even that (then `rate-limited`).
 */
export class Inbound {
  private readonly bucket: Bucket
  /** Messages received over the rate, in order; bounded by what the socket had delivered when it was paused. */
  private readonly backlog: Array<{ data: Uint8Array; isBinary: boolean }> = []
  private bytes = 0
  private timer: HostTimer | undefined
  private readonly host: InboundHost

  constructor(rate: Rate, host: InboundHost) {
    this.bucket = new Bucket(rate)
    this.host = host
  }

  receive(data: Uint8Array, isBinary: boolean): void {
    // A client that does not read its replies is not read either: replies would pile up.
    if (this.backlog.length === 0 && !this.host.repliesPiled() && this.admit(data.byteLength) === 0) return this.host.handle(data, isBinary)
    if (this.bytes + data.byteLength > MAX_BACKLOG_BYTES) return this.host.refuse(new SteadError('rate-limited', 'too many messages or bytes; slow down'))
    this.backlog.push({ data, isBinary })
    this.bytes += data.byteLength
    this.host.held(data.byteLength)
    this.host.pause()
    this.timer ??= this.host.clock.setTimer(1, () => this.drain())
  }

  /** Replies drained: what waited for that goes on. */
  wake(): void {
    if (this.backlog.length > 0 && this.timer === undefined) this.timer = this.host.clock.setTimer(0, () => this.drain())
  }

  /** The session closed: what was held goes. */
  close(): void {
    this.timer?.cancel()
    this.timer = undefined
    this.host.held(-this.bytes)
    this.bytes = 0
    this.backlog.length = 0
  }

  /** 0 and the tokens taken when a message of `size` bytes may be handled now, else the ms to wait. */
  private admit(size: number): number {
    const wait = Math.max(this.bucket.wait(size), this.host.shared.wait(size))
    if (wait > 0) return wait
    this.bucket.take(size)
    this.host.shared.take(size)
    return 0
  }

  private drain(): void {
    this.timer = undefined
    // A few at a time, so other sessions and HTTP requests get their turn in between.
    for (let n = 0; n < 32 && this.backlog.length > 0 && !this.host.isClosed(); n++) {
      // Replies are not being read: wait for the socket to drain (wake() goes on).
      if (this.host.repliesPiled()) return
      const next = this.backlog[0] as { data: Uint8Array; isBinary: boolean }
      const wait = this.admit(next.data.byteLength)
      if (wait > 0) {
        this.timer = this.host.clock.setTimer(wait, () => this.drain())
        return
      }
      this.backlog.shift()
      this.bytes -= next.data.byteLength
      this.host.held(-next.data.byteLength)
      this.host.handle(next.data, next.isBinary)
    }
    if (this.host.isClosed()) return
    if (this.backlog.length > 0) this.timer = this.host.clock.setTimer(0, () => this.drain())
    else this.host.resume()
  }
}
