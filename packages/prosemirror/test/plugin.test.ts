// @vitest-environment happy-dom
/** Misuse of the plugin gets a typed error, never a document out of step. */
import { isSteadError, type Space } from '@stead/client'
import { Schema } from 'prosemirror-model'
import { EditorState } from 'prosemirror-state'
import { EditorView } from 'prosemirror-view'
import { afterEach, describe, expect, it } from 'vitest'
import { defaultMarks, steadDoc, steadRichText, steadSchema } from '../src/index.ts'
import { closeAll, world } from './helpers.ts'

afterEach(closeAll)

const fails = (reason: string, fn: () => unknown): void => {
  let caught: unknown
  try {
    fn()
  } catch (err) {
    caught = err
  }
  expect(isSteadError(caught, reason as never), String(caught)).toBe(true)
}

describe('steadRichText: misuse', () => {
  it('refuses a schema of another shape and marks the schema lacks, with SteadError malformed', async () => {
    const { spaces } = await world(1)
    const text = (spaces[0] as Space).text('notes')
    const nested = new Schema({ nodes: { doc: { content: 'list+' }, list: { content: 'paragraph+' }, paragraph: { content: 'text*' }, text: {} } })
    fails('malformed', () => EditorState.create({ schema: nested, plugins: [steadRichText(text)] }))
    fails('malformed', () => steadDoc(text, nested))
    const plain = new Schema({ nodes: steadSchema.spec.nodes, marks: { strong: {} } })
    fails('malformed', () => EditorState.create({ schema: plain, plugins: [steadRichText(text)] }))
    // With a mapping of only the marks it has, it works.
    expect(steadDoc(text, plain, defaultMarks.filter((m) => m.mark === 'strong')).childCount).toBe(1)
  })

  it('refuses a second live view on one plugin, and takes one once the first is gone', async () => {
    const { spaces } = await world(1)
    const text = (spaces[0] as Space).text('notes')
    const plugin = steadRichText(text)
    const state = EditorState.create({ schema: steadSchema, plugins: [plugin] })
    const first = new EditorView(document.createElement('div'), { state })
    fails('malformed', () => new EditorView(document.createElement('div'), { state }))
    first.destroy()
    const second = new EditorView(document.createElement('div'), { state })
    second.dispatch(second.state.tr.insertText('works'))
    expect(text.value).toBe('works')
    second.destroy()
  })
})
