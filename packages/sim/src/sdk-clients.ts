import { createClient, memoryStorage, SteadError, type ClientStorage, type SafeResult, type Space, type SteadClient } from '@stead/client'
import { decodeRelayMessage, toHex, type Crypto, type HostClock } from '@stead/core'
import type { Rng } from './rng.ts'
import { Violation } from './violation.ts'
import { Wire, type WireWorld } from './wire.ts'
import { SPACE, sdkClientSecret } from './workload.ts'

/** What the SDK clients need of the run, and what their checkers compare with. */
export interface ClientWorld extends WireWorld {
  readonly f: number
  readonly relays: number
  /** Starts relay `relay`'s session on `wire` if its machine is up (false: nobody answers). */
  accept(relay: number, wire: Wire, address: string): boolean
  isByzantine(relay: number): boolean
  /** The stable index and state hash (hex) correct relays attested for the commit at `round`, if they attested one there. */
  attestedState(round: number): { readonly index: number; readonly hash: string } | undefined
  /** The author of the envelope the stable order committed at `index`. */
  committedAuthor(index: number): string | undefined
  /** Whether the stable order decided (rejected or dropped) an envelope of `authorId` without committing it. */
  refusedAny(authorId: string): boolean
  /** Relays whose stored attestations reach stable index `index`: all of them, and the correct ones. */
  attestedUpTo(index: number): { readonly all: number; readonly correct: number }
  /** The stable index the attested commits lead to so far, and the state hash (hex) there. */
  latestIndex(): number
  latestHash(): string
}

export interface SdkClientOptions {
  readonly count: number
  /** Updates each client makes over the run. */
  readonly updates: number
  readonly durationMs: number
  /** Whether one client crashes (dropped without closing) and restarts on its storage. */
  readonly crash: boolean
  /** Weakens the clients: they are told the cluster tolerates f = 0, so one relay's attestation is a quorum (to prove the checkers catch it). */
  readonly weak?: boolean
  /** Whether client 0 reads at a freshness bound (BENDY's live stream, drawn from 100 ms to 2 s), and makes a quarter of the updates: paced deltas while it has nothing undecided. */
  readonly paced?: boolean
  readonly crypto: Crypto
}

/** One simulated device: its storage and key outlive a crash; the SteadClient over them does not. */
interface Device {
  readonly id: number
  readonly storage: ClientStorage
  readonly secretKey: Uint8Array
  authorId: string | undefined
  /** Bumped at each crash: the old client's timers and frames are void. */
  epoch: number
  client: SteadClient | undefined
  space: Space | undefined
  readonly wires: Set<Wire>
  /** Its own counter: increments whose promise resolved (stored), and all it made. */
  acked: number
  issued: number
  /** The round of the commit whose state the checkers last compared. */
  checkedRound: number
}

/** SIM_TRACE=1 prints what the clients are told of errors. */
const TRACE = Boolean(process.env.SIM_TRACE)

const OWN = (id: number): string => `sdk:own:${id}`
const SHARED = 'sdk:shared'
const ACCOUNT = 'sdk:acct'

const urlOf = (relay: number): string => `ws://r${relay}.sim:1`
function isDelta(frame: Uint8Array): boolean {
  try {
    return decodeRelayMessage(frame).type === 'delta'
  } catch {
    return false
  }
}
function relayOfUrl(url: string): number {
  const m = /^ws:\/\/r(\d+)\.sim/.exec(url)
  if (!m) throw new Violation(`a client dialled ${url}, not a relay of the run`)
  return Number(m[1])
}

/**
 * Real SDK clients (`createClient`, memory storage) in the simulated world:
 * their timers run on simulated time, their WebSockets are Wires into real
 * relay sessions. Each makes regular and safe updates; the checkers hold
 * them to the client's guarantees as the run goes and at its end:
 *
 * - the stable state a client holds after each commit is the one correct
 *   relays attested for it (it applies nothing f+1 of them did not sign);
 * - a safe update resolves committed only at the index where the stable
 *   order committed its author's envelope, once 2f+1 relays (f+1 of them
 *   correct) attested it; rejected only if the order refused one of its
 *   author's envelopes;
 * - every relay a client blames is Byzantine;
 * - once the run is quiet, each client's prospective state equals its
 *   stable state, which is the latest attested one (G5);
 * - increments a client acknowledged before a crash are in the stable
 *   state after its restart (none lost), and nothing it never made is.
 */
