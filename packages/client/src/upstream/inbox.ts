import type { HostClock, HostTimer } from '@stead/core'
import type { ClientRecords } from './persist.ts'
import type { StorageChange } from '../storage/types.ts'

/** How long received envelopes gather before they are stored in one write. */
const INBOX_WRITE_MS = 50

/**
 * Other authors' envelopes a space received and shows before they are
 * ordered, stored in batches (one write per INBOX_WRITE_MS), so a restart
 * shows them again. Those decided before their write are skipped: the
 * commit holds them.
 */
export class ReceivedInbox {
  private writes: StorageChange[] = []
  private timer: HostTimer | undefined
  private readonly o: {
    readonly records: ClientRecords
    readonly clock: HostClock
    /** Whether an envelope is still undecided (else it needs no record). */
    readonly pending: (idHex: string) => boolean
    readonly storageWorks: () => void
    readonly storageFailed: (err: unknown) => void
  }

  constructor(o: ReceivedInbox['o']) {
    this.o = o
  }

  add(idHex: string, frame: Uint8Array): void {
    this.writes.push(this.o.records.inboxPut(idHex, frame))
    this.timer ??= this.o.clock.setTimer(INBOX_WRITE_MS, () => void this.flush())
  }

  /** Stores what gathered now (close calls it). */
  async flush(): Promise<void> {
    this.timer?.cancel()
    this.timer = undefined
    const writes = this.writes
    this.writes = []
    const live = writes.filter((w) => this.o.pending(w.key[2] as string))
    if (live.length === 0) return
    await this.o.records.storage.write(live).then(
      () => this.o.storageWorks(),
      (err: unknown) => this.o.storageFailed(err),
    )
  }
}
