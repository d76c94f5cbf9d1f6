import { DEFAULT_LIMITS, SteadError, asSigned, decode, encode, expect, toHex, type Signed } from '@stead/core'
import { openStatement, type CheckpointPart, type CheckpointStatement } from './checkpoint.ts'

/**
 * Wire messages of the relay mesh. A block is encoded once and signed by its
 * author over those exact bytes; there are no votes and no certificates
 * (an uncertified DAG): support for a block is read from the references of
 * later blocks.
 */

/** Relays are numbered by their position in the committee. */
export interface Committee {
  readonly f: number
  readonly keys: readonly Uint8Array[]
  /**
   * Authors the direct rule needs (blamers to skip a leader, certificates to
   * commit it); 2f+1 unless set. Only the simulator sets it, to show that a
   * weakened commit rule is caught.
   */
  readonly directQuorum?: number
  /**
   * The epoch this committee rules (0, the cluster file's, unless set):
   * its blocks carry it, and blocks of any other epoch are refused.
   */
  readonly epoch?: number
  /**
   * The round its epoch starts after: the epoch's genesis (0 for epoch 0).
   * Its blocks are of later rounds; their references to this round are
   * genesis references, and nothing of an earlier round is referenced.
   */
  readonly startRound?: number
}

/** The epoch a committee rules. */
export const epochOf = (c: Committee): number => c.epoch ?? 0

/** The genesis round of a committee's epoch: its first blocks are of the next round. */
export const genesisRoundOf = (c: Committee): number => c.startRound ?? 0

export function committeeSize(c: Committee): number {
  return c.keys.length
}

/** 2f+1 = ⌊2n/3⌋+1 (N is exactly 3f+1, see validateCommittee): any two such sets share a correct relay. */
export function quorum(c: Committee): number {
  return 2 * c.f + 1
}

export function validateCommittee(c: Committee): string | null {
  if (!Number.isSafeInteger(c.f) || c.f < 0) return 'f must be a non-negative integer'
  if (c.keys.length < 3 * c.f + 1) return `${c.keys.length} relays cannot tolerate f = ${c.f}: N must be at least 3f+1`
  // Every threshold here (quorums of 2f+1) assumes N = 3f+1 exactly: with more relays,
  // two quorums of 2f+1 can meet in a Byzantine relay alone, and safety is gone.
  if (c.keys.length !== 3 * c.f + 1) return `${c.keys.length} relays with f = ${c.f}: N must be exactly 3f+1 (4, 7, 10, ... relays); with more, quorums of 2f+1 could meet in a Byzantine relay only`
  if (c.keys.some((k) => k.length !== 32)) return 'relay keys must be 32-byte Ed25519 public keys'
  if (!Number.isSafeInteger(epochOf(c)) || epochOf(c) < 0 || !Number.isSafeInteger(genesisRoundOf(c)) || genesisRoundOf(c) < 0) return 'epoch and start round must be non-negative integers'
  if (epochOf(c) === 0 && genesisRoundOf(c) !== 0) return 'epoch 0 starts at round 0'
  if (new Set(c.keys.map(toHex)).size !== c.keys.length) return 'relay keys must be distinct'
  return null
}

/** Synchronous Ed25519 and SHA-256, as node:crypto provides them: consensus runs on relays only. */
export interface SyncCrypto {
  sign(secretKey: Uint8Array, message: Uint8Array): Uint8Array
  verify(publicKey: Uint8Array, message: Uint8Array, signature: Uint8Array): boolean
  sha256(data: Uint8Array): Uint8Array
}

/** A reference to a block: its slot (round, author) and its digest. */
export interface BlockRef {
  readonly round: number
  readonly author: number
  readonly digest: Uint8Array
}

/**
 * Every relay has an implicit block at round 0 whose digest is 32 zero
 * bytes: round-1 blocks reference these, so "own previous block first" and
 * "a quorum of the previous round" hold for every block alike.
 */
export const GENESIS_DIGEST = new Uint8Array(32)
export const GENESIS_HEX = toHex(GENESIS_DIGEST)

