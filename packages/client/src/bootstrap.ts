import { auditStateHash, bytesEqual, decodeAttestation, decodeAuditState, fromBase64Url, fromHex, type Attestation, type AuditState, type Crypto, type Envelope } from '@stead/core'
import { firstQuorum, httpBaseOf, withTimeout, type ClusterDescriptor, type Fetch } from './cluster.ts'
import { openTrusted } from './intake.ts'

/** An audit state f+1 relays vouch for: the state after the commit `attestation` describes. */
export interface VerifiedSnapshot {
  readonly attestation: Attestation
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
  /** Relays to ask, the preferred snapshot source first (`relay`: its index, once a session told it). */
  readonly relays: ReadonlyArray<{ readonly relay: number | undefined; readonly url: string }>
  readonly timeoutMs: number
  /** A relay served a snapshot that its own attestation does not vouch for. */
  readonly faulty: (relay: number, why: string) => void
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
  const path = `/v1/spaces/${encodeURIComponent(r.space)}`
  for (const source of r.relays) {
    let snapshot: { relay: number; attestation: Uint8Array; sig: Uint8Array; state: Uint8Array; bytes: number }
    try {
      const res = await withTimeout(r.fetch(`${httpBaseOf(source.url)}${path}/snapshot`, { headers: r.headers }), r.timeoutMs)
      if (!res.ok) continue
      const body = (await res.json()) as { relay: number; attestation: string; sig: string; state: string }
      snapshot = { relay: body.relay, attestation: fromBase64Url(body.attestation), sig: fromHex(body.sig), state: fromBase64Url(body.state), bytes: body.attestation.length + body.state.length + body.sig.length }
    } catch {
      continue
    }
    const key = r.cluster.relays[snapshot.relay]?.publicKey
    const served = source.relay ?? snapshot.relay
    if (!key || !(await r.crypto.verify(key, snapshot.attestation, snapshot.sig))) {
      r.faulty(served, 'served a snapshot with an attestation its key did not sign')
      continue
    }
    let attestation: Attestation
    let state: AuditState<Envelope>
    try {
      attestation = decodeAttestation(snapshot.attestation)
      state = decodeAuditState(snapshot.state, (signed) => openTrusted(r.crypto, signed))
    } catch (err) {
      r.faulty(served, `served a malformed snapshot: ${(err as Error).message}`)
      continue
    }
    const hash = auditStateHash((b) => r.crypto.sha256(b), state)
    if (attestation.space !== r.space || state.space !== r.space || state.index !== attestation.toIndex || !bytesEqual(hash, attestation.stateHash)) {
      r.faulty(served, `served a snapshot of ${r.space} at index ${state.index} that does not match the state hash it attested for round ${attestation.round}`)
      continue
    }
    const quorum = await quorumFor(r, snapshot.attestation, attestation, snapshot.relay, source.url)
    if (quorum.verdict === 'vouched') return { attestation, state, bytes: snapshot.bytes + quorum.bytes }
    if (quorum.verdict === 'contradicted') r.faulty(served, `served a snapshot at round ${attestation.round} that f+1 other relays attested differently`)
  }
  return undefined
}

/**
 * What the other relays say of the source's attestation: `vouched` once f of
 * them signed the same bytes; `contradicted` when f+1 signed other bytes
 * for that commit (the source lied); else `unconfirmed`.
 */
async function quorumFor(r: BootstrapRequest, bytes: Uint8Array, a: Attestation, source: number, sourceUrl: string): Promise<{ verdict: 'vouched' | 'contradicted' | 'unconfirmed'; bytes: number }> {
  let downloaded = 0
  const path = `/v1/spaces/${encodeURIComponent(r.space)}/attestations/${a.round}?from=${a.fromIndex}`
  const count = (answers: ReadonlyArray<{ relay: number; same: boolean }>, same: boolean): number => new Set(answers.filter((x) => x.same === same).map((x) => x.relay)).size
  const verdict = await firstQuorum(
    r.relays
      .filter((x) => x.url !== sourceUrl)
      .map(async (x) => {
        try {
          const res = await withTimeout(r.fetch(`${httpBaseOf(x.url)}${path}`, { headers: r.headers }), r.timeoutMs)
          if (!res.ok) return undefined
          const body = (await res.json()) as { relay: number; attestation: string; sig: string }
          downloaded += body.attestation.length + body.sig.length
          const key = r.cluster.relays[body.relay]?.publicKey
          const theirs = fromBase64Url(body.attestation)
          if (body.relay === source || !key || !(await r.crypto.verify(key, theirs, fromHex(body.sig)))) return undefined
          return { relay: body.relay, same: bytesEqual(theirs, bytes) }
        } catch {
          return undefined
        }
      }),
    (answers, done) => {
      if (count(answers, true) >= r.cluster.f) return 'vouched' as const
      if (count(answers, false) >= r.cluster.f + 1) return 'contradicted' as const
      return done ? ('unconfirmed' as const) : undefined
    },
  )
  return { verdict: verdict ?? 'unconfirmed', bytes: downloaded }
}
