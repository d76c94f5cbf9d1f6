import { concatBytes } from './bytes.ts'
/**
 * Stream framing (the relay mesh, client peers): every frame is a 4-byte big-endian unsigned length followed by
 * that many bytes. Pure code, no I/O, so it is unit-testable on its own.
 */

export const FRAME_HEADER_BYTES = 4

/** A length prefix announced a frame larger than the receiver accepts. */
export class FrameTooLargeError extends Error {
  /** Always `too-large`, as a SteadError would say. */
  readonly reason = 'too-large'
  /** The length the prefix announced. */
  readonly length: number
  /** The largest frame the receiver accepts. */
  readonly max: number
  constructor(
    length: number,
    max: number,
  ) {
    super(`frame of ${length} bytes exceeds the limit of ${max} bytes`)
    this.length = length
    this.max = max
    this.name = 'FrameTooLargeError'
  }
}

/** Writes `frames` (with their length prefixes) into one new buffer. */
export function encodeFrames(frames: readonly Uint8Array[], totalPayload: number): Uint8Array {
  const out = new Uint8Array(totalPayload + FRAME_HEADER_BYTES * frames.length)
  const view = new DataView(out.buffer)
  let off = 0
  for (const f of frames) {
    view.setUint32(off, f.byteLength)
    out.set(f, off + FRAME_HEADER_BYTES)
    off += FRAME_HEADER_BYTES + f.byteLength
  }
  return out
}

/** Frames up to this size get their buffer up front; larger ones only as bytes arrive. */
const PREALLOCATE_BYTES = 1 << 20

/**
 * Incremental decoder for one stream. Emitted frames are fresh copies (they
 * never alias the transport's buffers). `push` throws FrameTooLargeError on an
 * oversized prefix; after that the decoder must be discarded with its stream.
 */
export class FrameDecoder {
  private readonly header = new Uint8Array(FRAME_HEADER_BYTES)
  private headerFill = 0
  /** Body length of the frame being read, or -1 while reading a header. */
  private expected = -1
  private body: Uint8Array | undefined
  private parts: Uint8Array[] = []
  private filled = 0

  private readonly maxFrameBytes: number
  constructor(maxFrameBytes: number) {
    this.maxFrameBytes = maxFrameBytes
  }

  /** True when no partial frame is buffered. */
  get idle(): boolean {
    return this.expected < 0 && this.headerFill === 0
  }

  /** Feeds the next bytes of the stream (one chunk or a list of them); `emit` gets each frame they complete, in order. */
  push(data: Uint8Array | Iterable<Uint8Array>, emit: (frame: Uint8Array) => void): void {
    if (data instanceof Uint8Array) return this.pushChunk(data, emit)
    // A list of chunks (libp2p streams hand over a Uint8ArrayList): each in turn.
    for (const chunk of data) this.pushChunk(chunk, emit)
  }

  private pushChunk(chunk: Uint8Array, emit: (frame: Uint8Array) => void): void {
    let off = 0
    const len = chunk.byteLength
    while (off < len) {
      if (this.expected < 0) {
        if (this.headerFill === 0 && len - off >= FRAME_HEADER_BYTES) {
          this.expected = readU32(chunk, off)
          off += FRAME_HEADER_BYTES
        } else {
          const take = Math.min(FRAME_HEADER_BYTES - this.headerFill, len - off)
          this.header.set(chunk.subarray(off, off + take), this.headerFill)
          this.headerFill += take
          off += take
          if (this.headerFill < FRAME_HEADER_BYTES) return
          this.headerFill = 0
          this.expected = readU32(this.header, 0)
        }
        if (this.expected > this.maxFrameBytes) {
          const n = this.expected
          this.expected = -1
          throw new FrameTooLargeError(n, this.maxFrameBytes)
        }
        if (this.expected === 0) {
          this.expected = -1
          emit(new Uint8Array(0))
        }
        continue
      }
      const avail = len - off
      if (this.filled === 0 && avail >= this.expected) {
        // Whole frame inside this chunk: one copy.
        const end = off + this.expected
        this.expected = -1
        emit(chunk.slice(off, end))
        off = end
        continue
      }
      if (this.filled === 0 && this.expected <= PREALLOCATE_BYTES) this.body = new Uint8Array(this.expected)
      const take = Math.min(this.expected - this.filled, avail)
      if (this.body !== undefined) this.body.set(chunk.subarray(off, off + take), this.filled)
      else this.parts.push(chunk.slice(off, off + take))
      this.filled += take
      off += take
      if (this.filled === this.expected) {
        const frame = this.body ?? concatBytes(...this.parts)
        this.body = undefined
        this.parts = []
        this.filled = 0
        this.expected = -1
        emit(frame)
      }
    }
  }
}

function readU32(buf: Uint8Array, off: number): number {
  return ((buf[off]! << 24) >>> 0) + ((buf[off + 1]! << 16) | (buf[off + 2]! << 8) | buf[off + 3]!)
}

