/**
 * `Promise.withResolvers` (ES2024) for Node 20: libp2p 3 and its streams call
 * it at run time. Call {@link installPromiseWithResolvers} before loading
 * anything from libp2p.
 */
interface Resolvers<T> {
  promise: Promise<T>
  resolve: (value: T | PromiseLike<T>) => void
  reject: (reason?: unknown) => void
}

/** Adds `Promise.withResolvers` where the runtime lacks it (Node 20); a no-op elsewhere. */
export function installPromiseWithResolvers(): void {
  const P = Promise as PromiseConstructor & { withResolvers?: <T>() => Resolvers<T> }
  if (typeof P.withResolvers === 'function') return
  Object.defineProperty(Promise, 'withResolvers', {
    configurable: true,
    writable: true,
    enumerable: false,
    value: function withResolvers<T>(this: PromiseConstructor): Resolvers<T> {
      let resolve!: Resolvers<T>['resolve']
      let reject!: Resolvers<T>['reject']
      // Honour subclasses, as the spec does (`this` is the constructor).
      const Ctor = typeof this === 'function' ? this : Promise
      const promise = new Ctor<T>((res, rej) => {
        resolve = res
        reject = rej
      })
      return { promise, resolve, reject }
    },
  })
}
