import { SteadError, bytesEqual, decode, encode, expect, type Signed } from '@stead/core'
import type { Committee, SyncCrypto } from './messages.ts'

/**
 * Relay checkpoints: how a relay that fell behind past its peers' block
 * retention gets back in without the history it missed.
 *
 * Every relay takes a checkpoint at the first commit whose leader round
 * reaches a multiple of the cluster's `checkpointRounds`. Those commits are
 * the same on every correct relay (they follow the committed order), and so
 * is what a checkpoint holds: the consensus commit records the core needs
 * to go on ordering (the last GC window of them) and, per space, the hash
 * of its canonical audit state and the round of its latest attestation.
 * The relay signs a statement naming the checkpoint's round and the hash
 * of that manifest. A relay that needs one believes a manifest once f+1
 * relays (so at least one correct) signed statements with its hash, and
 * each space's audit state once it hashes to what the manifest lists:
 * the peer that sends the bytes need not be trusted.
 */

const MANIFEST_TAG = 'stead/checkpoint/v1'
const STATEMENT_TAG = 'stead/checkpoint-statement/v1'

/** One consensus commit record, as the core persists it and recovers from it. */
export interface CommitRecord {
  readonly anchorRound: number
  /** Digests (hex) of the blocks the commit ordered. */
  readonly ordered: readonly string[]
  /** Ids (hex) of the envelopes it ordered for the first time: the dedupe window. */
  readonly payloadIds: readonly string[]
}

/** One space in a checkpoint: its audit state's hash, the round of its latest attestation, and the user it is charged to (see SpaceQuota), if any. */
export interface CheckpointSpace {
  readonly space: string
  readonly stateHash: Uint8Array
  readonly lastAttested: number
  readonly starter?: string
}

/** What a checkpoint holds besides the spaces' states: see the module comment. */
export interface CheckpointManifest {
  readonly anchorRound: number
  /** The commit records of the last GC window, oldest first. */
  readonly commits: readonly CommitRecord[]
  /** Every space, sorted by name. */
  readonly spaces: readonly CheckpointSpace[]
}

/** A relay's signed word that the checkpoint at `anchorRound` has the manifest hashing to `digest`. */
export interface CheckpointStatement {
  readonly author: number
  readonly anchorRound: number
  readonly digest: Uint8Array
  readonly signed: Signed
}

/** Whether a commit at `anchorRound`, after one at `previous`, is where a checkpoint is taken. */
export function isCheckpointCommit(previous: number, anchorRound: number, every: number): boolean {
  return Math.floor(anchorRound / every) > Math.floor(previous / every)
}

export function encodeManifest(m: CheckpointManifest): Uint8Array {
  return encode([MANIFEST_TAG, m.anchorRound, m.commits.map((c) => [c.anchorRound, c.ordered, c.payloadIds]), m.spaces.map((s) => (s.starter === undefined ? [s.space, s.stateHash, s.lastAttested] : [s.space, s.stateHash, s.lastAttested, s.starter]))])
}

/**
 * Reads a manifest a peer sent (its hash was checked against f+1
 * statements first, so its shape is the only question left).
 *
 * @throws SteadError `malformed`.
 */
export function decodeManifest(bytes: Uint8Array): CheckpointManifest {
  const v = expect.array(decode(bytes, 1024 * 1024 * 1024), 'manifest', 4)
  if (v.length !== 4 || v[0] !== MANIFEST_TAG) throw new SteadError('malformed', `not a ${MANIFEST_TAG}`)
  const commits = expect.array(v[2], 'manifest.commits', 1_000_000).map((c, i): CommitRecord => {
    const [round, ordered, ids] = expect.array(c, `commits[${i}]`, 3)
    const hexList = (x: unknown, field: string) => expect.array(x, field, 10_000_000).map((h, j) => expect.string(h, `${field}[${j}]`, 64, 64))
    return { anchorRound: expect.uint(round, `commits[${i}].anchorRound`), ordered: hexList(ordered, `commits[${i}].ordered`), payloadIds: hexList(ids, `commits[${i}].payloadIds`) }
  })
  const spaces = expect.array(v[3], 'manifest.spaces', 100_000_000).map((s, i): CheckpointSpace => {
    // A fourth element (the starter) only for a space charged to someone: older manifests have none.
    const [space, hash, lastAttested, starter] = expect.array(s, `spaces[${i}]`, 4)
    return {
      space: expect.string(space, `spaces[${i}].space`, 1024, 1),
      stateHash: expect.bytes(hash, `spaces[${i}].stateHash`, 32),
      lastAttested: expect.uint(lastAttested, `spaces[${i}].lastAttested`),
      ...(starter === undefined ? {} : { starter: expect.string(starter, `spaces[${i}].starter`, 256, 1) }),
    }
  })
  return { anchorRound: expect.uint(v[1], 'manifest.anchorRound'), commits, spaces }
}

export function signStatement(crypto: SyncCrypto, secretKey: Uint8Array, author: number, anchorRound: number, digest: Uint8Array): CheckpointStatement {
  const bytes = encode([STATEMENT_TAG, author, anchorRound, digest])
  return { author, anchorRound, digest, signed: { bytes, sig: crypto.sign(secretKey, bytes) } }
}

