import { memoryStorage, type ClientOptions, type ClientStorage, type SocketLike } from '@stead/client'
import { authorIdOf, clockInit, decode, decodeClientMessage, decodeDeclaration, decodeRelayMessage, encodeEnvelope, encodeRelayMessage, ENVELOPE_REF_BYTES, openEnvelopeSync, restoreCrdt, sealEnvelope, SteadError, toHex, type Envelope, type ErrorReason, type EpochCertificate, type HostClock, type HostTimer, type RelayCommittee } from '@stead/core'
import { nodeCrypto, publicKeyOfSync, signSync, verifySync } from '@stead/core/node'
import {
  buildApi,
  ClientFacingLiar,
  committeeOf,
  MemoryJournal,
  MemoryKv,
  RelayNode,
  COMMITTEE_SPACE,
  backingKey,
  encodeCommitteeRequest,
  adoptEpochChain,
  storedChain,
  storedEpoch,
  type ClientLie,
  type ClientSessions,
  type ClusterConfig,
  type RelayNodeOptions,
  type SpacePolicy,
} from '@stead/relay'
import { byzantineMesh, type ByzantineStrategy, type SyncCrypto } from '@stead/relay/consensus'
import type { FastifyInstance } from 'fastify'
import pino from 'pino'
import { EventQueue } from './queue.ts'
import { RawSession } from './raw-session.ts'
import { Rng } from './rng.ts'
import { Wire, type WireWorld } from './wire.ts'

export interface SimClusterOptions {
  /** Relays in the committee (N = 3f+1). Default 4. */
  readonly relays?: number
  /** Spaces the cluster file lists: writer, reader and admin public keys (see the relay's SpacePolicy). */
  readonly spaces?: Readonly<Record<string, { readonly writers?: readonly Uint8Array[]; readonly readers?: readonly Uint8Array[]; readonly admins?: readonly Uint8Array[] }>>
  /** Whether spaces not listed exist, open to every signed author. Default true. */
  readonly openSpaces?: boolean
  /** Live spaces one user may hold (the cluster's spacesPerUser). Default: not counted. */
  readonly spacesPerUser?: number
  /** Public keys that may create spaces at runtime when openSpaces is false. */
  readonly spaceCreators?: readonly Uint8Array[]
  /** Seeds the network delays (1-3 ms). Default 1. */
  readonly seed?: number
  /** More RelayNode options for every relay (snapshot pace, retention, ...). */
  readonly relay?: Partial<Pick<RelayNodeOptions, 'snapshotEveryBatches' | 'retention' | 'gcDepth' | 'paceMs' | 'spaceIdleMs' | 'memoryBudgetBytes'>>
}

/** Simulated time a wait gives up after when it is not told (see SimCluster.until). */
const DEFAULT_WITHIN_MS = 60_000
/** Event-loop turns with nothing new scheduled before simulated time jumps to the next event. */
const QUIET_TURNS = 3
/**
 * With real work in flight (an HTTP answer, a storage call), how long in
 * real time it may take before simulated time moves on all the same (a
 * storage call that never ends, as a crashed process's, must not stop it).
 */
const IN_FLIGHT_WAIT_MS = 200

const START_AT = Date.UTC(2026, 0, 1)
/** How often a relay looks whether its peers are in a later epoch (see SimRelay.watchEpochs). */
const EPOCH_POLL_MS = 2_000
/** How long a relay the next committee leaves out serves the certificate before it stops (see nextEpoch). */
const LEAVE_GRACE_MS = 3_000
/** What a Byzantine mesh signs its forgeries and checks what it reads with: the relays' own Ed25519. */
const SIGNING: SyncCrypto = { sign: signSync, verify: verifySync, sha256: (d) => nodeCrypto.sha256(d) }

type Mesh = RelayNodeOptions['mesh']

/** The envelope in a submitted frame, or undefined for one that does not open (the relay refuses it itself). */
function openEnvelope(frame: Uint8Array): Envelope | undefined {
  try {
    return openEnvelopeSync({ sha256: (b) => nodeCrypto.sha256(b), verify: verifySync }, decode(frame))
  } catch {
    return undefined
  }
}

type SimEvent = { readonly action: () => void }

const turn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve))

/**
 * Real relays (RelayNode with its client sessions and HTTP API, memory
 * store) and real SDK clients in one process, in simulated time, for tests:
 * frames between relays and between clients and relays are events on one
 * queue, and every timer of the relays and the clients is an event too.
 * Time runs by itself: whenever the process has nothing left to do (no
 * event due, a few event-loop turns without news), it jumps to the next
 * event. So a test awaits client promises as it would against real relays,
 * and `advance(ms)` lets `ms` of simulated time pass, after which
 * everything due by then has happened: a check that something did not
 * happen is sound, and a 60 s timeout takes no 60 s.
 *
 * Faults are what the relay process has too: a relay crashed and restarted
 * on its store (`down`/`up`), lies to clients (`lie`, the ClientFacingLiar
 * of `stead-relay start --byzantine`), and `hold`, a mesh with every link
 * cut, under which relays take and fan out envelopes but order none.
 */
