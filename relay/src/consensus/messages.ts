import { DEFAULT_LIMITS, SteadError, asSigned, decode, encode, expect, toHex, type Signed } from '@stead/core'

/**
 * Wire messages of the relay mesh. Blocks and votes are encoded once and
 * signed over those exact bytes; a certificate carries the block's signed
 * bytes plus 2f+1 vote signatures, so anyone can check it without trusting
 * the relay that forwarded it.
 */

/** Relays are numbered by their position in the committee. */
export interface Committee {
  readonly f: number
  readonly keys: readonly Uint8Array[]
  /**
   * Votes that make a certificate; 2f+1 unless set. Only the simulator sets
   * it, to show that a weakened protocol is caught.
   */
  readonly certificateQuorum?: number
}

export function committeeSize(c: Committee): number {
  return c.keys.length
}

export function quorum(c: Committee): number {
  return 2 * c.f + 1
}

/** Weak links one block may carry; older orphans wait for the next block. */
export function maxWeakLinks(c: Committee): number {
  return 2 * c.keys.length
}

export function certificateQuorum(c: Committee): number {
  return c.certificateQuorum ?? quorum(c)
}

export function validateCommittee(c: Committee): string | null {
  if (!Number.isSafeInteger(c.f) || c.f < 0) return 'f must be a non-negative integer'
  if (c.keys.length < 3 * c.f + 1) return `${c.keys.length} relays cannot tolerate f = ${c.f}: N must be at least 3f+1`
  // Every threshold here (quorums of 2f+1, f+1 votes) assumes N = 3f+1 exactly: with more relays,
  // two quorums of 2f+1 can meet in a Byzantine relay alone, and safety is gone.
  if (c.keys.length !== 3 * c.f + 1) return `${c.keys.length} relays with f = ${c.f}: N must be exactly 3f+1 (4, 7, 10, ... relays); with more, quorums of 2f+1 could meet in a Byzantine relay only`
  if (c.keys.some((k) => k.length !== 32)) return 'relay keys must be 32-byte Ed25519 public keys'
  if (new Set(c.keys.map(toHex)).size !== c.keys.length) return 'relay keys must be distinct'
  return null
}

/** Synchronous Ed25519 and SHA-256, as node:crypto provides them: consensus runs on relays only. */
export interface SyncCrypto {
  sign(secretKey: Uint8Array, message: Uint8Array): Uint8Array
  verify(publicKey: Uint8Array, message: Uint8Array, signature: Uint8Array): boolean
  sha256(data: Uint8Array): Uint8Array
}

export interface BlockHeader {
  readonly round: number
  readonly author: number
  /** Digests of certificates of round-1 (none in round 1). */
  readonly parents: readonly Uint8Array[]
  /**
   * Weak links: certificates of older rounds that nothing referenced yet, so
   * every certified block is eventually ordered (Bullshark's weak links).
   */
  readonly weak: readonly Uint8Array[]
  /** Client envelopes as received: msgpack [bytes, sig] frames. */
  readonly payload: readonly Uint8Array[]
}

/** A block as received: its signed bytes, the decoded header and its digest (sha256 of the bytes). */
export interface Block {
  readonly signed: Signed
  readonly header: BlockHeader
  readonly digest: Uint8Array
  readonly digestHex: string
}

export interface Vote {
  readonly kind: 'vote'
  readonly digest: Uint8Array
  readonly round: number
  readonly author: number
  readonly voter: number
  readonly sig: Uint8Array
}

export interface Certificate {
  readonly block: Block
  /** [voter, signature] pairs, distinct voters, at least 2f+1. */
  readonly votes: ReadonlyArray<readonly [number, Uint8Array]>
}

export type Message =
  | { readonly kind: 'block'; readonly block: Block }
  | Vote
  | { readonly kind: 'cert'; readonly cert: Certificate }
  /** Please send the certificates with these digests (missing parents). */
  | { readonly kind: 'fetch'; readonly digests: readonly Uint8Array[] }
  /** Please send certificates from this round on (catching up). */
  | { readonly kind: 'sync'; readonly fromRound: number }
  | { readonly kind: 'certs'; readonly certs: readonly Certificate[] }

