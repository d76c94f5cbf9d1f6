/**
 * The Node build of @stead/client: the same API, with LMDB storage under
 * ./.stead/<database> by default, node:crypto Ed25519, and Node's own
 * WebSocket (Node 22 and later) or the `ws` package (Node 20). `lmdb` and `ws`
 * are optional peer dependencies, loaded only when used, so that browser apps
 * never install them.
 */
import { createRequire } from 'node:module'
import { join } from 'node:path'
import { SteadError } from '@stead/core'
import { nodeCrypto } from '@stead/core/node'
import { createClientWith, type SteadClient } from './client.ts'
import { lmdbStorage } from './storage/lmdb.ts'
import type { SocketFactory, SocketLike } from './transport/transport.ts'
import type { ClientOptions } from './types.ts'

export * from './index.ts'
export { lmdbStorage } from './storage/lmdb.ts'

/**
 * Opens a client with Node defaults: LMDB storage under `./.stead/<database>`
 * (default `./.stead/client`; needs the optional peer dependency `lmdb` unless
 * `options.storage` is given), node:crypto, and Node's WebSocket (Node 22 and
 * later) or the `ws` package. Otherwise as `@stead/client`'s `createClient`.
 *
 * @throws SteadError `unsupported` when this Node has no WebSocket, `ws` is not
 * installed and `options.connect` is not given.
 */
export async function createClient(options: ClientOptions): Promise<SteadClient> {
  return createClientWith(options, {
    storage: () => lmdbStorage(join(process.cwd(), '.stead', options?.database ?? 'client')),
    crypto: async () => nodeCrypto,
    // The app's own socket factory wins; only without one must Node have a WebSocket.
    connect: options?.connect ?? webSocketFactory(),
    fetch: (url, init) => fetch(url, init),
  })
}

type WebSocketClass = new (url: string) => SocketLike

/** Node's global WebSocket where it has one, else `ws`: a missing one fails `createClient` at once, with what to install. */
function webSocketFactory(): SocketFactory {
  const global = (globalThis as { WebSocket?: WebSocketClass }).WebSocket
  let Socket: WebSocketClass
  try {
    Socket = global ?? (createRequire(import.meta.url)('ws') as WebSocketClass)
  } catch (cause) {
    throw new SteadError('unsupported', 'this Node has no WebSocket (Node 22 and later do): npm install ws, an optional peer dependency of @stead/client', { cause })
  }
  return (url) => new Socket(url)
}