export class SimCluster {
  readonly f: number
  readonly relays: SimRelay[]
  readonly config: ClusterConfig
  /** Every distinct envelope clients submitted to any relay, by id, in the order they first came. */
  readonly submitted = new Map<string, Envelope>()
  /**
   * A rule every relay applies at its door before its own checks, as a
   * space's policy would (runtime policies are issue 46's): a reason
   * refuses the envelope with that SteadError.
   */
  refuse: (env: Envelope) => ErrorReason | undefined = () => undefined
  /** Envelopes every relay answers `queued` for and drops (censorship, or a relay that lost what it took): never ordered, never shown. */
  censor: (env: Envelope) => boolean = () => false
  private readonly queue = new EventQueue<SimEvent>()
  private readonly rng: Rng
  /** Simulated now: a plausible wall-clock time (registers and relays compare stamps with it), 2026-01-01 at start. */
  private time = START_AT
  private closed = false
  private held = false
  /** The relays on one side of a split (see split), while there is one. */
  private side: ReadonlySet<number> | undefined
  private wake: (() => void) | undefined
  /** Real work in flight (HTTP answers, storage calls) by when it began: time does not jump while some may still schedule work. */
  private readonly inFlight = new Set<{ readonly since: number }>()
  private failure: unknown
  private readonly loop: Promise<void>
  private readonly wires: WireWorld
  private readonly seed: number
  private readonly relayOptions: SimClusterOptions['relay'] & object

  private constructor(options: SimClusterOptions) {
    const n = options.relays ?? 4
    this.f = Math.floor((n - 1) / 3)
    this.rng = new Rng(options.seed ?? 1)
    const secrets = Array.from({ length: n }, (_, i) => nodeCrypto.sha256(new TextEncoder().encode(`sim-cluster-relay-${options.seed ?? 1}-${i}`)))
    this.config = {
      f: this.f,
      relays: secrets.map((s, i) => ({ id: `r${i + 1}`, publicKey: publicKeyOfSync(s), mesh: '/memory/sim', api: `relay${i}.sim` })),
      spaces: new Map(
        Object.entries(options.spaces ?? {}).map(([name, p]): [string, SpacePolicy] => [name, { ...(p.writers ? { writers: p.writers } : {}), ...(p.readers ? { readers: p.readers } : {}), ...(p.admins ? { admins: p.admins } : {}) }]),
      ),
      openSpaces: options.openSpaces ?? true,
      newSpacesPerKeyPerHour: 10_000,
      ...(options.spacesPerUser === undefined ? {} : { spacesPerUser: options.spacesPerUser }),
      spaceCreators: options.spaceCreators ?? [],
      checkpointRounds: 1000,
    }
    this.wires = {
      now: () => this.time,
      delay: () => this.delay(),
      schedule: (at, _toward, action) => this.schedule(at, action),
    }
    this.seed = options.seed ?? 1
    this.relayOptions = options.relay ?? {}
    this.relays = secrets.map((s, i) => new SimRelay(this, i, s, this.relayOptions, `r${i + 1}`))
    this.loop = this.drive()
  }

  /** A cluster whose relays have all started. */
  static async start(options: SimClusterOptions = {}): Promise<SimCluster> {
    const c = new SimCluster(options)
    for (const r of c.relays) await r.up()
    return c
  }

  /**
   * A new machine: a relay with a fresh key and an empty store, not
   * started. Once a committee change lists it, `up` joins it to the
   * committee (it takes the epoch certificates from a running relay, as
   * `stead-relay start --join` does, and fetches the state the epoch
   * started from).
   */
  addRelay(id = `r${this.relays.length + 1}`): SimRelay {
    const i = this.relays.length
    const secret = nodeCrypto.sha256(new TextEncoder().encode(`sim-cluster-relay-${this.seed}-${i}`))
    const relay = new SimRelay(this, i, secret, this.relayOptions, id)
    this.relays.push(relay)
    return relay
  }

  /** @internal The relay whose key this is, if any. */
  relayByKey(key: Uint8Array): SimRelay | undefined {
    return this.relays.find((r) => r.holds(key))
  }

  /** Simulated time now (ms since the epoch; 2026-01-01 when the cluster started). */
  get now(): number {
    return this.time
  }

  /** The cluster descriptor clients pin (what GET /v1/cluster serves). */
  get descriptor(): { f: number; relays: Array<{ id: string; publicKey: string; api: string }> } {
    return { f: this.f, relays: this.config.relays.map((r) => ({ id: r.id, publicKey: toHex(r.publicKey), api: r.api })) }
  }

  get urls(): string[] {
    return this.relays.map((r) => `ws://relay${r.index}.sim`)
  }

