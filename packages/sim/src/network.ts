import type { Rng } from './rng.ts'

/** What the network puts on the event queue: a frame arriving, a connection opening. `epoch`: the receiving process's, void once it crashes. */
export type NetEvent =
  | { kind: 'deliver'; from: number; to: number; epoch: number; frame: Uint8Array }
  | { kind: 'connect'; node: number; epoch: number; peer: number }

/** What the network needs of a relay's machine: whether it is up, its process, and the frames it holds for peers it cannot reach. */
export interface NetHost {
  readonly id: number
  readonly up: boolean
  readonly epoch: number
  /** Frames for each peer sent while it was unreachable, oldest first: sent once a connection to it opens (see transmit). In the process's memory: a crash clears it. */
  readonly held: Map<number, { frames: Uint8Array[]; bytes: number }>
}

/** A relay's outbound queue per unreachable peer, as relay/src/mesh/libp2p.ts keeps (smaller here: runs are short). */
const HELD_FRAMES = 4096
const HELD_BYTES = 16 * 1024 * 1024
/** What peers hold for a relay on a long outage: a real relay's queue overflows over hours; here over seconds. */
const HELD_FRAMES_LONG_OUTAGE = 64

/**
 * The simulated network between relays: seeded delays, loss (as
 * retransmission delay), a partition, and the bounded queues a relay keeps
 * for peers it cannot reach, replayed once a connection opens. It owns the
 * network's generator, so that its draws stay in the order they always were,
 * and counts the frames it replays and drops.
 */
export class SimNetwork {
  /** The relays cut off from the others, while a partition lasts. */
  private partitioned: ReadonlySet<number> | null = null
  /** Frames relays held for an unreachable peer and sent once it was back; and those their bounded queues dropped. */
  replayed = 0
  droppedHeld = 0

  private readonly rng: Rng
  /** Probability a message is lost once and retransmitted. */
  private readonly loss: number
  private readonly hosts: readonly NetHost[]
  private readonly now: () => number
  /** Puts a network event on the run's queue. */
  private readonly post: (at: number, ev: NetEvent) => void
  /** Whether a relay is the victim of a long outage (its peers hold fewer frames for it). */
  private readonly longOutageVictim: (relay: number) => boolean

  constructor(rng: Rng, loss: number, hosts: readonly NetHost[], now: () => number, post: (at: number, ev: NetEvent) => void, longOutageVictim: (relay: number) => boolean) {
    this.rng = rng
    this.loss = loss
    this.hosts = hosts
    this.now = now
    this.post = post
    this.longOutageVictim = longOutageVictim
  }

  /** Starts (a set) or heals (null) a partition. */
  partition(group: ReadonlySet<number> | null): void {
    this.partitioned = group
  }

  cut(a: number, b: number): boolean {
    return this.partitioned !== null && this.partitioned.has(a) !== this.partitioned.has(b)
  }

  /** Two relays' connections (one each way) open after a network delay; each tells its relay. */
  connect(a: NetHost, b: NetHost): void {
    if (this.cut(a.id, b.id)) return
    this.post(this.now() + this.delay(), { kind: 'connect', node: a.id, epoch: a.epoch, peer: b.id })
    this.post(this.now() + this.delay(), { kind: 'connect', node: b.id, epoch: b.epoch, peer: a.id })
  }

  /** Puts a frame on its way to a peer; false when it is lost at once (a partition, a peer down). */
  transmit(from: number, to: number, frame: Uint8Array): boolean {
    const receiver = this.hosts[to] as NetHost
    // A peer cut off by a partition, or down: the frame waits in the sender's bounded queue for
    // that peer (oldest dropped first) and goes out once a connection to it opens, as the real
    // mesh does. What was already on its way to a relay that crashes is lost with the connection.
    if (this.cut(from, to) || !receiver.up) {
      this.hold(this.hosts[from] as NetHost, to, frame)
      return true
    }
    this.post(this.now() + this.delay(), { kind: 'deliver', from, to, epoch: receiver.epoch, frame })
    return true
  }

  private hold(sender: NetHost, to: number, frame: Uint8Array): void {
    let q = sender.held.get(to)
    if (!q) sender.held.set(to, (q = { frames: [], bytes: 0 }))
    q.frames.push(frame)
    q.bytes += frame.length
    const cap = this.longOutageVictim(to) ? HELD_FRAMES_LONG_OUTAGE : HELD_FRAMES
    while (q.frames.length > cap || q.bytes > HELD_BYTES) {
      q.bytes -= (q.frames.shift() as Uint8Array).length
      this.droppedHeld++
    }
  }

  /** A connection to `peer` opened: what `host` held for it goes out, in order. */
  sendHeld(host: NetHost, peer: number): void {
    const q = host.held.get(peer)
    if (!q || this.cut(host.id, peer) || !(this.hosts[peer] as NetHost).up) return
    host.held.delete(peer)
    for (const frame of q.frames) this.transmit(host.id, peer, frame)
    this.replayed += q.frames.length
  }

  private delay(): number {
    let d = 1 + this.rng.exp(8)
    // A lost message is retransmitted by the link after a timeout, perhaps more than once.
    while (this.rng.chance(this.loss)) d += 100 + this.rng.exp(50)
    return d
  }
}