/**
 * Opens a statement: shape and its author's signature.
 *
 * @throws SteadError `malformed`, `unauthorized` (not a committee member) or `bad-signature`.
 */
export function openStatement(crypto: SyncCrypto, committee: Committee, signed: Signed): CheckpointStatement {
  const v = expect.array(decode(signed.bytes, 4096), 'statement', 4)
  if (v.length !== 4 || v[0] !== STATEMENT_TAG) throw new SteadError('malformed', `not a ${STATEMENT_TAG}`)
  const author = expect.uint(v[1], 'statement.author')
  const key = committee.keys[author]
  if (!key) throw new SteadError('unauthorized', `checkpoint statement by relay ${author}, not in the committee`)
  const statement = { author, anchorRound: expect.uint(v[2], 'statement.anchorRound'), digest: expect.bytes(v[3], 'statement.digest', 32), signed }
  if (!crypto.verify(key, signed.bytes, signed.sig)) throw new SteadError('bad-signature', `checkpoint statement of relay ${author} has a bad signature`)
  return statement
}

/** A verified space of a checkpoint being fetched: its audit state, decoded by the caller's `openState`. */
export interface FetchedSpace<S> {
  readonly space: string
  readonly lastAttested: number
  readonly starter?: string
  readonly state: S
}

/** A checkpoint fetched and checked whole: the manifest (vouched for by f+1) and every space's state. */
export interface FetchedCheckpoint<S> {
  readonly manifest: CheckpointManifest
  readonly manifestBytes: Uint8Array
  /** sha256 of the manifest's bytes, as the statements sign it. */
  readonly digest: Uint8Array
  /** The f+1 statements that vouch for it. */
  readonly statements: readonly CheckpointStatement[]
  readonly spaces: ReadonlyArray<FetchedSpace<S>>
}

/** What the fetcher wants sent: ask a peer for the manifest (from = 0) and spaces from `from` on. */
export interface PartRequest {
  readonly to: number
  readonly anchorRound: number
  readonly from: number
}

/** A part of a checkpoint as a peer served it. */
export interface CheckpointPart {
  readonly anchorRound: number
  readonly from: number
  /** Whether the peer still holds that checkpoint (it keeps only its latest). */
  readonly held: boolean
  /** The manifest's bytes, in the part from 0. */
  readonly manifest: Uint8Array | null
  /** Encoded audit states of the manifest's spaces from `from` on, in its order. */
  readonly states: readonly Uint8Array[]
}

/**
 * The fetching side, sans I/O: collects statements until f+1 relays vouch
 * for one checkpoint newer than the one this relay has (or one relay
 * holds the `certified` one: the checkpoint an epoch started from, whose
 * digest 2f+1 of the committee before signed), then pulls its parts from
 * one of them, checking each against what was vouched for. A
 * part that does not check out, or a peer that no longer holds the
 * checkpoint, moves it to the next voucher; `restart` (the caller's timer)
 * starts over from the statements.
 *
 * `openState` decodes one space's audit-state bytes and returns the state
 * with its hash and stable index (it throws on bytes that are not one).
 */
export class CheckpointFetch<S> {
  private readonly statements = new Map<number, CheckpointStatement>()
  private target: { readonly anchorRound: number; readonly digest: Uint8Array; readonly vouchers: readonly CheckpointStatement[] } | undefined
  private source = 0
  /** Sources that failed since the target was chosen: once every voucher did, start over. */
  private failures = 0
  private manifest: { readonly value: CheckpointManifest; readonly bytes: Uint8Array } | undefined
  private readonly spaces: Array<FetchedSpace<S>> = []
  /** Peers caught sending what f+1 did not vouch for, with why. */
  readonly faults: Array<{ readonly relay: number; readonly reason: string }> = []

  private readonly committee: Committee
  private readonly sha256: (bytes: Uint8Array) => Uint8Array
  /** Checkpoints at or below this round are of no use (the relay is already there). */
  private readonly above: number
  private readonly openState: (bytes: Uint8Array) => { readonly state: S; readonly space: string; readonly hash: Uint8Array }
  /**
   * A checkpoint already vouched for by an epoch certificate: a relay
   * joining the epoch takes it from any one peer that holds it. Waiting
   * for f+1 of the new committee could wait for ever: in a committee that
   * grows, its new members hold nothing yet, and old ones may be down.
   */
  private readonly certified: CertifiedCheckpoint | undefined

  constructor(
    committee: Committee,
    sha256: (bytes: Uint8Array) => Uint8Array,
    above: number,
    openState: (bytes: Uint8Array) => { readonly state: S; readonly space: string; readonly hash: Uint8Array },
    certified?: CertifiedCheckpoint,
  ) {
    this.committee = committee
    this.sha256 = sha256
    this.above = above
    this.openState = openState
    this.certified = certified
  }

  /** The round of the checkpoint being pulled, once f+1 vouch for one (or one holds the certified one). */
  get anchorRound(): number | undefined {
    return this.target?.anchorRound
  }