  /**
   * createClient options for a client of this cluster: pinned, in memory,
   * on simulated time and sockets. A storage given in `more` (LMDB,
   * IndexedDB) is watched: simulated time waits for its calls.
   */
  clientOptions(more: Partial<ClientOptions> = {}): ClientOptions {
    const { storage, ...rest } = more
    return {
      relays: this.urls,
      cluster: this.descriptor,
      storage: storage ? this.watched(storage) : memoryStorage(),
      connect: (url) => this.dial(url),
      fetch: (url, init) => this.fetch(url, init?.headers),
      crypto: nodeCrypto,
      clock: this.clock(),
      random: () => this.rng.next(),
      ...rest,
    }
  }

  /** `storage` with each call counted as work in flight (see drive). */
  private watched(storage: ClientStorage | Promise<ClientStorage>): Promise<ClientStorage> {
    const track = <T>(p: Promise<T>): Promise<T> => this.track(p)
    return track(Promise.resolve(storage)).then((s) => ({
      load: (key) => track(s.load(key)),
      loadRange: (prefix) => track(s.loadRange(prefix)),
      write: (changes) => track(s.write(changes)),
      removeRange: (prefix) => track(s.removeRange(prefix)),
      close: () => track(s.close()),
    }))
  }

  /** Time and timers on the cluster's simulated clock (what clients and relays run on). */
  clock(alive: () => boolean = () => true): HostClock {
    return {
      now: () => this.time,
      setTimer: (ms, fire): HostTimer => {
        let cancelled = false
        this.schedule(this.time + Math.max(0, ms), () => {
          if (!cancelled && alive()) fire()
        })
        return { cancel: () => void (cancelled = true), unref: () => undefined }
      },
    }
  }

  /** Lets `ms` of simulated time pass: everything due by then has run when it resolves. */
  async advance(ms: number): Promise<void> {
    const until = this.time + ms
    let reached = false
    this.schedule(until, () => void (reached = true))
    while (!reached) {
      this.check()
      await turn()
    }
    this.check()
  }

  /** Resolves with the first value `probe` gives (not undefined), checked after every event; throws after `withinMs` of simulated time. */
  async until<T>(what: string, probe: () => T | undefined | Promise<T | undefined>, withinMs = DEFAULT_WITHIN_MS): Promise<T> {
    const deadline = this.time + withinMs
    let late = false
    this.schedule(deadline, () => void (late = true))
    for (;;) {
      this.check()
      const v = await probe()
      if (v !== undefined && v !== false) return v
      if (late) throw new Error(`${what}: not within ${withinMs} ms of simulated time`)
      await turn()
    }
  }

  /** Runs `action` after `ms` of simulated time (a test's own network or device, on the cluster's clock). */
  later(ms: number, action: () => void): void {
    this.schedule(this.time + ms, action)
  }

  /** Cuts every link between relays: envelopes are still taken and fanned out, nothing is ordered until `release`. */
  hold(): void {
    this.held = true
  }

  release(): void {
    if (!this.held) return
    this.held = false
    for (const r of this.relays) r.peersBack()
  }

  /** Splits the relays in two: those of `side` (SimCluster.relays indexes) and the rest reach only their own side until `heal`. */
  split(side: readonly number[]): void {
    this.side = new Set(side)
  }

  /** The two sides of a split reach each other again. */
  heal(): void {
    if (!this.side) return
    this.side = undefined
    for (const r of this.relays) r.peersBack()
  }

  /** Whether frames from relay `from` reach relay `to` now. */
  linked(from: number, to: number): boolean {
    const a = this.relays[from]
    const b = this.relays[to]
    return !this.held && from !== to && (!this.side || this.side.has(from) === this.side.has(to)) && Boolean(a?.isUp && b?.isUp && !a.isCutOff && !b.isCutOff)
  }

  async close(): Promise<void> {
    for (const r of this.relays) await r.down()
    this.closed = true
    this.wake?.()
    await this.loop
  }

  /** @internal */
  schedule(at: number, action: () => void): void {
    this.queue.push(Math.max(at, this.time), { action })
    const wake = this.wake
    this.wake = undefined
    wake?.()
  }

  /** @internal A network delay, 1-3 ms, from the seed. */
  delay(): number {
    return 1 + this.rng.int(0, 2)
  }

  /** @internal A relay's event loop failed: every wait of the test throws it. */
  fail(err: unknown): void {
    this.failure ??= err
  }

  /** Counts `work` as in flight until it settles. */
  private track<T>(work: Promise<T>): Promise<T> {
    const entry = { since: performance.now() }
    this.inFlight.add(entry)
    return work.finally(() => this.inFlight.delete(entry))
  }

  /** Whether real work began lately and has not settled (older work, such as a dead process's write, no longer holds time up). */
  private busy(): boolean {
    const now = performance.now()
    for (const w of this.inFlight) if (now - w.since < IN_FLIGHT_WAIT_MS) return true
    return false
  }

