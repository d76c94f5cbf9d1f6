import { createHash } from 'node:crypto'
import { closeSync, existsSync, fstatSync, fsyncSync, openSync, readFileSync, readSync, writeFileSync, writeSync } from 'node:fs'

/**
 * A short append-only log of what a relay must not lose before it speaks
 * (its own blocks, and the blocks they build on), so that it never signs
 * two blocks for one round, also when its process is killed. An append is
 * in the operating system's hands when it returns, which a killed process
 * cannot undo; it reaches the disk with the store's next transaction,
 * which holds the same records. This is how Mysticeti's validators persist
 * before they send (a WAL written to the kernel, synced in the
 * background): the relay speaks at once, and RelayStore bounds how far its
 * blocks may run ahead of the disk, for a restart of the machine (see
 * UNSYNCED_ROUNDS in store.ts). Once the store has every record, the log
 * is dropped and starts over.
 */
export interface Journal {
  /** The records appended and not dropped before this journal was opened (what a crash left), in order; on the disk now. */
  recovered(): Uint8Array[]
  /** Whether the machine restarted since this journal was last open: appends not on the disk then may be gone. */
  readonly rebooted: boolean
  /** Appends one record: a crash of this process no longer loses it once this returns. */
  append(record: Uint8Array): void
  /** Everything appended so far is durable elsewhere: the next append may overwrite it. */
  drop(): void
  close(): Promise<void>
}

/** Record header: body length, sequence number, check (the first 4 bytes of sha256 over the length, number and body). */
const HEADER = 12

/** The file is filled with zeros to this size when created, so appends overwrite allocated blocks. */
const DEFAULT_CAPACITY = 8 * 1024 * 1024

function check(header: Uint8Array, body: Uint8Array): number {
  return createHash('sha256').update(header.subarray(0, 8)).update(body).digest().readUInt32LE(0)
}

/** This boot of the machine (Linux); undefined where the system does not say, which counts as a restart of the machine at every start. */
function bootId(): string | undefined {
  try {
    return readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim()
  } catch {
    return undefined
  }
}

/**
 * A Journal in one file. Records are written at increasing offsets with
 * increasing sequence numbers; after a drop, writing starts again at the
 * start of the file, and reading stops at the first record that is torn,
 * zero or not the next number (older records left behind a newer, shorter
 * run have lower numbers).
 */
export class FileJournal implements Journal {
  private readonly fd: number
  private offset = 0
  private seq = 0
  private readonly found: Uint8Array[] = []
  readonly rebooted: boolean

  constructor(path: string, capacity = DEFAULT_CAPACITY) {
    const fresh = !existsSync(path)
    // The boot it was last opened in, beside it: what it had not synced then may be gone after a restart of the machine.
    const bootFile = `${path}.boot`
    const boot = bootId()
    const lastBoot = existsSync(bootFile) ? readFileSync(bootFile, 'utf8') : undefined
    this.rebooted = !fresh && (boot === undefined || lastBoot !== boot)
    if (boot !== undefined && lastBoot !== boot) writeFileSync(bootFile, boot, { mode: 0o600, flush: true })
    this.fd = openSync(path, fresh ? 'w+' : 'r+', 0o600)
    const size = fstatSync(this.fd).size
    if (!fresh) this.scan(size)
    if (size < capacity) {
      const zeros = Buffer.alloc(Math.min(1024 * 1024, capacity - size))
      for (let at = size; at < capacity; at += zeros.length) writeSync(this.fd, zeros, 0, Math.min(zeros.length, capacity - at), at)
    }
    // What it found may be in the kernel's buffers only (the process was killed, not the machine): on the disk before anything builds on it.
    fsyncSync(this.fd)
  }

  private scan(size: number): void {
    const all = Buffer.alloc(size)
    let read = 0
    while (read < size) read += readSync(this.fd, all, read, size - read, read)
    let at = 0
    while (at + HEADER <= size) {
      const length = all.readUInt32LE(at)
      const seq = all.readUInt32LE(at + 4)
      if (length === 0 || at + HEADER + length > size || (this.found.length > 0 && seq !== this.seq + 1)) break
      const body = all.subarray(at + HEADER, at + HEADER + length)
      if (check(all.subarray(at, at + 8), body) !== all.readUInt32LE(at + 8)) break
      this.found.push(new Uint8Array(body))
      this.seq = seq
      at += HEADER + length
    }
    this.offset = at
  }

  recovered(): Uint8Array[] {
    return this.found
  }

  append(record: Uint8Array): void {
    const buf = Buffer.alloc(HEADER + record.length)
    buf.writeUInt32LE(record.length, 0)
    buf.writeUInt32LE(++this.seq, 4)
    buf.set(record, HEADER)
    buf.writeUInt32LE(check(buf, record), 8)
    writeSync(this.fd, buf, 0, buf.length, this.offset)
    this.offset += buf.length
  }

  drop(): void {
    this.offset = 0
    // If this never reaches the disk, the older records come back at the next open, and putting them in the store again changes nothing.
    writeSync(this.fd, Buffer.alloc(HEADER), 0, HEADER, 0)
  }

  async close(): Promise<void> {
    closeSync(this.fd)
  }
}

/**
 * A Journal in memory (the simulator's): what a process appended survives
 * its being killed; `powerLoss()` leaves only what was on the disk when it
 * was opened. A new MemoryJournal over `survivors()` is the journal a
 * restarted process opens (`rebooted` after a power loss).
 */
export class MemoryJournal implements Journal {
  private readonly kept: Uint8Array[]
  /** How many of `kept` (the first ones) were found at open, on the disk since. */
  private onDisk: number
  private readonly atOpen: Uint8Array[]
  readonly rebooted: boolean

  constructor(survivors: readonly Uint8Array[] = [], rebooted = false) {
    this.kept = [...survivors]
    this.onDisk = this.kept.length
    this.atOpen = [...survivors]
    this.rebooted = rebooted
  }

  recovered(): Uint8Array[] {
    return this.atOpen
  }

  append(record: Uint8Array): void {
    this.kept.push(record)
  }

  drop(): void {
    this.kept.splice(0)
    this.onDisk = 0
  }

  /** What a process started now finds. */
  survivors(): Uint8Array[] {
    return [...this.kept]
  }

  /** The machine lost power: appends the kernel had not written back are gone (all of them, at worst). */
  powerLoss(): void {
    this.kept.splice(this.onDisk)
  }

  async close(): Promise<void> {}
}
