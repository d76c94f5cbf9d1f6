/**
 * @stead/core: the isomorphic heart of Stead. CRDTs, verifiable logical
 * clocks, crypto, the wire codec, envelopes and the reliable replica with
 * its audit. No Node built-ins here; `@stead/core/node` adds node:crypto.
 *
 * Apps use `@stead/client`, which is built on this; use core directly to
 * build another client, a relay, or tools that read Stead's signed data.
 *
 * @module @stead/core
 */
export * from './errors.ts'
export * from './bytes.ts'
export * from './crypto/index.ts'
export * from './codec.ts'
export * from './clock.ts'
export * from './chrono.ts'
export * from './epoch.ts'
export * from './causal.ts'
export * from './crdt/index.ts'
export * from './device.ts'
export * from './envelope.ts'
export * from './replica.ts'
export * from './protocol.ts'
export * from './presence.ts'
export * from './state.ts'
export * from './merkle.ts'
export * from './delta.ts'
export * from './hot-objects.ts'
export * from './frame.ts'
export * from './time.ts'
