import { readFileSync, statSync, utimesSync } from 'node:fs'
import { resolve } from 'node:path'
import { describe, expect, it } from 'vitest'
// @ts-expect-error: plain JavaScript of the bin, without types
import { relayBundle } from '../bin/bundle.mjs'

const bundleOf = relayBundle as () => Promise<string>

describe("the bin's bundle of a checkout's sources", () => {
  it('is made again when a file it was made from changes, and reused while none does', async () => {
    const first = await bundleOf()
    expect(await bundleOf()).toBe(first)
    expect(readFileSync(first, 'utf8')).toContain('stead-relay')
    // A source of the relay and one of @stead/core: each is an input.
    for (const file of ['../src/process/version.ts', '../../packages/core/src/index.ts']) {
      const path = resolve(import.meta.dirname, file)
      const was = statSync(path)
      const before = await bundleOf()
      utimesSync(path, was.atime, new Date(was.mtimeMs + 1000))
      try {
        const after = await bundleOf()
        expect(after).not.toBe(before)
        expect(await bundleOf()).toBe(after)
      } finally {
        utimesSync(path, was.atime, was.mtime)
      }
    }
  }, 60_000)
})
