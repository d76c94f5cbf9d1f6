import { describe, expect, it } from 'vitest'
import { PeerDirectory } from '../src/peer-directory.ts'

describe('the peer directory', () => {
  it('tells an announcer where the others are and the others where it is, per space, within its bound', () => {
    const heard: Array<[string, string, string[]]> = []
    const d = new PeerDirectory<string>(3, (to, space, addrs) => heard.push([to, space, addrs]))
    d.announce('s', 'a', ['/a'])
    expect(heard).toEqual([])
    d.announce('s', 'b', ['/b1', '/b2'])
    expect(heard.splice(0)).toEqual([
      ['a', 's', ['/b1', '/b2']],
      ['b', 's', ['/a']],
    ])
    // Another space is another directory.
    d.announce('t', 'c', ['/c'])
    expect(heard.splice(0)).toEqual([])
    // Past the bound, the longest-known announcer makes room.
    d.announce('s', 'c', ['/c'])
    d.announce('s', 'd', ['/d'])
    expect(d.size('s')).toBe(3)
    heard.length = 0
    d.announce('s', 'e', ['/e'])
    expect(heard.map(([to]) => to).sort()).toEqual(['c', 'd', 'e'])
    // An empty list, or leaving, withdraws.
    d.announce('s', 'e', [])
    d.withdraw('s', 'd')
    d.withdraw('t', 'c')
    expect(d.size('s')).toBe(1)
    expect(d.size('t')).toBe(0)
  })
})
