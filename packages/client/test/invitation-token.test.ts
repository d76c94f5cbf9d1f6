import { encode, toBase64Url } from '@stead/core'
import { describe, expect, it } from 'vitest'
import { decodeInvitation, encodeInvitation } from '../src/handles/invitation-token.ts'
import { invitationSpace } from '../src/index.node.ts'

/** Invitation tokens on their own: what they hold, and junk refused with a typed error. */

const secret = Uint8Array.from({ length: 32 }, (_, i) => i * 7)

describe('invitation tokens', () => {
  it('round-trip a space of any characters and the secret, as a URL-safe string', () => {
    for (const space of ['board:42', 'a', 'x'.repeat(128), 'with spaces/and?query=1&#frag', 'émoji 🎉 and 中文', 'stead-invite:inside']) {
      const token = encodeInvitation(space, secret)
      expect(token).toMatch(/^stead-invite:[A-Za-z0-9_-]+$/)
      const back = decodeInvitation(token)
      expect(back.space).toBe(space)
      expect([...back.secret]).toEqual([...secret])
      expect(invitationSpace(token)).toBe(space)
      // A pasted token keeps working with whitespace around it.
      expect(decodeInvitation(`  ${token}\n`).space).toBe(space)
    }
    // Two secrets, two tokens.
    expect(encodeInvitation('s', secret)).not.toBe(encodeInvitation('s', new Uint8Array(32)))
  })

  it('refuses to make a token of a bad space or secret', () => {
    expect(() => encodeInvitation('', secret)).toThrowError(expect.objectContaining({ reason: 'malformed' }))
    expect(() => encodeInvitation('x'.repeat(129), secret)).toThrowError(expect.objectContaining({ reason: 'malformed' }))
    expect(() => encodeInvitation('\ud800', secret)).toThrowError(expect.objectContaining({ reason: 'malformed' }))
    expect(() => encodeInvitation('s', new Uint8Array(31))).toThrowError(expect.objectContaining({ reason: 'malformed' }))
  })

  it('refuses junk with SteadError malformed', () => {
    const token = encodeInvitation('board', secret)
    const body = (v: unknown) => `stead-invite:${toBase64Url(encode(v))}`
    const junk: unknown[] = [
      '',
      'hello',
      token.slice('stead-invite:'.length),
      'stead-invite:',
      'stead-invite:!!!!',
      'stead-invite:a',
      token.slice(0, -6),
      `${token}AAAA`,
      'stead-invite:' + 'A'.repeat(2000),
      body(['board']),
      body(['board', secret, 1]),
      body({ space: 'board', secret }),
      body([42, secret]),
      body(['', secret]),
      body(['x'.repeat(129), secret]),
      body(['board', new Uint8Array(16)]),
      body(['board', 'not bytes']),
      null,
      42,
    ]
    for (const j of junk) {
      expect(() => decodeInvitation(j as string), String(j)).toThrowError(expect.objectContaining({ name: 'SteadError', reason: 'malformed', message: expect.stringMatching(/not an invitation token/) }))
    }
  })
})
