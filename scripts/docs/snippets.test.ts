import { spawn } from 'node:child_process'
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import ts from 'typescript'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { TestCluster } from '@stead/relay/testing'
import { blocksOf, commandsOf, flagsOf, inlineCommandsOf, type Block, type Command } from './snippets.ts'

/**
 * What the docs tell a user to run, checked as a fresh clone would run it:
 * every shell command names a script, subcommand, file and flags that
 * exist (and runs where it can here), every TypeScript block typechecks
 * against the packages' sources, and the runnable ones run against a real
 * cluster. Docs of generated or historical text (docs/api, the benchmark
 * history) are not instructions and are left out.
 */
const root = resolve(import.meta.dirname, '../..')
const DOCS = ['README.md', 'apps/demo/README.md', 'e2e/README.md', 'relay/README.md', 'docs/architecture.md', ...['bench', 'client', 'codemirror', 'core', 'prosemirror', 'react', 'sim'].map((p) => `packages/${p}/README.md`)].filter((f) => existsSync(join(root, f)))
const blocks = DOCS.flatMap((f) => blocksOf(root, f)).filter((b) => b.directive?.kind !== 'skip')
const shell = [...blocks.filter((b) => b.lang === 'sh').flatMap(commandsOf), ...DOCS.flatMap((f) => inlineCommandsOf(root, f))]
const typescript = blocks.filter((b) => b.lang === 'ts' || b.lang === 'tsx')

const packageJson = (dir: string): { scripts?: Record<string, string>; name?: string } => JSON.parse(readFileSync(join(root, dir, 'package.json'), 'utf8')) as never
const workspaces = new Map(['packages/core', 'packages/client', 'packages/react', 'packages/codemirror', 'packages/prosemirror', 'packages/sim', 'packages/bench', 'relay', 'apps/demo'].map((d) => [packageJson(d).name ?? d, d]))
const RELAY_CLI = [process.execPath, join(root, 'relay/bin/stead-relay.mjs')]

/**
 * What a command prints for `--help`, once per command line. It runs in a
 * process group of its own, killed whole after 60 s: a command that did not
 * know --help would otherwise run for real (a benchmark starting relays) and
 * outlive the test.
 */
const helps = new Map<string, Promise<string>>()
function helpOf(argv: readonly string[], cwd = root): Promise<string> {
  const key = `${cwd}: ${argv.join(' ')}`
  let h = helps.get(key)
  if (!h) {
    const [cmd = '', ...args] = argv
    h = new Promise<string>((done) => {
      const child = spawn(cmd, [...args, '--help'], { cwd, detached: true, stdio: ['ignore', 'pipe', 'pipe'] })
      let out = ''
      child.stdout.on('data', (d: Buffer) => (out += d.toString()))
      child.stderr.on('data', (d: Buffer) => (out += d.toString()))
      const timer = setTimeout(() => {
        out += `\n(killed: no answer to --help in 60 s)`
        if (child.pid) process.kill(-child.pid, 'SIGKILL')
      }, 60_000)
      child.on('close', () => {
        clearTimeout(timer)
        done(out)
      })
    })
    helps.set(key, h)
  }
  return h
}

/** The flags that none of the commands' `--help` mentions. */
async function unknownFlags(flags: readonly string[], helpArgv: readonly string[], cwd = root): Promise<string[]> {
  const text = await helpOf(helpArgv, cwd)
  return flags.filter((f) => f !== '--help' && f !== '--version').filter((f) => !new RegExp(`${f}(?![a-z-])`).test(text))
}

/** `npm run S [-w W] [-- args]`: the script exists where it is run, and the CLI behind it knows every flag passed. */
async function checkNpmRun(c: Command, rest: readonly string[]): Promise<string | undefined> {
  const dash = rest.indexOf('--')
  const before = dash < 0 ? rest : rest.slice(0, dash)
  const args = dash < 0 ? [] : rest.slice(dash + 1)
  const [script] = before
  const w = before.indexOf('-w')
  const dir = w >= 0 ? workspaces.get(before[w + 1] ?? '') : '.'
  if (dir === undefined) return `no workspace ${before[w + 1]}`
  const body = script ? packageJson(dir).scripts?.[script] : undefined
  if (!script || !body) return `no npm script "${script}" in ${dir}/package.json`
  const flags = flagsOf(args)
  if (!flags.length) return undefined
  // The dev script hands its options to `stead-relay dev`.
  const missing = script === 'dev' ? await unknownFlags(flags, [...RELAY_CLI, 'dev']) : await unknownFlags(flags, ['sh', '-c', `${body} "$@"`, 'sh'], join(root, dir))
  return missing.length ? `${missing.join(', ')} not in the --help of npm run ${script}` : undefined
}

