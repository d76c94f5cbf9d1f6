import {
  auditStateHash,
  bytesEqual,
  decodeAttestation,
  decodeAuditState,
  decodeDeclaration,
  decodeObjectProof,
  decodeStateDelta,
  fromBase64Url,
  fromHex,
  objectProofHash,
  restoreCrdt,
  type Attestation,
  type AuditState,
  type Crypto,
  type Envelope,
  type ReliableReplica,
  type VerifiedDelta,
} from '@stead/core'
import { MAX_ATTESTED_BODY, firstQuorum, getJson, httpBaseOf, type ClusterDescriptor, type Fetch } from '../transport/cluster.ts'
import { openTrusted } from './trusted.ts'
import type { Certified } from '../peers/peer-messages.ts'

/** The largest snapshot, delta or object proof read from a relay. */
const MAX_SERVED_BYTES = 1024 * 1024 * 1024
/**
 * Its JSON answer: the content in base64url with an attestation beside it,
 * but never past what one string can hold (V8's limit is about 512M
 * characters), since the answer is parsed as one.
 */
const MAX_SERVED_BODY = Math.min(Math.ceil(MAX_SERVED_BYTES / 3) * 4 + MAX_ATTESTED_BODY, 512 * 1024 * 1024)

/** An audit state f+1 relays vouch for: the state after the commit `attestation` describes. */
export interface VerifiedSnapshot {
  readonly attestation: Attestation
  /** The signatures of the f+1 relays that vouched for it (undefined: a peer's certificate did, see snapshotFromPeer). */
  readonly vouched?: Certified
  readonly state: AuditState<Envelope>
  /** Bytes downloaded for it (the snapshot and the attestations), for reports. */
  readonly bytes: number
}

export interface BootstrapRequest {
  readonly space: string
  readonly cluster: ClusterDescriptor
  readonly crypto: Crypto
  readonly fetch: Fetch
  /** The reader proof relays of a space with readers ask for. */
  readonly headers: Record<string, string>
  /** Relays to ask, the preferred snapshot source first (`relay`: its index, once its session proved it). */
  readonly relays: ReadonlyArray<{ readonly relay: number | undefined; readonly url: string }>
  readonly timeoutMs: number
  /** The relay at `url` served something its own attestation does not vouch for. */
  readonly faulty: (url: string, why: string) => void
}

/**
 * Fetches a space's latest snapshot from one relay and believes it only if
 * its audit state hashes to the state hash of an attestation that f+1
 * relays signed alike (at least one of them correct): a Byzantine relay can
 * serve a wrong state, but not one that matches. Tries the relays in turn;
 * undefined when none serves a snapshot the quorum vouches for (then the
 * client replays the space's commits instead, which is always correct).
 */
export async function fetchVerifiedSnapshot(r: BootstrapRequest): Promise<VerifiedSnapshot | undefined> {
  const found = await fetchAttested<AuditState<Envelope>>(r, 'snapshot', 'a snapshot', (body, attestation) => {
    if (typeof body.state !== 'string') return { faulty: 'served a snapshot without a state' }
    const state = decodeAuditState(fromBase64Url(body.state), (signed) => openTrusted(r.crypto, signed), MAX_SERVED_BYTES)
    const hash = auditStateHash((b) => r.crypto.sha256(b), state)
    if (state.space !== r.space || state.index !== attestation.toIndex || !bytesEqual(hash, attestation.stateHash)) {
      return { faulty: `served a snapshot of ${r.space} at index ${state.index} that does not match the state hash it attested for round ${attestation.round}` }
    }
    return { value: state, bytes: body.state.length }
  })
  return found && { attestation: found.attestation, vouched: found.vouched, state: found.value, bytes: found.bytes }
}

/** One object's stable value that f+1 relays vouch for. */
export interface VerifiedObject {
  /** The stable index the value is at. */
  readonly index: number
  /** The value as the object's type holds it (undefined for an object with no stable state there). */
  readonly value: unknown
  /** Bytes downloaded for it (the proof and the attestations), for reports. */
  readonly bytes: number
}

/**
 * Fetches one object's stable state at a stable index of at least
 * `atLeast`, from the first relay whose answer proves it: the state with
 * its Merkle path leads to the state hash of an attestation f+1 relays
 * signed alike. A relay whose path leads elsewhere lied (it is reported);
 * one that is behind `atLeast` is passed over. Undefined when no relay
 * could prove such a state.
 */
