#!/usr/bin/env node
// Runs the plain (forward-and-merge) baseline relay from its TypeScript source.
import { register } from 'tsx/esm/api'

register()
await import('../src/plain/main.ts')