  private check(): void {
    if (this.failure !== undefined) throw this.failure instanceof Error ? this.failure : new Error(String(this.failure))
  }

  /** A session to relay `relay` under `secretKey`, driven by hand (see RawSession); resolves once welcomed. */
  async session(relay: number, secretKey: Uint8Array): Promise<RawSession> {
    const s = new RawSession(this.dial(this.urls[relay] as string), secretKey)
    await s.welcomed
    return s
  }

  private dial(url: string): SocketLike {
    const relay = this.relayOf(url)
    const wire = new Wire(this.wires, relay.index)
    this.schedule(this.time + this.delay() + relay.connectDelayMs, () => {
      // A relay that is down opens and closes at once: the client's link retries, as after a refused connection.
      wire.opened()
      if (!relay.accept(wire)) wire.refused()
    })
    return wire.client
  }

  private async fetch(url: string, headers: Readonly<Record<string, string>> | undefined): Promise<{ ok: boolean; status: number; json(): Promise<unknown> }> {
    const u = new URL(url)
    const relay = this.relayOf(url)
    relay.requests.push(u.pathname)
    const app = relay.app
    if (!app) throw new TypeError('fetch failed')
    const res = await this.track(app.inject({ method: 'GET', url: u.pathname + u.search, ...(headers ? { headers: { ...headers } } : {}) }))
    return { ok: res.statusCode >= 200 && res.statusCode < 300, status: res.statusCode, json: async () => JSON.parse(res.body) as unknown }
  }

  private relayOf(url: string): SimRelay {
    // relay<i>.sim, or relay<i>-<anything>.sim: where a committee change moved relay i's API.
    const i = Number(/relay(\d+)(?:-[a-z0-9-]+)?\.sim/.exec(url)?.[1] ?? -1)
    const relay = this.relays[i]
    if (!relay) throw new TypeError(`${url} is no relay of this cluster`)
    return relay
  }

  /** Runs events in time order; time jumps to the next one once the process is quiet. */
  private async drive(): Promise<void> {
    while (!this.closed) {
      await turn()
      const next = this.queue.peekAt()
      if (next === undefined) {
        await new Promise<void>((resolve) => (this.wake = resolve))
        continue
      }
      if (next > this.time) {
        // Real work (a promise chain, an HTTP answer, a disk write) may still schedule something sooner.
        let quiet = 0
        while (!this.closed && this.queue.peekAt() === next && (quiet < QUIET_TURNS || this.busy())) {
          await turn()
          quiet++
        }
        if (this.queue.peekAt() !== next) continue
        this.time = next
      }
      const ev = this.queue.pop()
      try {
        ev?.item.action()
      } catch (err) {
        this.fail(err)
      }
    }
  }
}

/** Frames a relay sent its clients, by kind: envelopes (alone or inside commits), commits with envelopes, compact attestations. */
function noTraffic(): ClientTraffic {
  return { envelopes: 0, commits: 0, attests: 0, deltas: 0, bytes: 0, paces: 0 }
}

export interface ClientTraffic {
  envelopes: number
  commits: number
  attests: number
  /** Paced deltas (BENDY's live stream). */
  deltas: number
  /** Every byte of every frame sent to clients. */
  bytes: number
  /** `pace` requests received from clients. */
  paces: number
}

/** A relay key, its public half and that as hex, worked out once. */
interface RelayKey {
  readonly secretKey: Uint8Array
  readonly publicKey: Uint8Array
  readonly hex: string
}

function relayKey(secretKey: Uint8Array): RelayKey {
  const publicKey = publicKeyOfSync(secretKey)
  return { secretKey, publicKey, hex: toHex(publicKey) }
}

/** Where a running relay's mesh delivers: its node's handlers. */
interface MeshHandlers {
  receive?: (from: number, frame: Uint8Array) => void
  connected?: (peer: number) => void
}

/** One relay of a SimCluster: its store outlives `down`; its node, sessions and API do not. */
export class SimRelay {
  /** Its place in SimCluster.relays (a machine; its index in a committee is its place there). */
  readonly index: number
  /** Its name in the committees that list it. */
  readonly id: string
  /** Paths of the HTTP requests it was sent, in order. */
  readonly requests: string[] = []
  readonly traffic: ClientTraffic = noTraffic()
  /** The same, per client (by author id, once its hello named it). */
  readonly trafficOf = new Map<string, ClientTraffic>()
  /** Extra time a client's connection takes to open here (a farther relay). */
  connectDelayMs = 0
  private readonly cluster: SimCluster
  /** Its keys: the first it had, then those its operator made for rotations (see nextKey); it runs with the one its committee lists. */
  private readonly keys: RelayKey[]
  /** The key it last ran with (what it is known by while down). */
  private ranWith: RelayKey
  private readonly more: SimClusterOptions['relay'] & object
  private readonly kv = new MemoryKv()
  private journal = new MemoryJournal()
  private running: { node: RelayNode; app: FastifyInstance; sessions: ClientSessions; liar: ClientFacingLiar; epoch: number; wires: Set<Wire>; view: ClusterConfig; indexOf: ReadonlyMap<string, number>; mesh: MeshHandlers; towardsPeers: (strategy: ByzantineStrategy | undefined) => void; key: RelayKey; started: boolean; leaving?: boolean } | undefined
  /** An epoch change left it out of the committee: it stays down. */
  private left = false
  /** Partitioned from the other relays (see cutOff). */
  private cut = false
  private epoch = 0
  private lies: ClientLie[] = []
  /** How it misbehaves towards the other relays (see misbehave). */
  private strategy: ByzantineStrategy | undefined
  /** Who each client socket proved to be and whether it asked for frames; sockets silenced by `silence`. */
  private readonly heard = new WeakMap<Wire, { authorId: string | undefined; frames: boolean }>()
  private readonly muted = new WeakSet<Wire>()

