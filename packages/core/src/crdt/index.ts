import { SteadError } from '../errors.ts'
import { boundedCounterType, type BoundedCounter, type BoundedCounterDeclaration, type BoundedCounterOp } from './bounded-counter.ts'
import { counterType, type CounterDeclaration, type CounterOp, type PNCounter } from './counter.ts'
import { registerType, type LWWRegister, type RegisterDeclaration, type RegisterOp } from './register.ts'
import { setType, type ORSet, type SetDeclaration, type SetOp } from './set.ts'
import { listType, type CollabList, type ListDeclaration, type ListOp } from './list.ts'
import { mapType, type CollabMap, type MapDeclaration, type MapOp } from './map.ts'
import { textType, type CollabText, type TextDeclaration, type TextOp } from './text.ts'
import { policyType, type PolicyDeclaration, type PolicyOp, type SpacePolicy } from './policy.ts'
import { deletionType, type Deletion, type DeletionDeclaration, type DeletionOp } from './deletion.ts'
import type { Crdt, ObjectType } from './types.ts'
import type { ValuePatch } from './value-patch.ts'

export * from './types.ts'
export * from './counter.ts'
export * from './set.ts'
export * from './register.ts'
export * from './bounded-counter.ts'
export * from './text.ts'
export * from './marks.ts'
export * from './map.ts'
export * from './list.ts'
export * from './policy.ts'
export * from './deletion.ts'
export { validateRelativePosition, type Assoc, type RelativePosition } from './position.ts'
export * from './value-patch.ts'

/**
 * What an object is: its type and declared invariants. The first committed
 * declaration of a key fixes it for every replica; updates that declare the
 * key differently are rejected with 'type-mismatch', so a client cannot
 * weaken an invariant by declaring it its own way.
 */
export type Declaration = CounterDeclaration | SetDeclaration | RegisterDeclaration | BoundedCounterDeclaration | TextDeclaration | MapDeclaration | ListDeclaration | PolicyDeclaration | DeletionDeclaration

/** An operation of any object type (which one is known from the declaration it comes with). */
export type AnyOp = CounterOp | SetOp | RegisterOp | BoundedCounterOp | TextOp | MapOp | ListOp | PolicyOp | DeletionOp
/** A CRDT of any object type; narrow on `type`. */
export type AnyCrdt = PNCounter | ORSet | LWWRegister | BoundedCounter | CollabText | CollabMap | CollabList | SpacePolicy | Deletion

/** A declaration's compact wire form, `[code, ...params]`: ['c', min, max] | ['s', maxSize] | ['r'] | ['b', 'min'|'max', bound, initial] | ['t', maxLength] | ['m', maxKeys] | ['l', maxLength] | ['p']. */
export type EncodedDeclaration = readonly unknown[]

type AnyType = ObjectType<Declaration, AnyCrdt>

/** The registry: every object type, one module each. Adding a type is adding its module here. */
const TYPES: readonly AnyType[] = [counterType, setType, registerType, boundedCounterType, textType, mapType, listType, policyType, deletionType] as unknown as AnyType[]
const byName = new Map(TYPES.map((t) => [t.name, t]))
const byCode = new Map(TYPES.map((t) => [t.code, t]))

function typeOf(d: Declaration): AnyType {
  const t = byName.get(d.type)
  if (!t) throw new SteadError('malformed', `unknown object type ${JSON.stringify(d.type)}`)
  return t
}

/** The compact wire form of a declaration (see {@link EncodedDeclaration}). */
export function encodeDeclaration(d: Declaration): EncodedDeclaration {
  return typeOf(d).encode(d)
}

/** Parses and validates a declaration from the wire; throws SteadError('malformed'). */
export function decodeDeclaration(enc: unknown): Declaration {
  if (!Array.isArray(enc)) throw new SteadError('malformed', 'declaration must be an array')
  const t = typeof enc[0] === 'string' ? byCode.get(enc[0]) : undefined
  if (!t) throw new SteadError('malformed', `unknown object type ${JSON.stringify(enc[0])}`)
  return t.decode(enc, checkDeclaration)
}

/** Whether two declarations are the same type with the same invariants (what opening a key twice requires). */
export function sameDeclaration(a: Declaration, b: Declaration): boolean {
  // Wire forms hold numbers, strings, null and arrays of them (a map schema): JSON compares them exactly.
  return JSON.stringify(encodeDeclaration(a)) === JSON.stringify(encodeDeclaration(b))
}

/** A declaration in a few characters for error messages: its wire form as JSON. */
export function describeDeclaration(d: Declaration): string {
  return JSON.stringify(encodeDeclaration(d))
}

/** Validates an op from the wire against its declared type; null when fine. */
export function validateOp(d: Declaration, op: unknown): string | null {
  return typeOf(d).validateOp(op, checkDeclaration)
}

/** Checks a declaration nested in another (a map schema's): system objects (onlyAt) cannot nest. */
function checkDeclaration(enc: unknown): string | null {
  try {
    const d = decodeDeclaration(enc)
    const t = typeOf(d)
    if (t.deletes) return 'a deletion deletes a key of the space, never something inside another object'
    return t.onlyAt === undefined ? null : `a ${d.type} lives only at ${t.onlyAt}, never inside another object`
  } catch (err) {
    return err instanceof SteadError ? err.message : String(err)
  }
}

/**
 * A fresh, empty CRDT of the declared type and invariants.
 *
 * @throws RangeError for invariants the type does not allow (e.g. a counter `min` above 0).
 */
