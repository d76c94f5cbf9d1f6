import { SteadError } from '@stead/core'
import { describe, expect, it } from 'vitest'
import { PeerDirectory } from '../src/api/peer-directory.ts'

type S = { name: string }
const sessions = new Map<string, S>()
const s = (name: string): S => sessions.get(name) ?? (sessions.set(name, { name }), sessions.get(name) as S)
/** Each session its own key and address unless told. */
const who = (name: string, address = `addr-${name}`, key = `key-${name}`) => ({ key, address })

describe('the peer directory', () => {
  it('tells an announcer where the others are and the others where it is, per space, within its bound', () => {
    const heard: Array<[string, string, string[]]> = []
    const d = new PeerDirectory<S>({ perSpace: 3 }, (to, space, addrs) => heard.push([to.name, space, addrs]))
    d.announce('s', s('a'), who('a'), ['/a'])
    expect(heard).toEqual([])
    d.announce('s', s('b'), who('b'), ['/b1', '/b2'])
    expect(heard.splice(0)).toEqual([
      ['a', 's', ['/b1', '/b2']],
      ['b', 's', ['/a']],
    ])
    // Another space is another directory.
    d.announce('t', s('c'), who('c'), ['/c'])
    expect(heard.splice(0)).toEqual([])
    // Past the bound, the newest announcer makes room: clients already known stay known.
    d.announce('s', s('c'), who('c'), ['/c'])
    d.announce('s', s('d'), who('d'), ['/d'])
    expect(d.size('s')).toBe(3)
    heard.length = 0
    d.announce('s', s('e'), who('e'), ['/e'])
    expect(heard.map(([to]) => to).sort()).toEqual(['a', 'b', 'e'])
    // An empty list, or leaving, withdraws.
    d.announce('s', s('e'), who('e'), [])
    d.withdraw('s', s('a'))
    d.withdraw('t', s('c'))
    expect(d.size('s')).toBe(1)
    expect(d.size('t')).toBe(0)
  })

  it('holds a key and an address to their shares (rate-limited), and a flood evicts its own entries, not honest ones', () => {
    const d = new PeerDirectory<S>({ perSpace: 8, perKey: 2, perAddress: 3 }, () => undefined)
    d.announce('s', s('h1'), who('h1'), ['/h1'])
    d.announce('s', s('h2'), who('h2'), ['/h2'])
    d.announce('s', s('k1'), who('k1', 'x', 'k'), ['/k1'])
    d.announce('s', s('k2'), who('k2', 'x', 'k'), ['/k2'])
    const third = (): void => d.announce('s', s('k3'), who('k3', 'y', 'k'), ['/k3'])
    expect(third).toThrow(SteadError)
    expect(third).toThrow(/the most one key may/)
    d.announce('s', s('x3'), who('x3', 'x'), ['/x3'])
    expect(() => d.announce('s', s('x4'), who('x4', 'x'), ['/x4'])).toThrow(/the most one address may/)
    // A renewal is not a new entry.
    d.announce('s', s('x3'), who('x3', 'x'), ['/x3'])
    // Many addresses, three entries each: the space fills, and the largest holders give way.
    for (let a = 0; a < 10; a++) for (let n = 0; n < 3; n++) d.announce('s', s(`f${a}.${n}`), who(`f${a}.${n}`, `f${a}`), [`/f${a}.${n}`])
    expect(d.size('s')).toBe(8)
    const heard: string[][] = []
    // The honest entries are still there: a newcomer hears of them.
    const d2 = d as unknown as { spaces: Map<string, Map<S, { addrs: string[] }>> }
    for (const e of d2.spaces.get('s')?.values() ?? []) heard.push(e.addrs)
    expect(heard.flat()).toEqual(expect.arrayContaining(['/h1', '/h2']))
  })

  it('forgets an announcement after its time, and keeps what it tells a session to a byte rate', () => {
    let now = 1_000_000
    let told = 0
    const d = new PeerDirectory<S>({ ttlMs: 60_000, bytesPerSecond: 1000, burstBytes: 2000 }, () => void told++, () => now)
    d.announce('s', s('a'), who('a'), ['/a'])
    now += 61_000
    expect(d.size('s')).toBe(0)
    // A flood of announcers: `a` is told at most its burst and then its rate.
    d.announce('s', s('a'), who('a'), ['/a'])
    told = 0
    const addr = '/'.padEnd(100, 'x')
    for (let n = 0; n < 40; n++) d.announce('s', s(`z${n}`), who(`z${n}`, `z${n}`), [addr])
    const first = told
    // Sent to `a`: about 2,000 bytes' worth; the announcers' replies are within their own budgets.
    expect(d.dropped).toBeGreaterThan(0)
    now += 1000
    d.announce('s', s('z0'), who('z0', 'z0'), [addr + 'y'])
    expect(told).toBeGreaterThan(first)
  })
})
