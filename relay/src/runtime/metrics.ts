import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client'
import { RELAY_VERSION } from '../process/version.ts'
import { EnvelopeSteps } from './envelope-steps.ts'

/** What the relay reports at each scrape; read when Prometheus asks, never kept up to date in between. */
export interface MetricsSnapshot {
  readonly ready: boolean
  /** Every other relay by its cluster-file name, and whether it is connected now. */
  readonly peers: ReadonlyArray<{ readonly name: string; readonly connected: boolean }>
  readonly clusterRound: number
  readonly roundsBehind: number
  /** Bytes waiting in each queue: envelopes for a block, client sends and receives, the mesh towards peers. */
  readonly queuedBytes: Readonly<Record<string, number>>
  /** The memory budget's use by part, and its size. */
  readonly memoryUsed: Readonly<Record<string, number>>
  readonly memoryBudget: number
  readonly clientKeys: number
  /** Spaces this relay holds, and how many of them have their replica in memory now. */
  readonly spaces: { readonly held: number; readonly resident: number }
  readonly lastCommitAt: number | null
  /** The epoch this relay runs, the proposals for the next committee, and whether a change is decided (the epoch is ending). */
  readonly epoch: { readonly epoch: number; readonly proposals: number; readonly decided: boolean }
}

/**
 * The process's and runtime's metrics, collected once per process: their
 * collectors (a GC observer, an event-loop delay monitor) are never taken
 * down, so one per relay run would keep every relay a process ever ran (one
 * per epoch) alive with them.
 */
let processRegistry: Registry | undefined

function processMetrics(): Registry {
  if (!processRegistry) {
    processRegistry = new Registry()
    // The lag monitor samples the event loop on a timer: at 10 ms it woke an idle relay 100
    // times a second (0.63-0.80% of a core, 0.13-0.20% at 100 ms). A stall longer than a tick
    // still shows in its histogram.
    collectDefaultMetrics({ register: processRegistry, eventLoopMonitoringPrecision: 100 })
  }
  return processRegistry
}

/** The relay's Prometheus metrics, one registry per relay so several relays can share a process in tests. */
export class Metrics {
  readonly registry = new Registry()
  private source: (() => MetricsSnapshot) | undefined
  /** One snapshot serves every gauge of a scrape. */
  private cached: { at: number; snapshot: MetricsSnapshot } | undefined

  private withProcess = false
  /** Where client envelopes' waits for their order go at the relay they were submitted to (histograms by whether they carry safe updates). */
  readonly steps: EnvelopeSteps

