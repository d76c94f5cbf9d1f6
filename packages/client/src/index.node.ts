/**
 * The Node build of @stead/client: the same API, with LMDB storage under
 * ./.stead/<space> by default, node:crypto Ed25519 and the `ws` WebSocket.
 */
import { join } from 'node:path'
import { nodeCrypto } from '@stead/core/node'
import WebSocket from 'ws'
import { createClientWith, type SteadClient } from './client.ts'
import { lmdbStorage } from './storage/lmdb.ts'
import type { SocketLike } from './transport.ts'
import type { ClientOptions } from './types.ts'

export * from './index.ts'
export { lmdbStorage } from './storage/lmdb.ts'

export function createClient(options: ClientOptions): Promise<SteadClient> {
  return createClientWith(options, {
    storage: () => lmdbStorage(join(process.cwd(), '.stead', options?.database ?? 'client')),
    crypto: async () => nodeCrypto,
    connect: (url) => new WebSocket(url) as unknown as SocketLike,
    fetch: (url, init) => fetch(url, init),
  })
}
