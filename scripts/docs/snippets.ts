/**
 * The code blocks of the repository's Markdown docs, and the shell commands
 * in them, so that a test can check that what the docs tell a user to run
 * still runs.
 *
 * A block may carry a directive in an HTML comment on the line just above
 * its fence (invisible on GitHub):
 *
 * - `<!-- snippet: run -->`: a TypeScript program to run against a dev cluster
 *   (its relay addresses 127.0.0.1:7401-7404 are rewritten to the test's);
 * - `<!-- snippet: context DECLARATIONS -->`: TypeScript prepended when the
 *   block is typechecked, for a fragment that uses names it does not define;
 * - `<!-- snippet: skip REASON -->`: not checked, for the reason given.
 */
import { readFileSync } from 'node:fs'

export interface Block {
  /** The Markdown file, relative to the repository root. */
  readonly file: string
  /** 1-based line of the block's first line of code. */
  readonly line: number
  /** The fence's language (`sh`, `ts`, `tsx`, `json`, or empty). */
  readonly lang: string
  readonly code: string
  readonly directive?: Directive
}

export type Directive = { readonly kind: 'run' } | { readonly kind: 'context'; readonly code: string } | { readonly kind: 'skip'; readonly reason: string }

const DIRECTIVE = /^<!--\s*snippet:\s*(run|context|skip)\b\s*(.*?)\s*-->$/

/** Every fenced block of a Markdown file (`root`-relative `file`). */
export function blocksOf(root: string, file: string): Block[] {
  const lines = readFileSync(`${root}/${file}`, 'utf8').split('\n')
  const blocks: Block[] = []
  for (let i = 0; i < lines.length; i++) {
    const open = /^```(\S*)/.exec(lines[i] ?? '')
    if (!open) continue
    const end = lines.findIndex((l, j) => j > i && l.startsWith('```'))
    if (end < 0) throw new Error(`${file}:${i + 1}: code block never closed`)
    const directive = parseDirective(lines[i - 1] ?? '', `${file}:${i}`)
    blocks.push({ file, line: i + 2, lang: open[1] ?? '', code: lines.slice(i + 1, end).join('\n'), ...(directive ? { directive } : {}) })
    i = end
  }
  return blocks
}

function parseDirective(line: string, where: string): Directive | undefined {
  if (!line.includes('snippet:')) return undefined
  const m = DIRECTIVE.exec(line.trim())
  if (!m) throw new Error(`${where}: malformed snippet directive ${JSON.stringify(line)} (want <!-- snippet: run | context CODE | skip REASON -->)`)
  const [, kind, rest = ''] = m
  if (kind === 'run') return { kind: 'run' }
  if (!rest) throw new Error(`${where}: snippet ${kind} needs ${kind === 'skip' ? 'a reason' : 'declarations'}`)
  return kind === 'skip' ? { kind: 'skip', reason: rest } : { kind: 'context', code: rest }
}

/** One command of a shell block, as its words, with the block it came from. */
export interface Command {
  readonly where: string
  readonly words: readonly string[]
  readonly text: string
}

/**
 * The commands of a shell block: comments dropped, `\` continuations
 * joined, `&&` chains split, leading `VAR=value` assignments dropped.
 */
export function commandsOf(block: Block): Command[] {
  const out: Command[] = []
  const lines = block.code.replace(/\\\n/g, ' ').split('\n')
  lines.forEach((line, k) => {
    const text = stripComment(line).trim()
    if (!text) return
    for (const part of text.split(/\s&&\s/)) {
      const words = wordsOf(part.replace(LEADING_ASSIGNMENTS, ''))
      if (words.length) out.push({ where: `${block.file}:${block.line + k}`, words, text: part.trim() })
    }
  })
  return out
}

/** `A=1 B=$(id -u) cmd`: the environment assignments before a command. */
const LEADING_ASSIGNMENTS = /^\s*(?:[A-Z_][A-Z0-9_]*=(?:\$\([^)]*\)|\S+)\s+)+/

function stripComment(line: string): string {
  let quote: string | undefined
  for (let i = 0; i < line.length; i++) {
    const c = line[i]
    if (quote) { if (c === quote) quote = undefined; continue }
    if (c === '"' || c === "'") quote = c
    else if (c === '#' && (i === 0 || /\s/.test(line[i - 1] ?? ''))) return line.slice(0, i)
  }
  return line
}

/** Shell words with simple quoting (no expansions): enough for the commands docs show. */
export function wordsOf(text: string): string[] {
  const words: string[] = []
  for (const m of text.matchAll(/"([^"]*)"|'([^']*)'|(\S+)/g)) words.push(m[1] ?? m[2] ?? m[3] ?? '')
  return words
}

/** The `--flags` a command passes (without values), in order. */
export function flagsOf(words: readonly string[]): string[] {
  return words.filter((w) => /^--[a-z]/.test(w)).map((w) => w.split('=')[0] ?? w)
}

/** Commands written inline (`npm run x`, `npx stead-relay ...`) in a file's prose, outside code blocks: users run those too. */
export function inlineCommandsOf(root: string, file: string): Command[] {
  const out: Command[] = []
  let fenced = false
  readFileSync(`${root}/${file}`, 'utf8').split('\n').forEach((line, k) => {
    if (line.startsWith('```')) fenced = !fenced
    if (fenced) return
    for (const m of line.matchAll(/`([^`]+)`/g)) {
      const text = (m[1] ?? '').trim()
      // Not a command: a placeholder (<dir>, ...), an error message quoted (`stead-relay start: ...`), or node flags named without a script.
      if (!/^(npm (run|test)\b|npx |node |tsx |stead-relay )/.test(text) || /[<>…|]|\.\.\.|^stead-relay [a-z]+:/.test(text)) continue
      if (/^(node|tsx) /.test(text) && !/\.m?[jt]s\b/.test(text)) continue
      out.push({ where: `${file}:${k + 1}`, words: wordsOf(text), text })
    }
  })
  return out
}
