/** `@stead/core/node`: Node-only additions to the isomorphic main entry. */
export { nodeCrypto, publicKeyOfSync, signSync, verifySync } from './crypto/node.ts'
