#!/usr/bin/env node
// The consumer test: Stead's packages as users get them. Builds every
// published package, packs it with `npm pack`, and installs the tarballs into
// fresh projects in a temporary directory outside the workspace:
//
//   node-app   a plain `node` ESM script (no tsx) that makes a safe update
//              against a 4-relay cluster run by the packed relay's own
//              `npx stead-relay dev`, and `npx stead-relay --version`
//   ts-strict  `tsc --noEmit` under module nodenext, strict,
//              exactOptionalPropertyTypes, without skipLibCheck
//   vite-app   a React app on @stead/react, with a CodeMirror editor on
//              @stead/codemirror and a @stead/prosemirror one, under Vite's
//              react-ts settings
//              (`tsc -b && vite build`), with React 19 and with React 18; the
//              bundle holds no Node built-in, the install no `lmdb` and no `ws`
//
// npm's cache is used where it has a package (CI ran `npm ci` just before).
// Usage: npm run test:consumer [-- --keep]   (--keep leaves the directory)
import { execFileSync, spawn, spawnSync } from 'node:child_process'
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import process from 'node:process'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'

const { fetch } = globalThis
const root = resolve(dirname(fileURLToPath(import.meta.url)), '..')
const keep = process.argv.includes('--keep')
const work = mkdtempSync(join(tmpdir(), 'stead-consumer-'))
const PACKAGES = ['@stead/core', '@stead/client', '@stead/react', '@stead/codemirror', '@stead/prosemirror', '@stead/relay']
const version = JSON.parse(readFileSync(join(root, 'relay/package.json'), 'utf8')).version
const results = []
let cluster

function run(cmd, args, cwd, options = {}) {
  try {
    return execFileSync(cmd, args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], maxBuffer: 64 * 1024 * 1024, ...options })
  } catch (err) {
    throw new Error(`${cmd} ${args.join(' ')} (in ${cwd}) failed:\n${err.stdout ?? ''}${err.stderr ?? ''}`)
  }
}

/** `npm install` in a fresh project; returns what npm printed (warnings go to stderr) so the caller can check them. */
function install(dir) {
  const r = spawnSync('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund'], { cwd: dir, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 })
  const printed = `${r.stdout}${r.stderr}`
  if (r.status !== 0) throw new Error(`npm install (in ${dir}) failed:\n${printed}`)
  return printed
}

function project(name, pkg, files) {
  const dir = join(work, name)
  mkdirSync(dir, { recursive: true })
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: `consumer-${name}`, private: true, type: 'module', ...pkg }, null, 2))
  for (const [file, text] of Object.entries(files)) {
    mkdirSync(dirname(join(dir, file)), { recursive: true })
    writeFileSync(join(dir, file), text)
  }
  return dir
}

async function step(name, body) {
  const started = Date.now()
  process.stdout.write(`== ${name}\n`)
  try {
    await body()
    results.push({ name, ok: true })
    process.stdout.write(`   ok (${((Date.now() - started) / 1000).toFixed(1)} s)\n`)
  } catch (err) {
    results.push({ name, ok: false })
    process.stdout.write(`   FAILED: ${err instanceof Error ? err.message : String(err)}\n`)
  }
}

function check(condition, message) {
  if (!condition) throw new Error(message)
}

/** Four consecutive free ports for the relays' HTTP API and four more, 100 above, for their mesh (the `dev` layout). */
async function freeBasePort() {
  const free = (port) =>
    new Promise((ok) => {
      const server = createServer()
      server.once('error', () => ok(false))
      server.listen(port, '127.0.0.1', () => server.close(() => ok(true)))
    })
  for (let attempt = 0; attempt < 50; attempt++) {
    const base = 20_000 + Math.floor(Math.random() * 20_000)
    const ports = [0, 1, 2, 3].flatMap((i) => [base + i, base + 100 + i])
    if ((await Promise.all(ports.map(free))).every(Boolean)) return base
  }
  throw new Error('no free ports for the cluster')
}

async function until(what, timeoutMs, probe) {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    if (await probe().catch(() => false)) return
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)
    await sleep(200)
  }
}

const tarballs = {}

