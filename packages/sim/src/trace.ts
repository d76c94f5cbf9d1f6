/**
 * SIM_TRACE=1 prints faults and every relay's log (at debug level). Tracing
 * never changes a run. Shared by the simulator's modules, so that a trace
 * reads as one timeline.
 */
export const TRACE = Boolean(process.env.SIM_TRACE)
export const trace: (line: string) => void = TRACE ? (line) => console.log(`  ${line}`) : () => {}
