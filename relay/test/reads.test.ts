import { describe, expect, it } from 'vitest'
import { jsonWithBytes } from '../src/api/reads.ts'

describe('jsonWithBytes', () => {
  it('writes the fields and the bytes as base64url, as JSON.stringify would, whatever the length', () => {
    for (const n of [0, 1, 2, 3, 100, 49_151, 49_152, 49_153, 200_000]) {
      const bytes = new Uint8Array(n).map((_, i) => (i * 7) % 256)
      const fields = { a: 1, s: 'x"y\u00e9', next: null }
      expect(JSON.parse(jsonWithBytes(fields, 'data', bytes).toString())).toEqual({ ...fields, data: Buffer.from(bytes).toString('base64url') })
    }
    expect(JSON.parse(jsonWithBytes({}, 'd', new Uint8Array([1])).toString())).toEqual({ d: 'AQ' })
  })
})
