import { createHash } from 'node:crypto'
import { chmodSync, closeSync, existsSync, linkSync, mkdirSync, openSync, readdirSync, lstatSync, readFileSync, realpathSync, renameSync, statSync, unlinkSync, writeFileSync } from 'node:fs'
import { hostname } from 'node:os'
import { join } from 'node:path'
import { ConfigError, fileProblem } from './config.ts'

/** The layout of the LMDB store this stead-relay writes and reads (2: blocks of the uncertified DAG, no votes or certificates; 4: state hashes over Merkle trees of objects and authors; 5: histories of texts, lists and maps as patches between whole values, and lists and texts audited against maxLength before an edit applies). */
export const STORE_FORMAT = 5

/** Names of the files a data dir holds besides the key and the LMDB store. */
export const LOCK_FILE = 'stead-relay.lock'
export const META_FILE = 'stead-store.json'

/** What the lock file holds: who has the data dir. */
export interface LockOwner {
  readonly pid: number
  readonly hostname: string
  /** ISO time the owner took the lock. */
  readonly startedAt: string
  /** Linux: the owner's start time in clock ticks since boot (/proc/<pid>/stat), which tells a reused pid apart. */
  readonly procStart?: string
}

export interface DataDir {
  readonly dir: string
  /** Removes the lock; idempotent. */
  release(): void
}

/** Data dirs this process holds, so a second open in the same process is refused too. */
const held = new Set<string>()

/** sha256 (hex) of the committee a store was written under: f and the relay keys in cluster-file order. */
export function committeeFingerprint(committee: { readonly f: number; readonly keys: readonly Uint8Array[] }): string {
  const h = createHash('sha256').update('stead/committee/v1\0')
  const n = Buffer.alloc(8)
  n.writeUInt32BE(committee.f, 0)
  n.writeUInt32BE(committee.keys.length, 4)
  h.update(n)
  for (const k of committee.keys) h.update(k)
  return h.digest('hex')
}

/**
 * Prepares a relay's data dir before its store opens: mode 0700 for the dir and
 * 0600 for its files, an exclusive lock (a second process is refused), and the
 * store's format and cluster fingerprint, recorded on first use and checked
 * afterwards. Throws ConfigError when the dir cannot be used; call `release()`
 * once the store is closed.
 */
export function openDataDir(dir: string, committee: { readonly f: number; readonly keys: readonly Uint8Array[] }, policy?: string): DataDir {
  return explainingFsErrors(dir, () => openChecked(dir, committee, policy))
}

/** A file-system error while preparing a data dir (not a dir, permission denied, read-only) as a ConfigError naming the dir. */
function explainingFsErrors<T>(dir: string, open: () => T): T {
  try {
    return open()
  } catch (err) {
    if (err instanceof ConfigError) throw err
    const code = (err as NodeJS.ErrnoException | null)?.code
    const fix = 'point --data at a directory this user can write (it is created if missing)'
    const problem =
      code === 'EEXIST' || code === 'ENOTDIR'
        ? `data dir ${dir} cannot be a directory: it or a part of its path is a file; ${fix}`
        : code === 'ENOENT'
          ? undefined
          : fileProblem(err, 'data dir', dir, fix)
    throw problem ? new ConfigError(problem) : err
  }
}

/**
 * Who holds a data dir's lock now: a stead-relay that is running (on this
 * host, or on another one sharing the dir), or undefined if nobody does (no
 * lock file, or a stale one).
 */
export function lockHolder(dir: string): LockOwner | undefined {
  let real: string
  try {
    real = realpathSync(dir)
  } catch {
    return undefined // no dir, no lock
  }
  let other: LockOwner
  try {
    other = JSON.parse(readFileSync(join(real, LOCK_FILE), 'utf8')) as LockOwner
  } catch {
    return undefined
  }
  if (!Number.isSafeInteger(other.pid) || typeof other.hostname !== 'string') return undefined
  if (other.hostname !== hostname()) return other
  return ownerAlive(other, real) ? other : undefined
}

/** "pid 123, started …", or with the host when it is another one. */
export function describeLockOwner(o: LockOwner): string {
  return describe(o)
}