await step('build and pack', () => {
  run('npm', ['run', 'build'], root, { stdio: ['ignore', 'pipe', 'inherit'] })
  const out = join(work, 'tarballs')
  mkdirSync(out)
  const packed = JSON.parse(run('npm', ['pack', '--json', '--pack-destination', out, ...PACKAGES.flatMap((p) => ['-w', p])], root))
  for (const p of packed) tarballs[p.name] = join(out, p.filename)
  check(PACKAGES.every((p) => tarballs[p]), `npm pack made ${Object.keys(tarballs).join(', ')}`)
  for (const p of packed) {
    const paths = p.files.map((f) => f.path)
    check(!paths.some((f) => /^(src|test|bench|examples)\//.test(f) || f.startsWith('tsconfig')), `${p.name} ships sources or tests: ${paths.filter((f) => !f.startsWith('dist/')).join(', ')}`)
    check(paths.includes('dist/index.js') && paths.includes('dist/index.d.ts'), `${p.name} has no dist/index.js and dist/index.d.ts`)
    check(paths.includes('LICENSE') && paths.includes('README.md'), `${p.name} ships no LICENSE or README.md`)
    check(!paths.some((f) => f.endsWith('.tsbuildinfo')), `${p.name} ships a .tsbuildinfo`)
    process.stdout.write(`   ${p.filename}: ${p.entryCount} files, ${(p.size / 1024).toFixed(0)} KiB\n`)
  }
})

const dep = (name) => `file:${tarballs[name]}`

await step('node-app: a plain node script makes a safe update against `npx stead-relay dev`', async () => {
  const dir = project(
    'node-app',
    // The app depends on what it imports; Node 20 has no WebSocket of its own (ws), and Node storage is LMDB.
    { dependencies: { '@stead/core': dep('@stead/core'), '@stead/client': dep('@stead/client'), '@stead/relay': dep('@stead/relay'), lmdb: '^3.5.6', ws: '^8.18.0' } },
    {
      'main.mjs': `import { createClient } from '@stead/client'
const relays = process.argv.slice(2)
const client = await createClient({ relays, database: 'consumer' })
const online = new Promise((ok, fail) => {
  const timer = setTimeout(() => fail(new Error('not online after 30 s: ' + JSON.stringify(client.status))), 30_000)
  const check = (s) => { if (s.online) { clearTimeout(timer); ok() } }
  client.onStatus(check)
  check(client.status)
})
await online
const bank = await client.space('consumer-bank')
const account = bank.counter('acct:consumer', { min: 0 })
await account.increment(10, { safe: true })
const result = await account.decrement(4, { safe: true })
const tooMuch = await account.decrement(100, { safe: true })
console.log(JSON.stringify({ result: result.status, tooMuch: tooMuch.status, reason: tooMuch.reason, stable: account.stable }))
await client.close()
`,
    },
  )
  install(dir)
  check(!existsSync(join(dir, 'node_modules/tsx')), 'tsx was installed: the relay must run without it')
  const printed = run('npx', ['stead-relay', '--version'], dir).trim()
  check(printed.includes(version), `npx stead-relay --version printed ${JSON.stringify(printed)}, expected ${version}`)
  process.stdout.write(`   npx stead-relay --version: ${printed}\n`)

  const base = await freeBasePort()
  let log = ''
  cluster = spawn('npx', ['stead-relay', 'dev', '--relays', '4', '--base-port', String(base), '--dir', join(dir, 'cluster')], { cwd: dir, detached: true, stdio: ['ignore', 'pipe', 'pipe'] })
  for (const s of [cluster.stdout, cluster.stderr]) s.on('data', (chunk) => (log = (log + chunk).slice(-20_000)))
  const urls = [0, 1, 2, 3].map((i) => `127.0.0.1:${base + i}`)
  try {
    await until('the cluster to answer /health', 60_000, async () => {
      check(cluster.exitCode === null, 'the cluster exited')
      const ok = await Promise.all(urls.map((u) => fetch(`http://${u}/health`).then((r) => r.ok)))
      return ok.every(Boolean)
    })
    const out = run('node', ['main.mjs', ...urls.map((u) => `ws://${u}`)], dir, { timeout: 120_000 }).trim()
    process.stdout.write(`   main.mjs: ${out}\n`)
    const answer = JSON.parse(out.split('\n').pop())
    check(answer.result === 'committed' && answer.tooMuch === 'rejected' && answer.reason === 'invariant' && answer.stable === 6, `unexpected result ${out}`)
  } catch (err) {
    throw new Error(`${err.message}\n--- cluster log (tail) ---\n${log.slice(-4000)}`)
  } finally {
    stopCluster()
  }
})

function stopCluster() {
  if (!cluster || cluster.exitCode !== null) return
  try {
    process.kill(-cluster.pid, 'SIGTERM')
  } catch {
    // already gone
  }
}

await step('ts-strict: tsc under nodenext, strict, exactOptionalPropertyTypes, no skipLibCheck', () => {
  const dir = project(
    'ts-strict',
    { dependencies: { '@stead/core': dep('@stead/core'), '@stead/client': dep('@stead/client') }, devDependencies: { typescript: '~5.9.0', '@types/node': '^20.19.0' } },
    {
      'tsconfig.json': JSON.stringify({
        compilerOptions: { target: 'ES2022', module: 'nodenext', moduleResolution: 'nodenext', strict: true, exactOptionalPropertyTypes: true, noUncheckedIndexedAccess: true, skipLibCheck: false, noEmit: true, types: ['node'] },
        include: ['src'],
      }),
      'src/main.ts': `import { createClient, lmdbStorage, isSteadError, type CounterHandle, type SteadClient, type Space } from '@stead/client'
import { SteadError } from '@stead/core'

export async function main(relays: string[]): Promise<number> {
  const client: SteadClient = await createClient({ relays, storage: lmdbStorage('./data') })
  const space: Space = await client.space('bank')
  const account: CounterHandle = space.counter('acct:alice', { min: 0 })
  const r = await account.decrement(5, { safe: true })
  if (r.status === 'rejected') console.log(r.reason)
  const unsubscribe = account.subscribe(() => console.log(account.value, account.stable))
  unsubscribe()
  try {
    await space.readStable(account.key, { quorum: true })
  } catch (err) {
    if (isSteadError(err, 'timeout')) console.log('timed out')
  }
  void SteadError
  await client.close()
  return account.stable
}
`,
    },
  )
  install(dir)
  run('npx', ['tsc', '-p', '.'], dir)
})

for (const react of ['19', '18']) await step(`vite-app (React ${react}): tsc -b && vite build with Vite's react-ts settings`, () => {
  const dir = project(
    `vite-app-react${react}`,
    {
      scripts: { build: 'tsc -b && vite build' },
      dependencies: {
        '@stead/core': dep('@stead/core'),
        '@stead/client': dep('@stead/client'),
        '@stead/react': dep('@stead/react'),
        '@stead/codemirror': dep('@stead/codemirror'),
        '@codemirror/state': '^6.5.0',
        '@codemirror/view': '^6.38.0',
        '@stead/prosemirror': dep('@stead/prosemirror'),
        'prosemirror-model': '^1.25.0',
        'prosemirror-state': '^1.4.3',
        'prosemirror-view': '^1.40.0',
        react: `^${react}.0.0`,
        'react-dom': `^${react}.0.0`,
      },
      devDependencies: { typescript: '~5.9.0', vite: '^8.0.0', '@vitejs/plugin-react': '^6.0.0', '@types/react': `^${react}.0.0`, '@types/react-dom': `^${react}.0.0` },
    },
    {
      // What `npm create vite -- --template react-ts` writes, in substance.
      'tsconfig.json': JSON.stringify({ files: [], references: [{ path: './tsconfig.app.json' }] }),
      'tsconfig.app.json': JSON.stringify({
        compilerOptions: {
          tsBuildInfoFile: './node_modules/.tmp/tsconfig.app.tsbuildinfo',
          target: 'ES2022',
          useDefineForClassFields: true,
          lib: ['ES2022', 'DOM', 'DOM.Iterable'],
          module: 'ESNext',
          types: ['vite/client'],
          skipLibCheck: true,
          moduleResolution: 'bundler',
          allowImportingTsExtensions: true,
          verbatimModuleSyntax: true,
          moduleDetection: 'force',
          noEmit: true,
          jsx: 'react-jsx',
          strict: true,
          noUnusedLocals: true,
          noUnusedParameters: true,
          erasableSyntaxOnly: true,
          noFallthroughCasesInSwitch: true,
          noUncheckedSideEffectImports: true,
        },
        include: ['src'],
      }),
      'vite.config.ts': `import { defineConfig } from 'vite'\nimport react from '@vitejs/plugin-react'\nexport default defineConfig({ plugins: [react()] })\n`,
      'index.html': `<!doctype html><html><body><div id="root"></div><div id="editor"></div><script type="module" src="/src/main.tsx"></script></body></html>\n`,
      'src/main.tsx': `import { StrictMode } from 'react'
import { createRoot } from 'react-dom/client'
import { createClient } from '@stead/client'
import { SteadProvider, useCounter, useStatus } from '@stead/react'
import { EditorState } from '@codemirror/state'
import { EditorView } from '@codemirror/view'
import { steadText } from '@stead/codemirror'
import { mountEditor } from './editor.ts'

function Likes() {
  const likes = useCounter('likes')
  const status = useStatus()
  return <button onClick={() => void likes.handle.increment(1)}>{likes.value} likes ({status.online ? 'online' : 'offline'})</button>
}

const client = await createClient({ relays: ['ws://127.0.0.1:7401'], database: 'app' })
const space = await client.space('demo')
mountEditor(space, document.body)
createRoot(document.getElementById('root')!).render(
  <StrictMode>
    <SteadProvider space={space}>
      <Likes />
    </SteadProvider>
  </StrictMode>,
)
const notes = space.text('notes')
new EditorView({
  parent: document.getElementById('editor')!,
  state: EditorState.create({ doc: notes.value, extensions: [steadText(notes, { presence: space.presence, user: { name: 'Ada', colour: '#30bced' } })] }),
})
`,
      // A rich-text editor: its bundle must stay free of Node built-ins too.
      'src/editor.ts': `import type { Space } from '@stead/client'
import { steadDoc, steadRichText, steadSchema } from '@stead/prosemirror'
import { EditorState } from 'prosemirror-state'
import { EditorView } from 'prosemirror-view'

export function mountEditor(space: Space, place: HTMLElement): EditorView {
  const text = space.text('notes')
  const plugin = steadRichText(text, { presence: space.presence, user: { name: 'Ann', colour: '#d1495b' } })
  return new EditorView(place, { state: EditorState.create({ schema: steadSchema, doc: steadDoc(text), plugins: [plugin] }) })
}
`,
    },
  )
  const npmOut = install(dir)
  check(!/EBADENGINE/.test(npmOut), `npm warned EBADENGINE installing the browser app:\n${npmOut}`)
  // msgpackr (core's codec) still brings its optional prebuilt accelerator msgpackr-extract, which only Node loads.
  for (const native of ['lmdb', 'ws']) check(!existsSync(join(dir, 'node_modules', native)), `a browser app installed ${native}`)
  // The same install used from Node, without the optional peers: typed errors that say what to install.
  const probe = `import { createClient, lmdbStorage, memoryStorage, isSteadError } from '@stead/client'
const storage = (() => { try { lmdbStorage('./db'); return 'opened' } catch (e) { return isSteadError(e) && /npm install lmdb/.test(e.message) ? 'unavailable' : String(e) } })()
const socket = await createClient({ relays: ['ws://127.0.0.1:9'], storage: memoryStorage() }).then(async (c) => { await c.close(); return 'created' }, (e) => (isSteadError(e, 'unsupported') && /npm install ws/.test(e.message) ? 'unsupported' : String(e)))
console.log(JSON.stringify({ storage, socket }))
`
  writeFileSync(join(dir, 'probe.mjs'), probe)
  const probed = JSON.parse(run('node', ['probe.mjs'], dir).trim())
  const expected = { storage: 'unavailable', socket: globalThis.WebSocket ? 'created' : 'unsupported' }
  check(JSON.stringify(probed) === JSON.stringify(expected), `without lmdb and ws, Node got ${JSON.stringify(probed)}, expected ${JSON.stringify(expected)}`)
  const out = run('npm', ['run', 'build'], dir)
  check(!/externalized for browser compatibility/.test(out), `vite externalized a Node built-in:\n${out}`)
  const assets = join(dir, 'dist/assets')
  const js = readdirSync(assets).filter((f) => f.endsWith('.js'))
  check(js.length > 0, 'vite build wrote no JavaScript')
  for (const f of js) {
    const text = readFileSync(join(assets, f), 'utf8')
    const nodeBuiltin = /["'`]node:[a-z_/]+["'`]|__vite-browser-external/.exec(text)
    check(!nodeBuiltin, `${f} refers to a Node built-in: ${nodeBuiltin?.[0]}`)
  }
})

stopCluster()
const failed = results.filter((r) => !r.ok)
if (keep || failed.length) process.stdout.write(`(projects left in ${work})\n`)
else rmSync(work, { recursive: true, force: true })
process.stdout.write(`consumer: ${results.length - failed.length} passed, ${failed.length} failed\n`)
process.exit(failed.length ? 1 : 0)