export interface BlockHeader {
  readonly round: number
  readonly author: number
  /**
   * Earlier blocks this one builds on: the author's own previous block first,
   * then at most one block per other relay, each of a lower round, with at
   * least 2f+1 distinct authors at round - 1.
   */
  readonly ancestors: readonly BlockRef[]
  /** Client envelopes as received: msgpack [bytes, sig] frames. */
  readonly payload: readonly Uint8Array[]
  /** The epoch it belongs to; absent for epoch 0. */
  readonly epoch?: number
}

/** A block as received: its signed bytes, the decoded header and its digest (sha256 of the bytes). */
export interface Block {
  readonly signed: Signed
  readonly header: BlockHeader
  readonly digest: Uint8Array
  readonly digestHex: string
  /** Whether its signature was checked (or made here). The core checks an unchecked block before it takes it. */
  readonly verified: boolean
}

export type Message =
  /** A relay's own new block, pushed to every peer. */
  | { readonly kind: 'block'; readonly block: Block }
  /** Please send the blocks with these digests (missing ancestors). */
  | { readonly kind: 'fetch'; readonly digests: readonly Uint8Array[] }
  /** Please send blocks from this round on (catching up). */
  | { readonly kind: 'sync'; readonly fromRound: number }
  /** Blocks answering a fetch or a sync, by anyone: each carries its author's signature. */
  | { readonly kind: 'blocks'; readonly blocks: readonly Block[] }
  /**
   * The sender holds these client envelopes but waits for a quorum at a
   * round it already proposed: carry them too, which gives idle relays a
   * reason to propose (idle relays make no rounds otherwise).
   */
  | { readonly kind: 'wake'; readonly payload: readonly Uint8Array[] }
  /**
   * Answer to a sync from before the sender's retention window: it keeps no
   * blocks below `keptFrom` (they were pruned), so it cannot send those.
   */
  | { readonly kind: 'pruned'; readonly keptFrom: number }
  /**
   * Answer to a fetch: the sender holds none of these blocks, and keeps
   * blocks from round `keptFrom` on. A relay saying so of an ancestor of its
   * own block, at a round it keeps, shows that block can never be complete.
   */
  | { readonly kind: 'unknown'; readonly digests: readonly Uint8Array[]; readonly keptFrom: number }
  /** Please send your latest checkpoint statement (a relay behind past every peer's retention; see checkpoint.ts). */
  | { readonly kind: 'checkpoint-ask' }
  /** The sender's signed statement of its latest checkpoint (the signature was checked on decoding). */
  | { readonly kind: 'checkpoint'; readonly statement: CheckpointStatement }
  /** Please send the checkpoint of this round: its manifest when `from` is 0, and the spaces' states from `from` on. */
  | { readonly kind: 'checkpoint-get'; readonly anchorRound: number; readonly from: number }
  /** An answer to checkpoint-get: checked by the receiver against what f+1 relays vouch for. */
  | { readonly kind: 'checkpoint-part'; readonly part: CheckpointPart }
  /**
   * Please send the latest block of mine you hold: the sender started with
   * an empty store and must not sign a second block for a round it signed
   * before it lost it (see core.ts, awaitingOwnLast).
   */
  | { readonly kind: 'own-last-ask' }
  /**
   * Answer to own-last-ask: the asker's latest block the sender holds (its
   * signature checked on decoding), or null; and the sender's GC round (it
   * ignores blocks at or below it, so proposing there is of no use).
   */
  | { readonly kind: 'own-last'; readonly block: Block | null; readonly gcRound: number }
  /** Please sign your stable head as of your attested commit of `space` at [fromIndex, round] (see head-proofs.ts). */
  | { readonly kind: 'head-ask'; readonly space: string; readonly fromIndex: number; readonly round: number }
  /**
   * The sender's signature over stableReadBytes(space, index, stateHash): its stable state at that index has that hash;
   * and, from relays that have it, its signature over its attestation of the commit asked about (paced clients take f+1 of those).
   */
  | { readonly kind: 'head-sig'; readonly space: string; readonly index: number; readonly stateHash: Uint8Array; readonly sig: Uint8Array; readonly attestationSig?: Uint8Array }
  /**
   * The sender's clock votes: [space, envelope id, weight, its signature
   * over encodeClockVote(space, id, weight)], and the frames of the
   * envelopes among them it got from clients (its peers may not hold them
   * until its next block: they vote sooner). See relay/src/runtime/clock-votes.ts.
   */
  | { readonly kind: 'clock-votes'; readonly votes: ReadonlyArray<readonly [space: string, id: Uint8Array, weight: number, sig: Uint8Array]>; readonly frames?: readonly Uint8Array[] }
  /**
   * The sender's signature over the change that ends the epoch before
   * `epoch` (@stead/core's encodeEpochChange): every correct relay of the
   * ending epoch computes the same change, so the signature alone is sent.
   * See relay/src/runtime/hand-over.ts.
   */
  | { readonly kind: 'epoch-vote'; readonly epoch: number; readonly sig: Uint8Array }

