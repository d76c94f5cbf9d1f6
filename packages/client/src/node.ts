/** `@stead/client/node`: everything in the main entry, plus Node-only storage. */
export * from './index.ts'
export { lmdbStorage } from './storage/lmdb.ts'