export interface MessageLimits {
  readonly maxMessageBytes: number
  readonly maxBlockEnvelopes: number
  readonly maxEnvelopeBytes: number
  readonly maxCertsPerMessage: number
  readonly maxFetchDigests: number
}

export const DEFAULT_MESSAGE_LIMITS: MessageLimits = Object.freeze({
  maxMessageBytes: 64 * 1024 * 1024,
  maxBlockEnvelopes: 10_000,
  maxEnvelopeBytes: DEFAULT_LIMITS.maxEnvelopeBytes + 128,
  maxCertsPerMessage: 1000,
  maxFetchDigests: 1000,
})

const BLOCK_TAG = 'stead/block/v1'
const VOTE_TAG = 'stead/vote/v1'

export function signBlock(crypto: SyncCrypto, secretKey: Uint8Array, header: BlockHeader): Block {
  const bytes = encode([BLOCK_TAG, header.round, header.author, header.parents, header.payload, header.weak])
  const signed = { bytes, sig: crypto.sign(secretKey, bytes) }
  const digest = crypto.sha256(bytes)
  return { signed, header, digest, digestHex: toHex(digest) }
}

/** The bytes a voter signs: tagged, so a vote can never pass for a block or an envelope. */
export function voteBytes(digest: Uint8Array, round: number, author: number): Uint8Array {
  return encode([VOTE_TAG, digest, round, author])
}

export function signVote(crypto: SyncCrypto, secretKey: Uint8Array, voter: number, block: Block): Vote {
  const { round, author } = block.header
  return { kind: 'vote', digest: block.digest, round, author, voter, sig: crypto.sign(secretKey, voteBytes(block.digest, round, author)) }
}

/**
 * Opens a signed block: shape, limits and the author's signature. Parents and
 * payload are checked by the consensus core, which knows the DAG.
 */
export function openBlock(crypto: SyncCrypto, committee: Committee, signed: Signed, limits: MessageLimits = DEFAULT_MESSAGE_LIMITS, verify = true): Block {
  const v = expect.array(decode(signed.bytes, limits.maxMessageBytes), 'block', 8)
  if (v.length !== 6 || v[0] !== BLOCK_TAG) throw new SteadError('malformed', `not a ${BLOCK_TAG}`)
  const round = expect.uint(v[1], 'block.round')
  if (round < 1) throw new SteadError('malformed', 'block rounds start at 1')
  const author = expect.uint(v[2], 'block.author')
  const key = committee.keys[author]
  if (!key) throw new SteadError('unauthorized', `block author ${author} is not in the committee`)
  const parents = expect.array(v[3], 'block.parents', committee.keys.length).map((p, i) => expect.bytes(p, `block.parents[${i}]`, 32))
  const payload = expect.array(v[4], 'block.payload', limits.maxBlockEnvelopes).map((p, i) => {
    if (!(p instanceof Uint8Array)) throw new SteadError('malformed', `block.payload[${i}] must be bytes`)
    if (p.length > limits.maxEnvelopeBytes) throw new SteadError('too-large', `block.payload[${i}] is ${p.length} bytes`)
    return p
  })
  const weak = expect.array(v[5], 'block.weak', maxWeakLinks(committee)).map((p, i) => expect.bytes(p, `block.weak[${i}]`, 32))
  if (verify && !crypto.verify(key, signed.bytes, signed.sig)) throw new SteadError('bad-signature', `block of relay ${author} round ${round} has a bad signature`)
  const digest = crypto.sha256(signed.bytes)
  return { signed, header: { round, author, parents, payload, weak }, digest, digestHex: toHex(digest) }
}

export function verifyVote(crypto: SyncCrypto, committee: Committee, vote: Vote): boolean {
  const key = committee.keys[vote.voter]
  return key !== undefined && crypto.verify(key, voteBytes(vote.digest, vote.round, vote.author), vote.sig)
}

