import { spawn, spawnSync } from 'node:child_process'
import { once } from 'node:events'
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { hostname, tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { toHex } from '@stead/core'
import { open } from 'lmdb'
import { afterAll, describe, expect, it } from 'vitest'
import { ConfigError, generateIdentity } from '../src/process/config.ts'
import { committeeFingerprint, LOCK_FILE, META_FILE, openDataDir, policyFingerprint, STORE_FORMAT } from '../src/process/datadir.ts'
import { TestCluster, type TestRelay } from './helpers/cluster.ts'

const root = mkdtempSync(join(tmpdir(), 'stead-datadir-'))
let n = 0
const freshDir = () => join(root, `d${++n}`)
const committee = { f: 1, keys: [1, 2, 3, 4].map(() => generateIdentity().publicKey) }
const mode = (path: string) => statSync(path).mode & 0o777
const writeLock = (dir: string, owner: Record<string, unknown>) => {
  mkdirSync(dir, { recursive: true })
  writeFileSync(join(dir, LOCK_FILE), JSON.stringify({ hostname: hostname(), startedAt: '2020-01-01T00:00:00.000Z', ...owner }))
}
const refusal = (f: () => unknown): ConfigError => {
  try {
    f()
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError)
    return err as ConfigError
  }
  throw new Error('expected a ConfigError')
}
/** A pid no process has: one that just exited. */
const deadPid = () => spawnSync(process.execPath, ['-e', '']).pid as number

afterAll(() => rmSync(root, { recursive: true, force: true }))

describe('data dir', () => {
  it('is 0700 with 0600 files, also when it existed, and its LMDB files stay 0600', () => {
    const dir = freshDir()
    mkdirSync(dir, { mode: 0o755 })
    chmodSync(dir, 0o755)
    writeFileSync(join(dir, 'notes.txt'), 'x', { mode: 0o644 })
    chmodSync(join(dir, 'notes.txt'), 0o644)
    const d = openDataDir(dir, committee)
    // The store, opened the way RelayStore opens it, under this process's usual umask.
    const db = open({ path: dir, encoding: 'binary', maxDbs: 16 })
    db.putSync('k', Buffer.from('v'))
    expect(mode(dir)).toBe(0o700)
    for (const f of ['notes.txt', 'data.mdb', 'lock.mdb', LOCK_FILE, META_FILE]) expect([f, mode(join(dir, f))]).toEqual([f, 0o600])
    expect(JSON.parse(readFileSync(join(dir, META_FILE), 'utf8'))).toEqual({ format: STORE_FORMAT, committee: committeeFingerprint(committee) })
    void db.close()
    d.release()
    expect(existsSync(join(dir, LOCK_FILE))).toBe(false)
    // The store it made opens again.
    openDataDir(dir, committee).release()
  })

  it('creates missing parents with 0700', () => {
    const dir = join(freshDir(), 'a', 'b')
    openDataDir(dir, committee).release()
    expect(mode(dir)).toBe(0o700)
  })

  it('refuses a second open while the lock is held, in this process or by another live one', () => {
    const dir = freshDir()
    const d = openDataDir(dir, committee)
    const e = refusal(() => openDataDir(dir, committee))
    expect(e.message).toMatch(new RegExp(`^data dir ${dir} is in use by another stead-relay \\(pid ${process.pid}, started [^)]+\\); stop it first, or point --data elsewhere$`))
    d.release()
    openDataDir(dir, committee).release()

    const other = freshDir()
    writeLock(other, { pid: process.ppid })
    expect(refusal(() => openDataDir(other, committee)).message).toMatch(`is in use by another stead-relay (pid ${process.ppid}, started 2020-01-01T00:00:00.000Z)`)
    expect(JSON.parse(readFileSync(join(other, LOCK_FILE), 'utf8')).pid).toBe(process.ppid)

    const remote = freshDir()
    writeLock(remote, { pid: process.ppid, hostname: 'elsewhere' })
    expect(refusal(() => openDataDir(remote, committee)).message).toMatch(/in use by a stead-relay on host elsewhere .*remove .*stead-relay\.lock/)
  })

  it('takes over a stale lock: a dead pid, a reused pid, or its own pid from an earlier run', () => {
    for (const owner of [{ pid: deadPid() }, ...(existsSync('/proc/self/stat') ? [{ pid: process.ppid, procStart: '1' }] : []), { pid: process.pid }]) {
      const dir = freshDir()
      writeLock(dir, owner)
      const d = openDataDir(dir, committee)
      expect(JSON.parse(readFileSync(join(dir, LOCK_FILE), 'utf8')).pid).toBe(process.pid)
      d.release()
    }
  })

  it('refuses a store of another committee, of another format, or without its record', () => {
    const dir = freshDir()
    openDataDir(dir, committee).release()
    writeFileSync(join(dir, 'data.mdb'), 'a store') // anything non-empty: the dir now holds data
    const mine = committeeFingerprint(committee)
    for (const other of [
      { f: 1, keys: [1, 2, 3, 4].map(() => generateIdentity().publicKey) },
      { f: 1, keys: [...committee.keys].reverse() },
      { f: 0, keys: committee.keys },
    ]) {
      const theirs = committeeFingerprint(other)
      expect(theirs).not.toBe(mine)
      expect(refusal(() => openDataDir(dir, other)).message).toBe(
        `data dir ${dir} belongs to another cluster (fingerprint ${mine.slice(0, 12)}), the cluster file gives ${theirs.slice(0, 12)}; use the data dir of this cluster or an empty one`,
      )
    }
    // A refusal leaves no lock behind.
    openDataDir(dir, committee).release()

    writeFileSync(join(dir, META_FILE), JSON.stringify({ format: 1, committee: mine }))
    expect(refusal(() => openDataDir(dir, committee)).message).toMatch(/written by store format 1, this stead-relay reads format 5/)

    rmSync(join(dir, META_FILE))
    expect(refusal(() => openDataDir(dir, committee)).message).toMatch(/holds a store written by an older stead-relay \(it has data\.mdb but no stead-store\.json\).*start with an empty data dir/)

    writeFileSync(join(dir, META_FILE), '{ not json')
    expect(refusal(() => openDataDir(dir, committee)).message).toMatch(/cannot read .*stead-store\.json/)
  })

  it('refuses a store audited under other space policies, and records the policy of a store that has none yet', () => {
    const dir = freshDir()
    const policy = (openSpaces: boolean, writers?: Uint8Array[]) => policyFingerprint({ openSpaces, spaces: new Map([['bank', writers ? { writers } : {}]]) })
    const writer = generateIdentity().publicKey
    openDataDir(dir, committee).release() // an older meta without a policy
    writeFileSync(join(dir, 'data.mdb'), 'a store')
    openDataDir(dir, committee, policy(false, [writer])).release()
    expect(JSON.parse(readFileSync(join(dir, META_FILE), 'utf8')).policy).toBe(policy(false, [writer]))
    openDataDir(dir, committee, policy(false, [writer])).release()
    const admins = policyFingerprint({ openSpaces: false, spaces: new Map([['bank', { writers: [writer], admins: [writer] }]]) })
    const creators = policyFingerprint({ openSpaces: false, spaces: new Map([['bank', { writers: [writer] }]]), spaceCreators: [writer] })
    const quota = policyFingerprint({ openSpaces: false, spaces: new Map([['bank', { writers: [writer] }]]), spacesPerUser: 5 })
    for (const changed of [policy(true, [writer]), policy(false), policy(false, [generateIdentity().publicKey]), admins, creators, quota]) {
      expect(refusal(() => openDataDir(dir, committee, changed)).message).toMatch(/audited under other space policies.*not supported yet/)
    }
    // A file that names no admins, space creators nor space quota keeps the fingerprint it had before they existed.
    expect(policyFingerprint({ openSpaces: false, spaces: new Map([['bank', { writers: [writer], admins: [] }]]), spaceCreators: [] })).toBe(policy(false, [writer]))
  })

  it('gives a dir without a store to the cluster that opens it', () => {
    const dir = freshDir()
    openDataDir(dir, committee).release()
    const other = { f: 0, keys: [generateIdentity().publicKey] }
    openDataDir(dir, other).release()
    expect(JSON.parse(readFileSync(join(dir, META_FILE), 'utf8')).committee).toBe(committeeFingerprint(other))
    expect(committeeFingerprint(other)).toMatch(/^[0-9a-f]{64}$/)
    expect(toHex(other.keys[0] as Uint8Array)).toHaveLength(64)
  })
})

