import { execFileSync } from 'node:child_process'
import { mkdtempSync, readFileSync } from 'node:fs'
import { get } from 'node:https'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { ENVELOPE_REF_BYTES, ReliableReplica, auditStateHash, decodeStateDelta, decodeObjectProof, objectProofHash, authBytes, clockInit, decodeAttestation, decodeAuditState, decodeRelayMessage, encodeClientMessage, encodeEnvelope, freshHeadBytes, fromBase64Url, fromHex, openEnvelopeSync, sealEnvelope, stableReadBytes, toHex, welcomeBytes } from '@stead/core'
import { nodeCrypto, publicKeyOfSync, signSync, verifySync } from '@stead/core/node'
import pino from 'pino'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import WebSocket from 'ws'
import { generateIdentity, parseCluster } from '../src/process/config.ts'
import { addressKey } from '../src/api/server.ts'
import { publicKeyFromRaw } from '@libp2p/crypto/keys'
import { peerIdFromPublicKey } from '@libp2p/peer-id'
import { runRelay, type RunningRelay } from '../src/process/relay.ts'
import { freePort } from './helpers/cluster.ts'

/** A WebSocket session to the relay at `api` over wss, past the challenge, as the key made of bytes `n`. */
async function session(api: string, n: number, nonce?: Uint8Array) {
  const me = { secretKey: new Uint8Array(32).fill(n), publicKey: publicKeyOfSync(new Uint8Array(32).fill(n)) }
  const ws = new WebSocket(`wss://${api}/v1/ws`, { rejectUnauthorized: false })
  const inbox: ReturnType<typeof decodeRelayMessage>[] = []
  ws.on('message', (d: Buffer) => inbox.push(decodeRelayMessage(new Uint8Array(d))))
  const next = async (pred: (m: (typeof inbox)[number]) => boolean) => {
    for (let i = 0; i < 100; i++) {
      const m = inbox.find(pred)
      if (m) return m
      await new Promise((r) => setTimeout(r, 50))
    }
    throw new Error('no such message')
  }
  const challenge = await next((m) => m.type === 'challenge')
  if (challenge.type !== 'challenge') throw new Error('expected a challenge')
  ws.send(encodeClientMessage({ type: 'hello', publicKey: me.publicKey, sig: signSync(me.secretKey, authBytes(challenge.nonce, challenge.relayKey)), ...(nonce ? { nonce } : {}) }))
  const welcome = await next((m) => m.type === 'welcome')
  return { me, ws, next, welcome }
}

describe('per-address limits', () => {
  it('count an IPv4 address (also IPv4-mapped) alone and an IPv6 address by its /64', () => {
    expect(addressKey('127.0.0.2')).toBe('127.0.0.2')
    expect(addressKey('::ffff:10.1.2.3')).toBe('10.1.2.3')
    expect(addressKey('2001:db8:0:1:aaaa::1')).toBe('2001:db8:0:1::/64')
    expect(addressKey('2001:0db8:0000:0001:ffff:1:2:3')).toBe('2001:db8:0:1::/64')
    expect(addressKey('2001:db8::1')).toBe('2001:db8:0:0::/64')
    expect(addressKey('::1')).toBe('0:0:0:0::/64')
    expect(addressKey(undefined)).toBe('unknown')
  })
})

