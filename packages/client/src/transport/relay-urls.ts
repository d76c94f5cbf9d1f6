import { decode, encode, expect } from '@stead/core'
import type { ClusterDescriptor } from './cluster.ts'

/**
 * The URLs a client reached a followed committee's relays at, kept with the
 * committee: after a restart the app passes the URLs it was built with,
 * which may name relays that left (and fewer than a grown committee has),
 * while these reach the relays of the epoch the client moved to.
 */
export interface RelayUrls {
  /** The epoch of the committee they reach. */
  readonly epoch: number
  /** The URLs the app passed when the client moved to that committee. */
  readonly given: readonly string[]
  /** One per relay of the committee, in its order. */
  readonly urls: readonly string[]
}

/** Longest URL kept (a URL is a host and a path). */
const MAX_URL_CHARS = 2048

export function encodeRelayUrls(r: RelayUrls): Uint8Array {
  return encode([r.epoch, r.given, r.urls])
}

/** A stored record; one that does not decode counts as none (the app's URLs are used). */
export function decodeRelayUrls(bytes: Uint8Array): RelayUrls | undefined {
  try {
    const [epoch, given, urls] = expect.array(decode(bytes), 'relay urls', 3) as [unknown, unknown, unknown]
    const strings = (v: unknown, field: string) => expect.array(v, field, 1000).map((u) => expect.string(u, field, MAX_URL_CHARS, 1))
    return { epoch: expect.uint(epoch, 'relay urls.epoch'), given: strings(given, 'relay urls.given'), urls: strings(urls, 'relay urls.urls') }
  } catch {
    return undefined
  }
}

/**
 * Where the sessions of a client that trusts `cluster` start: the URLs it
 * reached that committee at, if it moved there while the app passed the
 * same URLs as now; else the app's (an app that changed its URLs knows
 * where the relays are now).
 */
export function startUrls(cluster: ClusterDescriptor | undefined, stored: RelayUrls | undefined, appUrls: readonly string[]): readonly string[] {
  const same = stored !== undefined && stored.given.length === appUrls.length && stored.given.every((u, i) => u === appUrls[i])
  return same && cluster !== undefined && stored.epoch === (cluster.epoch ?? 0) && stored.urls.length === cluster.relays.length ? stored.urls : appUrls
}