/** Clock votes one message carries at most (ClockVotes sends up to 512). */
const MAX_CLOCK_VOTES = 512
/** Client envelope frames one clock-votes message carries at most. */
export const MAX_VOTE_FRAMES = 64

export interface MessageLimits {
  readonly maxMessageBytes: number
  readonly maxBlockEnvelopes: number
  readonly maxEnvelopeBytes: number
  readonly maxBlocksPerMessage: number
  readonly maxFetchDigests: number
}

export const DEFAULT_MESSAGE_LIMITS: MessageLimits = Object.freeze({
  maxMessageBytes: 64 * 1024 * 1024,
  maxBlockEnvelopes: 10_000,
  maxEnvelopeBytes: DEFAULT_LIMITS.maxEnvelopeBytes + 128,
  maxBlocksPerMessage: 1000,
  maxFetchDigests: 1000,
})

/** Blocks of epoch 0 (the cluster file's committee) keep the format relays wrote before epochs existed. */
const BLOCK_TAG = 'stead/block/v2'
/** Blocks of later epochs sign their epoch too: a block of one epoch is never taken for one of another. */
const EPOCH_BLOCK_TAG = 'stead/block/v3'

/**
 * The epoch a signed block's bytes name, read from their first bytes
 * without decoding the block (undefined for bytes that do not start like
 * a block). A relay's store keeps blocks of the epochs before its current
 * one; this tells them apart cheaply, and the store skips blocks of
 * another epoch (and bytes it cannot place) instead of opening them.
 */
export function blockEpochOf(bytes: Uint8Array): number | undefined {
  // [tag, ...] as msgpack: a fixarray of 5 (v2) or 6 (v3), then the tag as a fixstr of 14 bytes.
  if (bytes[0] === 0x95) return 0
  if (bytes[0] !== 0x96) return undefined
  const at = 16
  const b = bytes[at]
  if (b === undefined) return undefined
  if (b < 0x80) return b
  if (b === 0xcc) return bytes[at + 1]
  if (b === 0xcd) return ((bytes[at + 1] ?? 0) << 8) | (bytes[at + 2] ?? 0)
  if (b === 0xce) return new DataView(bytes.buffer, bytes.byteOffset + at + 1, 4).getUint32(0)
  return undefined
}

export function signBlock(crypto: SyncCrypto, secretKey: Uint8Array, header: BlockHeader): Block {
  const epoch = header.epoch ?? 0
  const ancestors = header.ancestors.map((a) => [a.round, a.author, a.digest])
  const bytes = encode(epoch === 0 ? [BLOCK_TAG, header.round, header.author, ancestors, header.payload] : [EPOCH_BLOCK_TAG, epoch, header.round, header.author, ancestors, header.payload])
  const signed = { bytes, sig: crypto.sign(secretKey, bytes) }
  const digest = crypto.sha256(bytes)
  return { signed, header, digest, digestHex: toHex(digest), verified: true }
}

/**
 * Opens a signed block and applies every check that needs no other block:
 * shape, limits, the author's signature, and the ancestor rules (own
 * previous block first and only there, one block per author, rounds below
 * the block's, genesis references well formed, a quorum at round - 1).
 * The DAG checks that the ancestors exist; the core checks the payload.
 */
/**
 * Whether a block's signature needs checking, given its digest and round:
 * a relay skips blocks it already holds (verified when they came first)
 * and blocks it will drop unread (below its horizon, far ahead of it).
 */
export type VerifyFilter = (digestHex: string, round: number) => boolean

