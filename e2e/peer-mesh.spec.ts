/**
 * Peers without relays (issue 48): eight Node clients (each its own
 * process) and two pages on one space, linked peer to peer (Node to Node
 * over TCP, pages to Node clients over WebSockets, pages to each other over
 * WebRTC). Every relay stops; a new Node client and a new page, which never
 * held the space, join it from their peers alone (the attested commits,
 * believed on f+1 relay signatures, then what the others did meanwhile) and
 * converge with everyone. The relays come back: everything commits and
 * every peer ends on the state the relays attest.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { resolve } from 'node:path'
import { createInterface } from 'node:readline'
import { expect, freshSpace, openUser, test, useCluster, type User } from './fixtures.ts'

const cluster = useCluster({ basePort: 7841 })
const root = resolve(import.meta.dirname, '..')

interface PeerState {
  value: number
  stable: number
  stableIndex: number
  online: boolean
  peers: number
  exchanging: number
}

/** One Node client process (e2e/node-peer.ts), driven one command at a time. */
class NodePeer {
  readonly errors: string[] = []
  private readonly answers: Array<(line: Record<string, unknown>) => void> = []
  private exited = false
  addresses: string[] = []
  private readonly child: ChildProcess
  private readonly name: string

  private constructor(child: ChildProcess, name: string) {
    this.child = child
    this.name = name
  }

  static async start(name: string, options: Record<string, unknown>): Promise<NodePeer> {
    const child = spawn(process.execPath, ['--conditions=@stead/source', '--import', 'tsx', 'e2e/node-peer.ts', JSON.stringify(options)], { cwd: root, stdio: ['pipe', 'pipe', 'pipe'] })
    const peer = new NodePeer(child, name)
    let stderr = ''
    child.stderr?.on('data', (chunk: Buffer) => (stderr = (stderr + chunk.toString()).slice(-4000)))
    const ready = new Promise<void>((done, fail) => {
      const late = setTimeout(() => {
        child.kill('SIGKILL')
        fail(new Error(`${name} was not ready within 60 s: ${stderr}`))
      }, 60_000)
      child.once('exit', (code) => {
        peer.exited = true
        clearTimeout(late)
        fail(new Error(`${name} exited (${code}): ${stderr}`))
        // A command in flight gets no answer: fail it rather than wait for the test's timeout.
        for (const answer of peer.answers.splice(0)) answer({ exited: code })
      })
      peer.answers.push((line) => {
        clearTimeout(late)
        peer.addresses = line.addresses as string[]
        done()
      })
    })
    createInterface({ input: child.stdout as NodeJS.ReadableStream }).on('line', (text) => {
      let line: Record<string, unknown>
      try {
        line = JSON.parse(text) as Record<string, unknown>
      } catch {
        // A library printing to stdout: not an answer.
        return
      }
      if (typeof line.error === 'string') peer.errors.push(line.error)
      else peer.answers.shift()?.(line)
    })
    await ready
    return peer
  }

  /** Its address for `kind` of peer: TCP for Node clients, WebSockets for pages. */
  address(kind: 'tcp' | 'ws'): string {
    const found = this.addresses.find((a) => (kind === 'ws' ? a.includes('/ws/') : !a.includes('/ws/')))
    if (!found) throw new Error(`${this.name} listens on no ${kind} address: ${this.addresses.join(', ')}`)
    return found
  }

  private command(op: Record<string, unknown>): Promise<Record<string, unknown>> {
    if (this.exited) throw new Error(`${this.name} has exited`)
    return new Promise((done) => {
      this.answers.push(done)
      this.child.stdin?.write(`${JSON.stringify(op)}\n`)
    })
  }

  async increment(n: number): Promise<void> {
    const answer = await this.command({ op: 'inc', n })
    if (answer.ok !== true) throw new Error(`${this.name} could not increment: ${JSON.stringify(answer)}`)
  }

  state(): Promise<PeerState> {
    return this.command({ op: 'state' }) as Promise<unknown> as Promise<PeerState>
  }

  async stop(): Promise<void> {
    if (this.exited) return
    const gone = new Promise((r) => this.child.once('exit', r))
    await Promise.race([this.command({ op: 'close' }), new Promise((r) => setTimeout(r, 5000))])
    await Promise.race([gone, new Promise((r) => setTimeout(r, 2000))])
    if (!this.exited) this.child.kill('SIGKILL')
  }
}

/** Links a page's client holds open to other clients. */
const links = (user: User): Promise<number> => user.page.evaluate(() => (window as unknown as { stead: { peers?: { peers: number } } }).stead.peers?.peers ?? 0)

