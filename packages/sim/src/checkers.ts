import { ReliableReplica, SteadError, asSigned, attestedDecision, decode, decodeAttestation, encode, openEnvelopeSync, toHex, type AttestedDecision, type Envelope } from '@stead/core'
import { nodeCrypto } from '@stead/core/node'
import { STORE_TABLES, storeRecords, type Kv, type KvKey, type KvTable, type MemoryKv } from '@stead/relay'
import type { Committee, SyncCrypto } from '@stead/relay/consensus'
import { AttestedOrder } from './attested-order.ts'
import { PolicyOracle } from './policy-oracle.ts'
import { trace } from './trace.ts'
import { Violation } from './violation.ts'
import { ClockVoteCheck } from './clock-vote-check.ts'
import { SPACE, type Workload } from './workload.ts'

/**
 * What the storage checkers need of a simulated relay: what its disk holds,
 * and what they learned of it so far (kept on the relay's host, since a
 * restart resets it from what the disk kept).
 */
export interface CheckedRelay {
  readonly id: number
  /** Byzantine relays' stores are not checked (they may store anything). */
  readonly strategy: string | null
  readonly kv: MemoryKv
  /** The latest consensus commit (anchor round) the checkers saw this relay store. */
  checkedCommit: number
  /** Stable index of this relay's latest attestation. */
  stableIndex: number
  /** Envelopes this relay attested a decision for. */
  readonly decided: Set<string>
  /** Envelopes clients handed this relay since its last restart, with when: it owes a decision on each. */
  readonly accepted: Map<string, number>
}

/** What one write put and removed, by table. */
export interface Written {
  readonly puts: Map<string, Array<{ key: KvKey; value: Uint8Array }>>
  readonly removes: Map<string, KvKey[]>
}

/** A relay's disk as the checkers watch it: every write's puts and removes, by table, reported inside the write as the relay issues it. */
export function observed(kv: MemoryKv, onWrite: (written: Written) => void): Kv {
  let current: Written | undefined
  const log = <T>(into: Map<string, T[]> | undefined, name: string, item: T): void => {
    if (!into) return
    let list = into.get(name)
    if (!list) into.set(name, (list = []))
    list.push(item)
  }
  return {
    table<K extends KvKey>(name: string): KvTable<K> {
      const t = kv.table<K>(name)
      return {
        get: (key) => t.get(key),
        getRange: (range) => t.getRange(range),
        getKeys: (range) => t.getKeys(range),
        put(key, value) {
          t.put(key, value)
          log(current?.puts, name, { key, value })
        },
        remove(key) {
          t.remove(key)
          log(current?.removes, name, key)
        },
      }
    },
    write(fn) {
      const mine: Written = { puts: new Map(), removes: new Map() }
      // Checked inside the write, where reads see it (outside, only what is durable): a write that
      // fails is not checked, and a violation aborts it.
      return kv.write(() => {
        current = mine
        try {
          fn()
        } finally {
          current = undefined
        }
        onWrite(mine)
      })
    },
    read: (fn) => kv.read(fn),
    close: () => kv.close(),
  }
}

/**
 * The storage checkers: they read what each relay stores and attests, as
 * its peers and clients would, and keep the one sequence of commits and
 * attestations every correct relay must agree on, with a client's replica
 * replaying it. They own that canonical record and the workload's ledger
 * (which envelopes are honest, which are twins, when one was first
 * accepted), so the simulator only tells them what happened.
 */
