import { SteadError, bytesEqual, decode, encode, expect, fromHex, toHex } from '@stead/core'
import { TrustError } from './errors.ts'

/** The cluster a client trusts: f and each relay's key, in committee order. */
export interface ClusterDescriptor {
  readonly f: number
  readonly relays: ReadonlyArray<{ readonly id: string; readonly publicKey: Uint8Array; readonly api?: string }>
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
  const obj = raw as { f?: unknown; relays?: unknown }
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
  return { f: f as number, relays }
}

export function sameCluster(a: ClusterDescriptor, b: ClusterDescriptor): boolean {
  return a.f === b.f && a.relays.length === b.relays.length && a.relays.every((r, i) => bytesEqual(r.publicKey, (b.relays[i] as { publicKey: Uint8Array }).publicKey))
}

export function encodeCluster(c: ClusterDescriptor): Uint8Array {
  return encode([c.f, c.relays.map((r) => [r.id, r.publicKey, r.api ?? null])])
}

export function decodeCluster(bytes: Uint8Array): ClusterDescriptor {
  const [f, relays] = expect.array(decode(bytes), 'cluster', 2) as [unknown, unknown]
  return parseClusterDescriptor({
    f,
    relays: expect.array(relays, 'cluster.relays', 1000).map((r) => {
      const [id, publicKey, api] = expect.array(r, 'relay', 3) as [unknown, unknown, unknown]
      return { id, publicKey, ...(typeof api === 'string' ? { api } : {}) }
    }),
  })
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

export type Fetch = (url: string, init?: { readonly headers?: Record<string, string> }) => Promise<{ ok: boolean; status: number; json(): Promise<unknown> }>

/**
 * Trust on first use: asks every relay for its descriptor and accepts it only
 * if all that answered (at least 2f+1 of them, and at least 2f+1 of the
 * URLs given) serve the same one. Throws TrustError when they disagree, and
 * a SteadError `unsupported` when too few answered (try again later).
 */
export async function fetchCluster(urls: readonly string[], fetchFn: Fetch, timeoutMs = 5000): Promise<ClusterDescriptor> {
  const answers = await Promise.all(
    urls.map(async (url) => {
      try {
        const res = await withTimeout(fetchFn(`${httpBaseOf(url)}/v1/cluster`), timeoutMs)
        if (!res.ok) return undefined
        return parseClusterDescriptor(await res.json(), `${url}/v1/cluster`)
      } catch (err) {
        if (err instanceof SteadError && err.reason === 'malformed') throw new TrustError(err.message)
        return undefined
      }
    }),
  )
  const got = answers.filter((a): a is ClusterDescriptor => a !== undefined)
  const first = got[0]
  if (!first) throw new SteadError('unsupported', `no relay answered GET /v1/cluster (${urls.join(', ')})`)
  for (const other of got) if (!sameCluster(first, other)) throw new TrustError('relays serve different cluster descriptors; refusing to trust any (pass `cluster` explicitly)')
  const quorum = 2 * first.f + 1
  if (got.length < quorum) throw new SteadError('unsupported', `only ${got.length} relays answered GET /v1/cluster; trusting a cluster on first use needs ${quorum} that agree`)
  return first
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
