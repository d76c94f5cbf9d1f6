import { useEffect } from 'react'
import { usePresence } from '@stead/react'
import { useDemo } from '../demo-context.ts'

const COLOURS = ['#d9480f', '#1971c2', '#2f9e44', '#9c36b5', '#e8590c', '#0c8599', '#c2255c', '#5f3dc4']

/** A colour of its own for each name, the same on every page (a cursor and its name tag wear it). */
export function colourOf(name: string): string {
  let h = 0
  for (const ch of name) h = (h * 31 + (ch.codePointAt(0) ?? 0)) >>> 0
  return COLOURS[h % COLOURS.length] as string
}

/** Who else has the space open now (presence: never ordered, never stored), and this page's own name shown to them. */
export function People() {
  const { config } = useDemo()
  const { others, update } = usePresence()
  // This page's name and colour, shown to the others as long as the page is open.
  useEffect(() => update({ name: config.user, colour: colourOf(config.user) }), [config.user, update])
  const names = others.map((p) => {
    const s = (p.state ?? {}) as { name?: unknown; colour?: unknown }
    return { author: p.author, name: typeof s.name === 'string' ? s.name : 'someone', colour: typeof s.colour === 'string' ? s.colour : '#888' }
  })
  return (
    <span className="pill people" data-testid="people" data-count={names.length} title="who else has this space open now">
      here:{' '}
      {names.length === 0 ? (
        <span className="muted">only you</span>
      ) : (
        names.map((p) => (
          <span key={p.author} className="person" data-testid="person" style={{ color: p.colour }}>
            ● {p.name}
          </span>
        ))
      )}
    </span>
  )
}
