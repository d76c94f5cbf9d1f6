/** `@stead/core/node`: Node-only additions to the isomorphic main entry. */
export { nodeCrypto, signSync, verifySync } from './crypto/node.ts'
