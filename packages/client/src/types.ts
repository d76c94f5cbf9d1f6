import type { Crypto, ErrorReason, HostClock } from '@stead/core'
import type { ClusterDescriptor, Fetch } from './transport/cluster.ts'
import type { PeerNetwork } from './peers/peers.ts'
import type { ClientStorage } from './storage/types.ts'
import type { SocketFactory } from './transport/transport.ts'

/**
 * How a safe update (or an atomic group) ended in the stable order, as f+1
 * relays attested it and this client's own audit confirmed. An outcome is
 * never thrown: a safe update that would break an invariant resolves
 * `rejected` with reason `invariant` (and is undone in the prospective
 * value). The promise rejects only when the wait ends first (`timeout`,
 * `aborted`, {@link ClosedError}) or the update could not be stored.
 */
export type SafeResult =
  | {
      /** Committed: it is part of the stable state of every correct replica. */
      readonly status: 'committed'
      /** The stable index its envelope took (each committed envelope takes the next one). */
      readonly index: number
    }
  | {
      /** Rejected: it never takes effect anywhere. */
      readonly status: 'rejected'
      /**
       * Why: `invariant` (a declared bound would break), `type-mismatch`
       * (the key is another type or has other invariants), `unauthorized`
       * (the space's policy does not let this key write), `conflict`
       * (another envelope of the same author took its sequence number: one
       * identity used by two clients), or another reason the relays gave
       * when they refused the envelope for good (`malformed`, `too-large`,
       * `bad-signature`, ...).
       */
      readonly reason: ErrorReason
      /** A sentence for logs and developers, not for matching on. */
      readonly detail: string
    }

/**
 * What an update's promise resolves to: `stored` for a regular update (it is
 * durable on this device and will be sent), `held` for one stored but kept
 * out of the prospective value by an invariant, a SafeResult for a safe one.
 */
export type UpdateResult =
  | {
      /** A regular update, stored on this device: it shows in `value` and will reach the stable order. */
      readonly status: 'stored'
      /** The envelope it went in (hex id, as `space.clockProof` and `space.compare` take); absent when nothing was sent (the update cancelled out, or an empty edit). */
      readonly update?: string
    }
  | {
      /**
       * A regular update, stored on this device, that would break the
       * object's invariant if it applied now (a decrement past `min`, an add
       * past `maxSize`, ...): it is held back from `value` (the handle's
       * `pending` lists it) and will reach the stable order, which commits
       * it if other updates made room by then, else rejects it (`onError`
       * says so). Not a refusal: use `{ safe: true }` to wait for the
       * decision.
       */
      readonly status: 'held'
      /** Always `invariant`. */
      readonly reason: 'invariant'
      /** A sentence for logs and developers, not for matching on. */
      readonly detail: string
    }
  | SafeResult

/**
 * How long a caller waits. Past `timeoutMs` the promise rejects with a
 * SteadError `timeout`, when `signal` aborts with `aborted`; either way only
 * the wait ends: an update that left keeps its place in the order (see
 * `pendingUpdates()` and `onSettled`).
 */
export interface WaitOptions {
  /** Ends the wait with a SteadError `aborted` when it aborts. */
  readonly signal?: AbortSignal
  /**
   * Ends the wait with a SteadError `timeout` after this many milliseconds
   * (0 to 2,147,483,647, or `Infinity` to wait for ever). Defaults: 60 s for
   * safe updates and `safe` groups (the client's `safeTimeoutMs`), for
   * `flush` and `settled`; 10 s for `readStable` with `quorum` and for
   * history pages the relays serve; none for regular updates (they resolve
   * once stored on this device). A timed-out safe update is not lost: it
   * keeps its place and may still commit (`pendingUpdates()`, `onSettled`).
   */
  readonly timeoutMs?: number
}

/** Which page `handle.historyPage` returns, and how long to wait for relays to serve it. */
export interface HistoryPageOptions extends WaitOptions {
  /** Entries per page: 1 to 1,000, default 100. */
  readonly limit?: number
  /** Only entries before this stable index (default: the latest). */
  readonly before?: number
}

/**
 * Options of an update. Without `safe` an update is regular: it shows at
 * once, resolves `stored` as soon as it is durable on this device (signed
 * and stored with the next batch), and reaches the stable order later; if
 * that rejects it, it is undone and `onError` says so.
 */