export function openBlock(crypto: SyncCrypto, committee: Committee, signed: Signed, limits: MessageLimits = DEFAULT_MESSAGE_LIMITS, verify: boolean | VerifyFilter = true, digest = crypto.sha256(signed.bytes)): Block {
  const raw = expect.array(decode(signed.bytes, limits.maxMessageBytes), 'block', 8)
  let v: unknown[]
  let epoch = 0
  if (raw.length === 5 && raw[0] === BLOCK_TAG) v = raw
  else if (raw.length === 6 && raw[0] === EPOCH_BLOCK_TAG) {
    epoch = expect.uint(raw[1], 'block.epoch')
    v = [raw[0], ...raw.slice(2)]
  } else throw new SteadError('malformed', `not a ${BLOCK_TAG} or ${EPOCH_BLOCK_TAG}`)
  // v3 names epochs after 0 only: one block format per epoch, so a block has one digest.
  if (epoch !== epochOf(committee) || (raw[0] === EPOCH_BLOCK_TAG && epoch === 0)) throw new SteadError('malformed', `a block of epoch ${epoch} (${String(raw[0])}); this committee rules epoch ${epochOf(committee)}`)
  const round = expect.uint(v[1], 'block.round')
  const genesis = genesisRoundOf(committee)
  if (round <= genesis) throw new SteadError('malformed', `block rounds of epoch ${epoch} start at ${genesis + 1}`)
  const author = expect.uint(v[2], 'block.author')
  const n = committee.keys.length
  const key = committee.keys[author]
  if (!key) throw new SteadError('unauthorized', `block author ${author} is not in the committee`)
  const ancestors = expect.array(v[3], 'block.ancestors', n).map((a, i): BlockRef => {
    const [r, who, digest] = expect.array(a, `block.ancestors[${i}]`, 3)
    return { round: expect.uint(r, `block.ancestors[${i}].round`), author: expect.uint(who, `block.ancestors[${i}].author`), digest: expect.bytes(digest, `block.ancestors[${i}].digest`, 32) }
  })
  const problem = ancestorProblem(committee, round, author, ancestors)
  if (problem) throw new SteadError('malformed', `block of relay ${author} round ${round}: ${problem}`)
  const payload = expect.array(v[4], 'block.payload', limits.maxBlockEnvelopes).map((p, i) => {
    if (!(p instanceof Uint8Array)) throw new SteadError('malformed', `block.payload[${i}] must be bytes`)
    if (p.length > limits.maxEnvelopeBytes) throw new SteadError('too-large', `block.payload[${i}] is ${p.length} bytes`)
    return p
  })
  const digestHex = toHex(digest)
  const check = typeof verify === 'function' ? verify(digestHex, round) : verify
  if (check && !crypto.verify(key, signed.bytes, signed.sig)) throw new SteadError('bad-signature', `block of relay ${author} round ${round} has a bad signature`)
  return { signed, header: { round, author, ancestors, payload, ...(epoch ? { epoch } : {}) }, digest, digestHex, verified: check }
}

/** The ancestor rules of a block, which need no other block (Sui's block verifier). Null when they hold. */
function ancestorProblem(committee: Committee, round: number, author: number, ancestors: readonly BlockRef[]): string | null {
  const n = committee.keys.length
  const genesis = genesisRoundOf(committee)
  if (ancestors.length === 0) return 'no ancestors'
  const authors = new Set<number>()
  let atPrevious = 0
  for (const [i, a] of ancestors.entries()) {
    if (a.author >= n) return `ancestor ${i} names relay ${a.author}, not in the committee`
    if ((i === 0) !== (a.author === author)) return i === 0 ? 'the first ancestor must be the author’s own previous block' : 'the author’s own previous block may only come first'
    if (authors.has(a.author)) return `two ancestors by relay ${a.author}`
    authors.add(a.author)
    if (a.round >= round) return `ancestor ${i} is from round ${a.round}, not below ${round}`
    if (a.round < genesis) return `ancestor ${i} is from round ${a.round}, before this epoch's genesis round ${genesis}`
    if (a.round === genesis && !a.digest.every((b) => b === 0)) return `ancestor ${i} is a round-${genesis} block other than genesis`
    // No block has the genesis digest: a core that took it as held accepted such a block and stopped on its invariant check.
    if (a.round > genesis && a.digest.every((b) => b === 0)) return `ancestor ${i} names genesis at round ${a.round}`
    if (a.round === round - 1) atPrevious++
  }
  if (atPrevious < quorum(committee)) return `needs ${quorum(committee)} ancestors from round ${round - 1}, has ${atPrevious}`
  return null
}

