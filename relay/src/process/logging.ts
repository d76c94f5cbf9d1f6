import pino, { type Logger } from 'pino'
import { prettyFactory } from 'pino-pretty'

/** pino's levels, quietest last; `silent` logs nothing. */
export const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'] as const
export type LogLevel = (typeof LOG_LEVELS)[number]

/** A relay's logger: JSON lines on stdout, each naming the relay as the cluster file does. */
export function relayLogger(id: string, level: LogLevel = 'info'): Logger {
  return pino({ name: 'stead-relay', level }).child({ relay: id })
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