export async function fetchVerifiedObject(r: BootstrapRequest, key: string, atLeast: number): Promise<VerifiedObject | undefined> {
  const found = await fetchAttested<{ index: number; value: unknown }>(r, `objects/${encodeURIComponent(key)}`, `${key}'s state`, (body, attestation) => {
    if (attestation.toIndex < atLeast) return 'behind'
    if (typeof body.proof !== 'string') return { faulty: `served ${key}'s state without a proof` }
    // As large as a snapshot may be: an object has no size limit of its own, and its bytes are here already.
    const proof = decodeObjectProof(fromBase64Url(body.proof), MAX_SERVED_BYTES)
    const proven = objectProofHash((b) => r.crypto.sha256(b), proof)
    if ('problem' in proven) return { faulty: `served a proof of ${key} that proves nothing: ${proven.problem}` }
    if (proof.space !== r.space || proof.key !== key || proof.index !== attestation.toIndex || !bytesEqual(proven.hash, attestation.stateHash)) {
      return { faulty: `served a state of ${key} that does not lead to the state hash it attested for round ${attestation.round}` }
    }
    const value = proof.object ? restoreCrdt(decodeDeclaration(proof.object[0]), proof.object[1]).value() : undefined
    return { value: { index: attestation.toIndex, value }, bytes: body.proof.length }
  })
  return found && { ...found.value, bytes: found.bytes }
}

/** A delta from the replica's stable index that leads to a state f+1 relays vouch for (see fetchVerifiedDelta). */
export interface VerifiedCatchUp {
  /** The attestation of the commit the delta ends at. */
  readonly attestation: Attestation
  /** The signatures of the f+1 relays that vouched for it (undefined: a paced delta, whose certificate is not kept). */
  readonly vouched?: Certified
  /** The delta, checked against that attestation's state hash: `replica.applyDelta` installs it. */
  readonly delta: VerifiedDelta
  /** Bytes downloaded for it (the delta and the attestations), for reports. */
  readonly bytes: number
}

/**
 * Fetches what changed in the space since `replica`'s stable index, each
 * object as its ops or its state as the relay's BENDY rule picked, and
 * believes it only if applying it to the replica leads to the state hash
 * of an attestation f+1 relays signed alike. Nothing is applied here; the
 * replica must not move before `applyDelta`. Undefined when no relay could
 * serve such a delta (they keep recent commits only): the client follows
 * the commits instead.
 */
export async function fetchVerifiedDelta(r: BootstrapRequest, replica: ReliableReplica): Promise<VerifiedCatchUp | undefined> {
  const fromIndex = replica.stableIndex
  const found = await fetchAttested<VerifiedDelta>(r, `delta?from=${fromIndex}`, 'a delta', (body, attestation) => {
    // The replica moved on meanwhile (a commit applied): no delta from here applies, and nobody lied.
    if (replica.stableIndex !== fromIndex) return 'stop'
    if (typeof body.delta !== 'string') return { faulty: 'served a delta without its content' }
    const delta = decodeStateDelta(fromBase64Url(body.delta), (signed) => openTrusted(r.crypto, signed), MAX_SERVED_BYTES)
    if (delta.space !== r.space || delta.fromIndex !== fromIndex || delta.toIndex !== attestation.toIndex) {
      return { faulty: `served a delta of ${delta.space} from ${delta.fromIndex} to ${delta.toIndex}, asked from ${fromIndex} under an attestation to ${attestation.toIndex}` }
    }
    const verified = replica.verifyDelta((b) => r.crypto.sha256(b), delta, attestation.stateHash)
    if ('problem' in verified) return { faulty: `served a delta that proves nothing: ${verified.problem} (round ${attestation.round})` }
    return { value: verified, bytes: body.delta.length }
  })
  return found && { attestation: found.attestation, vouched: found.vouched, delta: found.value, bytes: found.bytes }
}

/**
 * Asks the relays in turn for something they serve with their attestation
 * of the commit it is the result of (GET /v1/spaces/<space>/<route>), and
 * returns the first answer that `check` accepts and f+1 relays vouch for.
 * `check` may throw on malformed content; the relay is then reported, as
 * when it says `faulty`; 'behind' passes the relay over; 'stop' ends the
 * search (what was asked no longer makes sense).
 */