export class SdkClients {
  private readonly devices: Device[] = []
  private readonly world: ClientWorld
  private readonly rng: Rng
  private readonly o: SdkClientOptions
  private readonly cluster: unknown
  /** Safe updates resolved, by outcome. */
  readonly safeOutcomes = { committed: 0, rejected: 0 }
  /** Relays some client found lying ("client:relay"), all Byzantine (else the run failed). */
  private readonly blames = new Set<string>()
  /** Client 0's freshness bound, when it is paced. */
  private readonly freshnessMs: number
  /** Paced deltas that reached client 0. */
  pacedDeltas = 0

  constructor(world: ClientWorld, rng: Rng, o: SdkClientOptions, relayKeys: readonly Uint8Array[]) {
    this.world = world
    this.rng = rng
    this.o = o
    this.freshnessMs = o.paced ? rng.int(100, 2000) : 0
    this.cluster = {
      f: o.weak ? 0 : world.f,
      relays: relayKeys.map((publicKey, i) => ({ id: `r${i}`, publicKey: toHex(publicKey), api: urlOf(i) })),
    }
    for (let id = 0; id < o.count; id++) {
      const secretKey = sdkClientSecret(id)
      this.devices.push({ id, storage: memoryStorage(), secretKey, authorId: undefined, epoch: 0, client: undefined, space: undefined, wires: new Set(), acked: 0, issued: 0, checkedRound: 0 })
    }
  }

  /** Opens every client and plans their updates, crash and restart. */
  async start(): Promise<void> {
    for (const d of this.devices) await this.open(d)
    const { durationMs } = this.o
    for (const d of this.devices) {
      // The paced reader writes a quarter as much: paced most of the run, following every commit while its own are undecided.
      const updates = d.id === 0 && this.o.paced ? Math.ceil(this.o.updates / 4) : this.o.updates
      for (let i = 0; i < updates; i++) {
        const at = durationMs * (0.02 + 0.58 * this.rng.next())
        this.world.schedule(at, null, () => this.update(d))
      }
    }
    if (this.o.crash && this.devices.length > 0) {
      const d = this.rng.pick(this.devices)
      const at = durationMs * (0.15 + 0.3 * this.rng.next())
      this.world.schedule(at, null, () => this.crash(d))
      this.world.schedule(at + 200 + this.rng.exp(1500), null, () => void this.open(d))
    }
  }

  private async open(d: Device): Promise<void> {
    const epoch = d.epoch
    const world = this.world
    const clock: HostClock = {
      // Whole milliseconds, as Date.now gives.
      now: () => Math.floor(world.now()),
      setTimer(ms, fn) {
        const timer = { cancelled: false }
        world.schedule(world.now() + Math.max(0, ms), null, () => {
          if (!timer.cancelled && d.epoch === epoch) fn()
        })
        return { cancel: () => void (timer.cancelled = true) }
      },
    }
    const client = await createClient({
      relays: Array.from({ length: world.relays }, (_, i) => urlOf(i)),
      cluster: this.cluster,
      storage: d.storage,
      identity: { secretKey: d.secretKey },
      crypto: this.o.crypto,
      clock,
      random: () => this.rng.next(),
      connect: (url) => this.dial(d, epoch, url).client,
      // No HTTP here: reads that need it (snapshots after pruning, quorum reads) fail at once, deterministically.
      fetch: () => Promise.reject(new Error('no HTTP in the simulator')),
      safeTimeoutMs: Number.POSITIVE_INFINITY,
    })
    if (d.epoch !== epoch) return
    if (TRACE) client.onError((err) => console.log(`  t=${world.now().toFixed(0)} client ${d.id}: ${err.reason}: ${err.message}`))
    d.client = client
    d.authorId = client.authorId
    d.space = await client.space(SPACE)
    if (d.id === 0 && this.o.paced) d.space.setFreshness(this.freshnessMs)
  }