/** One in-process relay (N = 1, f = 0) serving over TLS, for what the API itself promises. */
describe('client API over TLS', () => {
  let relay: RunningRelay
  let api: string
  let relayKey: Uint8Array
  const dir = mkdtempSync(join(tmpdir(), 'stead-api-'))

  beforeAll(async () => {
    execFileSync('openssl', ['req', '-x509', '-newkey', 'ed25519', '-nodes', '-days', '1', '-subj', '/CN=localhost', '-keyout', join(dir, 'key.pem'), '-out', join(dir, 'cert.pem')], { stdio: 'ignore' })
    const id = generateIdentity()
    relayKey = id.publicKey
    api = `127.0.0.1:${await freePort()}`
    const cluster = parseCluster({ f: 0, relays: [{ id: 'solo', publicKey: toHex(id.publicKey), mesh: `/ip4/127.0.0.1/tcp/${await freePort()}`, api, peers: `/ip4/127.0.0.1/tcp/${await freePort()}/ws` }], openSpaces: true })
    relay = await runRelay({
      cluster,
      id: 'solo',
      secretKey: id.secretKey,
      dataDir: join(dir, 'data'),
      tls: { key: readFileSync(join(dir, 'key.pem')), cert: readFileSync(join(dir, 'cert.pem')) },
      logger: pino({ level: 'silent' }),
      limits: { maxPendingPerClient: 2, authTimeoutMs: 500, maxConnections: 3 },
      // A snapshot per batch, and two stable indexes of commits kept per space: pruning shows at once.
      snapshotEveryBatches: 1,
      retention: { updates: 2 },
    })
  }, 30_000)

  afterAll(async () => relay?.stop())

  const getText = (path: string): Promise<{ status: number; text: string; cors: string | undefined }> =>
    new Promise((ok, fail) => {
      get(`https://${api}${path}`, { rejectUnauthorized: false }, (res) => {
        let data = ''
        res.on('data', (d) => (data += d))
        res.on('end', () => ok({ status: res.statusCode ?? 0, text: data, cors: res.headers['access-control-allow-origin'] as string | undefined }))
      }).on('error', fail)
    })
  const getJson = async (path: string): Promise<{ body: unknown; cors: string | undefined; status: number }> => {
    const { text, ...rest } = await getText(path)
    return { body: JSON.parse(text), ...rest }
  }

  it('proves its key in the session: it signs the nonce a hello carries (and only then)', async () => {
    const nonce = new Uint8Array(32).fill(7)
    const { me, ws, welcome } = await session(api, 41, nonce)
    ws.close()
    if (welcome.type !== 'welcome' || !welcome.sig) throw new Error('expected a signed welcome')
    expect(verifySync(relayKey, welcomeBytes(nonce, me.publicKey, welcome.relay), welcome.sig)).toBe(true)
    expect(verifySync(relayKey, welcomeBytes(new Uint8Array(32), me.publicKey, welcome.relay), welcome.sig)).toBe(false)
    const plain = await session(api, 42)
    plain.ws.close()
    expect(plain.welcome).not.toHaveProperty('sig')
  })

  it('serves HTTPS', async () => {
    const { body, cors } = await getJson('/health')
    expect(body).toEqual({ ok: true, relay: 'solo' })
    expect(cors).toBe('*')
    expect(relay.url).toBe(`https://${api}`)
  })

  it('names itself as the cluster file does, is ready alone (f = 0), and exports runtime and cluster metrics', async () => {
    const status = (await getJson('/v1/status')).body as { relay: string; peers: { connected: string[]; total: number }; sessions: { open: number }; ready: boolean }
    expect(status).toMatchObject({ relay: 'solo', peers: { connected: [], total: 0 }, ready: true })
    expect(status.sessions.open).toBeGreaterThanOrEqual(0)
    const ready = await getJson('/ready')
    expect(ready.status).toBe(200)
    expect(ready.body).toMatchObject({ ready: true, relay: 'solo', reasons: [], peers: { connected: [], needed: 0, total: 0 }, roundsBehind: 0 })
    const metrics = (await getText('/metrics')).text
    for (const line of [
      /^process_cpu_user_seconds_total \S+$/m,
      /^nodejs_eventloop_lag_p99_seconds \S+$/m,
      /^nodejs_heap_size_used_bytes \S+$/m,
      /^stead_relay_info\{relay="solo",version="\d+\.\d+\.\d+[^"]*"\} 1$/m,
      /^stead_ready 1$/m,
      /^stead_peers_connected 0$/m,
      /^stead_rounds_behind 0$/m,
      /^stead_queued_bytes\{queue="envelopes"\} \d+$/m,
      /^stead_queued_bytes\{queue="mesh"\} \d+$/m,
      /^stead_memory_budget_bytes \d+$/m,
      /^stead_connected_clients \d+$/m,
      /^stead_spaces\{state="held"\} \d+$/m,
      /^stead_spaces\{state="resident"\} \d+$/m,
    ]) {
      expect(metrics).toMatch(line)
    }
  })

  it('serves the cluster descriptor and signed heads of spaces', async () => {
    const cluster = (await getJson('/v1/cluster')).body as { f: number; epoch: number; relays: Array<{ id: string; publicKey: string; api: string }> }
    expect(cluster.f).toBe(0)
    expect(cluster.epoch).toBe(0)
    expect(cluster.relays).toEqual([{ id: 'solo', publicKey: expect.stringMatching(/^[0-9a-f]{64}$/), api }])
    const head = (await getJson('/v1/spaces/nothing-yet/head')).body as { index: number; stateHash: string; sig: string }
    expect(head.index).toBe(0)
    const ok = nodeCrypto.verify(fromHex(cluster.relays[0]!.publicKey), stableReadBytes('nothing-yet', 0, fromHex(head.stateHash)), fromHex(head.sig))
    expect(await ok).toBe(true)
    const forged = nodeCrypto.verify(fromHex(cluster.relays[0]!.publicKey), stableReadBytes('nothing-yet', 1, fromHex(head.stateHash)), fromHex(head.sig))
    expect(await forged).toBe(false)
    // Asked with a nonce, the head is signed over it: it verifies for this request and no other.
    const key = fromHex(cluster.relays[0]!.publicKey)
    const nonce = new Uint8Array(32).fill(9)
    const fresh = (await getJson(`/v1/spaces/nothing-yet/head?nonce=${toHex(nonce)}`)).body as { index: number; stateHash: string; sig: string }
    expect(await nodeCrypto.verify(key, freshHeadBytes('nothing-yet', 0, fromHex(fresh.stateHash), nonce), fromHex(fresh.sig))).toBe(true)
    expect(await nodeCrypto.verify(key, freshHeadBytes('nothing-yet', 0, fromHex(fresh.stateHash), new Uint8Array(32).fill(8)), fromHex(fresh.sig))).toBe(false)
    expect(await nodeCrypto.verify(key, stableReadBytes('nothing-yet', 0, fromHex(fresh.stateHash)), fromHex(fresh.sig))).toBe(false)
    const bad = await getJson('/v1/spaces/nothing-yet/head?nonce=xyz')
    expect(bad.status).toBe(400)
    expect(bad.body).toMatchObject({ error: 'malformed' })
  })

  it('closes sessions that do not answer the challenge, refuses sessions over the cap, and makes room for another address at the heaviest one\'s cost', async () => {
    const open = (localAddress = '127.0.0.1'): Promise<{ ws: WebSocket; inbox: ReturnType<typeof decodeRelayMessage>[]; closed: Promise<number> }> =>
      new Promise((ok) => {
        const ws = new WebSocket(`wss://${api}/v1/ws`, { rejectUnauthorized: false, localAddress })
        const inbox: ReturnType<typeof decodeRelayMessage>[] = []
        ws.on('message', (d: Buffer) => inbox.push(decodeRelayMessage(new Uint8Array(d))))
        const closed = new Promise<number>((done) => ws.on('close', (code) => done(code)))
        ws.on('open', () => ok({ ws, inbox, closed }))
      })
    const silent = await open()
    expect(await silent.closed).toBe(4003)
    expect(silent.inbox.some((m) => m.type === 'error' && m.reason === 'unauthenticated')).toBe(true)
    const three = [await open(), await open(), await open()]
    const fourth = await open()
    expect(await fourth.closed).toBe(1013)
    expect(fourth.inbox.some((m) => m.type === 'error' && m.reason === 'too-many-sessions')).toBe(true)
    // Full, but another address holds none: the newest session of the address holding the most gives way.
    const other = await open('127.0.0.2')
    expect(await three[2]!.closed).toBe(1013)
    expect(three[2]!.inbox.some((m) => m.type === 'error' && m.reason === 'too-many-sessions' && m.detail.includes('another address'))).toBe(true)
    // Now 2 and 1: the second address may not push the first below its own share.
    const again = await open('127.0.0.2')
    expect(await again.closed).toBe(1013)
    const open2 = [three[0]!, three[1]!, other]
    expect(open2.every((s) => s.ws.readyState === WebSocket.OPEN)).toBe(true)
    for (const s of open2) s.ws.close()
    await Promise.all(open2.map((s) => s.closed))
  })

  it('offers its peer service in welcome, and passes on where the clients of a space can be reached', async () => {
    const a = await session(api, 21)
    const welcome = await a.next((m) => m.type === 'welcome')
    expect(welcome.type === 'welcome' && welcome.peers?.every((p) => /^\/ip4\/127\.0\.0\.1\/tcp\/\d+\/ws\/p2p\/12D3Koo/.test(p))).toBe(true)
    // Only for a space the session follows.
    a.ws.send(encodeClientMessage({ type: 'announce', space: 'meet', addrs: ['/ip4/127.0.0.1/tcp/1/p2p/a'] }))
    expect(await a.next((m) => m.type === 'error' && m.detail.includes('subscribe first'))).toMatchObject({ reason: 'malformed' })
    const b = await session(api, 22)
    const idOf = (s: { me: { publicKey: Uint8Array } }): string => peerIdFromPublicKey(publicKeyFromRaw(s.me.publicKey)).toString()
    const [aAddr, bAddr] = [`/ip4/127.0.0.1/tcp/1/p2p/${idOf(a)}`, `/ip4/127.0.0.1/tcp/2/p2p/${idOf(b)}`]
    for (const s of [a, b]) s.ws.send(encodeClientMessage({ type: 'subscribe', space: 'meet', fromIndex: 0, frames: false }))
    // Only its own addresses: another client's peer id is refused.
    a.ws.send(encodeClientMessage({ type: 'announce', space: 'meet', addrs: [bAddr] }))
    expect(await a.next((m) => m.type === 'error' && m.detail.includes('/p2p/'))).toMatchObject({ reason: 'malformed' })
    a.ws.send(encodeClientMessage({ type: 'announce', space: 'meet', addrs: [aAddr] }))
    b.ws.send(encodeClientMessage({ type: 'announce', space: 'meet', addrs: [bAddr] }))
    expect(await a.next((m) => m.type === 'peers')).toEqual({ type: 'peers', space: 'meet', addrs: [bAddr] })
    expect(await b.next((m) => m.type === 'peers')).toEqual({ type: 'peers', space: 'meet', addrs: [aAddr] })
    // Too many addresses is a typed error, not a crash.
    a.ws.send(encodeClientMessage({ type: 'announce', space: 'meet', addrs: Array.from({ length: 9 }, (_, i) => `/ip4/127.0.0.1/tcp/${i}`) }))
    expect(await a.next((m) => m.type === 'error' && m.reason === 'too-large')).toBeTruthy()
    a.ws.close()
    b.ws.close()
  })

  it('limits envelopes a session has pending, over wss', async () => {
    const { me, ws, next } = await session(api, 5)
    const submit = async (space: string, seq: number, id: number) => {
      const env = await sealEnvelope(nodeCrypto, me, { space, seq, clock: clockInit(), deps: [], updates: [{ key: 'c', decl: { type: 'counter', bounds: {} }, ops: [1] }], safe: [] })
      ws.send(encodeClientMessage({ type: 'submit', id, envelope: encodeEnvelope(env) }))
    }
    // Two in flight fill the session's allowance; once they are decided it is free again.
    await submit('p', 1, 101)
    await submit('p', 2, 102)
    expect(await next((m) => m.type === 'accepted' && m.id === 102)).toMatchObject({ status: 'queued' })
    let id = 103
    for (;;) {
      await submit('p', 3, id)
      const answer = await next((m) => (m.type === 'accepted' || m.type === 'error') && m.id === id)
      if (answer.type === 'accepted') break
      expect(answer).toMatchObject({ reason: 'rate-limited' })
      expect(id++).toBeLessThan(200)
    }
    // All three decided (each committed envelope is one step of the stable index): nothing of this session pends.
    for (let i = 0; relay.node.reads.listSpaces('', 100).find((x) => x.space === 'p')?.stableIndex !== 3; i++) {
      expect(i).toBeLessThan(100)
      await new Promise((r) => setTimeout(r, 50))
    }
    // Sequence numbers 2, 3, 4 without 1: they wait for the gap, so they stay undecided.
    for (const seq of [2, 3, 4]) await submit('s', seq, seq)
    expect(await next((m) => m.type === 'accepted' && m.id === 2)).toMatchObject({ status: 'queued' })
    expect(await next((m) => m.type === 'accepted' && m.id === 3)).toMatchObject({ status: 'queued' })
    expect(await next((m) => m.type === 'error' && m.id === 4)).toMatchObject({ reason: 'rate-limited' })
    ws.close()
  })

  it('names by id, in commits, the envelopes it sent a subscription with refs early, and sends the others whole', async () => {
    const a = await session(api, 7)
    const b = await session(api, 8)
    a.ws.send(encodeClientMessage({ type: 'subscribe', space: 'refs', fromIndex: 0, frames: true, refs: true }))
    b.ws.send(encodeClientMessage({ type: 'subscribe', space: 'refs', fromIndex: 0 }))
    const env = await sealEnvelope(nodeCrypto, a.me, { space: 'refs', seq: 1, clock: clockInit(), deps: [], updates: [{ key: 'c', decl: { type: 'counter', bounds: {} }, ops: [1] }], safe: [] })
    a.ws.send(encodeClientMessage({ type: 'submit', id: 1, envelope: encodeEnvelope(env) }))
    const early = await a.next((m) => m.type === 'envelope')
    expect(early).toMatchObject({ type: 'envelope', space: 'refs' })
    const named = await a.next((m) => m.type === 'commit')
    const whole = await b.next((m) => m.type === 'commit')
    if (named.type !== 'commit' || whole.type !== 'commit') throw new Error('expected commits')
    expect(named.envelopes.map(toHex)).toEqual([toHex(fromHex(env.idHex))])
    expect(named.envelopes[0]).toHaveLength(ENVELOPE_REF_BYTES)
    expect(whole.envelopes.map(toHex)).toEqual([toHex(encodeEnvelope(env))])
    // Subscribed again: the replayed commit carries whole what was already named once.
    a.ws.send(encodeClientMessage({ type: 'subscribe', space: 'refs', fromIndex: 0, frames: true, refs: true }))
    const again = await a.next((m) => m.type === 'commit' && m !== named)
    if (again.type !== 'commit') throw new Error('expected a commit')
    expect(again.envelopes.map(toHex)).toEqual([toHex(encodeEnvelope(env))])
    a.ws.close()
    b.ws.close()
  })

  it('serves a space\'s audit state with the attestation that vouches for it, and its attestation of a commit by position', async () => {
    const key = fromHex(((await getJson('/v1/cluster')).body as { relays: Array<{ publicKey: string }> }).relays[0]!.publicKey)
    const open = (signed: { bytes: Uint8Array; sig: Uint8Array }) => openEnvelopeSync({ sha256: (b) => nodeCrypto.sha256(b), verify: () => true }, [signed.bytes, signed.sig])
    // 's' has envelopes parked behind a gap (seq 1 never came): they are part of the state the hash covers.
    for (const [space, index, parked] of [['p', 3, 0], ['s', 0, 2]] as const) {
      const snap = (await getJson(`/v1/spaces/${space}/snapshot`)).body as { relay: number; attestation: string; sig: string; state: string }
      const bytes = fromBase64Url(snap.attestation)
      expect(await nodeCrypto.verify(key, bytes, fromHex(snap.sig))).toBe(true)
      const a = decodeAttestation(bytes)
      const state = decodeAuditState(fromBase64Url(snap.state), open)
      expect([state.index, state.waiting.length, a.toIndex]).toEqual([index, parked, index])
      expect(toHex(auditStateHash((b) => nodeCrypto.sha256(b), state))).toBe(toHex(a.stateHash))
      const same = (await getJson(`/v1/spaces/${space}/attestations/${a.round}?from=${a.fromIndex}`)).body as { attestation: string; sig: string }
      expect(toHex(fromBase64Url(same.attestation))).toBe(toHex(bytes))
    }
    // A space with no commit yet is an expected state, not an error (a browser would print a 404 in red).
    const none = await getJson('/v1/spaces/nothing-yet/snapshot')
    expect([none.status, (none.body as { attestation: unknown }).attestation]).toEqual([200, null])
    // Its stable state is the empty one at index 0, signed like any other.
    const empty = (await getJson('/v1/spaces/nothing-yet/stable')).body as { index: number; stateHash: string; sig: string }
    expect(empty.index).toBe(0)
    expect(empty.stateHash).toBe(toHex(new ReliableReplica({ space: 'nothing-yet' }).stableHash((b) => nodeCrypto.sha256(b))))
    expect(await nodeCrypto.verify(key, stableReadBytes('nothing-yet', 0, fromHex(empty.stateHash)), fromHex(empty.sig))).toBe(true)
    // Commits of 'p' are kept from two indexes back: a subscription from 0 is told where they start.
    const { ws, next } = await session(api, 6)
    ws.send(encodeClientMessage({ type: 'subscribe', space: 'p', fromIndex: 0 }))
    expect(await next((m) => m.type === 'pruned')).toEqual({ type: 'pruned', space: 'p', from: 1 })
    ws.send(encodeClientMessage({ type: 'subscribe', space: 'p', fromIndex: 1 }))
    expect(await next((m) => m.type === 'commit')).toMatchObject({ type: 'commit', space: 'p' })
    ws.close()
    const bad = await getJson('/v1/spaces/p/attestations/abc?from=0')
    expect([bad.status, (bad.body as { error: string }).error]).toEqual([400, 'malformed'])
  })

  it('serves one object with the Merkle path that proves it, or its absence, against the state hash it attested', async () => {
    const key = fromHex(((await getJson('/v1/cluster')).body as { relays: Array<{ publicKey: string }> }).relays[0]!.publicKey)
    const snap = (await getJson('/v1/spaces/p/snapshot')).body as { state: string }
    const state = decodeAuditState(fromBase64Url(snap.state), (signed) => openEnvelopeSync({ sha256: (b) => nodeCrypto.sha256(b), verify: () => true }, [signed.bytes, signed.sig]))
    for (const [object] of [...state.objects, ['no-such-object']]) {
      const got = (await getJson(`/v1/spaces/p/objects/${encodeURIComponent(object)}`)).body as { attestation: string; sig: string; proof: string }
      const bytes = fromBase64Url(got.attestation)
      expect(await nodeCrypto.verify(key, bytes, fromHex(got.sig))).toBe(true)
      const a = decodeAttestation(bytes)
      const proof = decodeObjectProof(fromBase64Url(got.proof))
      expect([proof.space, proof.key, proof.index]).toEqual(['p', object, a.toIndex])
      expect(proof.object === undefined).toBe(object === 'no-such-object')
      expect(toHex((objectProofHash((b) => nodeCrypto.sha256(b), proof) as { hash: Uint8Array }).hash)).toBe(toHex(a.stateHash))
    }
    expect(state.objects.length).toBeGreaterThan(0)
    const none = await getJson('/v1/spaces/nothing-yet/objects/x')
    expect([none.status, (none.body as { attestation: unknown }).attestation]).toEqual([200, null])
    // The longest key there can be, in 3-byte characters, is served (absent here); one character more is refused.
    const longest = (await getJson(`/v1/spaces/p/objects/${encodeURIComponent('€'.repeat(256))}`)).body as { proof: string }
    expect(decodeObjectProof(fromBase64Url(longest.proof)).key).toBe('€'.repeat(256))
    const long = await getJson(`/v1/spaces/p/objects/${'k'.repeat(257)}`)
    expect([long.status, (long.body as { error: string }).error]).toEqual([400, 'too-large'])
  })

  it('serves what changed since a stable index, as ops, as state or each the cheaper way, leading a replica there to the state hash it attested', async () => {
    const key = fromHex(((await getJson('/v1/cluster')).body as { relays: Array<{ publicKey: string }> }).relays[0]!.publicKey)
    const open = (signed: { bytes: Uint8Array; sig: Uint8Array }) => openEnvelopeSync({ sha256: (b) => nodeCrypto.sha256(b), verify: () => true }, [signed.bytes, signed.sig])
    for (const mode of ['ops', 'state', 'adaptive']) {
      const res = await getJson(`/v1/spaces/p/delta?from=0&mode=${mode}`)
      expect([mode, res.status]).toEqual([mode, 200])
      const got = res.body as { attestation: string; sig: string; delta: string }
      const bytes = fromBase64Url(got.attestation)
      expect(await nodeCrypto.verify(key, bytes, fromHex(got.sig))).toBe(true)
      const a = decodeAttestation(bytes)
      const delta = decodeStateDelta(fromBase64Url(got.delta), open)
      expect([delta.space, delta.fromIndex, delta.toIndex]).toEqual(['p', 0, a.toIndex])
      expect(delta.objects.length).toBeGreaterThan(0)
      if (mode !== 'adaptive') expect(delta.objects.every((o) => o.mode === mode)).toBe(true)
      const replica = new ReliableReplica({ space: 'p' })
      const verified = replica.verifyDelta((b) => nodeCrypto.sha256(b), delta, a.stateHash)
      expect(verified).not.toHaveProperty('problem')
      replica.applyDelta((b) => nodeCrypto.sha256(b), verified as Exclude<typeof verified, { problem: string }>, a.round)
      expect(toHex(replica.stableHash((b) => nodeCrypto.sha256(b)))).toBe(toHex(a.stateHash))
    }
    const now = decodeAttestation(fromBase64Url(((await getJson('/v1/spaces/p/snapshot')).body as { attestation: string }).attestation)).toIndex
    // Nothing to catch up, a delta heavier than the commits it replaces, or none kept: no delta (and no error status,
    // which a browser would log); the client follows the commits.
    for (const path of [`/v1/spaces/p/delta?from=${now}`, `/v1/spaces/p/delta?from=${now + 1}`, '/v1/spaces/nothing-yet/delta?from=0']) {
      const none = await getJson(path)
      expect([path, none.status, (none.body as { delta: unknown }).delta]).toEqual([path, 200, null])
    }
    for (const [path, status] of [
      ['/v1/spaces/p/delta', 400],
      ['/v1/spaces/p/delta?from=-1', 400],
      ['/v1/spaces/p/delta?from=0&mode=both', 400],
    ] as const) {
      expect([path, (await getJson(path)).status]).toEqual([path, status])
    }
  })
})
