/**
 * `@stead/client/node`: what Node gets. The same API as `@stead/client`
 * (re-exported here), plus {@link lmdbStorage}, and a `createClient` whose
 * defaults suit Node: LMDB storage under `./.stead/<database>` (default
 * `./.stead/client`), node:crypto, and Node's WebSocket (Node 22 and later)
 * or the `ws` package. `lmdb` and `ws` are optional peer dependencies:
 * install them when you use them.
 *
 * In Node, `@stead/client` itself resolves to this entry, so
 * `import { createClient, lmdbStorage } from '@stead/client'` works there;
 * this subpath is kept for explicit imports.
 *
 * @module @stead/client/node
 */
export * from './index.node.ts'
