/**
 * What the demo connects to. Everything can be overridden in the page URL,
 * which is how the e2e tests point two browser contexts at their own cluster
 * and space:
 *
 *   ?relays=ws://127.0.0.1:7401,ws://127.0.0.1:7402&space=treasury&user=Alice
 *
 * `&peers=1` also syncs peer to peer (WebRTC between browsers, set up
 * through the relays' peer service, and WebSockets to Node clients), so
 * pages keep collaborating while every relay is down. A page opened while
 * every relay is down joins from its peers when given the cluster to pin
 * (`&cluster=<the JSON of GET /v1/cluster>`) and peers to dial
 * (`&dial=<multiaddr>,<multiaddr>`: Node clients' WebSocket addresses).
 */
export interface DemoConfig {
  /** Relay base URLs (ws://host:port); the SDK appends /v1/ws. */
  readonly relays: readonly string[]
  readonly space: string
  /** A display name for this tab's user (only shown, never trusted). */
  readonly user: string
  /** IndexedDB database of this page's client (tabs with the same one share it). */
  readonly database: string
  /** The cluster descriptor to pin; when absent the client trusts what the relays agree on, on first use. */
  readonly cluster?: unknown
  /** Whether to sync peer to peer too (`?peers=1`). */
  readonly peers: boolean
  /** Peers to dial and keep connected (`&dial=`), besides those the relays name. */
  readonly dial: readonly string[]
}

const DEFAULT_PORTS = [7401, 7402, 7403, 7404]

export function readConfig(location: Location = window.location): DemoConfig {
  const params = new URLSearchParams(location.search)
  const fromEnv = import.meta.env.VITE_STEAD_RELAYS
  const relays = (params.get('relays') ?? fromEnv ?? DEFAULT_PORTS.map((p) => `ws://127.0.0.1:${p}`).join(','))
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)
  const space = params.get('space') || 'treasury'
  const user = params.get('user') || 'You'
  const tag = params.get('db') ?? import.meta.env.VITE_STEAD_CLUSTER_TAG
  const database = tag ? `stead-${space}-${tag}` : `stead-${space}`
  const given = params.get('cluster')
  const cluster = given ? parseCluster(given) : import.meta.env.VITE_STEAD_CLUSTER && !params.has('relays') ? (JSON.parse(import.meta.env.VITE_STEAD_CLUSTER) as unknown) : undefined
  const peers = params.get('peers') === '1'
  const dial = (params.get('dial') ?? '').split(',').map((s) => s.trim()).filter(Boolean)
  return { relays, space, user, database, peers, dial, ...(cluster ? { cluster } : {}) }
}

/** The `cluster` parameter: JSON, or undefined (trust on first use) when it is not, with the reason in the console. */
function parseCluster(json: string): unknown {
  try {
    return JSON.parse(json) as unknown
  } catch (err) {
    console.error(`the page's cluster parameter is not JSON (${(err as Error).message}): trusting the relays on first use instead`)
    return undefined
  }
}

/** ws://host:port (or wss://) → http://host:port (or https://), for the relay's HTTP API. */
export function httpBase(relay: string): string {
  return relay.replace(/^ws(s?):\/\//, 'http$1://').replace(/\/v1\/ws\/?$/, '').replace(/\/$/, '')
}
