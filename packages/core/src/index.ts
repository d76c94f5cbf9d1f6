/**
 * @stead/core: the isomorphic heart of Stead. CRDTs, verifiable logical
 * clocks, crypto, the wire codec, envelopes and the reliable replica with
 * its audit. No Node built-ins here; `@stead/core/node` adds node:crypto.
 */
export * from './errors.ts'
export * from './bytes.ts'
export * from './crypto/index.ts'
export * from './codec.ts'
export * from './clock.ts'
export * from './chrono.ts'
export * from './crdt/index.ts'
export * from './envelope.ts'
export * from './replica.ts'
export * from './protocol.ts'
