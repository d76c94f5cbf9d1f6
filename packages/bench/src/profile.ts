import { readFileSync } from 'node:fs'

interface CpuProfileNode {
  readonly id: number
  readonly callFrame: { readonly functionName: string; readonly url: string; readonly lineNumber: number }
  readonly hitCount?: number
  readonly children?: readonly number[]
}

interface CpuProfile {
  readonly nodes: readonly CpuProfileNode[]
  readonly samples?: readonly number[]
  readonly timeDeltas?: readonly number[]
  readonly startTime: number
  readonly endTime: number
}

export interface ProfileEntry {
  readonly name: string
  readonly percent: number
}

export interface ProfileSummary {
  readonly file: string
  /** Wall time covered and the share of it the relay was busy (not idle). */
  readonly seconds: number
  readonly busyPercent: number
  /** Self time of the busy part, grouped by component. */
  readonly components: ProfileEntry[]
  /** Self time of the busy part, top functions. */
  readonly functions: ProfileEntry[]
}

/** What a frame belongs to: a package, a Stead source file, or a V8 pseudo-frame. */
function component(url: string, fn: string): string {
  if (!url) {
    if (fn === '(garbage collector)') return 'V8 garbage collector'
    if (fn === '(program)') return 'V8/native (program)'
    return `native: ${fn || '(anonymous)'}`
  }
  const nm = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url)
  if (nm) return `npm: ${nm[1]}`
  const src = /\/(relay\/src\/.*|packages\/[^/]+\/src\/.*)$/.exec(url)
  if (src) return (src[1] as string).replace(/\.ts$/, '.ts')
  if (url.startsWith('node:')) return url.replace(/^node:(internal\/)?/, 'node:')
  return url
}

/** Self time per component and per function from a V8 .cpuprofile (idle excluded from the shares). */
export function summarizeProfile(path: string, top = 15): ProfileSummary {
  const p = JSON.parse(readFileSync(path, 'utf8')) as CpuProfile
  const byId = new Map(p.nodes.map((n) => [n.id, n]))
  const self = new Map<number, number>()
  if (p.samples && p.timeDeltas) {
    p.samples.forEach((id, i) => self.set(id, (self.get(id) ?? 0) + (p.timeDeltas?.[i + 1] ?? 0)))
  } else {
    for (const n of p.nodes) self.set(n.id, n.hitCount ?? 0)
  }
  const parent = new Map<number, number>()
  for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id)
  /** A native frame (no url) counts for the nearest JavaScript caller's component. */
  const owner = (id: number): string | undefined => {
    for (let cur = parent.get(id); cur !== undefined; cur = parent.get(cur)) {
      const f = byId.get(cur)?.callFrame
      if (f?.url) return component(f.url, f.functionName)
    }
    return undefined
  }
  let busy = 0
  let idle = 0
  const comps = new Map<string, number>()
  const fns = new Map<string, number>()
  for (const [id, t] of self) {
    const n = byId.get(id)
    if (!n) continue
    const fn = n.callFrame.functionName
    if (fn === '(idle)') {
      idle += t
      continue
    }
    busy += t
    const native = !n.callFrame.url && !fn.startsWith('(')
    const c = native ? `${owner(id) ?? 'native'} (native ${fn || 'code'})` : component(n.callFrame.url, fn)
    comps.set(c, (comps.get(c) ?? 0) + t)
    const label = `${fn || '(anonymous)'} — ${c}${n.callFrame.url ? `:${n.callFrame.lineNumber + 1}` : ''}`
    fns.set(label, (fns.get(label) ?? 0) + t)
  }
  const pct = (t: number) => Math.round((t / (busy || 1)) * 1000) / 10
  const sorted = (m: Map<string, number>) =>
    [...m]
      .sort((a, b) => b[1] - a[1])
      .slice(0, top)
      .map(([name, t]) => ({ name, percent: pct(t) }))
  return {
    file: path,
    seconds: Math.round((p.endTime - p.startTime) / 1e4) / 100,
    busyPercent: Math.round((busy / (busy + idle || 1)) * 1000) / 10,
    components: sorted(comps),
    functions: sorted(fns),
  }
}