export function createCrdt(d: Declaration): AnyCrdt {
  return typeOf(d).create(d)
}

/** Rebuilds a CRDT from its `snapshot()` (trusted input: a replica's own checkpoint). */
export function restoreCrdt(d: Declaration, snap: unknown): AnyCrdt {
  return typeOf(d).restore(d, snap)
}

/** The CRDTs share one interface; this view lets generic code call it without a type switch. */
export function asGeneric(c: AnyCrdt): Crdt<AnyOp, unknown> {
  return c as unknown as Crdt<AnyOp, unknown>
}

/** Compacts one object's regular operations before they are signed, as its type says (counters sum, registers keep the last write). */
export function compactOps(d: Declaration, ops: readonly AnyOp[]): AnyOp[] {
  const t = typeOf(d)
  return t.compact ? (t.compact(ops) as AnyOp[]) : [...ops]
}

/**
 * An op of `d`'s type with the draft tags it names renamed (see
 * ObjectType.rename); ops of types that name no elements come back as they are.
 */
export function renameOp(d: Declaration, op: AnyOp, rename: (tag: string) => { tag: string; shift: number } | undefined): AnyOp {
  const t = typeOf(d)
  return t.rename ? (t.rename(op, rename) as AnyOp) : op
}

/** Whether ops of `d`'s type name elements that other ops made (text, list): their drafts' names need renaming when signed. */
export function namesElements(d: Declaration): boolean {
  return typeOf(d).rename !== undefined
}

/** How many elements an op of `d`'s type makes (see ObjectType.runLength). */
export function runLength(d: Declaration, op: AnyOp): number {
  return typeOf(d).runLength?.(op) ?? 0
}

/** `prev` and `next` as one op when `next` continues `prev`'s run (see ObjectType.joinRun), else undefined. */
export function joinRun(d: Declaration, prev: AnyOp, lastId: string, next: AnyOp): AnyOp | undefined {
  return typeOf(d).joinRun?.(prev, lastId, next) as AnyOp | undefined
}

/**
 * What the state hash holds for an object of `d`'s type: its snapshot, or
 * for types that keep a digest (see ObjectType.digest) that digest.
 */
export function leafPayload(d: Declaration, crdt: AnyCrdt, sha256: (bytes: Uint8Array) => Uint8Array): unknown {
  const t = typeOf(d)
  return t.digest ? t.digest(crdt, sha256) : crdt.snapshot()
}

/** `leafPayload` computed from a declaration and a snapshot in their wire forms, as a verifier has them (untrusted: a bad declaration leaves the snapshot as it is). */
export function leafPayloadOfSnapshot(declaration: unknown, snap: unknown, sha256: (bytes: Uint8Array) => Uint8Array): unknown {
  let t: AnyType
  try {
    t = typeOf(decodeDeclaration(declaration))
  } catch {
    return snap
  }
  return t.digestSnapshot ? t.digestSnapshot(snap, sha256) : snap
}

/** Whether a declaration has invariants a prospective view must respect (an escrow counter respects its own through rights). */
export function hasInvariants(d: Declaration): boolean {
  return typeOf(d).hasInvariants(d)
}

/** Whether objects of type `d` keep their history as patches (see historyPatch). */
export function patchesHistory(d: Declaration): boolean {
  return typeOf(d).historyPatch !== undefined
}

/** What an object's stable history holds for its state: its value, or what its type keeps instead (see ObjectType.historyValue). */
export function historyValue(d: Declaration, crdt: AnyCrdt): unknown {
  const t = typeOf(d)
  return t.historyValue ? t.historyValue(crdt) : crdt.value()
}

/** The patch from one stable value of an object of type `d` to a later one, for types whose values grow long; undefined for the others (their history keeps whole values) and where no patch fits. */
export function historyPatch(d: Declaration, before: unknown, after: unknown): ValuePatch | undefined {
  return typeOf(d).historyPatch?.(before, after)
}

/**
 * What is wrong with an update of `key` declared `d` carrying `op` (`safe`:
 * as a safe update), beyond the op itself, or null: a system object lives
 * only at its key, its key holds nothing else, and ops the stable order must
 * decide travel as safe updates.
 */
export function placementProblem(key: string, d: Declaration, op: AnyOp, safe: boolean): string | null {
  const t = typeOf(d)
  if (t.onlyAt !== undefined && key !== t.onlyAt) return `a ${d.type} lives only at ${t.onlyAt}, not at ${key}`
  const owner = systemTypeAt(key)
  if (owner && owner !== t) return `${key} holds the space's ${owner.name}, not a ${d.type}`
  if (!safe && t.mustBeSafe?.(op)) return `this ${d.type} op must be a safe update (only the stable order may decide it)`
  return null
}

function systemTypeAt(key: string): AnyType | undefined {
  for (const t of TYPES) if (t.onlyAt === key) return t
  return undefined
}

/** The replica whose own state `op` disposes of, if any (see ObjectType.disposesOf). */
export function disposesOf(d: Declaration, op: unknown): string | undefined {
  return typeOf(d).disposesOf?.(op)
}

/** Whether `d` declares the deletion of whatever its key holds (see deletion.ts). */
export function isDeletion(d: Declaration): boolean {
  return typeOf(d).deletes === true
}

/** Whether ops of `d`'s type do not commute, so only the stable order says what its state is (see ObjectType.ordered). */
export function isOrdered(d: Declaration): boolean {
  return typeOf(d).ordered === true
}