export class Checkers {
  /** The consensus commits (ordered block digests, envelope ids) by anchor round, and their order, as the first correct relay stored them. */
  private readonly canonicalCommits = new Map<number, string>()
  private readonly commitOrder: number[] = []
  private readonly commitIndex = new Map<number, number>()
  /** slot (round:author) → the block correct relays ordered for it: never two. */
  private readonly orderedSlots = new Map<string, string>()
  /** Attestation bytes by round, as the first correct relay signed them: the others must sign the same. */
  private readonly canonicalAttestations = new Map<number, string>()
  /** A client's replica replaying the attested commits: its state must hash to what was attested, and keep every invariant. */
  private readonly replica = new ReliableReplica({ space: SPACE })
  private replicaRound = 0
  private readonly committed = new Set<string>()
  private readonly decided = new Set<string>()
  /** Opened envelopes by frame hash: relays attest the same frames over and over. */
  private readonly envelopes = new Map<string, Envelope | SteadError>()
  /** What the attested commits lead to, for the SDK clients' checkers. */
  readonly attested = new AttestedOrder()
  /** The space's policy modelled apart from the audit: every attested verdict must agree with it. */
  readonly policy = new PolicyOracle(SPACE)
  /** What the run showed: committed envelopes by whether the audit verified their clock, and relays that started over from a checkpoint (as their stores show it). */
  readonly counts = { clocks: { verified: 0, unverified: 0 }, installs: 0 }
  /** The workload's ledger: honest envelopes, every envelope by id, the twins' pairs, when a correct relay first accepted each. */
  private readonly honest: Set<string>
  private readonly byId: Map<string, Envelope>
  private readonly twinIds: ReadonlyArray<readonly [string, string]>
  private readonly firstAccepted = new Map<string, number>()
  /** Verifies envelope signatures (the run's memo: the relays verified the same). */
  private readonly crypto: SyncCrypto
  /** Simulated time, for traces. */
  private readonly now: () => number
  /** Every clock vote of the run, against the stateful validator's rules. */
  readonly clockVotes: ClockVoteCheck

  /** `bound`: whether a relay's clock votes are held to the rules (correct, and still on the store it voted from). */
  constructor(workload: Workload, crypto: SyncCrypto, now: () => number, committee: Committee, bound: (relay: number) => boolean) {
    this.crypto = crypto
    this.now = now
    this.honest = new Set(workload.honest.flat().map((e) => e.idHex))
    this.byId = new Map([...workload.honest.flat(), ...workload.twins.flat(), ...workload.junk, ...workload.policy.flat()].map((e) => [e.idHex, e]))
    this.twinIds = workload.twins.map(([a, b]) => [a.idHex, b.idHex] as const)
    this.clockVotes = new ClockVoteCheck(committee, crypto, (idHex) => {
      const env = this.byId.get(idHex)
      return env && `${env.authorId}:${env.seq}`
    }, bound)
  }

  /** The replica's stable index and state hash: what an up-to-date client holds. */
  latestIndex(): number {
    return this.replica.stableIndex
  }

  latestHash(): string {
    return toHex(this.replica.stableHash((b) => nodeCrypto.sha256(b)))
  }

  /** The honest clients' envelopes (fillers in, the envelopes they replaced out). */
  get honestIds(): string[] {
    return [...this.honest]
  }

  /**
   * f+1 correct relays refused an honest client's envelope for good (its
   * author may no longer write): as the SDK does, the client takes its
   * sequence number with a filler, which nothing owes a decision for the
   * refused one, and the filler is owed one instead.
   */
  replaced(refused: string, filler: Envelope): void {
    this.honest.delete(refused)
    this.honest.add(filler.idHex)
    this.byId.set(filler.idHex, filler)
  }

  /** Whether the audit committed the envelope (clients stop resubmitting it once every correct relay decided it). */
  isCommitted(idHex: string): boolean {
    return this.committed.has(idHex)
  }

  /** A relay accepted an envelope from a client: if correct, it owes a decision, and so does the cluster. */
  noteAccepted(relay: CheckedRelay, idHex: string, at: number): void {
    relay.accepted.set(idHex, at)
    if (!relay.strategy && !this.firstAccepted.has(idHex)) this.firstAccepted.set(idHex, at)
  }

