/** Small dependency-free SVG charts for the report: line charts (series of x,y points) and grouped bars. */

const COLORS: Record<string, string> = { reliable: '#1f77b4', plain: '#2ca02c', 'consensus-first': '#d62728' }
const FALLBACK = ['#9467bd', '#ff7f0e', '#8c564b', '#e377c2', '#17becf', '#7f7f7f']

function color(name: string, i: number): string {
  return COLORS[name] ?? FALLBACK[i % FALLBACK.length] ?? '#333'
}

function esc(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;')
}

/** 1, 2, 5 × 10^k ticks covering [lo, hi]. */
function niceTicks(lo: number, hi: number, count = 5): number[] {
  if (!(hi > lo)) hi = lo + 1
  const raw = (hi - lo) / count
  const mag = 10 ** Math.floor(Math.log10(raw))
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw) ?? 10 * mag
  const out: number[] = []
  // The last tick is the first at or above hi, so the scale always covers the data.
  for (let v = Math.floor(lo / step) * step; ; v += step) {
    out.push(Number(v.toPrecision(12)))
    if (v >= hi - step * 1e-9) break
  }
  return out
}

function logTicks(lo: number, hi: number): number[] {
  const out: number[] = []
  for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++) out.push(10 ** e)
  return out
}

export function fmt(v: number): string {
  if (v === 0) return '0'
  const a = Math.abs(v)
  if (a >= 1e6) return `${+(v / 1e6).toPrecision(3)}M`
  if (a >= 1e3) return `${+(v / 1e3).toPrecision(3)}k`
  if (a >= 10) return String(Math.round(v))
  if (a >= 1) return String(+v.toPrecision(2))
  return String(+v.toPrecision(2))
}

export interface Series {
  readonly name: string
  readonly points: ReadonlyArray<readonly [number, number]>
  readonly dashed?: boolean
}

export interface LineChartOptions {
  readonly title: string
  readonly xLabel: string
  readonly yLabel: string
  readonly logX?: boolean
  readonly logY?: boolean
  readonly width?: number
  readonly height?: number
}

