import { MAX_RELAY_MESSAGE_BYTES, SteadError, bytesEqual, decode, encode, expect, fromHex, toHex, type EpochCommittee, type RelayCommittee } from '@stead/core'

/** The cluster a client trusts: f and each relay's key, in committee order. */
export interface ClusterDescriptor {
  /** How many relays may be faulty (Byzantine); the cluster has at least 3f+1. */
  readonly f: number
  /** The epoch whose committee this is: 0 (or absent) for the cluster file's, one more at each committee change. */
  readonly epoch?: number
  /** The last round of the epochs before (0 or absent for epoch 0, or when not known): commits up to it were attested by earlier committees. */
  readonly startRound?: number
  /** Every relay, in committee order (a relay's index is its place here). */
  readonly relays: ReadonlyArray<{
    /** The operator's name for the relay, e.g. "r1". */
    readonly id: string
    /** Its Ed25519 public key (32 bytes): a relay session must prove it (the welcome's signature), and attestations are checked against it. */
    readonly publicKey: Uint8Array
    /** host:port of its client API, when the descriptor says. */
    readonly api?: string
  }>
}

/**
 * Parses a cluster descriptor from JSON-like input: the relays' cluster file
 * (`{ f, relays: [{ id, publicKey: hex, mesh, api }], spaces }`) or what
 * `GET /v1/cluster` serves. Extra fields are ignored.
 */
export function parseClusterDescriptor(raw: unknown, where = 'cluster'): ClusterDescriptor {
  const fail = (msg: string): never => {
    throw new SteadError('malformed', `${where}: ${msg}`)
  }
  if (typeof raw !== 'object' || raw === null) fail('must be an object')
  const obj = raw as { f?: unknown; relays?: unknown; epoch?: unknown; startRound?: unknown }
  if (!Array.isArray(obj.relays) || obj.relays.length === 0) fail('relays must be a non-empty array')
  const relays = (obj.relays as unknown[]).map((r, i) => {
    const e = (r ?? {}) as Record<string, unknown>
    if (typeof e.id !== 'string' || e.id.length === 0) fail(`relays[${i}].id must be a non-empty string`)
    let publicKey: Uint8Array
    try {
      publicKey = e.publicKey instanceof Uint8Array ? e.publicKey : fromHex(String(e.publicKey))
    } catch {
      return fail(`relays[${i}].publicKey is not hex`)
    }
    if (publicKey.length !== 32) fail(`relays[${i}].publicKey must be 32 bytes`)
    return { id: e.id as string, publicKey, ...(typeof e.api === 'string' ? { api: e.api } : {}) }
  })
  const f = obj.f === undefined ? Math.floor((relays.length - 1) / 3) : obj.f
  if (typeof f !== 'number' || !Number.isSafeInteger(f) || f < 0) fail('f must be a non-negative integer')
  if (relays.length < 3 * (f as number) + 1) fail(`${relays.length} relays cannot tolerate f = ${f as number} (needs 3f+1)`)
  if (new Set(relays.map((r) => toHex(r.publicKey))).size !== relays.length) fail('relay keys must be distinct')
  const epoch = obj.epoch ?? 0
  if (typeof epoch !== 'number' || !Number.isSafeInteger(epoch) || epoch < 0) fail('epoch must be a non-negative integer')
  const startRound = obj.startRound ?? 0
  if (typeof startRound !== 'number' || !Number.isSafeInteger(startRound) || startRound < 0) fail('startRound must be a non-negative integer')
  return { f: f as number, relays, ...(epoch ? { epoch: epoch as number } : {}), ...(startRound ? { startRound: startRound as number } : {}) }
}

/** The same committee of the same epoch: f, and every relay's key in order. */
export function sameCluster(a: ClusterDescriptor, b: ClusterDescriptor): boolean {
  return (a.epoch ?? 0) === (b.epoch ?? 0) && (a.startRound ?? 0) === (b.startRound ?? 0) && a.f === b.f && a.relays.length === b.relays.length && a.relays.every((r, i) => bytesEqual(r.publicKey, (b.relays[i] as { publicKey: Uint8Array }).publicKey))
}