  /** A verified statement from a peer; returns the first request once f+1 vouch for one checkpoint, or one holds the certified one. */
  statement(s: CheckpointStatement): PartRequest | undefined {
    if (s.anchorRound <= this.above) return undefined
    const held = this.statements.get(s.author)
    if (!held || held.anchorRound < s.anchorRound) this.statements.set(s.author, s)
    if (this.target) return undefined
    const same = [...this.statements.values()].filter((x) => x.anchorRound === s.anchorRound && bytesEqual(x.digest, s.digest))
    const certified = this.certified !== undefined && s.anchorRound === this.certified.anchorRound && bytesEqual(s.digest, this.certified.digest)
    if (!certified && same.length < this.committee.f + 1) return undefined
    this.target = { anchorRound: s.anchorRound, digest: s.digest, vouchers: same }
    this.source = 0
    this.failures = 0
    return this.request(0)
  }

  /**
   * A part from `from`: the next request, the whole checkpoint once every
   * space checked out, `askAgain` once every voucher failed (the caller asks
   * every peer for statements again), or nothing (not the part asked for).
   */
  part(relay: number, p: CheckpointPart): PartOutcome<S> {
    const t = this.target
    if (!t || p.anchorRound !== t.anchorRound || relay !== this.sourceRelay()) return {}
    const expected = this.manifest ? this.spaces.length : 0
    if (p.from !== expected) return {}
    if (!p.held) return this.nextSource(relay, null)
    if (!this.manifest) {
      if (!p.manifest || !bytesEqual(this.sha256(p.manifest), t.digest)) return this.nextSource(relay, `sent a checkpoint manifest for round ${t.anchorRound} that was not vouched for`)
      let value: CheckpointManifest
      try {
        value = decodeManifest(p.manifest)
      } catch (err) {
        // f+1 (or a certificate, 2f+1) vouched for these bytes, so a correct relay wrote them: this relay cannot read its peers.
        throw new SteadError('malformed', `the checkpoint of round ${t.anchorRound} that f+1 relays vouch for cannot be read here: ${(err as Error).message}`)
      }
      if (value.anchorRound !== t.anchorRound) throw new SteadError('malformed', `the checkpoint vouched for round ${t.anchorRound} names round ${value.anchorRound}`)
      this.manifest = { value, bytes: p.manifest }
    }
    const listed = this.manifest.value.spaces
    for (const bytes of p.states) {
      const want = listed[this.spaces.length]
      if (!want) return this.nextSource(relay, 'sent more space states than the checkpoint lists')
      let opened: { state: S; space: string; hash: Uint8Array }
      try {
        opened = this.openState(bytes)
      } catch (err) {
        return this.nextSource(relay, `sent a malformed state of space ${want.space}: ${(err as Error).message}`)
      }
      if (opened.space !== want.space || !bytesEqual(opened.hash, want.stateHash)) return this.nextSource(relay, `sent a state of space ${want.space} that does not hash to the checkpoint's`)
      this.spaces.push({ space: want.space, lastAttested: want.lastAttested, ...(want.starter === undefined ? {} : { starter: want.starter }), state: opened.state })
    }
    if (this.spaces.length === listed.length) return { done: { manifest: this.manifest.value, manifestBytes: this.manifest.bytes, digest: t.digest, statements: t.vouchers, spaces: this.spaces } }
    if (p.states.length === 0) return this.nextSource(relay, 'sent an empty part of a checkpoint it holds')
    return { request: this.request(this.spaces.length) }
  }

  /** Starts over from the statements (a source that went quiet): the caller asks every peer for them again. */
  restart(): void {
    this.statements.clear()
    this.target = undefined
    this.manifest = undefined
    this.spaces.length = 0
  }

  private sourceRelay(): number {
    const t = this.target as NonNullable<typeof this.target>
    return (t.vouchers[this.source % t.vouchers.length] as CheckpointStatement).author
  }

  private request(from: number): PartRequest {
    const t = this.target as NonNullable<typeof this.target>
    return { to: this.sourceRelay(), anchorRound: t.anchorRound, from }
  }

  /** The current source failed (or lied: `fault`); the next voucher serves from where this one stopped, until each has failed. */
  private nextSource(relay: number, fault: string | null): PartOutcome<S> {
    if (fault) this.faults.push({ relay, reason: fault })
    const t = this.target as NonNullable<typeof this.target>
    if (++this.failures >= t.vouchers.length) {
      this.restart()
      return { askAgain: true }
    }
    this.source++
    return { request: this.request(this.manifest ? this.spaces.length : 0) }
  }
}

/** The checkpoint an epoch certificate names: the state the epoch started from, at its start round. */
export interface CertifiedCheckpoint {
  readonly anchorRound: number
  /** sha256 of its manifest. */
  readonly digest: Uint8Array
}

/** See CheckpointFetch.part. */
export interface PartOutcome<S> {
  readonly request?: PartRequest
  readonly done?: FetchedCheckpoint<S>
  readonly askAgain?: boolean
}
