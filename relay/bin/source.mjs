// Runs a source checkout of Stead: TypeScript through tsx (a devDependency of
// the repository), and every @stead/* package resolved to its src/ through the
// "@stead/source" export condition, as the repository's scripts do with
// `node --conditions=@stead/source`.
import { register } from 'node:module'
import { register as registerTsx } from 'tsx/esm/api'

register('data:text/javascript,' + encodeURIComponent(`
export async function resolve(specifier, context, next) {
  return next(specifier, { ...context, conditions: ['@stead/source', ...context.conditions] })
}`))
registerTsx()