/** `stead-relay SUB [SUBSUB] args`: the subcommand exists and knows every flag passed. */
async function checkRelayCli(words: readonly string[]): Promise<string | undefined> {
  const [sub, second] = words
  if (sub === '--version' || sub === '--help') return undefined
  if (!sub) return 'stead-relay without a subcommand'
  const help = await helpOf([...RELAY_CLI, sub])
  if (!help.includes(`stead-relay ${sub}`)) return `stead-relay has no subcommand ${sub}`
  // A command of the subcommand's (`stead-relay committee status`) has the flags in its own --help.
  const command = second !== undefined && /^[a-z]+$/.test(second) && new RegExp(`^ {2}${second} `, 'm').test(help) ? [sub, second] : [sub]
  const missing = await unknownFlags(flagsOf(words), [...RELAY_CLI, ...command])
  return missing.length ? `${missing.join(', ')} not in stead-relay ${command.join(' ')} --help` : undefined
}

/** `node [flags] FILE [args]` or `tsx FILE`: a TypeScript file of the repository only runs from source with the @stead/source condition. */
async function checkNode(words: readonly string[]): Promise<string | undefined> {
  const file = words.find((w) => /\.(m?[jt]s)$/.test(w))
  if (!file) return 'no script file'
  if (!existsSync(join(root, file))) return `${file} does not exist`
  if (file.endsWith('.ts') && !words.some((w) => w.includes('@stead/source'))) return `${file} needs --conditions=@stead/source to run from a clone (or use the npm script that runs it)`
  const i = words.indexOf(file)
  const nodeFlags = words.slice(1, i).flatMap((w) => (w === 'tsx' ? ['tsx'] : [w]))
  const missing = await unknownFlags(flagsOf(words.slice(i + 1)), [process.execPath, ...nodeFlags, file])
  return missing.length ? `${missing.join(', ')} not in ${file} --help` : undefined
}

/** Programs the docs show that this test does not run: they install, deploy or need a host of their own. */
const NOT_RUN_HERE = new Set(['docker', 'systemctl', 'journalctl', 'apt-get'])
const curls: Command[] = []

