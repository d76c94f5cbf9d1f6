/** `@stead/client/node`: kept for explicit imports; the package's Node entry already is this. */
export * from './index.node.ts'