async function fetchAttested<T>(
  r: BootstrapRequest,
  route: string,
  what: string,
  check: (body: Record<string, unknown>, attestation: Attestation) => { value: T; bytes: number } | { faulty: string } | 'behind' | 'stop',
): Promise<{ attestation: Attestation; vouched: Certified; value: T; bytes: number } | undefined> {
  const path = `/v1/spaces/${encodeURIComponent(r.space)}/${route}`
  for (const source of r.relays) {
    let body: Record<string, unknown> & { relay: number; attestation: string; sig: string }
    let signed: { bytes: Uint8Array; sig: Uint8Array }
    try {
      // The body too has a deadline: a relay that sends headers and then stalls must not hold the caller up.
      const got = (await getJson(r.fetch, `${httpBaseOf(source.url)}${path}`, { headers: r.headers, maxBytes: MAX_SERVED_BODY, timeoutMs: r.timeoutMs })) as typeof body | undefined
      if (got === undefined) continue
      body = got
      // An answer without an attestation: the relay has nothing of the kind to serve (say, no delta that pays).
      if (typeof body.attestation !== 'string') continue
      signed = { bytes: fromBase64Url(body.attestation), sig: fromHex(body.sig) }
    } catch {
      continue
    }
    // Blame goes to the relay at the URL that answered, whatever index its answer names: it may pass
    // on another relay's genuine attestation with a wrong state, and that relay did nothing wrong.
    const faulty = (why: string): void => r.faulty(source.url, why)
    const key = r.cluster.relays[body.relay]?.publicKey
    if (source.relay !== undefined && body.relay !== source.relay) {
      faulty(`served ${what} under relay ${body.relay}'s attestation, not its own`)
      continue
    }
    if (!key || !(await r.crypto.verify(key, signed.bytes, signed.sig))) {
      faulty(`served ${what} with an attestation its key did not sign`)
      continue
    }
    let attestation: Attestation
    let checked: ReturnType<typeof check>
    try {
      attestation = decodeAttestation(signed.bytes)
      checked = attestation.space === r.space ? check(body, attestation) : { faulty: `served ${what} under an attestation of space ${attestation.space}` }
    } catch (err) {
      faulty(`served malformed ${what}: ${(err as Error).message}`)
      continue
    }
    if (checked === 'behind') continue
    if (checked === 'stop') return undefined
    if ('faulty' in checked) {
      faulty(checked.faulty)
      continue
    }
    const quorum = await quorumFor(r, signed.bytes, attestation, body.relay, source.url)
    if (quorum.verdict === 'vouched') {
      const vouched = { attestation: signed.bytes, signatures: [[body.relay, signed.sig] as const, ...quorum.signatures] }
      return { attestation, vouched, value: checked.value, bytes: checked.bytes + body.attestation.length + body.sig.length + quorum.bytes }
    }
    if (quorum.verdict === 'contradicted') faulty(`served ${what} at round ${attestation.round} that f+1 other relays attested differently`)
  }
  return undefined
}

/**
 * What the other relays say of the source's attestation: `vouched` once f of
 * them signed the same bytes; `contradicted` when f+1 signed other bytes
 * for that commit (the source lied); else `unconfirmed`.
 */
async function quorumFor(
  r: BootstrapRequest,
  bytes: Uint8Array,
  a: Attestation,
  source: number,
  sourceUrl: string,
): Promise<{ verdict: 'vouched' | 'contradicted' | 'unconfirmed'; bytes: number; signatures: Array<readonly [number, Uint8Array]> }> {
  let downloaded = 0
  const path = `/v1/spaces/${encodeURIComponent(r.space)}/attestations/${a.round}?from=${a.fromIndex}`
  const count = (answers: ReadonlyArray<{ relay: number; same: boolean }>, same: boolean): number => new Set(answers.filter((x) => x.same === same).map((x) => x.relay)).size
  let agreeing: Array<readonly [number, Uint8Array]> = []
  const verdict = await firstQuorum(
    r.relays
      .filter((x) => x.url !== sourceUrl)
      .map(async (x) => {
        try {
          const body = (await getJson(r.fetch, `${httpBaseOf(x.url)}${path}`, { headers: r.headers, maxBytes: MAX_ATTESTED_BODY, timeoutMs: r.timeoutMs })) as { relay: number; attestation: string; sig: string } | undefined
          if (body === undefined) return undefined
          downloaded += body.attestation.length + body.sig.length
          const key = r.cluster.relays[body.relay]?.publicKey
          const theirs = fromBase64Url(body.attestation)
          const sig = fromHex(body.sig)
          if (body.relay === source || !key || !(await r.crypto.verify(key, theirs, sig))) return undefined
          return { relay: body.relay, same: bytesEqual(theirs, bytes), sig }
        } catch {
          return undefined
        }
      }),
    (answers, done) => {
      if (count(answers, true) >= r.cluster.f) {
        // One signature per relay: what makes the certificate the client hands on.
        const seen = new Set<number>()
        agreeing = answers.filter((x) => x.same && !seen.has(x.relay) && seen.add(x.relay)).map((x) => [x.relay, x.sig] as const)
        return 'vouched' as const
      }
      if (count(answers, false) >= r.cluster.f + 1) return 'contradicted' as const
      return done ? ('unconfirmed' as const) : undefined
    },
  )
  return { verdict: verdict ?? 'unconfirmed', bytes: downloaded, signatures: agreeing }
}