  constructor(cluster: SimCluster, index: number, secretKey: Uint8Array, more: SimClusterOptions['relay'] & object, id: string) {
    this.cluster = cluster
    this.index = index
    this.id = id
    this.keys = [relayKey(secretKey)]
    this.ranWith = this.keys[0] as RelayKey
    this.more = more
  }

  /** Whether its relay runs (started: peers and clients reach it). */
  get isUp(): boolean {
    return this.running?.started === true
  }

  /** The running node (throws while the relay is down). */
  get node(): RelayNode {
    if (!this.running) throw new Error(`relay ${this.index} is down`)
    return this.running.node
  }

  /** The value of `key` in the stable state this relay holds of `space` (undefined before its first commit). */
  stableValue(space: string, key: string): unknown {
    const [, , , , objects] = this.node.reads.stableSnapshot(space).snapshot as [string, string, number, unknown, Array<[string, Uint8Array, unknown]>]
    const found = objects.find(([k]) => k === key)
    return found && restoreCrdt(decodeDeclaration(found[1]), found[2]).value()
  }

  /** How many authors' presence it holds for `space` now (in memory: a restart forgets it). */
  presenceIn(space: string): number {
    return this.running?.sessions.presence.size(space) ?? 0
  }

  /** Client sessions open on it now. */
  get openSessions(): number {
    return [...(this.running?.wires ?? [])].filter((w) => w.relay.open).length
  }

  /** @internal */
  get app(): FastifyInstance | undefined {
    return this.running?.app
  }

  /**
   * Lies this relay tells its clients from now on (none: honest), the
   * modes of `stead-relay start --byzantine` (ClientFacingLiar); it keeps
   * them across restarts. Sessions open now hear them too.
   */
  async lie(...lies: ClientLie[]): Promise<void> {
    this.lies = lies
    this.running?.liar.tell(lies)
  }

  /**
   * How this relay misbehaves towards the other relays from now on (none:
   * honest), a strategy of `stead-relay start --byzantine`: an honest node
   * behind a mesh that rewrites what it sends (byzantineMesh), built on the
   * committee of each epoch it runs in. It keeps it across restarts and
   * epochs.
   */
  misbehave(strategy?: ByzantineStrategy): void {
    this.strategy = strategy
    this.running?.towardsPeers(strategy)
  }

  /** The key it runs with now (the latest it was given while down). */
  get publicKey(): Uint8Array {
    return this.key.publicKey
  }

  private get secretKey(): Uint8Array {
    return this.key.secretKey
  }

  private get key(): RelayKey {
    return this.running?.key ?? this.ranWith
  }

  /** Whether `key` is one of its keys. */
  holds(key: Uint8Array): boolean {
    const hex = toHex(key)
    return this.keys.some((k) => k.hex === hex)
  }

  /**
   * A new key for this relay, for a rotation: its operator proposes the
   * committee with this public key in place of its current one; the relay
   * runs with it from the epoch that lists it (`stead-relay start
   * --next-key`).
   */
  nextKey(): Uint8Array {
    // From its first key (the cluster's seed and its place), so no two machines get one.
    const key = relayKey(nodeCrypto.sha256(new TextEncoder().encode(`sim-relay-next-key-${(this.keys[0] as RelayKey).hex}-${this.keys.length}`)))
    this.keys.push(key)
    return key.publicKey
  }

  /** Whether its links to the other relays are cut (see cutOff). */
  get isCutOff(): boolean {
    return this.cut
  }

  /** Cuts its links to every other relay (its clients still reach it): a relay partitioned away. */
  cutOff(): void {
    this.cut = true
  }

  /** Its links to the other relays are back. */
  reconnect(): void {
    this.cut = false
    this.peersBack()
  }

  /** Whether an epoch change left it out of the committee (it stays down then). */
  get hasLeft(): boolean {
    return this.left
  }

