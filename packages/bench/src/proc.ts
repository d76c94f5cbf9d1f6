import { readFileSync } from 'node:fs'

/** Clock ticks per second for /proc/<pid>/stat utime and stime (USER_HZ, 100 on Linux). */
const HZ = 100

export interface ProcSample {
  /** utime + stime, seconds. */
  readonly cpu: number
  /** Resident set size, MB. */
  readonly rssMb: number
  /** Peak resident set size of the process so far, MB. */
  readonly hwmMb: number
  /**
   * RSS split as the kernel counts it: anonymous memory (heap, buffers, the
   * allocator's arenas) and mapped files (the store's memory map, code). Pages
   * of an LMDB store a process read count as RSS but are page cache the kernel
   * can take back.
   */
  readonly anonMb: number
  readonly fileMb: number
}

/** CPU and memory of one process from /proc (Linux); null if it is gone. */
export function sampleProc(pid: number): ProcSample | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
    // Field 2 (comm) may contain spaces: count fields after its closing paren.
    const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
    const utime = Number(rest[11])
    const stime = Number(rest[12])
    const status = readFileSync(`/proc/${pid}/status`, 'utf8')
    const kb = (field: string): number => Number(new RegExp(`^${field}:\\s+(\\d+)`, 'm').exec(status)?.[1] ?? 0)
    return { cpu: (utime + stime) / HZ, rssMb: kb('VmRSS') / 1024, hwmMb: kb('VmHWM') / 1024, anonMb: kb('RssAnon') / 1024, fileMb: kb('RssFile') / 1024 }
  } catch {
    return null
  }
}

export interface ProcUsage {
  readonly label: string
  /** Share of one core over the window, percent (200% = both cores of this machine). */
  readonly cpuPercent: number
  readonly rssMb: number
  readonly peakRssMb: number
}

/**
 * Watches a set of processes over a measurement window: CPU from the
 * difference of utime+stime between start and stop, RSS sampled every
 * `intervalMs` (the largest seen) and the kernel's high-water mark.
 */
export class ProcWatch {
  private readonly start = new Map<number, ProcSample>()
  private readonly maxRss = new Map<number, number>()
  private readonly last = new Map<number, ProcSample>()
  private timer: NodeJS.Timeout | null = null
  private t0 = 0

  private readonly procs: ReadonlyArray<{ label: string; pid: number }>
  constructor(procs: ReadonlyArray<{ label: string; pid: number }>) {
    this.procs = procs
  }

  begin(intervalMs = 250): void {
    this.t0 = performance.now()
    for (const p of this.procs) {
      const s = sampleProc(p.pid)
      if (s) this.start.set(p.pid, s)
    }
    this.timer = setInterval(() => this.tick(), intervalMs)
    this.timer.unref()
  }

  private tick(): void {
    for (const p of this.procs) {
      const s = sampleProc(p.pid)
      if (!s) continue
      this.last.set(p.pid, s)
      this.maxRss.set(p.pid, Math.max(this.maxRss.get(p.pid) ?? 0, s.rssMb))
    }
  }

  end(): ProcUsage[] {
    this.tick()
    if (this.timer) clearInterval(this.timer)
    const seconds = (performance.now() - this.t0) / 1000
    const out: ProcUsage[] = []
    for (const p of this.procs) {
      const a = this.start.get(p.pid)
      const b = this.last.get(p.pid)
      if (!a || !b) continue
      out.push({
        label: p.label,
        cpuPercent: Math.round(((b.cpu - a.cpu) / seconds) * 1000) / 10,
        rssMb: Math.round((this.maxRss.get(p.pid) ?? b.rssMb) * 10) / 10,
        peakRssMb: Math.round(b.hwmMb * 10) / 10,
      })
    }
    return out
  }
}