export function encodeCluster(c: ClusterDescriptor): Uint8Array {
  return encode([c.f, c.relays.map((r) => [r.id, r.publicKey, r.api ?? null]), c.epoch ?? 0, c.startRound ?? 0])
}

/** A stored descriptor (before epochs it had no epoch and start round: epoch 0). */
export function decodeCluster(bytes: Uint8Array): ClusterDescriptor {
  const [f, relays, epoch, startRound] = expect.array(decode(bytes), 'cluster', 4) as [unknown, unknown, unknown, unknown]
  return parseClusterDescriptor({
    f,
    epoch,
    startRound,
    relays: expect.array(relays, 'cluster.relays', 1000).map((r) => {
      const [id, publicKey, api] = expect.array(r, 'relay', 3) as [unknown, unknown, unknown]
      return { id, publicKey, ...(typeof api === 'string' ? { api } : {}) }
    }),
  })
}

/** A descriptor as the committee of its epoch: what epoch certificates are checked from (only f and the keys count). */
export function epochCommitteeOf(c: ClusterDescriptor): EpochCommittee {
  return { epoch: c.epoch ?? 0, committee: { f: c.f, members: c.relays.map((r) => ({ id: r.id, publicKey: r.publicKey, api: r.api ?? '', mesh: '' })) } }
}

/** The descriptor of a committee a client followed to. */
export function descriptorOf(epoch: number, committee: RelayCommittee, startRound: number): ClusterDescriptor {
  return { f: committee.f, epoch, startRound, relays: committee.members.map((m) => ({ id: m.id, publicKey: m.publicKey, api: m.api })) }
}

/** ws://host:port[/path] → http://host:port (wss → https): where a relay serves HTTP. */
export function httpBaseOf(url: string): string {
  const u = new URL(url)
  if (u.protocol !== 'ws:' && u.protocol !== 'wss:' && u.protocol !== 'http:' && u.protocol !== 'https:') {
    throw new SteadError('malformed', `relay URL ${url} must be ws://, wss://, http:// or https://`)
  }
  const scheme = u.protocol === 'wss:' || u.protocol === 'https:' ? 'https:' : 'http:'
  return `${scheme}//${u.host}`
}

/** The session endpoint of a relay URL (a bare ws://host:port gets /v1/ws). */
export function sessionUrlOf(url: string): string {
  const u = new URL(url)
  const scheme = u.protocol === 'https:' || u.protocol === 'wss:' ? 'wss:' : 'ws:'
  const path = u.pathname === '/' || u.pathname === '' ? '/v1/ws' : u.pathname
  return `${scheme}//${u.host}${path}`
}

/** The largest cluster descriptor read from a relay (a descriptor of a thousand relays is about 200 KB). */
const MAX_DESCRIPTOR_BYTES = 1024 * 1024

/** An answer carrying a signed head or an attestation: an attestation (up to the largest relay message) in base64url, and a little beside it. */
export const MAX_ATTESTED_BODY = Math.ceil(MAX_RELAY_MESSAGE_BYTES / 3) * 4 + 64 * 1024

/**
 * The fetch the client uses for relay reads (GET only). `signal` aborts
 * the request when the client gives up on it; a fetch that ignores it
 * still works, but a relay that never answers then holds its connection
 * until it closes.
 */
export type Fetch = (url: string, init?: { readonly headers?: Record<string, string>; readonly signal?: AbortSignal }) => Promise<FetchResponse>

/**
 * What the client reads of a response. `body` and `headers` are there with
 * the platform's fetch; a response without `body` (an injected fetch's) is
 * read with `json()`, unbounded.
 */
export interface FetchResponse {
  readonly ok: boolean
  readonly status: number
  json(): Promise<unknown>
  readonly body?: ReadableStream<Uint8Array> | null
  readonly headers?: { get(name: string): string | null }
}

/**
 * A response's JSON body, read to at most `maxBytes` and within `timeoutMs`:
 * a relay that announces or streams more is cut off with a SteadError
 * 'too-large', and one that is too slow with an error, its stream cancelled
 * either way, so that no lying relay can fill a tab's memory or keep a read
 * going after the caller gave up on it.
 */
