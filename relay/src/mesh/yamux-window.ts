/**
 * Receive-window updates on inbound yamux streams, sent once half the
 * window is used instead of after every data frame.
 *
 * @libp2p/yamux 8 answers every data frame it receives with a window
 * update frame. On the relay mesh, where most frames are one block of a
 * few hundred bytes, that doubles the frames on the wire: each update is
 * one more noise encryption and socket write at the receiver and one more
 * decryption at the sender, about a tenth of a relay's CPU at light load
 * (bench:latency: 12.4 -> 11.3 ms of CPU per safe update per relay).
 * Yamux leaves the timing of updates to the receiver; hashicorp/yamux, the
 * spec's reference implementation, sends one only once at least half the
 * window is consumed, which is what this does.
 *
 * It replaces the stream's private `sendWindowUpdate`, so it first checks
 * the fields it relies on; on a stream of another shape it changes nothing
 * and returns false (the mesh logs that once: flow control then works as
 * the library ships it, just less cheaply).
 */

/** The yamux stream state in which a window update carries no flags (StreamState.Established). */
const ESTABLISHED = 3

interface YamuxStreamInternals {
  state: number
  recvWindow: number
  recvWindowCapacity: number
  sendWindowUpdate: () => void
}

function isYamuxStream(stream: object): stream is YamuxStreamInternals {
  const s = stream as Partial<YamuxStreamInternals>
  return typeof s.sendWindowUpdate === 'function' && typeof s.state === 'number' && typeof s.recvWindow === 'number' && typeof s.recvWindowCapacity === 'number'
}

/** Whether a receiver with `capacity` of its `window` left should tell the sender now. */
export function windowUpdateDue(state: number, window: number, capacity: number): boolean {
  // In any other state the update carries flags (SYN/ACK) or is not sent at all: yamux decides.
  return state !== ESTABLISHED || capacity * 2 <= window
}

export function halfWindowUpdates(stream: object): boolean {
  if (!isYamuxStream(stream)) return false
  const send = stream.sendWindowUpdate
  stream.sendWindowUpdate = function (this: YamuxStreamInternals): void {
    if (windowUpdateDue(this.state, this.recvWindow, this.recvWindowCapacity)) send.call(this)
  }
  return true
}
