import { describe, expect, it } from 'vitest'
import { connectionCap, openFilesLimit } from '../src/connections.ts'

describe('the client API connection cap', () => {
  it('stays below the open-files limit, keeping a headroom for the store, the mesh, the peer port and probes', () => {
    expect(connectionCap(16_000, 20_000)).toBe(16_000)
    expect(connectionCap(16_000, 16_000)).toBe(13_952)
    expect(connectionCap(16_000, 1024)).toBe(768)
    expect(connectionCap(16_000, undefined)).toBe(16_000)
    expect(connectionCap(16_000, 10)).toBe(16)
    const fds = openFilesLimit()
    if (process.platform === 'linux') expect(fds).toBeGreaterThan(0)
  })
})