describe('data dir of a relay process', () => {
  let cluster: TestCluster | undefined
  afterAll(async () => {
    await cluster?.stopAll()
    if (cluster) rmSync(cluster.dir, { recursive: true, force: true })
  })

  it('refuses a second stead-relay, is private, and survives kill -9', async () => {
    cluster = await TestCluster.create(1)
    const r = cluster.relays[0] as TestRelay
    cluster.start(0)
    await cluster.waitHealthy(0)
    const first = r.process?.pid as number

    const second = spawn(process.execPath, [resolve(import.meta.dirname, '../bin/stead-relay.mjs'), 'start', '--config', cluster.clusterPath, '--id', r.id, '--data', r.data], { stdio: ['ignore', 'pipe', 'pipe'] })
    let stderr = ''
    second.stderr.on('data', (d: Buffer) => (stderr += d.toString()))
    const [code] = (await once(second, 'exit')) as [number | null]
    expect(code).toBe(2)
    expect(stderr.trim()).toMatch(new RegExp(`^stead-relay: data dir ${r.data} is in use by another stead-relay \\(pid ${first}, started [^)]+\\); stop it first, or point --data elsewhere$`))

    expect(mode(r.data)).toBe(0o700)
    for (const f of ['data.mdb', 'lock.mdb', 'key.json', LOCK_FILE, META_FILE]) expect([f, mode(join(r.data, f))]).toEqual([f, 0o600])

    const killed = r.process
    cluster.kill(0)
    if (killed && killed.exitCode === null && killed.signalCode === null) await once(killed, 'exit')
    expect(JSON.parse(readFileSync(join(r.data, LOCK_FILE), 'utf8')).pid).toBe(first)
    cluster.start(0)
    await cluster.waitHealthy(0)
    expect(JSON.parse(readFileSync(join(r.data, LOCK_FILE), 'utf8')).pid).toBe(r.process?.pid)

    // A clean stop releases the lock.
    await cluster.stopAll()
    expect(existsSync(join(r.data, LOCK_FILE))).toBe(false)
  }, 120_000)
})
