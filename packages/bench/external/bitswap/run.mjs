#!/usr/bin/env node
/* global process, console */
// npm run bench:bitswap -- [--blocks 100,1000] [--runs 3]
// Helia's bitswap (IPFS block exchange over libp2p) fetching a chain of envelope-sized blocks from one
// peer on loopback: the comparison issue 48 asks for against Stead's own peer sync (npm run
// bench:peer-fetch). Helia and its 480 packages are installed apart from the workspace, once, into
// $TMPDIR/stead-bench-bitswap (Helia 7 asks for Node 22; undici is pinned to 7 so it loads on Node 20).
import { execFileSync } from 'node:child_process'
import { copyFileSync, existsSync, mkdirSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parseArgs } from 'node:util'

const { values } = parseArgs({ options: { blocks: { type: 'string', default: '100,1000' }, runs: { type: 'string', default: '3' } } })
const here = import.meta.dirname
const dir = join(tmpdir(), 'stead-bench-bitswap')
mkdirSync(dir, { recursive: true })
copyFileSync(join(here, 'package.json'), join(dir, 'package.json'))
copyFileSync(join(here, 'walk.mjs'), join(dir, 'walk.mjs'))
if (!existsSync(join(dir, 'node_modules', 'helia'))) {
  console.log(`installing Helia into ${dir} (once)…`)
  execFileSync('npm', ['install', '--no-audit', '--no-fund', '--loglevel=error'], { cwd: dir, stdio: 'inherit' })
}
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]
for (const blocks of values.blocks.split(',').map(Number)) {
  for (const mode of ['walk', 'known']) {
    const runs = []
    for (let i = 0; i < Number(values.runs); i++) runs.push(JSON.parse(execFileSync(process.execPath, ['walk.mjs', String(blocks), mode], { cwd: dir, encoding: 'utf8' }).trim().split('\n').at(-1)))
    const ms = runs.map((r) => r.ms)
    console.log(`bitswap ${mode === 'walk' ? 'walking the deps' : 'all CIDs known'}, ${blocks} blocks: median ${median(ms)} ms (runs ${ms.join(', ')}), ${(median(ms) / blocks).toFixed(2)} ms per block`)
  }
}