  /** What one write of a relay stores, as the checkers see it when the relay issues it (its disk may lose it at a crash: then the relay must redo it alike). */
  checkWrite(host: CheckedRelay, { puts, removes }: Written): void {
    if (host.strategy) {
      // Not checked (it may store anything), but what it attests counts towards the quorums clients gather.
      for (const { key, value } of puts.get(STORE_TABLES.attestations) ?? []) {
        if ((key as unknown[])[0] === SPACE) host.stableIndex = Math.max(host.stableIndex, decodeAttestation(storeRecords.attestation(value).attestation.bytes).toIndex)
      }
      return
    }
    // Starting over from a checkpoint (RelayStore.install) replaces every space's snapshot: the
    // commit records it writes are the checkpoint's window, which correct relays made.
    const installing = (puts.get(STORE_TABLES.snapshotHead) ?? []).some((p) => p.key === 'installed')
    if (installing) {
      trace(`t=${this.now().toFixed(0)} relay ${host.id} started over from a checkpoint`)
      // What clients handed it before is in the checkpoint's state, or theirs to resubmit.
      host.accepted.clear()
      this.counts.installs++
    }
    // A relay catching up far behind its peers may prune, in the write that commits a block, blocks that old.
    const pruned = new Set((removes.get(STORE_TABLES.blockDigests) ?? []).map(String))
    for (const { key, value } of puts.get(STORE_TABLES.commits) ?? []) this.checkCommit(host, key as number, value, !installing, pruned)
    const chunks = puts.get(STORE_TABLES.attestationChunks) ?? []
    // (A write's attestations follow its commits: see RelayStore.write.)
    for (const { key, value } of puts.get(STORE_TABLES.attestations) ?? []) {
      const [space, fromIndex, round] = key as [string, number, number]
      if (space !== SPACE) continue
      const frames = chunks.filter((c) => (c.key as unknown[])[1] === fromIndex && (c.key as unknown[])[2] === round).flatMap((c) => storeRecords.chunk(c.value))
      this.checkAttestation(host, value, frames)
    }
  }

  /**
   * Correct relays store the same sequence of commits (same blocks in the
   * same order, same envelopes) and never order two blocks of one slot.
   */
  private checkCommit(host: CheckedRelay, anchor: number, value: Uint8Array, madeHere: boolean, pruned: ReadonlySet<string>): void {
    const { ordered, payloadIds } = storeRecords.commit(value)
    const line = `${ordered.join(',')}|${payloadIds.join(',')}`
    trace(`t=${this.now().toFixed(0)} relay ${host.id} stored commit ${anchor}: ${ordered.length} blocks, ${payloadIds.length} envelopes`)
    const seen = this.canonicalCommits.get(anchor)
    if (seen === undefined) {
      // The first relay to commit at a round: after every commit correct relays made, never between.
      const last = this.commitOrder.at(-1) ?? 0
      if (anchor < last) throw new Violation(`relay ${host.id} committed at round ${anchor}, where the others made no commit (their commits go on to ${last})`)
      this.canonicalCommits.set(anchor, line)
      this.commitIndex.set(anchor, this.commitOrder.length)
      this.commitOrder.push(anchor)
    } else if (seen !== line) {
      throw new Violation(`relay ${host.id} commit at round ${anchor} is ${line.slice(0, 80)}, another relay's ${seen.slice(0, 80)}`)
    }
    const slots = host.kv.table<string>(STORE_TABLES.blockDigests)
    // (A checkpoint's window orders blocks this relay never had: the relays that made it stored them.)
    for (const digest of madeHere ? ordered : []) {
      const where = slots.get(digest)
      if (!where && pruned.has(digest)) continue
      if (!where) throw new Violation(`relay ${host.id} committed block ${digest.slice(0, 8)} at round ${anchor} without storing it`)
      const { round, author } = storeRecords.blockSlot(where)
      const slot = `${round}:${author}`
      const owner = this.orderedSlots.get(slot)
      if (owner !== undefined && owner !== digest) throw new Violation(`two blocks of relay ${author} round ${round} were ordered (${owner.slice(0, 8)} and ${digest.slice(0, 8)})`)
      this.orderedSlots.set(slot, digest)
    }
    host.checkedCommit = Math.max(host.checkedCommit, anchor)
  }

