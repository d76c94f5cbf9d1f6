import { createHash } from 'node:crypto'
import { closeSync, existsSync, fstatSync, fsyncSync, openSync, readSync, writeSync } from 'node:fs'

/**
 * A short append-only log of what a relay must not lose before it speaks
 * (its own blocks, and the peers' blocks they build on), so that it never
 * signs two blocks for one round, also when its process is killed: an
 * append is in the operating system's hands when it returns, which a
 * killed process cannot undo. It reaches the disk with the store's next
 * transaction, which holds the same records and is synced; once the store
 * has every record, the log is dropped and starts over. Mysticeti's
 * validators persist the same way before they send (a WAL written to the
 * kernel, synced in the background), and Sui's (RocksDB writes without a
 * sync): a power loss in the few milliseconds before the sync can make a
 * relay sign a second block for a round after it reboots, which the
 * protocol bears as one of its f faulty relays.
 */
export interface Journal {
  /** The records appended and not dropped before this journal was opened (what a crash left), in order. */
  recovered(): Uint8Array[]
  /** Appends one record: once this returns, a crash of this process no longer loses it. */
  append(record: Uint8Array): void
  /** Everything appended so far is durable elsewhere: the next append may overwrite it. */
  drop(): void
  /** Bytes appended since the last drop (or found at open). */
  readonly size: number
  close(): Promise<void>
}

/** Record header: body length, sequence number, check (the first 4 bytes of sha256 over the length, number and body). */
const HEADER = 12

/**
 * The file is filled with zeros to this size when created, so appends
 * overwrite blocks the file already has; a relay keeps its journal within
 * it (see RelayStore.journalFull).
 */
export const JOURNAL_CAPACITY = 8 * 1024 * 1024

function check(header: Uint8Array, body: Uint8Array): number {
  return createHash('sha256').update(header.subarray(0, 8)).update(body).digest().readUInt32LE(0)
}

/**
 * A Journal in one file. Records are written at increasing offsets with
 * increasing sequence numbers; a drop writes an empty record carrying the
 * last number at the start of the file, and writing starts again after it.
 * Reading stops at the first record that is torn, empty or not the next
 * number (older records left behind a newer, shorter run have lower
 * numbers), so numbers never repeat, across reopens too.
 */
export class FileJournal implements Journal {
  private readonly fd: number
  private offset = 0
  /** Bytes of records since the last drop's marker. */
  private bytes = 0
  private seq = 0
  private readonly found: Uint8Array[] = []

  constructor(path: string, capacity = JOURNAL_CAPACITY) {
    const fresh = !existsSync(path)
    this.fd = openSync(path, fresh ? 'w+' : 'r+', 0o600)
    const size = fstatSync(this.fd).size
    if (!fresh) this.scan(size)
    if (size < capacity) {
      const zeros = Buffer.alloc(Math.min(1024 * 1024, capacity - size))
      for (let at = size; at < capacity; at += zeros.length) this.writeAt(zeros.subarray(0, Math.min(zeros.length, capacity - at)), at)
    }
    // What it found may be in the kernel's buffers only (the process was killed, not the machine): on the disk before anything builds on it.
    fsyncSync(this.fd)
  }

  private scan(size: number): void {
    const all = Buffer.alloc(size)
    let read = 0
    while (read < size) read += readSync(this.fd, all, read, size - read, read)
    let at = 0
    // A drop's marker (an empty record with the number to go on from): what follows must carry the next numbers.
    const marked = size >= HEADER && all.readUInt32LE(0) === 0 && all.readUInt32LE(4) > 0
    if (marked) {
      this.seq = all.readUInt32LE(4)
      at = HEADER
    }
    while (at + HEADER <= size) {
      const length = all.readUInt32LE(at)
      const seq = all.readUInt32LE(at + 4)
      const next = marked || this.found.length > 0 ? seq === this.seq + 1 : seq > 0
      if (length === 0 || at + HEADER + length > size || !next) break
      const body = all.subarray(at + HEADER, at + HEADER + length)
      if (check(all.subarray(at, at + 8), body) !== all.readUInt32LE(at + 8)) break
      this.found.push(new Uint8Array(body))
      this.seq = seq
      at += HEADER + length
      this.bytes += HEADER + length
    }
    this.offset = at
  }

  private writeAt(buf: Uint8Array, at: number): void {
    let done = 0
    while (done < buf.length) {
      const n = writeSync(this.fd, buf, done, buf.length - done, at + done)
      if (n <= 0) throw new Error(`journal: wrote ${done} of ${buf.length} bytes`)
      done += n
    }
  }

  recovered(): Uint8Array[] {
    return this.found
  }

  get size(): number {
    return this.bytes
  }

  append(record: Uint8Array): void {
    const buf = Buffer.alloc(HEADER + record.length)
    buf.writeUInt32LE(record.length, 0)
    buf.writeUInt32LE(++this.seq, 4)
    buf.set(record, HEADER)
    buf.writeUInt32LE(check(buf, record), 8)
    this.writeAt(buf, this.offset)
    this.offset += buf.length
    this.bytes += buf.length
  }

  drop(): void {
    const marker = Buffer.alloc(HEADER)
    marker.writeUInt32LE(this.seq, 4)
    // Not synced: if the disk never gets it, the older records come back at the next open, and putting them in the store again changes nothing.
    this.writeAt(marker, 0)
    this.offset = HEADER
    this.bytes = 0
  }

  async close(): Promise<void> {
    closeSync(this.fd)
  }
}

/**
 * A Journal in memory (the simulator's): what its process appended
 * survives the process being killed. A restarted process opens a new
 * MemoryJournal over `survivors()`.
 */
export class MemoryJournal implements Journal {
  private readonly kept: Uint8Array[]
  private readonly atOpen: Uint8Array[]
  /** As FileJournal counts them: each record's header and body. */
  private bytes: number

  constructor(survivors: readonly Uint8Array[] = []) {
    this.kept = [...survivors]
    this.atOpen = [...survivors]
    this.bytes = survivors.reduce((n, r) => n + HEADER + r.length, 0)
  }

  recovered(): Uint8Array[] {
    return this.atOpen
  }

  get size(): number {
    return this.bytes
  }

  append(record: Uint8Array): void {
    this.kept.push(record)
    this.bytes += HEADER + record.length
  }

  drop(): void {
    this.kept.splice(0)
    this.bytes = 0
  }

  /** What a process started now finds. */
  survivors(): Uint8Array[] {
    return [...this.kept]
  }

  async close(): Promise<void> {}
}