// ---- wire encoding of mesh messages ----

function encodeSigned(b: Block): unknown {
  return [b.signed.bytes, b.signed.sig]
}

export function encodeMessage(m: Message): Uint8Array {
  switch (m.kind) {
    case 'block':
      return encode(['block', encodeSigned(m.block)])
    case 'fetch':
      return encode(['fetch', m.digests])
    case 'sync':
      return encode(['sync', m.fromRound])
    case 'blocks':
      return encode(['blocks', m.blocks.map(encodeSigned)])
    case 'wake':
      return encode(['wake', m.payload])
    case 'pruned':
      return encode(['pruned', m.keptFrom])
    case 'unknown':
      return encode(['unknown', m.digests, m.keptFrom])
    case 'checkpoint-ask':
      return encode(['checkpoint-ask'])
    case 'checkpoint':
      return encode(['checkpoint', [m.statement.signed.bytes, m.statement.signed.sig]])
    case 'checkpoint-get':
      return encode(['checkpoint-get', m.anchorRound, m.from])
    case 'checkpoint-part':
      return encode(['checkpoint-part', m.part.anchorRound, m.part.from, m.part.held, m.part.manifest, m.part.states])
    case 'own-last-ask':
      return encode(['own-last-ask'])
    case 'own-last':
      return encode(['own-last', m.block ? encodeSigned(m.block) : null, m.gcRound])
    case 'head-ask':
      return encode(['head-ask', m.space, m.fromIndex, m.round])
    case 'head-sig':
      return encode(m.attestationSig ? ['head-sig', m.space, m.index, m.stateHash, m.sig, m.attestationSig] : ['head-sig', m.space, m.index, m.stateHash, m.sig])
    case 'clock-votes':
      return encode(m.frames?.length ? ['clock-votes', m.votes, m.frames] : ['clock-votes', m.votes])
    case 'epoch-vote':
      return encode(['epoch-vote', m.epoch, m.sig])
  }
}

/**
 * Decodes and verifies a mesh message (every block's signature and
 * ancestor rules; with `verify`, the signatures of the blocks it selects:
 * the core drops the others unread). Throws SteadError with a reason; the
 * consensus core only ever acts on verified blocks. `keepBlock`: of a
 * `blocks` message, only the blocks whose digest it admits are opened (the
 * rest are neither decoded nor verified: a peer's per-block budget, see
 * the relay's MeshBudget.blockGate).
 */