function openChecked(dir: string, committee: { readonly f: number; readonly keys: readonly Uint8Array[] }, policy?: string): DataDir {
  mkdirSync(dir, { recursive: true, mode: 0o700 })
  chmodSync(dir, 0o700)
  const real = realpathSync(dir)
  const lockPath = join(real, LOCK_FILE)
  const mine = acquire(dir, real, lockPath)
  let released = false
  const handle: DataDir = {
    dir,
    release() {
      if (released) return
      released = true
      held.delete(real)
      try {
        // Only our own lock: never remove one another process took over.
        if (readFileSync(lockPath, 'utf8') === mine) unlinkSync(lockPath)
      } catch {
        // already gone
      }
    },
  }
  try {
    checkMeta(dir, real, committeeFingerprint(committee), policy)
    for (const name of readdirSync(real)) {
      const path = join(real, name)
      const st = lstatSync(path)
      if (st.isFile() && (st.mode & 0o777) !== 0o600) chmodSync(path, 0o600)
    }
    // LMDB creates its files with 0644 under the usual umask and keeps the mode of existing ones;
    // an empty data.mdb is a new environment to it.
    for (const name of ['data.mdb', 'lock.mdb']) closeSync(openSync(join(real, name), 'a', 0o600))
  } catch (err) {
    handle.release()
    throw err
  }
  return handle
}

function procStart(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19]
  } catch {
    return undefined
  }
}

function describe(o: LockOwner): string {
  return `pid ${o.pid}${o.hostname === hostname() ? '' : ` on host ${o.hostname}`}, started ${o.startedAt}`
}

/** Whether the owner named by a lock file may still be running (then the lock stands). */
function ownerAlive(o: LockOwner, real: string): boolean {
  if (o.pid === process.pid) return held.has(real) // else a previous run with our pid (a container restart)
  const start = procStart(o.pid)
  if (o.procStart !== undefined && start !== undefined && start !== o.procStart) return false // the pid was reused
  try {
    process.kill(o.pid, 0)
    return true
  } catch (err) {
    return (err as NodeJS.ErrnoException).code !== 'ESRCH'
  }
}

function acquire(dir: string, real: string, lockPath: string): string {
  const owner: LockOwner = { pid: process.pid, hostname: hostname(), startedAt: new Date().toISOString(), ...(procStart(process.pid) ? { procStart: procStart(process.pid) as string } : {}) }
  const text = JSON.stringify(owner) + '\n'
  // Written aside, then linked into place: the lock file appears whole or not at all.
  const tmp = `${lockPath}.${process.pid}.tmp`
  writeFileSync(tmp, text, { mode: 0o600 })
  try {
    for (let attempt = 0; attempt < 3; attempt++) {
      try {
        linkSync(tmp, lockPath)
        held.add(real)
        return text
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err
      }
      let current: string
      try {
        current = readFileSync(lockPath, 'utf8')
      } catch {
        continue // released meanwhile
      }
      let other: LockOwner
      try {
        other = JSON.parse(current) as LockOwner
        if (!Number.isSafeInteger(other.pid) || typeof other.hostname !== 'string') throw new Error('no pid')
      } catch {
        throw new ConfigError(`data dir ${dir} has a lock file ${lockPath} that is not stead-relay's; if no stead-relay uses this dir, remove it`)
      }
      if (other.hostname !== hostname()) {
        throw new ConfigError(`data dir ${dir} is in use by a stead-relay on host ${other.hostname} (${describe(other)}); stop it first, or if it is not running remove ${lockPath}`)
      }
      if (ownerAlive(other, real)) {
        throw new ConfigError(`data dir ${dir} is in use by another stead-relay (${describe(other)}); stop it first, or point --data elsewhere`)
      }
      // Stale: its owner died without releasing it (kill -9, power loss). Take it over unless it changed meanwhile.
      try {
        if (readFileSync(lockPath, 'utf8') === current) unlinkSync(lockPath)
      } catch {
        // gone already
      }
    }
    throw new ConfigError(`data dir ${dir}: could not take its lock ${lockPath} (another stead-relay is starting on it?)`)
  } finally {
    try {
      unlinkSync(tmp)
    } catch {
      // not there
    }
  }
}