export interface UpdateOptions extends WaitOptions {
  /** Resolve only once the update is committed or rejected in the stable order (f+1 matching attestations). */
  readonly safe?: boolean
}

/**
 * How this client sends one object's updates; set when the object is
 * opened (`space.counter(key, { freshness: 500 })`), local to this client
 * (not part of the object's declaration), and the latest open that gives
 * one applies.
 */
export interface ObjectOptions {
  /**
   * Freshness bound in milliseconds (BENDY): a regular update of this
   * object may wait up to about this long before it leaves the client
   * (measured to when relays have it), merged meanwhile with the object's
   * other updates, so a hot object costs one update per bound instead of
   * one per batch. It shows in the local value at once, and its promise
   * resolves once it is signed and stored, so it can take that long too.
   * Safe updates never wait (one on the object sends its waiting updates
   * first); `flush`, `settled` and `close` send them at once. 0 or absent:
   * no waiting, today's behaviour. At most 3,600,000 (an hour).
   */
  readonly freshness?: number
}

/** One relay as the client sees it (`status.relays`). */
export interface RelayStatus {
  /** The URL as given in `relays`. */
  readonly url: string
  /** An authenticated session is open. */
  readonly connected: boolean
  /** The relay's id in the pinned cluster, once it said which it is. */
  readonly relay?: string
  /** Why this relay is no longer trusted (it attested something else, or proved a wrong key); it stays disconnected. */
  readonly faulty?: string
  /** The last connection problem, while not connected. */
  readonly error?: string
}

/** The relay sessions a client's spaces share (`client.status`). */
export interface SessionsStatus {
  /** Connected to at least f+1 trusted relays: enough to hear every commit. */
  readonly online: boolean
  /** Every relay in `options.relays`, in that order. */
  readonly relays: readonly RelayStatus[]
  /** Whether a cluster descriptor is pinned (given, or trusted on first use). */
  readonly trusted: boolean
  /** The epoch of the committee the client trusts: 0 for the cluster file's, one more for each committee change it followed (see `epochPollMs`). */
  readonly epoch: number
  /** Why it is not online, or another problem the app should show (storage failed, a space's commit could not be checked). */
  readonly problem?: string
}

/** A space's status (`space.status`): the sessions' and its own. */
export interface ClientStatus extends SessionsStatus {
  /** Local updates not yet decided in the stable order (queued operations and sent envelopes). */
  readonly pending: number
  /** The stable index this space's replica reached, confirmed by f+1 relays. */
  readonly stableIndex: number
}

/**
 * Options of `createClient`. Only `relays` is required; the defaults suit
 * an app (identity and data kept in the default storage, the cluster
 * trusted on first use).
 */
