// @vitest-environment happy-dom
/** useText, useMap and useList rendered against real clients and real relays in simulated time (SimCluster). */
import { createClient, type Space, type SteadClient } from '@stead/client'
import { act, cleanup, render, screen, waitFor } from '@testing-library/react'
import { StrictMode, createElement as h } from 'react'
import { afterEach, describe, expect, it } from 'vitest'
import { SimCluster } from '@stead/sim'
import { SteadProvider, useList, useMap, useText } from '../src/index.ts'

const open: SteadClient[] = []
const clusters: SimCluster[] = []

afterEach(async () => {
  cleanup()
  for (const c of open.splice(0)) await c.close()
  for (const c of clusters.splice(0)) await c.close()
})

async function client(c: SimCluster): Promise<Space> {
  const owner = await createClient(c.clientOptions())
  open.push(owner)
  return owner.space('notes')
}

const shown = (id: string) => screen.getByTestId(id).textContent

function Doc() {
  const text = useText('doc')
  const card = useMap('card')
  const todo = useList<string>('todo')
  return h(
    'div',
    null,
    h('p', { 'data-testid': 'text' }, `${text.value}|${text.stable}`),
    h('p', { 'data-testid': 'spans' }, text.spans.map((s) => (s.marks.bold ? `*${s.text}*` : s.text)).join('')),
    h('p', { 'data-testid': 'map' }, JSON.stringify(card.value)),
    h('p', { 'data-testid': 'list' }, todo.value.join(',')),
  )
}

describe('document hooks', () => {
  for (const strict of [false, true]) {
    it(`show local edits at once, nested edits and another client's edits when they arrive${strict ? ' (StrictMode)' : ''}`, async () => {
      const c = await SimCluster.start()
      clusters.push(c)
      const a = await client(c)
      const b = await client(c)
      const tree = h(SteadProvider, { space: a }, h(Doc))
      render(strict ? h(StrictMode, null, tree) : tree)
      expect(shown('text')).toBe('|')

      act(() => void a.text('doc').insert(0, 'hi'))
      expect(shown('text')).toBe('hi|')
      await waitFor(() => expect(shown('text')).toBe('hi|hi'), { timeout: 10_000 })
      // A format changes no character and re-renders all the same.
      act(() => void a.text('doc').format(0, 1, { bold: true }))
      expect(shown('spans')).toBe('*h*i')

      // An edit inside a nested text re-renders the map that holds it.
      const title = a.map('card').text('title')
      act(() => void title.insert(0, 'Card'))
      expect(shown('map')).toBe('{"title":"Card"}')
      act(() => void title.insert(4, ' one'))
      expect(shown('map')).toBe('{"title":"Card one"}')

      await b.list<string>('todo').insert(0, ['x', 'y'])
      await waitFor(() => expect(shown('list')).toBe('x,y'), { timeout: 10_000 })
      await b.list<string>('todo').move(1, 0)
      await waitFor(() => expect(shown('list')).toBe('y,x'), { timeout: 10_000 })
    })
  }
})