/**
 * The part of a cluster file the audit depends on, as a fingerprint: which
 * spaces exist, who may write them, who may create their policies and
 * spaces at runtime, how many live spaces a user may hold. The stable
 * state a store holds was audited under it, and a restart re-audits the
 * history, so a relay whose file changed it would diverge from its own
 * attestations and its peers. Admins, space creators and a space quota
 * count only when a file sets them: a file without them keeps the
 * fingerprint it had before they existed.
 */
export function policyFingerprint(c: {
  readonly openSpaces: boolean
  readonly spaces: ReadonlyMap<string, { readonly writers?: readonly Uint8Array[]; readonly admins?: readonly Uint8Array[] }>
  readonly spaceCreators?: readonly Uint8Array[]
  readonly spacesPerUser?: number
}): string {
  const hexes = (keys: readonly Uint8Array[]): string => [...keys].map((w) => Buffer.from(w).toString('hex')).sort().join(',')
  const h = createHash('sha256').update(`stead/policy/v1\0${c.openSpaces ? 'open' : 'closed'}\0`)
  for (const name of [...c.spaces.keys()].sort()) {
    h.update(`${name}\0`)
    const { writers, admins } = c.spaces.get(name) ?? {}
    h.update(writers ? hexes(writers) : '*')
    if (admins?.length) h.update(`\0admins:${hexes(admins)}`)
    h.update('\0')
  }
  if (c.spaceCreators?.length) h.update(`creators:${hexes(c.spaceCreators)}\0`)
  if (c.spacesPerUser !== undefined) h.update(`spaces-per-user:${c.spacesPerUser}\0`)
  return h.digest('hex')
}

function checkMeta(dir: string, real: string, fingerprint: string, policy: string | undefined): void {
  const metaPath = join(real, META_FILE)
  const dataPath = join(real, 'data.mdb')
  const hasStore = existsSync(dataPath) && statSync(dataPath).size > 0
  if (!hasStore || !existsSync(metaPath)) {
    if (hasStore) {
      throw new ConfigError(
        `data dir ${dir} holds a store written by an older stead-relay (it has data.mdb but no ${META_FILE}), which this one cannot check or read; start with an empty data dir (remove data.mdb and lock.mdb, keep key.json; stead-relay dev: --fresh)`,
      )
    }
    // No store yet: this cluster and this format own the dir from now on.
    const tmp = `${metaPath}.tmp`
    writeFileSync(tmp, JSON.stringify({ format: STORE_FORMAT, committee: fingerprint, ...(policy ? { policy } : {}) }, null, 2) + '\n', { mode: 0o600 })
    renameSync(tmp, metaPath)
    return
  }
  let meta: { format?: unknown; committee?: unknown; policy?: unknown }
  try {
    meta = JSON.parse(readFileSync(metaPath, 'utf8')) as typeof meta
  } catch (err) {
    throw new ConfigError(`cannot read ${metaPath}: ${(err as Error).message}`)
  }
  if (meta.format !== STORE_FORMAT) {
    throw new ConfigError(`data dir ${dir} was written by store format ${String(meta.format)}, this stead-relay reads format ${STORE_FORMAT}; use a stead-relay of that version, or start with an empty data dir (stead-relay dev: --fresh)`)
  }
  if (meta.committee !== fingerprint) {
    throw new ConfigError(
      `data dir ${dir} belongs to another cluster (fingerprint ${String(meta.committee).slice(0, 12)}), the cluster file gives ${fingerprint.slice(0, 12)}; use the data dir of this cluster or an empty one`,
    )
  }
  if (policy !== undefined && meta.policy !== undefined && meta.policy !== policy) {
    throw new ConfigError(
      `data dir ${dir} was audited under other space policies (openSpaces, spaceCreators, spacesPerUser, or a space's writers or admins differ from the cluster file's); the stable state would no longer match what the cluster attested. Changing the cluster file's policies under a running cluster's data is not supported yet (spaces change who may write and read them at runtime through their own policy: client.createSpace, space.members): restore the previous cluster file, or start every relay with an empty data dir`,
    )
  }
  if (policy !== undefined && meta.policy === undefined) {
    const tmp = `${metaPath}.tmp`
    writeFileSync(tmp, JSON.stringify({ ...meta, policy }, null, 2) + '\n', { mode: 0o600 })
    renameSync(tmp, metaPath)
  }
}
