export * from './messages.ts'
export * from './core.ts'
