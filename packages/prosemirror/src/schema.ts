import { Schema, type DOMOutputSpec } from 'prosemirror-model'

const P: DOMOutputSpec = ['p', 0]

/**
 * The ProseMirror schema a Stead text maps to: a document of paragraphs
 * (`doc > paragraph+`) of text with marks `strong`, `em`, `underline`,
 * `strike`, `code` and `link` (attribute `href`). The Stead text is flat:
 * each paragraph boundary is one `'\n'`, and the marks are Stead's `bold`,
 * `italic`, `underline`, `strike`, `code` and `link: { href }` (see
 * {@link defaultMarks}). Marks combine freely (no mark excludes another),
 * as they do in Stead.
 *
 * Links do not grow when someone types at their end (`inclusive: false`),
 * as Stead's `link` does not; the other marks do, as Stead's do.
 */
export const steadSchema: Schema<'doc' | 'paragraph' | 'text', 'strong' | 'em' | 'underline' | 'strike' | 'code' | 'link'> = new Schema({
  nodes: {
    doc: { content: 'paragraph+' },
    paragraph: { content: 'text*', group: 'block', parseDOM: [{ tag: 'p' }], toDOM: () => P },
    text: { group: 'inline' },
  },
  marks: {
    strong: {
      parseDOM: [{ tag: 'strong' }, { tag: 'b' }, { style: 'font-weight=bold' }],
      toDOM: () => ['strong', 0],
    },
    em: {
      parseDOM: [{ tag: 'em' }, { tag: 'i' }, { style: 'font-style=italic' }],
      toDOM: () => ['em', 0],
    },
    underline: {
      parseDOM: [{ tag: 'u' }, { style: 'text-decoration=underline' }],
      toDOM: () => ['u', 0],
    },
    strike: {
      parseDOM: [{ tag: 's' }, { tag: 'del' }, { tag: 'strike' }, { style: 'text-decoration=line-through' }],
      toDOM: () => ['s', 0],
    },
    code: {
      parseDOM: [{ tag: 'code' }],
      toDOM: () => ['code', 0],
    },
    link: {
      attrs: { href: { validate: 'string' } },
      inclusive: false,
      parseDOM: [{ tag: 'a[href]', getAttrs: (dom) => ({ href: (dom as HTMLElement).getAttribute('href') }) }],
      toDOM: (mark) => ['a', { href: mark.attrs.href as string, rel: 'noopener noreferrer nofollow' }, 0],
    },
  },
})