  /** Its index in the committee of the epoch it runs, or -1 (down, or not a member). */
  indexOf(key: Uint8Array): number {
    return this.running?.indexOf.get(toHex(key)) ?? -1
  }

  /**
   * Starts the relay on its store (a restart after `down` recovers what it
   * had made durable), as the committee of the epoch its store is in. A
   * new machine no committee of its store lists joins: it takes the
   * longest chain of epoch certificates a running relay has, checked from
   * the cluster file's committee.
   */
  async up(): Promise<void> {
    if (this.running || this.left) return
    const cluster = this.cluster
    // The epochs its peers went through while it was down (or before it existed), checked from its store's.
    await adoptEpochChain(this.kv, cluster.config, this.longestPeerChain())
    const stored = storedEpoch(this.kv, cluster.config)
    // The key its epoch's committee lists for it (after a rotation, the new one).
    const key = this.keys.find((k) => stored.cluster.relays.some((r) => toHex(r.publicKey) === k.hex))
    const me = key ? stored.cluster.relays.findIndex((r) => toHex(r.publicKey) === key.hex) : -1
    if (me < 0 && stored.epoch) {
      this.left = true
      return
    }
    if (me < 0) throw new Error(`relay ${this.id} is in no committee yet: back a committee that lists it first`)
    const view = stored.cluster
    const epoch = ++this.epoch
    const alive = (): boolean => this.running?.epoch === epoch
    this.journal = new MemoryJournal(this.journal.survivors())
    const clock = cluster.clock(() => this.epoch === epoch)
    // Its peers by their index in this epoch's committee: the machines whose keys it lists.
    // Per frame: looked up once per peer (a machine added later is found when it first is).
    const peers: Array<SimRelay | undefined> = []
    const peerAt = (i: number): SimRelay | undefined => {
      const entry = view.relays[i]
      return (peers[i] ??= entry && cluster.relayByKey(entry.publicKey))
    }
    // What the node's mesh hands frames and connections to: set as the node starts.
    const mesh: MeshHandlers = {}
    const honest: Mesh = {
      start: async () => undefined,
      stop: async () => undefined,
      send: (to, frame) => this.transmit(peerAt(to), frame, alive),
      broadcast: (frame) => {
        for (let to = 0; to < view.relays.length; to++) if (to !== me) this.transmit(peerAt(to), frame, alive)
      },
      onFrame: (handler) => void (mesh.receive = handler),
      onPeerConnected: (handler) => void (mesh.connected = handler),
      connectedPeers: () => view.relays.flatMap((_, i) => (i !== me && peerAt(i) && cluster.linked(this.index, (peerAt(i) as SimRelay).index) ? [i] : [])),
      queuedBytes: () => 0,
    }
    // What the node sends goes through `outward`: the honest mesh, or a Byzantine one around it (see misbehave).
    let outward = honest
    let receiver: ((from: number, frame: Uint8Array) => void) | undefined
    const towardsPeers = (strategy: ByzantineStrategy | undefined): void => {
      outward = strategy ? byzantineMesh(honest, strategy, { me, committee: committeeOf(view, stored.epoch), secretKey: (key as RelayKey).secretKey, crypto: SIGNING }) : honest
      // The Byzantine mesh watches what arrives too (split-refusal answers with what peers sent).
      if (receiver) outward.onFrame(receiver)
    }
    towardsPeers(this.strategy)
    const node = new RelayNode({
      cluster: stored.cluster,
      ...(stored.epoch ? { epoch: stored.epoch } : {}),
      // The epoch ended: the relay stops and starts again on its store, as the next epoch's.
      onEpochEnd: () => void this.nextEpoch().catch((err: unknown) => cluster.fail(err)),
      me,
      secretKey: (key as RelayKey).secretKey,
      storage: { kv: this.kv, journal: this.journal },
      clock,
      mesh: {
        ...honest,
        send: (to, frame) => outward.send(to, frame),
        broadcast: (frame) => outward.broadcast(frame),
        onFrame: (handler) => outward.onFrame((receiver = handler)),
      },
      logger: pino({ level: 'silent' }),
      leaderTimeoutMs: 300,
      syncIntervalMs: 500,
      ...this.more,
      onFatal: (err) => cluster.fail(err),
    })
    // The cluster's admission rule, before the node's own door (what a session submits goes through here).
    const submit = node.submit.bind(node)
    node.submit = (frame, ...rest) => {
      const env = openEnvelope(frame)
      const reason = env && cluster.refuse(env)
      if (env && reason) throw new SteadError(reason, `${env.authorId}:${env.seq} is refused by the cluster's rule`)
      if (env && cluster.censor(env)) return { status: 'queued', idHex: env.idHex, stopWatching: () => undefined }
      return submit(frame, ...rest)
    }
    // Always a liar, honest while it has no lies: a test may make it lie mid-session.
    const liar = new ClientFacingLiar(this.lies, { secretKey: (key as RelayKey).secretKey, relayKeys: cluster.config.relays.map((r) => r.publicKey), setTimeout: (fn, ms) => clock.setTimer(ms, fn) })
    const { app, sessions } = await buildApi(node, { logger: pino({ level: 'silent' }), liar })
    this.ranWith = key as RelayKey
    // Known (its committee, its mesh) while it starts; reached by peers and clients once started, as before.
    this.running = { node, app, sessions, liar, epoch, wires: new Set(), view, indexOf: new Map(view.relays.map((r, i) => [toHex(r.publicKey), i])), mesh, towardsPeers, key: this.ranWith, started: false }
    // What a test changed while the relay was being built holds from now on.
    liar.tell(this.lies)
    towardsPeers(this.strategy)
    try {
      await node.start()
    } catch (err) {
      this.running = undefined
      throw err
    }
    if (this.running?.epoch === epoch) this.running.started = true
    this.watchEpochs(epoch, clock)
    this.peersBack()
  }

