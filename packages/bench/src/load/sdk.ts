import { createClient, memoryStorage, type ClientOptions, type Space, type SteadClient } from '@stead/client'
import { nodeCrypto } from '@stead/core/node'
import WebSocket from 'ws'
import type { ClientFactoryOptions, LoadClient, Outcome } from './types.ts'

/**
 * A load client backed by the SDK (`@stead/client`), with in-memory storage
 * (so the clients' CPU goes to the protocol, not to LMDB) and the `ws`
 * WebSocket (whose frames the benchmark counts).
 *
 * Per system: `reliable` uses the SDK as designed (regular updates resolve
 * when stored, safe ones at the attested commit); `consensus-first` makes
 * every update safe and reads stable values; `plain` sends everything as
 * regular updates (there is no order to wait for) and never waits for
 * decisions, which plain relays do not make.
 */
const BOUNDED = { min: 0, initial: 1_000_000 }

class SdkLoadClient implements LoadClient {
  private readonly errorCounts: Record<string, number> = {}

  private readonly o: ClientFactoryOptions
  private readonly owner: SteadClient
  private readonly client: Space
  constructor(
    o: ClientFactoryOptions,
    owner: SteadClient,
    client: Space,
  ) {
    this.o = o
    this.owner = owner
    this.client = client
    client.onError((e) => this.count(e.reason))
  }

  get index(): number {
    return this.o.index
  }

  private count(reason: string): void {
    this.errorCounts[reason] = (this.errorCounts[reason] ?? 0) + 1
  }

  private get stableReads(): boolean {
    return this.o.system === 'consensus-first'
  }

  readCounter(key: string): number {
    const c = this.client.counter(key, { min: 0 })
    return this.stableReads ? c.stable : c.value
  }

  readSet(key: string): readonly unknown[] {
    const s = this.client.set<string>(key)
    return this.stableReads ? s.stable : s.value
  }

  readBounded(key: string): number {
    const b = this.client.boundedCounter(key, BOUNDED)
    return this.stableReads ? b.stable : b.value
  }

  boundedAdd(key: string, amount: number, safe: boolean): Promise<Outcome> {
    const b = this.client.boundedCounter(key, BOUNDED)
    const s = this.safeFor(safe)
    return this.outcome(amount > 0 ? b.increment(amount, s ? { safe: true } : {}) : b.decrement(-amount, s ? { safe: true } : {}))
  }

  /** consensus-first: every update waits for its commit; plain: nothing does. */
  private safeFor(safe: boolean): boolean {
    return this.o.system === 'consensus-first' ? true : this.o.system === 'plain' ? false : safe
  }

  private outcome(p: Promise<{ status: string }>): Promise<Outcome> {
    return p.then(
      (r) => (r.status === 'rejected' ? 'rejected' : 'ok'),
      (err: { reason?: string }) => {
        this.count(err?.reason ?? 'error')
        return 'rejected'
      },
    )
  }

  counterAdd(key: string, amount: number, safe: boolean): Promise<Outcome> {
    const c = this.client.counter(key, { min: 0 })
    const s = this.safeFor(safe)
    return this.outcome(amount > 0 ? c.increment(amount, s ? { safe: true } : {}) : c.decrement(-amount, s ? { safe: true } : {}))
  }

  setAdd(key: string, element: string, safe: boolean): Promise<Outcome> {
    const s = this.safeFor(safe)
    return this.outcome(this.client.set<string>(key).add(element, s ? { safe: true } : {}))
  }

  setRemove(key: string, element: string, safe: boolean): Promise<Outcome> {
    const set = this.client.set<string>(key)
    const s = this.safeFor(safe)
    if (!(this.stableReads ? set.stable : set.value).includes(element)) return this.outcome(set.add(element, s ? { safe: true } : {}))
    return this.outcome(set.delete(element, s ? { safe: true } : {}))
  }

  transfer(from: string, to: string, amount: number): Promise<Outcome> {
    if (this.o.system === 'plain') {
      // No atomic groups without an order: two regular updates.
      return Promise.all([this.counterAdd(from, -amount, false), this.counterAdd(to, amount, false)]).then((r) => (r.includes('rejected') ? 'rejected' : 'ok'))
    }
    return this.outcome(
      this.client.safe((tx) => {
        tx.counter(from).decrement(amount)
        tx.counter(to).increment(amount)
      }),
    )
  }

  backlog(): number {
    if (this.o.system === 'plain') return 0
    // pending = queued ops + envelopes sent and undecided; a full batch being filled is not backlog.
    return Math.max(0, this.client.status.pending - this.o.maxBatchOps)
  }

  private waiters: Array<() => void> = []
  private poll: NodeJS.Timeout | null = null

  /** One poll per client (not per worker) while workers wait: the SDK has no event for `pending`. */
  ready(): Promise<void> {
    if (this.backlog() < this.o.maxBacklog) return Promise.resolve()
    const p = new Promise<void>((r) => this.waiters.push(r))
    this.poll ??= setInterval(() => {
      if (this.backlog() >= this.o.maxBacklog && !this.closed) return
      for (const w of this.waiters.splice(0)) w()
      if (this.poll) clearInterval(this.poll)
      this.poll = null
    }, 2)
    return p
  }

  private closed = false

  carriedOps(): number {
    return 0
  }

  async drain(timeoutMs: number): Promise<boolean> {
    try {
      if (this.o.system === 'plain') await this.client.flush({ timeoutMs })
      else await this.client.settled({ timeoutMs })
      return true
    } catch {
      return false
    }
  }

  errors(): Record<string, number> {
    return { ...this.errorCounts }
  }

  async close(): Promise<void> {
    this.closed = true
    if (this.poll) clearInterval(this.poll)
    for (const w of this.waiters.splice(0)) w()
    await this.owner.close()
  }
}

export async function createSdkClient(o: ClientFactoryOptions): Promise<LoadClient> {
  const { owner, space } = await openSdkSpace({
    relays: o.relays.map((r) => r.url.replace(/\/v1\/ws$/, '')),
    cluster: o.cluster,
    seed: `stead-bench-sdk-${o.space}-${o.index}`,
    space: o.space,
    options: {
      batchIntervalMs: o.batchIntervalMs,
      maxBatchOps: o.maxBatchOps,
      connect: (url) => new WebSocket(url) as never,
      // Plain relays never decide: do not resend to another relay while waiting for a decision that cannot come.
      ...(o.system === 'plain' ? { resubmitAfterMs: 1e9 } : {}),
    },
  })
  return new SdkLoadClient(o, owner, space)
}

/**
 * An SDK client pinned to a bench cluster (in-memory storage, node:crypto,
 * an identity derived from `seed`) and its space `space`, once online.
 */
export async function openSdkSpace(o: { relays: string[]; cluster: ClientFactoryOptions['cluster']; seed: string; space: string; options?: Partial<ClientOptions> }): Promise<{ owner: SteadClient; space: Space; secretKey: Uint8Array }> {
  const secretKey = nodeCrypto.sha256(new TextEncoder().encode(o.seed))
  const owner = await createClient({
    relays: o.relays,
    storage: memoryStorage(),
    cluster: o.cluster,
    identity: { secretKey },
    crypto: nodeCrypto,
    ...o.options,
  })
  const space = await owner.space(o.space)
  const deadline = Date.now() + 20_000
  while (!space.status.online) {
    if (Date.now() > deadline) throw new Error(`SDK client ${o.seed} not online after 20 s: ${JSON.stringify(space.status)}`)
    await new Promise((r) => setTimeout(r, 20))
  }
  return { owner, space, secretKey }
}
