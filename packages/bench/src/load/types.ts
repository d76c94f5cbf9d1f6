/**
 * The three systems under test. `reliable` and `consensus-first` run against
 * the same Stead relays; `plain` against the forward-and-merge baseline.
 */
export type System = 'reliable' | 'plain' | 'consensus-first'

export type Outcome = 'ok' | 'rejected'

/** What a workload needs from one client replica, whichever driver (protocol-level or SDK) is behind it. */
export interface LoadClient {
  readonly index: number
  /** Local read: the prospective value (reliable, plain) or the stable one (consensus-first). */
  readCounter(key: string): number
  readSet(key: string): readonly unknown[]
  readBounded(key: string): number
  counterAdd(key: string, amount: number, safe: boolean): Promise<Outcome>
  setAdd(key: string, element: string, safe: boolean): Promise<Outcome>
  setRemove(key: string, element: string, safe: boolean): Promise<Outcome>
  /** Bounded Counter (escrow): +amount increments, -amount spends rights (claims from the pool if this client has too few). */
  boundedAdd(key: string, amount: number, safe: boolean): Promise<Outcome>
  /** Atomic safe group: -amount on `from`, +amount on `to`. */
  transfer(from: string, to: string, amount: number): Promise<Outcome>
  /** Updates handed to the relays and not yet carried (plain: echoed back; others: committed). */
  backlog(): number
  /** Resolves when backlog() is under the client's cap. */
  ready(): Promise<void>
  /** Ops carried so far (see backlog), counted when their envelope was carried. */
  carriedOps(): number
  /** Waits until everything handed over is carried; false on timeout. */
  drain(timeoutMs: number): Promise<boolean>
  close(): Promise<void>
  errors(): Record<string, number>
}

export interface ClientFactoryOptions {
  readonly system: System
  readonly index: number
  readonly space: string
  /** ws://host:port/v1/ws of the relays this client may use, first = preferred. */
  readonly relays: ReadonlyArray<{ readonly url: string; readonly publicKey: string; readonly index: number }>
  readonly f: number
  readonly cluster: { readonly f: number; readonly relays: ReadonlyArray<{ readonly id: string; readonly publicKey: string; readonly api: string }> }
  readonly batchIntervalMs: number
  readonly maxBatchOps: number
  /** Envelopes (or, for the SDK, pending updates) a client may have uncarried before its workers wait. */
  readonly maxBacklog: number
}