  /**
   * This relay's operator backs `next` as the committee of epoch `epoch`
   * (see committee-proposals.ts): an envelope of the relay's own key in
   * `$committee`, submitted to it. Resolves once the relay decided it.
   */
  async backCommittee(epoch: number, next: RelayCommittee): Promise<void> {
    // As `stead-relay committee` does: the relay says what its next request takes.
    const seq = this.node.committeeChange().members.find((m) => m.publicKey === toHex(this.publicKey))?.nextSeq ?? 1
    const key = backingKey(authorIdOf(nodeCrypto, this.publicKey))
    const env = await sealEnvelope(nodeCrypto, { secretKey: this.secretKey, publicKey: this.publicKey }, { space: COMMITTEE_SPACE, seq, clock: clockInit(), deps: [], updates: [{ key, decl: { type: 'register' }, ops: [['s', encodeCommitteeRequest({ epoch, next }), Math.floor(this.cluster.now)]] }], safe: [] })
    const ran = this.running
    let decided = false
    this.node.submit(encodeEnvelope(env), 'operator', () => void (decided = true))
    // The backing that decides the change ends the epoch: the relay starts again as the next epoch's, and the
    // answer to this submit may never come. As `stead-relay committee` does, it looks at the relay instead.
    await this.cluster.until(`${this.id}'s backing of epoch ${epoch} decided`, () => decided || this.running !== ran || ran?.node.committeeChange().decided !== null || undefined)
  }

  /** At an epoch's end: the relay stops in good order (its clients' sockets drop, they reconnect) and starts as the next epoch's. */
  private async nextEpoch(graceOver = false): Promise<void> {
    const run = this.running
    if (!run || (run.leaving && !graceOver)) return
    // Left out of the next committee: it goes on serving the certificate for a while (as runRelay's
    // leaveGraceMs), so that a peer that missed its vote takes it from here.
    const next = storedEpoch(this.kv, this.cluster.config).cluster
    if (!graceOver && !next.relays.some((r) => this.holds(r.publicKey))) {
      run.leaving = true
      return this.cluster.later(LEAVE_GRACE_MS, () => void (this.running === run && this.nextEpoch(true).catch((err: unknown) => this.cluster.fail(err))))
    }
    this.running = undefined
    this.epoch++
    for (const w of run.wires) w.cut()
    await run.app.close()
    await run.node.stop()
    // A relay the new committee does not list leaves (see up): its operator retires the machine.
    await this.up()
  }

  /** The longest chain of epoch certificates a running relay holds (what `GET /v1/epochs` of each would say). */
  private longestPeerChain(): EpochCertificate[] {
    // Running, or starting again as the next epoch's (its store has the certificate by then).
    return this.cluster.relays.filter((r) => r !== this && r.running).map((r) => storedChain(r.kv)).reduce((a, b) => (b.length > a.length ? b : a), [])
  }

  /**
   * Every few seconds: whether a peer is in a later epoch than this relay
   * (it was cut off while the others ended the epoch, and they no longer
   * serve that epoch's blocks). It then starts again in the epoch they
   * certified, as a relay process asking its peers' /v1/epochs does.
   */
  private watchEpochs(run: number, clock: HostClock): void {
    clock.setTimer(EPOCH_POLL_MS, () => {
      if (this.running?.epoch !== run) return
      const mine = (this.running.node.status()['epoch'] as number) ?? 0
      if (this.longestPeerChain().length > mine) void this.nextEpoch().catch((err: unknown) => this.cluster.fail(err))
      else this.watchEpochs(run, clock)
    })
  }

  /** The relay's machine dies: no flush, no goodbye; its clients' sockets drop. */
  async down(): Promise<void> {
    const run = this.running
    if (!run) return
    this.running = undefined
    this.epoch++
    for (const w of run.wires) w.cut()
    // Writes the dead process still issues land in a journal nobody reads again; its timers and frames are void (epoch).
    this.journal = new MemoryJournal(this.journal.survivors())
    await run.app.close()
  }