  private dial(d: Device, epoch: number, url: string): Wire {
    const relay = relayOfUrl(url)
    const wire = new Wire(this.world, relay)
    if (d.epoch !== epoch) return wire
    if (d.id === 0 && this.o.paced) wire.tap = (frame) => void (isDelta(frame) && this.pacedDeltas++)
    d.wires.add(wire)
    this.world.schedule(this.world.now() + this.world.delay(), null, () => {
      if (d.epoch !== epoch) return
      // A relay that is down opens and closes at once: the client sees a session closed before its welcome
      // (a real WebSocket would only close; both end in the link's retry).
      wire.opened()
      if (!this.world.accept(relay, wire, `client-${d.id}`)) wire.refused()
    })
    return wire
  }

  /** The device dies: no close, no flush; its sockets drop and its storage keeps what it wrote. */
  private crash(d: Device): void {
    d.epoch++
    d.client = undefined
    d.space = undefined
    for (const w of d.wires) w.clientGone()
    d.wires.clear()
  }

  private update(d: Device): void {
    const space = d.space
    if (!space) return
    const r = this.rng.next()
    if (r < 0.4) {
      const n = this.rng.int(1, 3)
      d.issued += n
      space
        .counter(OWN(d.id))
        .increment(n)
        .then(() => void (d.acked += n))
        .catch(() => undefined)
    } else if (r < 0.6) {
      void space.counter(SHARED).increment(1).catch(() => undefined)
    } else {
      const account = space.counter(ACCOUNT, { min: 0 })
      const safe = r < 0.8 ? account.decrement(this.rng.int(1, 3), { safe: true }) : account.increment(this.rng.int(1, 5), { safe: true })
      const authorId = d.authorId as string
      safe.then(
        (result) => this.checkSafe(d, authorId, result),
        (err: unknown) => {
          if (!(err instanceof SteadError) || (err.reason !== 'closed' && err.reason !== 'aborted')) this.fail(`client ${d.id}: a safe update failed: ${String(err)}`)
        },
      )
    }
  }

