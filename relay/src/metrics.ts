import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client'

/** The relay's Prometheus metrics, one registry per relay so several relays can share a process in tests. */
export class Metrics {
  readonly registry = new Registry()

  constructor() {
    // Process and runtime: CPU, memory, heap, event-loop lag, GC pauses, handles.
    collectDefaultMetrics({ register: this.registry, eventLoopMonitoringPrecision: 10 })
  }

  readonly round = new Gauge({ name: 'stead_round', help: 'Current consensus round', registers: [this.registry] })
  readonly committedRound = new Gauge({ name: 'stead_committed_round', help: 'Round of the last committed anchor', registers: [this.registry] })
  readonly commits = new Counter({ name: 'stead_commits_total', help: 'Anchors committed', registers: [this.registry] })
  readonly certificates = new Counter({ name: 'stead_certificates_total', help: 'Certificates added to the DAG', registers: [this.registry] })
  readonly envelopesAccepted = new Counter({ name: 'stead_envelopes_accepted_total', help: 'Client envelopes accepted for ordering', registers: [this.registry] })
  readonly rejected = new Counter({ name: 'stead_rejected_total', help: 'Inputs rejected, by reason and source', labelNames: ['reason', 'source'], registers: [this.registry] })
  readonly prospectiveSkipped = new Counter({ name: 'stead_prospective_skipped_total', help: 'Certified envelopes not pushed to a client that was behind (it gets them with the commit)', registers: [this.registry] })
  readonly clients = new Gauge({ name: 'stead_connected_clients', help: 'Open client sessions', registers: [this.registry] })
  readonly commitLatency = new Histogram({
    name: 'stead_commit_latency_seconds',
    help: 'From a client submit to the attestation that decides it',
    buckets: [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [this.registry],
  })
}
