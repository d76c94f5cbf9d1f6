export * from './messages.ts'
export * from './core.ts'
export * from './byzantine.ts'
export { ConsensusInvariantError } from './dag.ts'