  /** Commits a relay made, as its store shows them: its position in the sequence every correct relay makes. */
  commitsOf(host: CheckedRelay): number {
    return host.checkedCommit === 0 ? 0 : (this.commitIndex.get(host.checkedCommit) ?? -1) + 1
  }

  /**
   * Correct relays sign the same attestation for each commit of the space
   * (same decisions, same stable index and state hash, same chain), and a
   * client replaying the attested commits reaches that state, keeping every
   * invariant.
   */
  private checkAttestation(host: CheckedRelay, value: Uint8Array, frames: readonly Uint8Array[]): void {
    const { bytes } = storeRecords.attestation(value).attestation
    const a = decodeAttestation(bytes)
    const hex = toHex(bytes)
    const seen = this.canonicalAttestations.get(a.round)
    if (seen === undefined) {
      if (a.prevRound !== this.replicaRound) throw new Violation(`relay ${host.id} attested round ${a.round} after round ${a.prevRound}, but the space's last attested commit was at round ${this.replicaRound}`)
      this.canonicalAttestations.set(a.round, hex)
      this.replay(host, a.round, frames, a.toIndex, toHex(a.stateHash), a.decisions)
    } else if (seen !== hex) {
      throw new Violation(`relay ${host.id} attested round ${a.round} (stable index ${a.fromIndex} -> ${a.toIndex}) differently from another relay`)
    }
    for (const d of a.decisions) host.decided.add(toHex(d[0]))
    host.stableIndex = a.toIndex
  }

  /** The checker replica applies one attested commit, as a client does, and must reach the attested state. */
  private replay(host: CheckedRelay, round: number, frames: readonly Uint8Array[], toIndex: number, stateHash: string, decisions: readonly AttestedDecision[]): void {
    const batch = frames.map((frame) => {
      const env = this.envelopeOf(frame)
      if (env instanceof SteadError) throw new Violation(`relay ${host.id} attested a commit carrying an invalid envelope (${env.reason})`)
      return env
    })
    const fromIndex = this.replica.stableIndex
    const result = this.replica.commit(batch, round)
    this.replicaRound = round
    // G4 and the audit: what the relays attest is what the audit decides (at most one of two twins committed).
    const decided = toHex(encode(result.decisions.filter((d) => d.kind !== 'superseded').map((d) => attestedDecision(d as Exclude<typeof d, { kind: 'superseded' }>))))
    if (decided !== toHex(encode(decisions))) throw new Violation(`relay ${host.id} attested decisions at round ${round} that the audit does not make`)
    this.policy.check(result.decisions)
    for (const d of result.decisions) {
      if (d.kind === 'committed') {
        this.committed.add(d.env.idHex)
        this.counts.clocks[d.clockVerified ? 'verified' : 'unverified']++
      }
      if (d.kind !== 'superseded') this.decided.add(d.env.idHex)
      // The clocks honest clients compose must never be judged bad, wherever their deps are.
      if (d.kind === 'dropped' && d.reason === 'bad-clock' && this.honest.has(d.env.idHex)) throw new Violation(`the audit refused honest envelope ${d.env.idHex.slice(0, 8)}'s clock: ${d.detail}`)
    }
    const hash = toHex(this.replica.stableHash((b) => nodeCrypto.sha256(b)))
    if (!this.attested.record(round, fromIndex, this.replica.stableIndex, hash, result.decisions)) throw new Violation(`the checker's stable index moved from ${fromIndex} to ${this.replica.stableIndex} at round ${round}, not by the envelopes it committed`)
    if (this.replica.stableIndex !== toIndex || hash !== stateHash) {
      throw new Violation(`relay ${host.id} attested stable index ${toIndex} with state ${stateHash.slice(0, 8)} at round ${round}; replaying the attested commits gives ${this.replica.stableIndex} with ${hash.slice(0, 8)}`)
    }
    for (const key of this.replica.keys()) {
      if (this.replica.stable(key)?.invariantsHold() === false) throw new Violation(`stable ${key} breaks its invariant after round ${round}`)
    }
  }

