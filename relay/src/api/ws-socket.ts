import type { Socket as NetSocket } from 'node:net'
import type { WebSocket } from 'ws'
import type { SessionSocket } from './sessions.ts'

/** What ws's receiver of a session holds of frames not yet complete (private fields of ws 8, read defensively). */
interface WsReceiver {
  _maxPayload?: number
  _bufferedBytes?: number
  _messageLength?: number
}

function receiverOf(socket: WebSocket): WsReceiver | undefined {
  return (socket as unknown as { _receiver?: WsReceiver })._receiver ?? undefined
}

/**
 * A `ws` WebSocket (as @fastify/websocket hands it over) as a session's
 * socket. `raw` is the TCP socket under it: ws reads each chunk first, so
 * after its listener the receiver's buffer holds what the chunk left
 * unfinished.
 */
export function wsSessionSocket(socket: WebSocket, raw: NetSocket): SessionSocket {
  // Logged once, at debug, by the websocket plugin's errorHandler (createApi).
  socket.on('error', () => undefined)
  return {
    get open() {
      return socket.readyState === socket.OPEN
    },
    send: (frame, written) => socket.send(frame, () => written()),
    close: (code, reason) => socket.close(code, reason),
    terminate: () => socket.terminate(),
    pause: () => socket.pause(),
    resume: () => socket.resume(),
    unfinishedBytes() {
      const r = receiverOf(socket)
      return (r?._bufferedBytes ?? 0) + (r?._messageLength ?? 0)
    },
    setFrameLimit(bytes) {
      const r = receiverOf(socket)
      if (r && typeof r._maxPayload === 'number') r._maxPayload = bytes
    },
    onMessage: (handler) => void socket.on('message', (data, isBinary) => handler(data as Buffer, isBinary)),
    onChunk: (handler) => void raw.on('data', handler),
    onClose: (handler) => void socket.once('close', handler),
  }
}
