/**
 * @stead/prosemirror: a ProseMirror binding for a Stead text with
 * formatting marks (Peritext), with the other clients' cursors from
 * presence. See README.md.
 *
 * @packageDocumentation
 */
export { steadSchema } from './schema.ts'
export { defaultMarks, type MarkMapping } from './marks.ts'
export { steadRichText, steadDoc, isRemoteChange, type SteadRichTextOptions } from './plugin.ts'
export { defaultRenderCursor, defaultSelectionAttrs, type RemoteCursor } from './cursors.ts'
