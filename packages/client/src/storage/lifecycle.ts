import { StorageError } from './errors.ts'

/**
 * Open/closed bookkeeping shared by the adapters: operations started before
 * `close()` finish (a resolved write stays durable), later ones fail with
 * `StorageError` `closed`, and the store is released once, after them all.
 */
export function lifecycle(what: string) {
  let closing: Promise<void> | undefined
  const inflight = new Set<Promise<unknown>>()
  return {
    run<T>(op: () => T | Promise<T>): Promise<T> {
      // async so that synchronous validation errors become rejections too
      const p = (async () => {
        if (closing) throw new StorageError('closed', `${what} is closed`)
        return await op()
      })()
      inflight.add(p)
      const settle = () => inflight.delete(p)
      p.then(settle, settle)
      return p
    },
    close(release: () => void | Promise<void>): Promise<void> {
      closing ??= (async () => {
        await Promise.allSettled([...inflight])
        await release()
      })()
      return closing
    },
  }
}
