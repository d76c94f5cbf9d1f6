#!/usr/bin/env node
// Installed from npm, the package holds the compiled dist/. In a checkout of
// the Stead repository it holds src/ as well: run that, so the relay is never
// a stale build of the code next to it (bundled, see bundle.mjs).
import { existsSync } from 'node:fs'
import process from 'node:process'
import { URL, pathToFileURL } from 'node:url'

const source = new URL('../src/process/cli.ts', import.meta.url)
if (existsSync(source)) {
  let bundle
  try {
    bundle = await (await import('./bundle.mjs')).relayBundle()
  } catch (err) {
    // A checkout it cannot write to, say: slower, through tsx, but running.
    process.stderr.write(`stead-relay: could not bundle the sources (${err instanceof Error ? err.message.split('\n')[0] : String(err)}); running them through tsx\n`)
  }
  if (bundle) {
    // Stack traces name the bundle's lines (NODE_OPTIONS=--enable-source-maps for the TypeScript sources': it
    // is not the default, as a relay's first stack trace would then cost it some 65 MB for the decoded map).
    await import(pathToFileURL(bundle).href)
  } else {
    await import('./source.mjs')
    await import(source.href)
  }
} else {
  await import('../dist/process/cli.js')
}
