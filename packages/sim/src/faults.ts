import type { Rng } from './rng.ts'
import { trace } from './trace.ts'

/** What the fault schedule asks of the simulator: it decides when, the simulator carries each fault out on its machines and network. */
export interface FaultActions {
  now(): number
  /** Runs `action` at simulated time `time` (a chaos event on the run's queue). */
  at(time: number, action: () => void | Promise<void>): void
  crash(relay: number, midWrite?: boolean): void
  restart(relay: number): Promise<void>
  /** The round a relay reached. */
  round(relay: number): number
  /** Whether the correct peers of `relay` that are up (at least one) all pruned their blocks of `round` and before. */
  prunedThrough(relay: number, round: number): boolean
  partition(group: ReadonlySet<number>): void
  heal(group: ReadonlySet<number>): void
}

export interface FaultOptions {
  readonly relays: number
  readonly byzantine: number
  readonly crash: number
  readonly partition: boolean
  readonly longOutage?: boolean
  readonly restartDelayMs?: number
}

/**
 * When crashes, restarts, a long outage and a partition strike, chosen by
 * the seed while clients are still submitting, and what they cost (writes
 * lost, restarts from a snapshot: counted by the simulator as it carries
 * them out, reported from here). It draws from the run's main generator in
 * the order the simulator always did, so schedules stay the seed's.
 */
export class FaultSchedule {
  /** The relay of a long outage (SimOptions.longOutage) and the round it had reached when it went down. */
  private longOutage: { victim: number; lastRound: number } | undefined
  /** Writes crashes lost: issued, not yet on disk. */
  private lost = 0
  /** Restarts that found a snapshot on their disk. */
  private fromSnapshot = 0

  private readonly options: FaultOptions
  private readonly f: number
  /** The run's simulated span: faults strike at fractions of it. */
  private readonly duration: number
  /** How far behind a long outage's peers must prune before its victim restarts. */
  private readonly gcDepth: number
  private readonly actions: FaultActions

  constructor(options: FaultOptions, f: number, duration: number, gcDepth: number, actions: FaultActions) {
    this.options = options
    this.f = f
    this.duration = duration
    this.gcDepth = gcDepth
    this.actions = actions
  }

  /** A crash carried out: the writes its disk had not finished are lost. */
  crashed(unwrittenWrites: number): void {
    this.lost += unwrittenWrites
  }

  /** A restart carried out (`fromSnapshot`: its disk held a snapshot). */
  restarted(fromSnapshot: boolean): void {
    if (fromSnapshot) this.fromSnapshot++
  }

  get lostWrites(): number {
    return this.lost
  }

  get restartsFromSnapshot(): number {
    return this.fromSnapshot
  }

  /** Whether `relay` is the long outage's victim (its peers hold fewer frames for it). */
  isLongOutageVictim(relay: number): boolean {
    return relay === this.longOutage?.victim
  }

  /** Puts every fault of the run on the queue. */
  plan(rng: Rng): void {
    const { crash, partition, relays, byzantine } = this.options
    const act = this.actions
    const at = (fraction: number, action: () => void | Promise<void>) => act.at(this.duration * fraction, action)
    const correct = Array.from({ length: relays - byzantine }, (_, i) => i)
    // At most f relays are faulty at once: crashes are staggered when Byzantine relays already use the budget.
    const budget = Math.max(1, this.f - byzantine)
    for (let i = 0; i < crash; i++) {
      const victim = correct[(rng.int(0, correct.length - 1) + i) % correct.length] as number
      if (i === 0 && this.options.longOutage) {
        this.longOutage = { victim, lastRound: 0 }
        at(0.05, () => {
          this.longOutage = { victim, lastRound: act.round(victim) }
          act.crash(victim)
          this.awaitPruned(victim)
        })
        continue
      }
      const slot = Math.floor(i / budget)
      const span = 0.4 / Math.ceil(crash / budget)
      // Half the crashes wait for a write in flight, so that they lose it.
      const midWrite = rng.chance(0.5)
      at(0.1 + slot * span + rng.next() * span * 0.3, () => act.crash(victim, midWrite))
      if (this.options.restartDelayMs === undefined) at(0.1 + slot * span + span * 0.8, () => act.restart(victim))
    }
    if (partition) {
      const size = rng.int(1, Math.max(1, Math.floor(relays / 2)))
      const group = new Set<number>()
      while (group.size < size) group.add(rng.int(0, relays - 1))
      at(0.2, () => {
        trace(`t=${act.now().toFixed(0)} partition ${[...group].join(',')}`)
        act.partition(group)
      })
      at(0.45, () => {
        trace(`t=${act.now().toFixed(0)} heal`)
        act.heal(group)
      })
    }
  }

  /** Restarts a long-outage victim once every correct peer that is up pruned past the round it stopped at, or at 55% of the run (while there is work). */
  private awaitPruned(victim: number): void {
    const act = this.actions
    const last = this.longOutage?.lastRound ?? 0
    if (act.prunedThrough(victim, last + this.gcDepth) || act.now() >= this.duration * 0.55) {
      act.at(act.now() + 1, () => act.restart(victim))
      return
    }
    act.at(act.now() + 250, () => this.awaitPruned(victim))
  }
}