export function lineChart(series: readonly Series[], o: LineChartOptions): string {
  const W = o.width ?? 640
  const H = o.height ?? 360
  const m = { l: 70, r: 160, t: 36, b: 50 }
  const pw = W - m.l - m.r
  const ph = H - m.t - m.b
  const all = series.flatMap((s) => s.points).filter(([x, y]) => Number.isFinite(x) && Number.isFinite(y) && (!o.logX || x > 0) && (!o.logY || y > 0))
  const xs = all.map((p) => p[0])
  const ys = all.map((p) => p[1])
  let [x0, x1] = [Math.min(...xs, o.logX ? Infinity : 0), Math.max(...xs)]
  let [y0, y1] = [Math.min(...ys, o.logY ? Infinity : 0), Math.max(...ys)]
  if (!all.length) [x0, x1, y0, y1] = [0, 1, 0, 1]
  const xt = o.logX ? logTicks(x0, x1) : niceTicks(x0, x1)
  const yt = o.logY ? logTicks(y0, y1) : niceTicks(y0, y1)
  x0 = Math.min(x0, xt[0] as number)
  x1 = Math.max(x1, xt[xt.length - 1] as number)
  y0 = Math.min(y0, yt[0] as number)
  y1 = Math.max(y1, yt[yt.length - 1] as number)
  const sx = (x: number) => m.l + (o.logX ? (Math.log10(x) - Math.log10(x0)) / (Math.log10(x1) - Math.log10(x0) || 1) : (x - x0) / (x1 - x0 || 1)) * pw
  const sy = (y: number) => m.t + ph - (o.logY ? (Math.log10(y) - Math.log10(y0)) / (Math.log10(y1) - Math.log10(y0) || 1) : (y - y0) / (y1 - y0 || 1)) * ph
  const parts: string[] = []
  parts.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="11">`)
  parts.push(`<rect width="${W}" height="${H}" fill="white"/>`)
  parts.push(`<text x="${m.l + pw / 2}" y="20" text-anchor="middle" font-size="13" font-weight="bold">${esc(o.title)}</text>`)
  for (const t of xt) {
    const x = sx(t)
    parts.push(`<line x1="${x}" y1="${m.t}" x2="${x}" y2="${m.t + ph}" stroke="#eee"/><text x="${x}" y="${m.t + ph + 15}" text-anchor="middle">${fmt(t)}</text>`)
  }
  for (const t of yt) {
    const y = sy(t)
    parts.push(`<line x1="${m.l}" y1="${y}" x2="${m.l + pw}" y2="${y}" stroke="#eee"/><text x="${m.l - 6}" y="${y + 4}" text-anchor="end">${fmt(t)}</text>`)
  }
  parts.push(`<rect x="${m.l}" y="${m.t}" width="${pw}" height="${ph}" fill="none" stroke="#999"/>`)
  parts.push(`<text x="${m.l + pw / 2}" y="${H - 12}" text-anchor="middle">${esc(o.xLabel)}</text>`)
  parts.push(`<text transform="translate(16 ${m.t + ph / 2}) rotate(-90)" text-anchor="middle">${esc(o.yLabel)}</text>`)
  series.forEach((s, i) => {
    const c = color(s.name, i)
    const pts = s.points.filter(([x, y]) => Number.isFinite(x) && Number.isFinite(y) && (!o.logX || x > 0) && (!o.logY || y > 0))
    if (pts.length > 1) parts.push(`<polyline fill="none" stroke="${c}" stroke-width="2"${s.dashed ? ' stroke-dasharray="5 3"' : ''} points="${pts.map(([x, y]) => `${sx(x).toFixed(1)},${sy(y).toFixed(1)}`).join(' ')}"/>`)
    for (const [x, y] of pts) parts.push(`<circle cx="${sx(x).toFixed(1)}" cy="${sy(y).toFixed(1)}" r="3" fill="${c}"/>`)
    const ly = m.t + 10 + i * 16
    parts.push(`<line x1="${m.l + pw + 12}" y1="${ly}" x2="${m.l + pw + 30}" y2="${ly}" stroke="${c}" stroke-width="2"${s.dashed ? ' stroke-dasharray="5 3"' : ''}/><text x="${m.l + pw + 34}" y="${ly + 4}">${esc(s.name)}</text>`)
  })
  parts.push('</svg>')
  return parts.join('\n') + '\n'
}

export interface BarGroup {
  readonly label: string
  readonly values: Readonly<Record<string, number>>
}

export function barChart(groups: readonly BarGroup[], seriesNames: readonly string[], o: { title: string; yLabel: string; width?: number; height?: number }): string {
  const W = o.width ?? Math.max(480, 120 + groups.length * (seriesNames.length * 18 + 24) + 150)
  const H = o.height ?? 400
  const m = { l: 70, r: 150, t: 36, b: 110 }
  const pw = W - m.l - m.r
  const ph = H - m.t - m.b
  const max = Math.max(1, ...groups.flatMap((g) => seriesNames.map((s) => g.values[s] ?? 0)))
  const yt = niceTicks(0, max)
  const y1 = yt[yt.length - 1] as number
  const sy = (v: number) => m.t + ph - (v / y1) * ph
  const gw = pw / Math.max(1, groups.length)
  const bw = Math.min(24, (gw - 12) / Math.max(1, seriesNames.length))
  const parts: string[] = []
  parts.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="11">`)
  parts.push(`<rect width="${W}" height="${H}" fill="white"/>`)
  parts.push(`<text x="${m.l + pw / 2}" y="20" text-anchor="middle" font-size="13" font-weight="bold">${esc(o.title)}</text>`)
  for (const t of yt) {
    const y = sy(t)
    parts.push(`<line x1="${m.l}" y1="${y}" x2="${m.l + pw}" y2="${y}" stroke="#eee"/><text x="${m.l - 6}" y="${y + 4}" text-anchor="end">${fmt(t)}</text>`)
  }
  groups.forEach((g, gi) => {
    const gx = m.l + gi * gw + (gw - bw * seriesNames.length) / 2
    seriesNames.forEach((s, si) => {
      const v = g.values[s]
      if (v === undefined) return
      const x = gx + si * bw
      parts.push(`<rect x="${x.toFixed(1)}" y="${sy(v).toFixed(1)}" width="${(bw - 2).toFixed(1)}" height="${(m.t + ph - sy(v)).toFixed(1)}" fill="${color(s, si)}"><title>${esc(`${g.label} ${s}: ${fmt(v)}`)}</title></rect>`)
    })
    const lx = m.l + gi * gw + gw / 2
    parts.push(`<text transform="translate(${lx.toFixed(1)} ${m.t + ph + 12}) rotate(-30)" text-anchor="end">${esc(g.label)}</text>`)
  })
  parts.push(`<rect x="${m.l}" y="${m.t}" width="${pw}" height="${ph}" fill="none" stroke="#999"/>`)
  parts.push(`<text transform="translate(16 ${m.t + ph / 2}) rotate(-90)" text-anchor="middle">${esc(o.yLabel)}</text>`)
  seriesNames.forEach((s, i) => {
    const ly = m.t + 10 + i * 16
    parts.push(`<rect x="${m.l + pw + 12}" y="${ly - 6}" width="14" height="10" fill="${color(s, i)}"/><text x="${m.l + pw + 30}" y="${ly + 3}">${esc(s)}</text>`)
  })
  parts.push('</svg>')
  return parts.join('\n') + '\n'
}
