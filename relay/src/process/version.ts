import { readFileSync } from 'node:fs'

/**
 * This package's version, from its own package.json. The module runs as
 * src/process/version.ts in a checkout and as dist/process/version.js once
 * built: both sit two levels below the package root, so the same relative
 * path works for both.
 */
export const RELAY_VERSION: string = readVersion()

function readVersion(): string {
  try {
    const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version?: unknown }
    return typeof pkg.version === 'string' ? pkg.version : 'unknown'
  } catch {
    // A bundler that moved this file away from package.json: the relay still runs.
    return 'unknown'
  }
}