/** Checks a certificate's 2f+1 distinct, valid votes (the block itself must already be open). */
export function verifyCertificateVotes(crypto: SyncCrypto, committee: Committee, block: Block, votes: ReadonlyArray<readonly [number, Uint8Array]>): boolean {
  const seen = new Set<number>()
  const bytes = voteBytes(block.digest, block.header.round, block.header.author)
  for (const [voter, sig] of votes) {
    const key = committee.keys[voter]
    if (!key || seen.has(voter) || !crypto.verify(key, bytes, sig)) return false
    seen.add(voter)
  }
  return seen.size >= certificateQuorum(committee)
}

// ---- wire encoding of mesh messages ----

function encodeCert(c: Certificate): unknown {
  return [[c.block.signed.bytes, c.block.signed.sig], c.votes.map(([voter, sig]) => [voter, sig])]
}

export function encodeMessage(m: Message): Uint8Array {
  switch (m.kind) {
    case 'block':
      return encode(['block', [m.block.signed.bytes, m.block.signed.sig]])
    case 'vote':
      return encode(['vote', m.digest, m.round, m.author, m.voter, m.sig])
    case 'cert':
      return encode(['cert', encodeCert(m.cert)])
    case 'fetch':
      return encode(['fetch', m.digests])
    case 'sync':
      return encode(['sync', m.fromRound])
    case 'certs':
      return encode(['certs', m.certs.map(encodeCert)])
  }
}

function decodeCert(crypto: SyncCrypto, committee: Committee, v: unknown, limits: MessageLimits): Certificate {
  const [block, votes] = expect.array(v, 'cert', 2)
  const opened = openBlock(crypto, committee, asSigned(block), limits)
  const list = expect.array(votes, 'cert.votes', committee.keys.length).map((pair, i) => {
    const [voter, sig] = expect.array(pair, `cert.votes[${i}]`, 2)
    return [expect.uint(voter, 'voter'), expect.bytes(sig, 'vote signature', 64)] as const
  })
  if (!verifyCertificateVotes(crypto, committee, opened, list)) {
    throw new SteadError('bad-signature', `certificate for relay ${opened.header.author} round ${opened.header.round} lacks 2f+1 valid distinct votes`)
  }
  return { block: opened, votes: list }
}

/**
 * Decodes and fully verifies a mesh message (block signature, vote
 * signature, certificate quorum). Throws SteadError with a reason; the
 * consensus core only ever sees verified messages.
 */
export function decodeMessage(crypto: SyncCrypto, committee: Committee, bytes: Uint8Array, limits: MessageLimits = DEFAULT_MESSAGE_LIMITS): Message {
  const v = expect.array(decode(bytes, limits.maxMessageBytes), 'message', 8)
  switch (v[0]) {
    case 'block':
      return { kind: 'block', block: openBlock(crypto, committee, asSigned(v[1]), limits) }
    case 'vote': {
      if (v.length !== 6) throw new SteadError('malformed', 'vote has 6 fields')
      const vote: Vote = {
        kind: 'vote',
        digest: expect.bytes(v[1], 'vote.digest', 32),
        round: expect.uint(v[2], 'vote.round'),
        author: expect.uint(v[3], 'vote.author'),
        voter: expect.uint(v[4], 'vote.voter'),
        sig: expect.bytes(v[5], 'vote.sig', 64),
      }
      if (!verifyVote(crypto, committee, vote)) throw new SteadError('bad-signature', `vote of relay ${vote.voter} does not verify`)
      return vote
    }
    case 'cert':
      return { kind: 'cert', cert: decodeCert(crypto, committee, v[1], limits) }
    case 'fetch':
      return { kind: 'fetch', digests: expect.array(v[1], 'fetch.digests', limits.maxFetchDigests).map((d, i) => expect.bytes(d, `fetch.digests[${i}]`, 32)) }
    case 'sync':
      return { kind: 'sync', fromRound: expect.uint(v[1], 'sync.fromRound') }
    case 'certs':
      return { kind: 'certs', certs: expect.array(v[1], 'certs', limits.maxCertsPerMessage).map((c) => decodeCert(crypto, committee, c, limits)) }
    default:
      throw new SteadError('malformed', `unknown mesh message ${JSON.stringify(v[0])}`)
  }
}
