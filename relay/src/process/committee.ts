import { authBytes, authorIdOf, clockInit, decodeRelayMessage, encodeClientMessage, encodeEnvelope, fromHex, sealEnvelope, SteadError, toHex, type RelayCommittee } from '@stead/core'
import { nodeCrypto, signSync } from '@stead/core/node'
import WebSocket from 'ws'
import { COMMITTEE_SPACE, backingKey, encodeCommitteeRequest, proposalId } from '../runtime/committee-proposals.ts'
import type { CommitteeChangeStatus, CommitteeJson } from '../runtime/node.ts'
import { ConfigError, loadCluster, relayCommitteeOf, type Identity } from './config.ts'

/**
 * `stead-relay committee propose|approve|status`: an operator backs the
 * committee of the next epoch with its relay's key (see
 * committee-proposals.ts). The request is an envelope of that key in the
 * reserved space $committee, submitted to the operator's relay over the
 * client protocol; 2f+1 operators backing the same committee decide the
 * change, which takes effect at the commit that decides it.
 */

/** What a relay's GET /v1/status says of epochs. */
interface EpochStatus {
  readonly relay: string
  readonly epoch: number
  readonly epochStartRound: number
  readonly committeeChange: CommitteeChangeStatus
}

const TIMEOUT_MS = 30_000

/** The relay's epoch and committee change, from its API at `url` (http://host:port). */
export async function committeeStatus(url: string): Promise<EpochStatus> {
  let res: Response
  try {
    res = await fetch(`${url.replace(/\/$/, '')}/v1/status`, { signal: AbortSignal.timeout(TIMEOUT_MS) })
  } catch (err) {
    throw new ConfigError(`--url ${url}: no relay answered (${(err as Error).message}); give the http://host:port of a running relay's API`)
  }
  if (!res.ok) throw new ConfigError(`--url ${url}: GET /v1/status answered ${res.status}`)
  const status = (await res.json()) as Partial<EpochStatus>
  if (typeof status.epoch !== 'number' || !status.committeeChange) throw new ConfigError(`--url ${url}: the relay's status says nothing of epochs (a stead-relay older than committee changes?)`)
  return status as EpochStatus
}

/** A status as an operator reads it. */
export function describeStatus(s: EpochStatus): string {
  const lines = [`relay ${s.relay}: epoch ${s.epoch} (from round ${s.epochStartRound})`]
  const d = s.committeeChange.decided
  if (d) lines.push(`decided: epoch ${d.epoch} with ${describeCommittee(d.next)} (proposal ${d.id}); this epoch ended at round ${d.round}; ${d.signers} of the ${d.needed} signatures its certificate needs`)
  for (const p of s.committeeChange.proposals) lines.push(`proposal ${p.id}: ${describeCommittee(p.next)}, backed by ${p.backers.join(', ')}`)
  if (!d && s.committeeChange.proposals.length === 0) lines.push('no committee change proposed')
  return lines.join('\n')
}

function describeCommittee(c: CommitteeJson): string {
  return `f = ${c.f}, relays ${c.relays.map((r) => `${r.id} (${r.api})`).join(', ')}`
}

/** The committee a cluster file names (its f and relays; the rest of the file is not part of a committee). */
export function committeeOfFile(path: string): RelayCommittee {
  return relayCommitteeOf(loadCluster(path))
}

/** The committee of a proposal the relay at `url` lists. */
export async function proposalOf(url: string, id: string): Promise<RelayCommittee> {
  const status = await committeeStatus(url)
  const p = status.committeeChange.proposals.find((x) => x.id === id)
  if (!p) throw new ConfigError(`no open proposal ${id} at ${url}${status.committeeChange.proposals.length ? ` (open: ${status.committeeChange.proposals.map((x) => x.id).join(', ')})` : ''}`)
  return { f: p.next.f, members: p.next.relays.map((r) => ({ id: r.id, publicKey: fromHex(r.publicKey), api: r.api, mesh: r.mesh, ...(r.peers ? { peers: r.peers } : {}) })) }
}

/**
 * Backs `next` as the next epoch's committee with the relay key `identity`
 * (a key of the current committee), through the relay at `url`; resolves
 * once that relay's stable state shows the backing, with its status then.
 */
export async function backCommittee(url: string, identity: Identity, next: RelayCommittee): Promise<{ id: string; status: EpochStatus }> {
  const before = await committeeStatus(url)
  if (before.committeeChange.decided) throw new ConfigError(`the change to epoch ${before.committeeChange.decided.epoch} is decided already; back the next one once it took effect`)
  const member = before.committeeChange.members.find((m) => m.publicKey === toHex(identity.publicKey))
  if (!member) throw new ConfigError(`the key given (${toHex(identity.publicKey)}) is no relay of epoch ${before.epoch}'s committee (${before.committeeChange.members.map((m) => m.id).join(', ')}): only they back a change`)
  const id = proposalId((b) => nodeCrypto.sha256(b), next)
  const env = await sealEnvelope(nodeCrypto, identity, {
    space: COMMITTEE_SPACE,
    seq: member.nextSeq,
    clock: clockInit(),
    deps: [],
    updates: [{ key: backingKey(authorIdOf(nodeCrypto, identity.publicKey)), decl: { type: 'register' }, ops: [['s', encodeCommitteeRequest({ epoch: before.epoch + 1, next }), Date.now()]] }],
    safe: [],
  })
  await submit(url, identity, encodeEnvelope(env))
  const deadline = Date.now() + TIMEOUT_MS
  for (;;) {
    // The backing that decides the change ends the epoch: the relay restarts its API as the next epoch's meanwhile.
    const status = await committeeStatus(url).catch((err: unknown) => (Date.now() > deadline ? Promise.reject(err) : undefined))
    const c = status?.committeeChange
    if (status && c && (status.epoch > before.epoch || c.decided?.id === id || c.proposals.some((p) => p.id === id && p.backers.includes(member.id)))) return { id, status }
    if (Date.now() > deadline) throw new SteadError('timeout', `the relay at ${url} did not show ${member.id}'s backing within ${TIMEOUT_MS / 1000} s (is the cluster committing? see its /ready)`)
    await new Promise((r) => setTimeout(r, 200))
  }
}

/** Submits one envelope over the relay's client protocol (challenge, hello, submit) and waits for its answer. */
function submit(url: string, identity: Identity, envelope: Uint8Array): Promise<void> {
  const ws = new WebSocket(`${url.replace(/^http/, 'ws').replace(/\/$/, '')}/v1/ws`)
  return new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => fail(new SteadError('timeout', `the relay at ${url} did not answer the submit within ${TIMEOUT_MS / 1000} s`)), TIMEOUT_MS)
    const fail = (err: Error): void => {
      clearTimeout(timer)
      ws.close()
      reject(err)
    }
    ws.on('error', (err) => fail(new ConfigError(`--url ${url}: ${err.message}`)))
    ws.on('message', (data: Buffer) => {
      const m = decodeRelayMessage(new Uint8Array(data))
      if (m.type === 'challenge') ws.send(encodeClientMessage({ type: 'hello', publicKey: identity.publicKey, sig: signSync(identity.secretKey, authBytes(m.nonce, m.relayKey)) }))
      else if (m.type === 'welcome') ws.send(encodeClientMessage({ type: 'submit', id: 1, envelope }))
      else if (m.type === 'accepted' && m.id === 1) {
        clearTimeout(timer)
        ws.close()
        resolve()
      } else if (m.type === 'error' && (m.id === 1 || m.id === null)) fail(new SteadError(m.reason, `the relay refused the request: ${m.detail}`))
    })
  })
}