/** What is wrong with one shell command from the docs, or undefined. */
async function problemOf(c: Command): Promise<string | undefined> {
  const [cmd, ...rest] = c.words
  if (cmd === 'cd') return existsSync(join(root, rest[0] ?? '')) ? undefined : `no directory ${rest[0]}`
  if (cmd === 'curl') {
    curls.push(c)
    return undefined
  }
  if (cmd === 'npx' && rest[0] === 'stead-relay') return checkRelayCli(rest.slice(1))
  if (cmd === 'npx' && rest[0] === 'vitest') {
    const paths = rest.slice(2).filter((w) => !w.startsWith('-'))
    const missing = paths.filter((p) => !existsSync(join(root, p)))
    return missing.length ? `${missing.join(', ')} does not exist` : undefined
  }
  if (cmd === 'stead-relay') return checkRelayCli(rest)
  if (cmd === 'node' || (cmd === 'npx' && rest[0] === 'tsx') || cmd === 'tsx') return checkNode(c.words)
  if (cmd === 'npm') {
    const [verb, ...args] = rest
    if (verb === 'run') return checkNpmRun(c, args)
    if (verb === 'test') return packageJson('.').scripts?.test ? undefined : 'no npm test script'
    if (verb === 'ci' || verb === 'install' || verb === 'pack') {
      const unknown = args.filter((_, k) => args[k - 1] === '-w').filter((w) => !workspaces.has(w))
      return unknown.length ? `no workspace ${unknown.join(', ')}` : undefined
    }
    return `npm ${verb} is not a command the docs are checked for`
  }
  if (cmd && NOT_RUN_HERE.has(cmd)) {
    const paths = rest.filter((w) => /^(relay|packages|apps|e2e|scripts|docs)\//.test(w))
    const missing = paths.filter((p) => !existsSync(join(root, p)))
    return missing.length ? `${missing.join(', ')} does not exist` : undefined
  }
  return `unknown program ${cmd}: teach scripts/docs/snippets.test.ts to check it, or mark the block <!-- snippet: skip REASON -->`
}

describe('the docs, as a user runs them', () => {
  it('find code to check', () => {
    expect(shell.length).toBeGreaterThan(20)
    expect(typescript.length).toBeGreaterThan(3)
    expect(typescript.some((b) => b.directive?.kind === 'run')).toBe(true)
  })

  it('name scripts, subcommands, files and flags that exist', async () => {
    const problems: string[] = []
    for (const c of shell) {
      const p = await problemOf(c)
      if (p) problems.push(`${c.where}: ${c.text}\n    ${p}`)
    }
    expect(problems, problems.join('\n')).toEqual([])
  }, 240_000)

  it('have TypeScript blocks that typecheck against the packages', () => {
    const dir = join(root, '.stead/snippets')
    rmSync(dir, { recursive: true, force: true })
    mkdirSync(dir, { recursive: true })
    const files = new Map<string, Block>()
    for (const b of typescript) {
      const name = join(dir, `${b.file.replace(/[/.]/g, '_')}_${b.line}.${b.lang}`)
      const context = b.directive?.kind === 'context' ? b.directive.code : ''
      // An empty export makes each block a module of its own (top-level await, no clashing names).
      writeFileSync(name, `${context}\n${b.code}\nexport {}\n`)
      files.set(name, b)
    }
    const base = ts.readConfigFile(join(root, 'tsconfig.base.json'), ts.sys.readFile).config as { compilerOptions: object }
    const { options } = ts.convertCompilerOptionsFromJson({ ...base.compilerOptions, composite: false, declaration: false, noEmit: true, jsx: 'react-jsx', types: ['node'] }, root)
    const program = ts.createProgram([...files.keys()], options)
    const problems = ts.getPreEmitDiagnostics(program).flatMap((d) => {
      const b = d.file && files.get(d.file.fileName)
      if (!d.file || !b) return [`${ts.flattenDiagnosticMessageText(d.messageText, '\n')}`]
      const { line } = d.file.getLineAndCharacterOfPosition(d.start ?? 0)
      // Line 1 of the file is the context line.
      return [`${b.file}:${b.line + line - 1}: ${ts.flattenDiagnosticMessageText(d.messageText, '\n    ')}`]
    })
    expect(problems, problems.join('\n')).toEqual([])
  }, 120_000)

  describe('against a running cluster', () => {
    let cluster: TestCluster
    /** The docs' dev cluster listens on 127.0.0.1:7401-7404; this test's cluster elsewhere. */
    const retarget = (text: string): string => text.replace(/(127\.0\.0\.1|localhost):740([1-9])\b/g, (_, host: string, n: string) => `${host}:${cluster.relays[Number(n) - 1]?.api.split(':')[1] ?? '0'}`)

    beforeAll(async () => {
      cluster = await TestCluster.create(4)
      await cluster.startAll()
    }, 90_000)
    afterAll(async () => {
      await cluster?.stopAll()
    })

    const runTs = (file: string, env: Record<string, string> = {}): Promise<{ code: number | null; out: string }> =>
      new Promise((done) => {
        const child = spawn(process.execPath, ['--conditions=@stead/source', '--import', 'tsx', file], { cwd: root, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] })
        let out = ''
        child.stdout.on('data', (d: Buffer) => (out += d.toString()))
        child.stderr.on('data', (d: Buffer) => (out += d.toString()))
        child.on('close', (code) => done({ code, out })) // after the pipes drain
      })

    it('runs the blocks marked runnable, and exits 0', async () => {
      const dir = join(root, '.stead/snippets')
      mkdirSync(dir, { recursive: true })
      for (const b of typescript.filter((x) => x.directive?.kind === 'run')) {
        const file = join(dir, `run_${b.file.replace(/[/.]/g, '_')}_${b.line}.ts`)
        writeFileSync(file, retarget(b.code))
        const { code, out } = await runTs(file)
        expect(code, `${b.file}:${b.line} exited ${code}:\n${out}`).toBe(0)
      }
    }, 120_000)

    it('runs npm run example:bank, which the README names', async () => {
      const script = packageJson('.').scripts?.['example:bank'] ?? ''
      const file = /\S+\.ts/.exec(script)?.[0]
      expect(file, 'example:bank runs a .ts file').toBeDefined()
      const { code, out } = await runTs(join(root, file ?? ''), { RELAYS: cluster.relays.map((r) => `ws://${r.api}`).join(',') })
      expect(code, out).toBe(0)
      expect(out).toMatch(/rejected \(invariant\)/)
    }, 120_000)

    it('answers every curl the docs show with a success', async () => {
      if (!curls.length) for (const c of shell) await problemOf(c)
      expect(curls.length).toBeGreaterThan(3)
      const failed: string[] = []
      for (const c of curls) {
        const url = c.words.find((w) => /^https?:\/\//.test(w)) ?? ''
        // Commands for a deployed cluster (10.0.0.x, a compose network) are not this machine's to reach.
        if (!/^http:\/\/(127\.0\.0\.1|localhost):740[1-9]\//.test(url)) continue
        const res = await fetch(retarget(url))
        if (!res.ok) failed.push(`${c.where}: ${c.text} -> ${res.status} ${(await res.text()).slice(0, 200)}`)
      }
      expect(failed, failed.join('\n')).toEqual([])
    }, 60_000)
  })
})
