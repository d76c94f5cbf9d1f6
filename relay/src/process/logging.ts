import pino, { type DestinationStream, type Logger } from 'pino'
import { prettyFactory } from 'pino-pretty'
import sonicBoom, { type SonicBoom } from 'sonic-boom'

/** pino's levels, quietest last; `silent` logs nothing. */
export const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'] as const
export type LogLevel = (typeof LOG_LEVELS)[number]

/** How far a relay's log may fall behind its reader before lines are dropped. */
export const LOG_BUFFER_BYTES = 4 * 1024 * 1024

/** A relay's logger: JSON lines on stdout, each naming the relay as the cluster file does. */
export function relayLogger(id: string, level: LogLevel = 'info'): Logger {
  return pino({ name: 'stead-relay', level }, new LogLines(1)).child({ relay: id })
}

/**
 * Log lines written to a file descriptor without ever holding the relay
 * up: asynchronously, at most LOG_BUFFER_BYTES behind (a reader that stalls
 * loses lines, not the relay's memory), and not at all once the reader is
 * gone. pino's own stdout destination flushes synchronously when the
 * process exits, retrying for ever: a relay whose log reader had stopped
 * reading (a `stead-relay dev` killed, a pipe nobody drains) never ended
 * after SIGTERM. `flush` waits until what was written is out, or failed.
 */
export class LogLines implements DestinationStream {
  private readonly out: SonicBoom
  /** Bytes handed to `out` and not yet written, dropped or failed. */
  private pending = 0
  private broken = false
  private readonly waiting: Array<() => void> = []

  constructor(fd: number) {
    // A CommonJS module: its class is a property of what Node's ESM loader gives as the default export.
    this.out = new sonicBoom.SonicBoom({ fd, sync: false, maxLength: LOG_BUFFER_BYTES })
    this.out.on('write', (n: number) => this.settle(n))
    this.out.on('drop', (line: string) => this.settle(Buffer.byteLength(line)))
    // EPIPE (the reader is gone) or worse: logging stops, the relay goes on.
    this.out.on('error', () => {
      this.broken = true
      this.settle(this.pending)
    })
  }

  write(line: string): void {
    if (this.broken) return
    this.pending += Buffer.byteLength(line)
    this.out.write(line)
  }

  flush(done: () => void): void {
    if (this.pending === 0) done()
    else this.waiting.push(done)
  }

  private settle(bytes: number): void {
    this.pending = Math.max(0, this.pending - bytes)
    if (this.pending === 0) for (const done of this.waiting.splice(0)) done()
  }
}

/**
 * Turns the JSON lines a relay prints into readable ones (pino-pretty), for
 * `stead-relay dev`. Anything that is not a log line passes through as it is.
 */
export function prettyLogLines(colorize: boolean): (line: string) => string {
  const pretty = prettyFactory({
    colorize,
    singleLine: true,
    translateTime: 'SYS:HH:MM:ss.l',
    // The prefix names the relay; pid and host say nothing on one machine.
    ignore: 'pid,hostname,name,relay',
  })
  return (line) => {
    let log: Record<string, unknown>
    try {
      log = JSON.parse(line) as Record<string, unknown>
    } catch {
      return line
    }
    if (typeof log !== 'object' || log === null || typeof log.level !== 'number') return line
    // A reason given as text reads best after the message; error objects keep pino-pretty's block.
    if (typeof log.err === 'string') {
      log.msg = `${String(log.msg ?? '')}: ${log.err}`
      delete log.err
    }
    return pretty(log).replace(/\n$/, '')
  }
}
