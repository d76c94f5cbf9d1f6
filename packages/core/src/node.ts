/**
 * `@stead/core/node`: Node-only additions to the isomorphic main entry: the
 * node:crypto (OpenSSL) backend, about 20 times faster than noble, and its
 * synchronous signing and verification, which relays use in their event
 * loop. Kept out of the main entry so that browser bundles never see
 * node:crypto.
 *
 * @module @stead/core/node
 */
export { nodeCrypto, publicKeyOfSync, signSync, verifySync } from './crypto/node.ts'
export { installPromiseWithResolvers } from './with-resolvers.ts'
