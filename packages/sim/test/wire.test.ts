import { describe, expect, it } from 'vitest'
import { EventQueue } from '../src/queue.ts'
import { Wire, type WireWorld } from '../src/wire.ts'

/** A world whose delays come from a list (then 1 ms), run to the end by `drain`. */
function world(delays: number[] = []): WireWorld & { drain(): void; towardRelay(): number } {
  const queue = new EventQueue<{ toward: number | null; action: () => void }>()
  let now = 0
  return {
    now: () => now,
    delay: () => delays.shift() ?? 1,
    schedule: (at, toward, action) => queue.push(at, { toward, action }),
    drain() {
      for (let ev = queue.pop(); ev; ev = queue.pop()) {
        now = ev.at
        ev.item.action()
      }
    },
    towardRelay: () => (queue.some((e) => e.toward !== null) ? 1 : 0),
  }
}

function connected(w: ReturnType<typeof world>): { wire: Wire; toClient: Uint8Array[]; toRelay: Uint8Array[]; closes: string[] } {
  const wire = new Wire(w, 2)
  const toClient: Uint8Array[] = []
  const toRelay: Uint8Array[] = []
  const closes: string[] = []
  wire.client.onmessage = (ev) => void toClient.push(ev.data as Uint8Array)
  wire.client.onclose = (ev) => void closes.push(`client ${(ev as { code: number }).code}`)
  wire.relay.onMessage((data) => void toRelay.push(data))
  wire.relay.onClose(() => void closes.push('relay'))
  wire.opened()
  return { wire, toClient, toRelay, closes }
}

describe('simulated WebSocket (Wire)', () => {
  it('delivers frames in order each way even when a later one draws a shorter delay, and counts frames to the relay as in flight', () => {
    const w = world([30, 1, 20, 1])
    const { wire, toClient, toRelay } = connected(w)
    wire.client.send(Uint8Array.of(1))
    wire.client.send(Uint8Array.of(2))
    expect(w.towardRelay()).toBe(1)
    const written: number[] = []
    wire.relay.send(Uint8Array.of(9), () => void written.push(9))
    wire.relay.send(Uint8Array.of(8), () => void written.push(8))
    w.drain()
    expect(toRelay.map((f) => f[0])).toEqual([1, 2])
    expect(toClient.map((f) => f[0])).toEqual([9, 8])
    expect(written).toEqual([9, 8])
  })

  it('holds what arrives while the relay end is paused and hands it over in order on resume', () => {
    const w = world()
    const { wire, toRelay } = connected(w)
    wire.relay.pause()
    wire.client.send(Uint8Array.of(1))
    wire.client.send(Uint8Array.of(2))
    w.drain()
    expect(toRelay).toEqual([])
    wire.relay.resume()
    expect(toRelay.map((f) => f[0])).toEqual([1, 2])
  })

  it('closes with 1009 on a frame over the limit of the relay end, and both ends hear the close once', () => {
    const w = world()
    const { wire, toRelay, closes } = connected(w)
    wire.relay.setFrameLimit(4)
    wire.client.send(new Uint8Array(5))
    w.drain()
    expect(toRelay).toEqual([])
    expect(closes).toEqual(['relay', 'client 1009'])
    expect(wire.client.readyState).toBe(3)
    expect(wire.relay.open).toBe(false)
  })

  it('a relay crash reaches only the client; a client that dies reaches only the relay', () => {
    const w = world()
    const a = connected(w)
    a.wire.cut()
    w.drain()
    expect(a.closes).toEqual(['client 1006'])
    const b = connected(w)
    b.wire.clientGone()
    w.drain()
    expect(b.closes).toEqual(['relay'])
    // Nothing sent after either reaches the other end.
    a.wire.relay.send(Uint8Array.of(1), () => undefined)
    b.wire.client.send(Uint8Array.of(1))
    w.drain()
    expect([a.toClient, b.toRelay]).toEqual([[], []])
  })
})
