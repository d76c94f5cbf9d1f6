#!/usr/bin/env node
// Runs the plain (forward-and-merge) baseline relay from its TypeScript source (tsx, workspace packages from src/).

await import('../../../relay/bin/source.mjs')
await import('../src/plain/main.ts')