  /** `now`: the relay's clock, in ms (what the steps are timed on). */
  constructor(relay: string, now: () => number) {
    this.info.set({ relay, version: RELAY_VERSION }, 1)
    this.registerScraped()
    const buckets = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5]
    const proposed = new Histogram({
      name: 'stead_envelope_proposed_seconds',
      help: 'From accepting a client envelope to this relay\'s own block that carries it (queue and proposal wait), by whether it carries safe updates',
      labelNames: ['safe'],
      buckets,
      registers: [this.registry],
    })
    const ordered = new Histogram({
      name: 'stead_envelope_ordered_seconds',
      help: 'From this relay\'s block carrying a client envelope to the commit that orders it, by whether it carries safe updates',
      labelNames: ['safe'],
      buckets,
      registers: [this.registry],
    })
    const rounds = new Histogram({
      name: 'stead_envelope_order_rounds',
      help: 'Rounds from this relay\'s block carrying a client envelope to the leader round of the commit that orders it (0: the leader\'s block carried it too), by whether it carries safe updates',
      labelNames: ['safe'],
      buckets: [1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 50],
      registers: [this.registry],
    })
    this.steps = new EnvelopeSteps(now, {
      proposed: (seconds, safe) => proposed.observe({ safe: String(safe) }, seconds),
      ordered: (seconds, n, safe) => {
        ordered.observe({ safe: String(safe) }, seconds)
        rounds.observe({ safe: String(safe) }, n)
      },
    })
  }

  /**
   * Adds the process and runtime (CPU, memory, heap, event-loop lag, GC
   * pauses, handles): what the process serving /metrics reports, not a
   * relay run inside another program (the simulator runs thousands).
   */
  includeProcess(): void {
    this.withProcess = true
    processMetrics()
  }

  /** The exposition text of /metrics: the relay's, then the process's if included. */
  async text(): Promise<string> {
    const relay = await this.registry.metrics()
    return this.withProcess ? `${relay}\n${await processMetrics().metrics()}` : relay
  }

  /** Gives the scrape-time gauges their source. */
  observe(source: () => MetricsSnapshot): void {
    this.source = source
  }

  private snapshot(): MetricsSnapshot | undefined {
    if (!this.source) return undefined
    const now = Date.now()
    if (!this.cached || now - this.cached.at > 100) this.cached = { at: now, snapshot: this.source() }
    return this.cached.snapshot
  }

  readonly round = new Gauge({ name: 'stead_round', help: 'Current consensus round', registers: [this.registry] })
  readonly committedRound = new Gauge({ name: 'stead_committed_round', help: 'Round of the last committed leader', registers: [this.registry] })
  readonly commits = new Counter({ name: 'stead_commits_total', help: 'Leaders committed', registers: [this.registry] })
  readonly snapshots = new Counter({ name: 'stead_snapshots_total', help: 'Snapshots of the spaces\' audit state written (a restart replays the batches since the latest)', registers: [this.registry] })
  readonly blocks = new Counter({ name: 'stead_blocks_total', help: 'Peers\' blocks accepted into the DAG', registers: [this.registry] })
  readonly envelopesAccepted = new Counter({ name: 'stead_envelopes_accepted_total', help: 'Client envelopes accepted for ordering', registers: [this.registry] })
  /** Chrono's verdicts: the audit's on committed clocks, and this relay's validators' before any order. */
  readonly clocks = {
    committed: new Counter({ name: 'stead_committed_clocks_total', help: 'Envelopes committed, by whether the audit could verify their clock (unverified: a dep it never ordered or no longer keeps)', labelNames: ['verified'], registers: [this.registry] }),
    votes: new Counter({ name: 'stead_clock_votes_total', help: 'This relay\'s validators on envelopes before any order: voted (signed the clock), refused (a validator said no), unverifiable (inputs it cannot vouch for), expired (inputs never came); and certified (a validator certificate came together here)', labelNames: ['result'], registers: [this.registry] }),
  }
  readonly rejected = new Counter({ name: 'stead_rejected_total', help: 'Inputs rejected, by reason and source', labelNames: ['reason', 'source'], registers: [this.registry] })
  readonly meshThrottled = new Counter({ name: 'stead_mesh_throttled_total', help: 'Mesh frames and requests dropped because a peer was over its budget for their kind (each also counts in stead_rejected_total{reason="rate-limited",source="mesh"})', labelNames: ['peer', 'kind'], registers: [this.registry] })
  readonly presence = new Counter({ name: 'stead_presence_messages_total', help: 'Presence messages taken from clients, passed on to others, and not passed on (a recipient over its byte budget or behind)', labelNames: ['result'], registers: [this.registry] })
  readonly pacedDeltas = new Counter({ name: 'stead_paced_deltas_total', help: 'Deltas sent to clients that pace a space at a freshness bound (BENDY\'s live stream), and paced subscriptions handed back to the commit feed', labelNames: ['result'], registers: [this.registry] })
  readonly prospectiveSkipped = new Counter({ name: 'stead_prospective_skipped_total', help: 'Envelopes not pushed to a client that was behind (it gets them with the commit)', registers: [this.registry] })
  readonly clients = new Gauge({ name: 'stead_connected_clients', help: 'Open client sessions', registers: [this.registry] })
  readonly commitLatency = new Histogram({
    name: 'stead_commit_latency_seconds',
    help: 'From a client submit to the attestation that decides it',
    buckets: [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [this.registry],
  })

  private readonly info = new Gauge({ name: 'stead_relay_info', help: 'This relay: its name in the cluster file and the stead-relay version', labelNames: ['relay', 'version'], registers: [this.registry] })

  // ---- read at scrape time ----

  private scraped<L extends string>(name: string, help: string, labelNames: readonly L[], set: (g: Gauge<L>, s: MetricsSnapshot) => void): void {
    const snapshot = () => this.snapshot()
    new Gauge<L>({
      name,
      help,
      labelNames,
      registers: [this.registry],
      // prom-client calls this with the gauge as `this`, at every scrape.
      collect() {
        const s = snapshot()
        if (s) set(this, s)
      },
    })
  }

  /** The gauges read at scrape time from the snapshot (the registry holds them). */
  private registerScraped(): void {
    this.scraped('stead_ready', '1 when GET /ready answers 200: connected to 2f peers, caught up and committing', [], (g, s) => g.set(s.ready ? 1 : 0))
    this.scraped('stead_peers_connected', 'Other relays this one is connected to', [], (g, s) => g.set(s.peers.filter((p) => p.connected).length))
    this.scraped('stead_peer_connected', 'Whether this relay is connected to a peer (named as in the cluster file)', ['peer'], (g, s) => {
      for (const p of s.peers) g.set({ peer: p.name }, p.connected ? 1 : 0)
    })
    this.scraped('stead_cluster_round', 'The (f+1)-th highest round relays signed blocks for, as this relay received them', [], (g, s) => g.set(s.clusterRound))
    this.scraped('stead_rounds_behind', "Rounds this relay is behind the cluster round", [], (g, s) => g.set(s.roundsBehind))
    this.scraped('stead_queued_bytes', 'Bytes waiting, by queue: envelopes for a block, client sends and receives, mesh towards peers', ['queue'], (g, s) => {
      for (const [queue, bytes] of Object.entries(s.queuedBytes)) g.set({ queue }, bytes)
    })
    this.scraped('stead_memory_used_bytes', "The memory budget's use, by part", ['part'], (g, s) => {
      for (const [part, bytes] of Object.entries(s.memoryUsed)) g.set({ part }, bytes)
    })
    this.scraped('stead_memory_budget_bytes', 'The memory budget (--memory-budget-mb)', [], (g, s) => g.set(s.memoryBudget))
    this.scraped('stead_spaces', 'Spaces this relay holds (held), and those with their replica in memory now (resident; the rest are read from the store when used)', ['state'], (g, s) => {
      g.set({ state: 'held' }, s.spaces.held)
      g.set({ state: 'resident' }, s.spaces.resident)
    })
    this.scraped('stead_client_keys', 'Distinct client keys with an authenticated session', [], (g, s) => g.set(s.clientKeys))
    this.scraped('stead_last_commit_timestamp_seconds', 'When this relay last committed (0: not yet)', [], (g, s) => g.set((s.lastCommitAt ?? 0) / 1000))
    this.scraped('stead_epoch', 'The epoch this relay runs: 0 for the cluster file\'s committee, one more at each committee change', [], (g, s) => g.set(s.epoch.epoch))
    this.scraped('stead_committee_proposals', 'Proposals for the next committee that current relays back and that are not decided', [], (g, s) => g.set(s.epoch.proposals))
    this.scraped('stead_committee_change_decided', '1 while a decided committee change ends this epoch (the relays gather its certificate, then move to the next)', [], (g, s) => g.set(s.epoch.decided ? 1 : 0))
  }
}
