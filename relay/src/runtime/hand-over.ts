import { encodeEpochChange, type EpochCertificate, type EpochChange, type HostClock, type HostTimer } from '@stead/core'
import { epochOf, type Committee, type Message, type SyncCrypto } from '../consensus/index.ts'

/** How often a relay says its vote again while the certificate is not complete (peers may have missed it, or restarted). */
const REPEAT_MS = 1000

export interface HandOverOptions {
  /** The committee of the epoch that ends. */
  readonly committee: Committee
  readonly me: number
  readonly secretKey: Uint8Array
  readonly crypto: SyncCrypto
  readonly clock: HostClock
  readonly send: (to: number, message: Message) => void
  readonly broadcast: (message: Message) => void
  /** 2f+1 of the committee signed the change: the certificate, for the relay to keep and move on with. */
  readonly certified: (cert: EpochCertificate, change: EpochChange) => void
}

/**
 * The end of an epoch, as one relay of its committee lives it (issue 49):
 * once the audit decided a committee change and the epoch's last commit
 * is durable, the relay signs the epoch change (the next epoch, its start
 * round, the digest of the boundary checkpoint, the next committee) and
 * gathers its peers' signatures over the same bytes. Every correct relay
 * computes the same change from the same commits, so a vote is a bare
 * signature; 2f+1 valid ones make the certificate that clients and
 * joining relays follow (see @stead/core's epoch.ts). Votes that come
 * before this relay reached the boundary wait, one per peer; a peer whose
 * signature does not verify is not heard again on this change.
 */
export class EpochHandOver {
  private readonly o: HandOverOptions
  private ending: { readonly change: EpochChange; readonly bytes: Uint8Array } | undefined
  /** Verified signatures by relay index, this relay's own included. */
  private readonly votes = new Map<number, Uint8Array>()
  /** Signatures that came before the change was known here: checked once it is. */
  private readonly early = new Map<number, Uint8Array>()
  /** Peers whose signature did not verify. */
  private readonly refused = new Set<number>()
  private timer: HostTimer | undefined
  private done = false

  constructor(options: HandOverOptions) {
    this.o = options
  }

  /** The change this relay signed, once the epoch reached its end here. */
  get change(): EpochChange | undefined {
    return this.ending?.change
  }

  /** How many of the committee signed the change so far (this relay included). */
  get signers(): number {
    return this.votes.size
  }

  /** The epoch ended here: sign the change, say so, and check the votes that waited. */
  begin(change: EpochChange): void {
    if (this.ending) return
    const { crypto, secretKey, me } = this.o
    const bytes = encodeEpochChange(change)
    this.ending = { change, bytes }
    this.votes.set(me, crypto.sign(secretKey, bytes))
    for (const [from, sig] of this.early) this.take(from, sig)
    this.early.clear()
    this.repeat()
    this.check()
  }

  /** A peer's vote (an `epoch-vote` message). */
  onVote(from: number, epoch: number, sig: Uint8Array): void {
    const n = this.o.committee.keys.length
    if (epoch !== epochOf(this.o.committee) + 1 || from === this.o.me || from < 0 || from >= n || this.refused.has(from)) return
    if (!this.ending) {
      this.early.set(from, sig)
      return
    }
    const known = this.votes.has(from)
    this.take(from, sig)
    // A peer that votes may have come back after this relay said its own: it hears it again.
    if (!known && this.votes.has(from)) this.o.send(from, this.myVote())
    this.check()
  }

  stop(): void {
    this.timer?.cancel()
    this.timer = undefined
  }

  private take(from: number, sig: Uint8Array): void {
    const ending = this.ending
    if (!ending || this.votes.has(from)) return
    const key = this.o.committee.keys[from] as Uint8Array
    if (this.o.crypto.verify(key, ending.bytes, sig)) this.votes.set(from, sig)
    else this.refused.add(from)
  }

  private myVote(): Message {
    return { kind: 'epoch-vote', epoch: (this.ending as { change: EpochChange }).change.epoch, sig: this.votes.get(this.o.me) as Uint8Array }
  }

  private repeat(): void {
    if (this.done) return
    this.o.broadcast(this.myVote())
    this.timer = this.o.clock.setTimer(REPEAT_MS, () => this.repeat())
  }

  private check(): void {
    const ending = this.ending
    if (this.done || !ending || this.votes.size < 2 * this.o.committee.f + 1) return
    this.done = true
    this.stop()
    const signatures = [...this.votes].sort(([a], [b]) => a - b).map(([relay, sig]) => ({ relay, sig }))
    this.o.certified({ change: ending.bytes, signatures }, ending.change)
  }
}