export async function readJson(res: FetchResponse, maxBytes: number, timeoutMs: number): Promise<unknown> {
  if (!res.body) return withTimeout(res.json(), timeoutMs)
  const announced = Number(res.headers?.get('content-length') ?? NaN)
  if (announced > maxBytes) {
    await res.body.cancel().catch(() => undefined)
    throw new SteadError('too-large', `a response of ${announced} bytes, over the ${maxBytes} bytes allowed`)
  }
  const reader = res.body.getReader()
  let timedOut = false
  // Cancelling ends the pending read (done), so the loop below stops holding bytes at once.
  const timer = setTimeout(() => {
    timedOut = true
    void reader.cancel().catch(() => undefined)
  }, timeoutMs)
  let chunks: Uint8Array[] = []
  let size = 0
  try {
    for (;;) {
      const { done, value } = await reader.read()
      if (timedOut) throw new Error(`timed out after ${timeoutMs} ms reading a response`)
      if (done) break
      size += value.byteLength
      if (size > maxBytes) {
        await reader.cancel().catch(() => undefined)
        throw new SteadError('too-large', `a response of more than ${maxBytes} bytes`)
      }
      chunks.push(value)
    }
  } finally {
    clearTimeout(timer)
  }
  const all = new Uint8Array(size)
  let at = 0
  for (const c of chunks) {
    all.set(c, at)
    at += c.byteLength
  }
  chunks = []
  return JSON.parse(new TextDecoder().decode(all)) as unknown
}

/**
 * GETs a relay's JSON answer: undefined for an error status (its body let
 * go unread), else the body read to at most `maxBytes` (see readJson). The
 * answer's headers have `timeoutMs` to come, and then its body as long
 * again; when either deadline passes, or the body is refused, the request
 * is aborted, so a relay that never answers or stalls holds no connection
 * and no memory once the caller gave up on it.
 */
export async function getJson(fetchFn: Fetch, url: string, o: { readonly headers?: Record<string, string>; readonly maxBytes: number; readonly timeoutMs: number }): Promise<unknown> {
  const abort = new AbortController()
  try {
    const res = await withTimeout(fetchFn(url, { ...(o.headers ? { headers: o.headers } : {}), signal: abort.signal }), o.timeoutMs)
    if (!res.ok) return discard(res)
    return await readJson(res, o.maxBytes, o.timeoutMs)
  } finally {
    // Once the body is read whole this changes nothing; otherwise it lets the request go.
    abort.abort()
  }
}

/** Lets go of an answer not read (an error status): its body must not hold the connection. */
export function discard(res: FetchResponse): undefined {
  void res.body?.cancel().catch(() => undefined)
  return undefined
}

/**
 * Settles with `enough(answers so far)` as soon as it is defined, or with
 * `enough` of all answers once every task settled: a quorum needs the
 * fastest answers, not the slowest. Tasks that fail count as no answer.
 */
export function firstQuorum<T, R>(tasks: ReadonlyArray<Promise<T | undefined>>, enough: (answers: readonly T[], done: boolean) => R | undefined): Promise<R | undefined> {
  return new Promise((resolve) => {
    const answers: T[] = []
    let pending = tasks.length
    let settled = false
    const step = (v: T | undefined): void => {
      pending--
      if (settled) return
      if (v !== undefined) answers.push(v)
      const r = enough(answers, pending === 0)
      if (r !== undefined || pending === 0) {
        settled = true
        resolve(r)
      }
    }
    if (pending === 0) resolve(enough(answers, true))
    for (const t of tasks) t.then(step, () => step(undefined))
  })
}

/**
 * Trust on first use: asks every relay for its descriptor and accepts one
 * as soon as enough relays served it identically: 2f+1, with f the larger of
 * the descriptor's and what its relay count and the number of URLs given
 * allow, and never fewer than a majority of the URLs (so no liar can get a
 * cluster trusted alone by claiming a small f); a descriptor listing fewer
 * relays than URLs were given is not a candidate. `onDissent` hears of every relay URL that served another
 * descriptor, also after the choice (late answers). Throws a SteadError
 * `unsupported` when no descriptor reaches that quorum yet (try again later).
 */
