/**
 * @stead/prosemirror: a ProseMirror binding for a Stead text with
 * formatting marks (Peritext), with the other clients' cursors from
 * presence: `steadRichText(text, options)` is the plugin, `steadSchema`
 * the schema it maps (a paragraph boundary is one '\n' of the text;
 * strong, em, underline, strike, code and link are Stead's bold, italic,
 * underline, strike, code and link).
 *
 * @module @stead/prosemirror
 */
export { steadSchema } from './schema.ts'
export { defaultMarks, type MarkMapping } from './marks.ts'
export { steadRichText, steadDoc, isRemoteChange, type SteadRichTextOptions } from './plugin.ts'
export { defaultRenderCursor, defaultSelectionAttrs, type RemoteCursor } from './cursors.ts'
export { steadUndo } from './undo.ts'