export interface ClientOptions {
  /** Relay URLs: ws://host:port (or wss://, http://, https://); the session path /v1/ws is added. */
  readonly relays: readonly string[]
  /**
   * The cluster to trust: the relays' cluster file (parsed JSON) or what
   * GET /v1/cluster serves. Without it, the client asks every relay and
   * pins the descriptor 2f+1 of them serve identically.
   */
  readonly cluster?: unknown
  /**
   * The default storage's name: the IndexedDB database in browsers (default
   * `stead`), the directory ./.stead/<database> in Node (default `client`).
   * In browsers, tabs of one origin with the same database share one client.
   */
  readonly database?: string
  /**
   * Holds the identity, the pinned cluster and every space's state, instead
   * of the default storage (then tabs do not share a client: each needs its own).
   */
  readonly storage?: ClientStorage | Promise<ClientStorage>
  /** Ed25519 secret key (32-byte seed). Defaults to one created once and kept in storage. */
  readonly identity?: {
    /** The 32-byte Ed25519 seed; the author id is derived from its public key. */
    readonly secretKey: Uint8Array
  }
  /**
   * This client's key as a device of a user: the token
   * `userClient.certifyDevice(thisClient.publicKey)` made on a client that
   * holds the user's key. From then on this client acts for that user
   * (`userId`): policies name the user, and the user can revoke this device
   * in a space (`space.members.revokeDevice`). Kept in storage, so later
   * starts need not pass it again. Updates signed before it carry none.
   */
  readonly deviceCertificate?: string
  /**
   * How long other clients keep this client's presence (`space.presence`)
   * without hearing it again: it is renewed at half of it while the space
   * is open. A client that vanishes without closing is shown until then
   * (unless a relay sends the leave it signed ahead, which it does when the
   * client's session closes). Default 30,000 ms; from 1,000 to 600,000.
   */
  readonly presenceTtlMs?: number
  /** Stable history entries kept in memory per object (older pages come from the relays). Default 1,000; whatever the limit, at most about 8 MiB of values per object are kept (a long document keeps fewer entries). */
  readonly historyLimit?: number
  /**
   * At most one envelope per this interval: an operation after a quiet spell
   * is signed and sent at the end of the current task; while operations keep
   * coming they wait up to this long and travel together. Default 10 ms.
   */
  readonly batchIntervalMs?: number
  /** ...or as soon as this many are pending. Default 500. */
  readonly maxBatchOps?: number
  /**
   * An envelope not decided this long after it was sent goes to another
   * relay too; a commit f+1 relays attested whose envelope frames the frame
   * source has not sent this long is taken from another relay. Default 2000 ms.
   */
  readonly resubmitAfterMs?: number
  /**
   * How often the client asks the relays whether the committee changed
   * (`GET /v1/epochs`): it checks each epoch certificate from the committee
   * it trusts and moves its sessions to the new relays. A relay proving a
   * key the client does not know makes it ask at once. Default 30000 ms.
   */
  readonly epochPollMs?: number
  /**
   * Stored commits are folded into one replica checkpoint once they hold this
   * many envelopes (or reach 1,000 commits), and on close. Default 1,000: a
   * client that crashed replays at most that many on open.
   */
  readonly checkpointEvery?: number
  /** A quiet session is pinged after `pingAfterMs` and dropped (then reconnected) after `deadAfterMs` without any message. Default 5 s / 15 s. */
  readonly heartbeat?: {
    /** Quiet time after which the client pings the relay. */
    readonly pingAfterMs: number
    /** Quiet time after which the session counts as dead: it is closed and reconnected. */
    readonly deadAfterMs: number
  }
  /** Reconnect backoff. Default 250 ms doubling to 10 s, with jitter. */
  readonly backoff?: {
    /** Delay before the first reconnect. */
    readonly initialMs: number
    /** Longest delay between reconnects. */
    readonly maxMs: number
  }
  /** Ed25519 and SHA-256. Default: WebCrypto (or @noble/curves where it lacks Ed25519) in browsers, node:crypto in Node. Tests pass fakes. */
  readonly crypto?: Crypto
  /** Opens a WebSocket to a relay. Default: the platform's WebSocket (`ws` on Node 20). */
  readonly connect?: SocketFactory
  /** HTTP GET for cluster descriptors, quorum reads and history pages. Default: the global fetch. */
  readonly fetch?: Fetch
  /**
   * Syncs spaces peer to peer too, over this network (`libp2pPeers` from
   * `@stead/client/node` in Node): envelopes go straight to the space's other
   * clients and come from them, each checked (signature, clock) before it
   * shows, so connected clients keep collaborating while every relay is
   * unreachable. Default: none, relays only. See "Peer to peer" in the README.
   */
  readonly peers?: PeerNetwork
  /**
   * How long a safe update or `safe` group waits for the stable order when
   * its call gives no `timeoutMs`: then it rejects with a SteadError
   * `timeout` that says what was missing (relays connected against the
   * quorum needed, which relays are down and why). The update itself is not
   * lost: it keeps its place and may still commit. Milliseconds, or
   * `Infinity` to wait for ever. Default 60,000 (60 s).
   */
  readonly safeTimeoutMs?: number
  /** The device clock, for timers and (corrected by the offset measured against the relays' clocks) register timestamps. Default Date.now. */
  readonly now?: () => number
  /**
   * Time and timers for everything the client schedules (batching,
   * heartbeats, reconnects, resubmits, waits): the simulator and tests in
   * simulated time pass theirs. Its `now` replaces the `now` option. Default:
   * Date.now and setTimeout.
   */
  readonly clock?: HostClock
  /** Random numbers in [0, 1), for reconnect jitter: seeded ones make a run repeat. Default Math.random. */
  readonly random?: () => number
}

export type { ClusterDescriptor }

/** One of this client's envelopes, decided. */
export interface SettledUpdate {
  /** The envelope id (hex), as listed by `pendingUpdates()`. */
  readonly id: string
  /** The keys of the objects it updated. */
  readonly keys: readonly string[]
  /** One result per safe group it carried, in the order they were made. */
  readonly safe: readonly SafeResult[]
  /** The stable index it took, when it committed. */
  readonly index?: number
}