test('eight Node peers and two pages: with every relay stopped a new Node peer and a new page join from their peers and converge; back, the relays commit it all', async ({ browser }, testInfo) => {
  test.setTimeout(300_000)
  const space = freshSpace(testInfo)
  const { urls } = cluster()
  const descriptor = (await (await fetch(`${cluster().httpUrl(0)}/v1/cluster`)).json()) as unknown
  const nodes: NodePeer[] = []
  const users: User[] = []
  const node = (i: number): NodePeer => nodes[i] as NodePeer
  try {
    // The first creates the space (anybody may write: its peers share it with any key, relays or not).
    nodes.push(await NodePeer.start('node 0', { relays: urls, space, create: true }))
    // Each kept as it starts, so that one failing to start leaves none of the others running.
    const starting = await Promise.allSettled([1, 2, 3, 4, 5, 6, 7].map(async (i) => nodes.push(await NodePeer.start(`node ${i}`, { relays: urls, space }))))
    for (const s of starting) if (s.status === 'rejected') throw s.reason
    users.push(await openUser(browser, urls, space, 'Alice', { peers: true }), await openUser(browser, urls, space, 'Bob', { peers: true }))
    const [alice, bob] = users as [User, User]

    await alice.deposit('main', 10)
    for (const n of nodes) await n.increment(1)
    await expect.poll(async () => (await Promise.all(nodes.map((n) => n.state()))).map((s) => s.stable), { timeout: 60_000 }).toEqual(Array(8).fill(18))
    await alice.expectBalance('main', 18)
    await bob.expectBalance('main', 18)
    // The relays named everyone to everyone: Node clients link to each other, pages to Node clients and each other.
    await expect.poll(async () => (await Promise.all(nodes.map((n) => n.state()))).every((s) => s.exchanging >= 7), { timeout: 60_000 }).toBe(true)
    await expect.poll(() => links(alice), { timeout: 60_000 }).toBeGreaterThanOrEqual(8)
    await expect.poll(() => links(bob), { timeout: 60_000 }).toBeGreaterThanOrEqual(8)

    await cluster().stopRelays()
    await alice.expectOnline(false)
    // Without any relay, what each does reaches everyone peer to peer.
    await alice.deposit('main', 5)
    await node(3).increment(7)
    await expect.poll(async () => (await Promise.all(nodes.map((n) => n.state()))).map((s) => s.value), { timeout: 60_000 }).toEqual(Array(8).fill(30))
    await bob.expectBalance('main', 30, ['prospective'])
    await bob.expectBalance('main', 18, ['stable'])

    // Newcomers that never held the space: given the cluster to pin and one peer to dial.
    const late = await NodePeer.start('node 8', { relays: urls, space, cluster: descriptor, dial: [node(0).address('tcp')] })
    nodes.push(late)
    await expect.poll(() => late.state(), { timeout: 60_000 }).toMatchObject({ stable: 18, value: 30, online: false })
    const carol = await openUser(browser, urls, space, 'Carol', { peers: true, waitOnline: false, params: { cluster: JSON.stringify(descriptor), dial: node(0).address('ws') } })
    users.push(carol)
    await carol.expectBalance('main', 18, ['stable'])
    await carol.expectBalance('main', 30, ['prospective'])
    await carol.deposit('main', 1)
    await late.increment(1)
    await expect.poll(async () => (await Promise.all(nodes.map((n) => n.state()))).map((s) => s.value), { timeout: 60_000 }).toEqual(Array(9).fill(32))
    for (const user of users) await user.expectBalance('main', 32, ['prospective'])

    // The relays come back: every peer ends on the state they attest.
    await cluster().restart()
    await expect.poll(async () => (await Promise.all(nodes.map((n) => n.state()))).map((s) => s.stable), { timeout: 90_000 }).toEqual(Array(9).fill(32))
    for (const user of users) await user.expectBalance('main', 32)
    // Every peer on the stable index the relays sign (read afresh each time: a relay may still be catching up).
    await expect
      .poll(async () => {
        const attested = await cluster().stableIndex(0, space)
        const indexes = new Set((await Promise.all(nodes.map((n) => n.state()))).map((s) => s.stableIndex))
        return attested !== null && attested > 0 && indexes.size === 1 && indexes.has(attested)
      }, { timeout: 30_000 })
      .toBe(true)
    expect(nodes.flatMap((n) => n.errors)).toEqual([])
  } finally {
    for (const user of users) await user.close(testInfo)
    await Promise.all(nodes.map((n) => n.stop()))
  }
})
