// Runs a source checkout of the relay fast: its TypeScript, the @stead/*
// packages' src/ ("@stead/source") and its dependencies bundled into one
// JavaScript file by esbuild, rebuilt only when one of the files it was made
// from changed. Through tsx (source.mjs) every module of the graph, libp2p's
// hundreds among them, goes through loader hooks on each start: about 3 s
// of CPU per relay, where the bundle starts in under 1 s. Tests and
// `stead-relay dev` start relays by the hundred.
import { randomBytes } from 'node:crypto'
import { mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

const relayDir = resolve(dirname(fileURLToPath(import.meta.url)), '..')
const repoDir = resolve(relayDir, '..')
/**
 * Two levels below relay/, as dist/process/ is: the relay finds its
 * package.json (its version) and its bin (`dev` starts relays through it)
 * relative to its own file.
 */
const cacheDir = join(relayDir, '.cache', 'bundle')
const manifestPath = join(cacheDir, 'manifest.json')
/** Native addons (found on disk next to their package) stay outside the bundle. */
const EXTERNAL = ['lmdb', 'msgpackr-extract']
/** What a change of the installed packages touches even where no bundled file changed (package.json exports, say). */
const INSTALL_STAMP = join(repoDir, 'node_modules', '.package-lock.json')
/** Bundles older than this that the manifest no longer names are removed (a relay still starting may be reading one). */
const OLD_BUNDLE_MS = 10 * 60 * 1000

/** The bundle of `relay/src/process/cli.ts` as it is now on disk: the cached one if none of its inputs changed, else a new one. */
export async function relayBundle() {
  const cached = current()
  if (cached) return cached
  return build()
}

function stamp(path) {
  const s = statSync(path)
  return `${s.mtimeMs}:${s.size}`
}

/** The cached bundle's path if it and every file it was made from are as they were, else undefined. */
function current() {
  let manifest
  try {
    manifest = JSON.parse(readFileSync(manifestPath, 'utf8'))
    for (const [path, was] of Object.entries(manifest.inputs)) if (stamp(resolve(repoDir, path)) !== was) return undefined
    const bundle = join(cacheDir, manifest.bundle)
    statSync(bundle)
    return bundle
  } catch {
    // No cache yet, a file gone or unreadable: build.
    return undefined
  }
}

async function build() {
  const esbuild = await import('esbuild')
  mkdirSync(cacheDir, { recursive: true })
  const name = `stead-relay-${Date.now().toString(36)}-${randomBytes(4).toString('hex')}.mjs`
  const result = await esbuild.build({
    absWorkingDir: repoDir,
    entryPoints: [join(relayDir, 'src/process/cli.ts')],
    outfile: join(cacheDir, name),
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    conditions: ['@stead/source'],
    external: EXTERNAL,
    // The CommonJS dependencies call require: give the module one.
    banner: { js: "import { createRequire as __steadCreateRequire } from 'node:module'; const require = __steadCreateRequire(import.meta.url);" },
    // For NODE_OPTIONS=--enable-source-maps; the sources are next to it, in the checkout.
    sourcemap: 'linked',
    sourcesContent: false,
    metafile: true,
    logLevel: 'error',
  })
  const inputs = {}
  for (const path of Object.keys(result.metafile.inputs)) inputs[path] = stamp(resolve(repoDir, path))
  // How it was bundled: this file's options.
  inputs[fileURLToPath(import.meta.url)] = stamp(fileURLToPath(import.meta.url))
  try {
    inputs[INSTALL_STAMP] = stamp(INSTALL_STAMP)
  } catch {
    // Not installed by npm: the bundled files' own stamps are all there is.
  }
  // Written whole, then renamed: relays started together each build, and the last one's manifest stands.
  const tmp = `${manifestPath}.${randomBytes(4).toString('hex')}`
  writeFileSync(tmp, JSON.stringify({ bundle: name, inputs }))
  renameSync(tmp, manifestPath)
  removeOld(name)
  return join(cacheDir, name)
}

function removeOld(keep) {
  for (const file of readdirSync(cacheDir)) {
    if (!file.startsWith('stead-relay-') || file.startsWith(keep)) continue
    const path = join(cacheDir, file)
    try {
      if (Date.now() - statSync(path).mtimeMs > OLD_BUNDLE_MS) rmSync(path, { force: true })
    } catch {
      // Removed by another start meanwhile.
    }
  }
}