  /** Closes every client session as the relay would drop them (the clients reconnect). */
  dropClients(): void {
    for (const w of this.running?.wires ?? []) w.cut()
  }

  /** @internal A client's socket reached this relay: false when it is down. */
  accept(wire: Wire): boolean {
    const run = this.running
    if (!run?.started) return false
    run.wires.add(wire)
    run.sessions.open(this.counted(wire), `client-${run.wires.size}`)
    return true
  }

  /** @internal Peers that can reach this relay now hear it is (back) up, and it hears of them. */
  peersBack(): void {
    for (const peer of this.cluster.relays) {
      if (!this.cluster.linked(this.index, peer.index)) continue
      // Each hears of the other under the index its own committee gives it (none: not its peer).
      const mine = this.indexOf(peer.publicKey)
      const theirs = peer.indexOf(this.publicKey)
      if (theirs >= 0) peer.running?.mesh.connected?.(theirs)
      if (mine >= 0) this.running?.mesh.connected?.(mine)
    }
  }

  /** A frame to a peer: it takes it as from this relay's index in its own committee, as a mesh authenticated by keys does (none: dropped). */
  private transmit(peer: SimRelay | undefined, frame: Uint8Array, alive: () => boolean): void {
    const cluster = this.cluster
    if (!peer || !alive() || !cluster.linked(this.index, peer.index)) return
    const copy = Uint8Array.from(frame)
    // Signed with the key it runs with now: the peer knows the sender by that.
    const sender = this.publicKey
    cluster.schedule(cluster.now + cluster.delay(), () => {
      const from = peer.indexOf(sender)
      if (from >= 0 && cluster.linked(this.index, peer.index)) peer.running?.mesh.receive?.(from, copy)
    })
  }

  /** Whether a session of the client with `authorId` takes envelope frames from this relay (its frame source), not attestations only. */
  sendsFramesTo(authorId: string): boolean {
    return [...(this.running?.wires ?? [])].some((w) => w.relay.open && this.heard.get(w)?.authorId === authorId && this.heard.get(w)?.frames === true)
  }

  /**
   * Sends `env` to the clients that take envelope frames here, as a fresh
   * envelope, without ordering it: a relay that shows what it then loses.
   */
  showOnly(env: Envelope): void {
    const frame = encodeRelayMessage({ type: 'envelope', space: env.space, envelope: encodeEnvelope(env) })
    for (const w of this.running?.wires ?? []) if (w.relay.open && this.heard.get(w)?.frames) w.relay.send(frame, () => undefined)
  }

  /** From now on nothing this relay sends its current clients arrives (the network vanished under their sockets, which stay open). */
  silence(): void {
    for (const w of this.running?.wires ?? []) this.muted.add(w)
  }

  /** The wire's relay end, counting what the session sends its client and the envelopes it submits, and noting who it is and how it follows. */
  private counted(wire: Wire): Wire['relay'] {
    const socket = wire.relay
    const all = this.traffic
    const byClient = this.trafficOf
    const submitted = this.cluster.submitted
    const heard = { authorId: undefined as string | undefined, frames: false }
    const counters = (): ClientTraffic[] => {
      if (heard.authorId === undefined) return [all]
      let mine = byClient.get(heard.authorId)
      if (!mine) byClient.set(heard.authorId, (mine = noTraffic()))
      return [all, mine]
    }
    this.heard.set(wire, heard)
    return Object.assign(Object.create(socket) as Wire['relay'], {
      onMessage: (handler: (data: Uint8Array, isBinary: boolean) => void) =>
        socket.onMessage((data, isBinary) => {
          try {
            const m = decodeClientMessage(data)
            if (m.type === 'submit') {
              const env = openEnvelope(m.envelope)
              if (env && !submitted.has(env.idHex)) submitted.set(env.idHex, env)
            }
            if (m.type === 'hello') heard.authorId = authorIdOf({ sha256: (b) => nodeCrypto.sha256(b) }, m.publicKey)
            if (m.type === 'subscribe') heard.frames = m.frames !== false
            if (m.type === 'pace') for (const t of counters()) t.paces++
          } catch {
            // Not a message: the session refuses it.
          }
          handler(data, isBinary)
        }),
      send: (frame: Uint8Array, written: () => void) => {
        // Into the void: written as far as the relay can tell.
        if (this.muted.has(wire)) return written()
        try {
          const m = decodeRelayMessage(frame)
          for (const traffic of counters()) {
            if (m.type === 'envelope') traffic.envelopes++
            if (m.type === 'commit') {
              traffic.commits++
              traffic.envelopes += m.envelopes.filter((e) => e.length !== ENVELOPE_REF_BYTES).length
            }
            if (m.type === 'attest') traffic.attests++
            if (m.type === 'delta') traffic.deltas++
            traffic.bytes += frame.length
          }
        } catch {
          // Junk a lying relay sends: not counted.
        }
        socket.send(frame, written)
      },
    })
  }
}