  private envelopeOf(frame: Uint8Array): Envelope | SteadError {
    const key = toHex(nodeCrypto.sha256(frame))
    let v = this.envelopes.get(key)
    if (v === undefined) {
      try {
        v = openEnvelopeSync({ sha256: (d) => nodeCrypto.sha256(d), verify: (pk, msg, sig) => this.crypto.verify(pk, msg, sig) }, asSigned(decode(frame)))
      } catch (err) {
        if (!(err instanceof SteadError)) throw err
        v = err
      }
      this.envelopes.set(key, v)
    }
    return v
  }

  /**
   * The end of a run: progress and liveness, over the correct relays that
   * are up. `progressMark`: each relay's commits when the run turned quiet,
   * if it had work then; `quietFrom`: when it did.
   */
  finalChecks(correct: readonly CheckedRelay[], progressMark: ReadonlyArray<number | null> | null, endedIdle: boolean, quietFrom: number): void {
    // An idle cluster sends nothing: a correct relay left behind when the work stopped must still catch up
    // with every commit that carried envelopes (one left without an empty last commit has nothing to lose:
    // it decides that slot once there is work, and idle relays do not propose for an empty one).
    const last = this.commitOrder.findLast((anchor) => !(this.canonicalCommits.get(anchor) as string).endsWith('|')) ?? 0
    for (const h of endedIdle ? correct : []) {
      if (h.checkedCommit < last) throw new Violation(`relay ${h.id} ended behind: its last commit is at round ${h.checkedCommit}, the others' last with envelopes at ${last}`)
    }
    for (const h of correct) {
      const mark = progressMark?.[h.id]
      if (mark !== undefined && mark !== null && this.commitsOf(h) <= mark) throw new Violation(`relay ${h.id} had work but made no progress after the network healed (${this.commitsOf(h)} commits)`)
    }
    // G7: what a correct relay accepted from a client before the quiet period is decided by the end, and every
    // honest update its client kept resubmitting is committed.
    // (Not the Byzantine client's twins: it sends each once, and a relay owes nothing for one whose slot
    // its twin took, or that went in a block that expired unordered. Its author would have to resubmit.)
    const honest = this.honest
    for (const h of correct) {
      // Nor is an envelope behind a gap in its author's sequence decided until the gap fills or its wait runs out.
      const owed = [...h.accepted].filter(([id, at]) => {
        const env = this.byId.get(id) as Envelope
        return honest.has(id) && at < quietFrom && !h.decided.has(id) && env.seq <= this.replica.nextSeq(env.authorId)
      })
      if (owed.length) throw new Violation(`relay ${h.id} never decided ${owed.length} envelope(s) clients sent it before the quiet period, e.g. ${owed[0]?.[0].slice(0, 8)} (${this.decided.has(owed[0]?.[0] ?? '') ? 'decided' : 'undecided'} in the stable order)`)
    }
    // G4 of the audit itself (the relays attest what it decides, checked at each commit): of two twins, at most one committed.
    for (const [a, b] of this.twinIds) {
      if (this.committed.has(a) && this.committed.has(b)) throw new Violation(`both conflicting envelopes ${a.slice(0, 8)} and ${b.slice(0, 8)} entered the stable history`)
    }
    const lost = [...this.honest].filter((id) => (this.firstAccepted.get(id) ?? Infinity) < quietFrom && !this.decided.has(id))
    if (lost.length) throw new Violation(`${lost.length} honest envelope(s) accepted before the quiet period were never decided, e.g. ${lost[0]?.slice(0, 8)}`)
  }
}