export function decodeMessage(crypto: SyncCrypto, committee: Committee, bytes: Uint8Array, limits: MessageLimits = DEFAULT_MESSAGE_LIMITS, verify: VerifyFilter | true = true, keepBlock?: (digestHex: string) => boolean): Message {
  const v = expect.array(decode(bytes, limits.maxMessageBytes), 'message', 8)
  switch (v[0]) {
    case 'block':
      return { kind: 'block', block: openBlock(crypto, committee, asSigned(v[1]), limits, verify) }
    case 'fetch':
      return { kind: 'fetch', digests: expect.array(v[1], 'fetch.digests', limits.maxFetchDigests).map((d, i) => expect.bytes(d, `fetch.digests[${i}]`, 32)) }
    case 'sync':
      return { kind: 'sync', fromRound: expect.uint(v[1], 'sync.fromRound') }
    case 'blocks': {
      const blocks: Block[] = []
      for (const b of expect.array(v[1], 'blocks', limits.maxBlocksPerMessage)) {
        const signed = asSigned(b)
        const digest = crypto.sha256(signed.bytes)
        if (!keepBlock || keepBlock(toHex(digest))) blocks.push(openBlock(crypto, committee, signed, limits, verify, digest))
      }
      return { kind: 'blocks', blocks }
    }
    case 'wake':
      return { kind: 'wake', payload: expect.array(v[1], 'wake.payload', limits.maxBlockEnvelopes).map((p, i) => expect.bytes(p, `wake.payload[${i}]`)) }
    case 'pruned':
      return { kind: 'pruned', keptFrom: expect.uint(v[1], 'pruned.keptFrom') }
    case 'unknown':
      return { kind: 'unknown', digests: expect.array(v[1], 'unknown.digests', limits.maxFetchDigests).map((d, i) => expect.bytes(d, `unknown.digests[${i}]`, 32)), keptFrom: expect.uint(v[2], 'unknown.keptFrom') }
    case 'checkpoint-ask':
      return { kind: 'checkpoint-ask' }
    case 'checkpoint':
      return { kind: 'checkpoint', statement: openStatement(crypto, committee, asSigned(v[1])) }
    case 'checkpoint-get':
      return { kind: 'checkpoint-get', anchorRound: expect.uint(v[1], 'checkpoint-get.anchorRound'), from: expect.uint(v[2], 'checkpoint-get.from') }
    case 'checkpoint-part': {
      const manifest = v[4] === null ? null : expect.bytes(v[4], 'checkpoint-part.manifest')
      const states = expect.array(v[5], 'checkpoint-part.states', 10_000_000).map((b, i) => expect.bytes(b, `checkpoint-part.states[${i}]`))
      return { kind: 'checkpoint-part', part: { anchorRound: expect.uint(v[1], 'checkpoint-part.anchorRound'), from: expect.uint(v[2], 'checkpoint-part.from'), held: expect.boolean(v[3], 'checkpoint-part.held'), manifest, states } }
    }
    case 'own-last-ask':
      return { kind: 'own-last-ask' }
    case 'own-last':
      // Always verified: the receiver trusts the round before the block reaches its DAG.
      return { kind: 'own-last', block: v[1] === null ? null : openBlock(crypto, committee, asSigned(v[1]), limits, true), gcRound: expect.uint(v[2], 'own-last.gcRound') }
    case 'head-ask':
      return { kind: 'head-ask', space: expect.string(v[1], 'head-ask.space', DEFAULT_LIMITS.maxSpaceChars, 1), fromIndex: expect.uint(v[2], 'head-ask.fromIndex'), round: expect.uint(v[3], 'head-ask.round') }
    case 'head-sig':
      return {
        kind: 'head-sig',
        space: expect.string(v[1], 'head-sig.space', DEFAULT_LIMITS.maxSpaceChars, 1),
        index: expect.uint(v[2], 'head-sig.index'),
        stateHash: expect.bytes(v[3], 'head-sig.stateHash', 32),
        sig: expect.bytes(v[4], 'head-sig.sig', 64),
        ...(v[5] === undefined ? {} : { attestationSig: expect.bytes(v[5], 'head-sig.attestationSig', 64) }),
      }
    case 'clock-votes':
      return {
        kind: 'clock-votes',
        votes: expect.array(v[1], 'clock-votes.votes', MAX_CLOCK_VOTES).map((t, i) => {
          const [space, id, weight, sig] = expect.array(t, `clock-votes.votes[${i}]`, 4)
          return [expect.string(space, `clock-votes.votes[${i}].space`, DEFAULT_LIMITS.maxSpaceChars, 1), expect.bytes(id, `clock-votes.votes[${i}].id`, 32), expect.uint(weight, `clock-votes.votes[${i}].weight`), expect.bytes(sig, `clock-votes.votes[${i}].sig`, 64)] as const
        }),
        ...(v[2] === undefined
          ? {}
          : {
              frames: expect.array(v[2], 'clock-votes.frames', MAX_VOTE_FRAMES).map((f, i) => {
                if (!(f instanceof Uint8Array)) throw new SteadError('malformed', `clock-votes.frames[${i}] must be bytes`)
                if (f.length > limits.maxEnvelopeBytes) throw new SteadError('too-large', `clock-votes.frames[${i}] is ${f.length} bytes`)
                return f
              }),
            }),
      }
    case 'epoch-vote':
      return { kind: 'epoch-vote', epoch: expect.uint(v[1], 'epoch-vote.epoch'), sig: expect.bytes(v[2], 'epoch-vote.sig', 64) }
    default:
      throw new SteadError('malformed', `unknown mesh message ${JSON.stringify(v[0])}`)
  }
}
