#!/usr/bin/env node
// Installed from npm, the package holds the compiled dist/. In a checkout of
// the Stead repository it holds src/ as well: run that, so the relay is never
// a stale build of the code next to it.
import { existsSync } from 'node:fs'
import { URL } from 'node:url'

const source = new URL('../src/process/cli.ts', import.meta.url)
if (existsSync(source)) {
  await import('./source.mjs')
  await import(source.href)
} else {
  await import('../dist/process/cli.js')
}