  private checkSafe(d: Device, authorId: string, result: SafeResult): void {
    this.safeOutcomes[result.status]++
    if (result.status === 'committed') {
      const author = this.world.committedAuthor(result.index)
      if (author !== authorId) this.fail(`client ${d.id}: a safe update resolved committed at stable index ${result.index}, where the stable order committed ${author === undefined ? 'nothing yet' : `author ${author.slice(0, 8)}'s envelope`}`)
      // A relay signs an attestation once it is stored (persist, then speak): 2f+1 signatures need 2f+1 relays that stored it, f+1 of them correct.
      const { all, correct } = this.world.attestedUpTo(result.index)
      if (all < 2 * this.world.f + 1 || correct < this.world.f + 1) this.fail(`client ${d.id}: a safe update resolved committed at stable index ${result.index} when ${all} relay(s), ${correct} of them correct, had attested it (2f+1 = ${2 * this.world.f + 1} needed, f+1 correct)`)
    } else if (!this.world.refusedAny(authorId)) {
      this.fail(`client ${d.id}: a safe update resolved rejected (${result.reason}) but the stable order refused no envelope of its author`)
    }
  }

  /** Checks each client's stable state and blame after a step of the run. */
  check(sha256: (b: Uint8Array) => Uint8Array): void {
    if (this.problem) throw this.problem
    for (const d of this.devices) {
      const space = d.space
      if (!space) continue
      const { lastRound, stableIndex } = space.position
      if (lastRound !== d.checkedRound) {
        d.checkedRound = lastRound
        const index = space.replica.stableIndex
        const hash = toHex(space.replica.stableHash(sha256))
        const attested = this.world.attestedState(lastRound)
        if (attested?.hash !== hash || attested.index !== index || stableIndex !== index) {
          throw new Violation(`client ${d.id}${d.epoch ? ' (restarted)' : ''} holds the commit of round ${lastRound} as stable index ${index} (position ${stableIndex}) with state ${hash.slice(0, 8)}; correct relays attested ${attested === undefined ? 'no commit there' : `index ${attested.index} with ${attested.hash.slice(0, 8)}`}`)
        }
      }
      for (const r of d.client?.status.relays ?? []) {
        if (r.faulty === undefined) continue
        const relay = relayOfUrl(r.url)
        if (!this.world.isByzantine(relay)) throw new Violation(`client ${d.id} blamed correct relay ${relay}: ${r.faulty}`)
        this.blames.add(`${d.id}:${relay}`)
      }
    }
  }

  /** How many times a client found a relay lying (each client and relay once). */
  get blamed(): number {
    return this.blames.size
  }

  /** Whether every client is up, has nothing undecided and holds the latest attested state (a commit that only parked envelopes leaves the index as it was): the run may end. */
  settled(sha256: (b: Uint8Array) => Uint8Array): boolean {
    const latest = this.world.latestIndex()
    const hash = this.world.latestHash()
    return this.devices.every((d) => d.space !== undefined && d.space.pendingUpdates().length === 0 && d.space.replica.stableIndex === latest && toHex(d.space.replica.stableHash(sha256)) === hash)
  }

  /** Why each client that is not settled is not, for a run that ended on the step limit. */
  unsettled(): string[] {
    const latest = this.world.latestIndex()
    return this.devices.flatMap((d) => {
      if (!d.space) return [`client ${d.id} down`]
      const pending = d.space.pendingUpdates().length
      const index = d.space.replica.stableIndex
      return pending || index !== latest ? [`client ${d.id}: ${pending} pending, stable index ${index} of ${latest}${d.client?.status.problem ? ` (${d.client.status.problem})` : ''}`] : []
    })
  }

  /** At the end of a quiet run: G5 and no acknowledged update lost. */
  finalChecks(sha256: (b: Uint8Array) => Uint8Array): void {
    const latest = { index: this.world.latestIndex(), hash: this.world.latestHash() }
    for (const d of this.devices) {
      const space = d.space
      if (!space) throw new Violation(`client ${d.id} is not running at the end of the run`)
      const replica = space.replica
      if (replica.stableIndex !== latest.index || toHex(replica.stableHash(sha256)) !== latest.hash) {
        throw new Violation(`client ${d.id} ended at stable index ${replica.stableIndex}, the attested commits at ${latest.index}`)
      }
      const pending = space.pendingUpdates().length
      if (pending) throw new Violation(`client ${d.id} ended with ${pending} update(s) undecided`)
      for (const key of replica.keys()) {
        // The workload's envelopes behind a gap, and a Byzantine client's twins, may never be ordered: they stay
        // pending until their wait expires (longer than a run). The clients' own keys have nothing pending.
        const pending = replica.pendingTouching(key).length
        if (pending && key.startsWith('sdk:')) throw new Violation(`client ${d.id}: ${pending} envelope(s) touching ${key} are still pending once the run is quiet`)
        if (pending) continue
        // A set's elements come in the order each replica added them: compared as sets.
        const plain = (v: unknown): string => (replica.declaration(key)?.type === 'set' && Array.isArray(v) ? JSON.stringify(v.map((e) => JSON.stringify(e)).sort()) : JSON.stringify(v ?? null))
        const stable = plain(replica.stable(key)?.value())
        const prospective = plain(replica.prospective(key)?.value())
        if (stable !== prospective) throw new Violation(`client ${d.id}: ${key} reads ${prospective.slice(0, 600)} prospectively and ${stable.slice(0, 600)} stable once the run is quiet (G5)`)
      }
      const own = (replica.stable(OWN(d.id))?.value() as number | undefined) ?? 0
      if (own < d.acked || own > d.issued) throw new Violation(`client ${d.id}'s own counter is ${own} in the stable state; it acknowledged ${d.acked} and made ${d.issued}`)
    }
  }

  /** A broken guarantee found inside a promise callback, where throwing would go nowhere: check() throws it. */
  private problem: Violation | undefined

  private fail(message: string): void {
    this.problem ??= new Violation(message)
  }
}
