import { Agent, createServer, request } from 'node:http'
import type { AddressInfo } from 'node:net'
import { describe, expect, it } from 'vitest'
import { connectionCap, guardConnections, openFilesLimit } from '../src/api/connections.ts'

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

describe('guardConnections', () => {
  it('at the total cap, makes room for an address holding none at the cost of the address holding the most, even when every connection has spoken', async () => {
    const server = createServer((_req, res) => res.end('ok'))
    server.keepAliveTimeout = 60_000
    const refused: string[] = []
    // connectionCap never goes below 16.
    guardConnections(server, { maxHttpConnections: 16, maxHttpConnectionsPerAddress: 15, firstRequestMs: 10_000 }, (why) => refused.push(why))
    await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok))
    const port = (server.address() as AddressInfo).port
    const agents: Agent[] = []
    /** One keep-alive connection from `from` that has made a request (so it is not silent). */
    const spoken = async (from: string): Promise<Agent> => {
      const agent = new Agent({ keepAlive: true, maxSockets: 1, localAddress: from })
      agents.push(agent)
      await get(port, agent)
      return agent
    }
    for (let i = 0; i < 15; i++) await spoken('127.0.0.2')
    await spoken('127.0.0.3')
    // Full, every connection busy: a newcomer from a third address still gets in.
    expect(await get(port, new Agent({ localAddress: '127.0.0.4' }))).toBe('ok')
    expect(refused).toEqual(['total'])
    for (const a of agents) a.destroy()
    await new Promise((ok) => server.close(ok))
  })
})

function get(port: number, agent: Agent): Promise<string> {
  return new Promise((ok, fail) => {
    const req = request({ host: '127.0.0.1', port, agent, path: '/' }, (res) => {
      let body = ''
      res.on('data', (d: Buffer) => (body += d.toString()))
      res.on('end', () => ok(body))
    })
    req.on('error', fail)
    req.end()
  })
}