export async function fetchCluster(
  urls: readonly string[],
  fetchFn: Fetch,
  onDissent: (url: string) => void = () => undefined,
  timeoutMs = 5000,
  onFailure: (url: string, why: string) => void = () => undefined,
): Promise<ClusterDescriptor> {
  const majority = Math.floor(urls.length / 2) + 1
  const needed = (c: ClusterDescriptor): number => {
    const f = Math.max(c.f, Math.floor((Math.max(urls.length, c.relays.length) - 1) / 3))
    return Math.max(2 * f + 1, majority)
  }
  const asks = urls.map(async (url) => {
    try {
      const body = await getJson(fetchFn, `${httpBaseOf(url)}/v1/cluster`, { maxBytes: MAX_DESCRIPTOR_BYTES, timeoutMs })
      if (body === undefined) onFailure(url, 'serves no cluster descriptor at /v1/cluster')
      return body === undefined ? undefined : { url, cluster: parseClusterDescriptor(body, `${url}/v1/cluster`) }
    } catch (err) {
      onFailure(url, describeNetworkError(err))
      return undefined
    }
  })
  let answered: ReadonlyArray<{ url: string; cluster: ClusterDescriptor }> = []
  const chosen = await firstQuorum(asks, (answers) => {
    answered = answers
    return answers.find((a) => a.cluster.relays.length >= urls.length && answers.filter((b) => sameCluster(a.cluster, b.cluster)).length >= needed(a.cluster))?.cluster
  })
  if (!chosen) {
    const kinds = answered.filter((a, i) => answered.findIndex((b) => sameCluster(a.cluster, b.cluster)) === i).length
    throw new SteadError(
      'unsupported',
      answered.length === 0
        ? `no relay answered GET /v1/cluster (${urls.join(', ')})`
        : `${answered.length} of ${urls.length} relays answered GET /v1/cluster${kinds > 1 ? ` with ${kinds} different descriptors` : ''}; trusting a cluster on first use needs ${Math.max(...answered.map((a) => needed(a.cluster)))} identical ones`,
    )
  }
  for (const ask of asks) void ask.then((a) => a && !sameCluster(a.cluster, chosen) && onDissent(a.url))
  return chosen
}

/**
 * A connection failure in a few words for `status.relays[].error`: what
 * Node's fetch and `ws` report (`connection refused`, `host not found`, ...)
 * or, when the platform says nothing more (browsers), the message.
 */
export function describeNetworkError(err: unknown): string {
  const seen = new Set<unknown>()
  let e: unknown = err
  while (e && typeof e === 'object' && !seen.has(e)) {
    seen.add(e)
    const code = (e as { code?: unknown }).code
    if (typeof code === 'string' && NETWORK_CODES[code]) return NETWORK_CODES[code]
    // An ErrorEvent of `ws` carries the error; fetch's TypeError its cause.
    e = (e as { error?: unknown; cause?: unknown }).error ?? (e as { cause?: unknown }).cause
  }
  const message = err instanceof Error ? err.message : (err as { message?: unknown } | undefined)?.message
  return typeof message === 'string' && message !== '' && message !== 'fetch failed' ? message : 'cannot connect'
}

const NETWORK_CODES: Readonly<Record<string, string>> = {
  ECONNREFUSED: 'connection refused',
  ECONNRESET: 'connection reset',
  ENOTFOUND: 'host not found',
  EAI_AGAIN: 'host not found',
  ETIMEDOUT: 'connection timed out',
  EHOSTUNREACH: 'host unreachable',
  ENETUNREACH: 'network unreachable',
  UND_ERR_CONNECT_TIMEOUT: 'connection timed out',
  UND_ERR_SOCKET: 'connection reset',
  CERT_HAS_EXPIRED: 'TLS certificate expired',
  DEPTH_ZERO_SELF_SIGNED_CERT: 'TLS certificate not trusted',
  SELF_SIGNED_CERT_IN_CHAIN: 'TLS certificate not trusted',
  UNABLE_TO_VERIFY_LEAF_SIGNATURE: 'TLS certificate not trusted',
}

/** Rejects when `p` has not settled within `ms`; the timer never outlives it. */
export function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`timed out after ${ms} ms`)), ms)
    p.then(
      (v) => {
        clearTimeout(t)
        resolve(v)
      },
      (e) => {
        clearTimeout(t)
        reject(e)
      },
    )
  })
}
