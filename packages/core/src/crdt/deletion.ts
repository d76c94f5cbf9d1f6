import { SteadError } from '../errors.ts'
import { OK, type ApplyResult, type Crdt, type ObjectType } from './types.ts'

/**
 * Deleting an object is a safe update of its key declared `{ type:
 * 'deletion' }` with the op `['x']`, whatever the object's type: where
 * the stable order puts it, the object's state goes (its key holds
 * nothing, and drops out of the state hash), its history records `null`
 * there, and an update ordered after it starts the key afresh, under any
 * declaration. Who may write the space may delete in it. A prospective
 * deletion shows the key empty at once; it is ordered (only the stable
 * order says which updates came before it), and never undone by undo.
 */
export interface DeletionDeclaration {
  /** A deletion of whatever its key holds. */
  readonly type: 'deletion'
}

/** The one deletion op. */
export type DeletionOp = readonly ['x']

/**
 * What a key holds between a deletion and the next update, in a replica's
 * prospective state: nothing, with a place in it (so that an update after
 * the deletion starts afresh instead of from the stable object).
 */
export class Deletion implements Crdt<DeletionOp, undefined> {
  readonly type = 'deletion' as const

  value(): undefined {
    return undefined
  }

  tryApply(): ApplyResult {
    return OK
  }

  apply(): void {}

  inverse(): DeletionOp {
    return ['x']
  }

  merge(): void {}

  clone(): this {
    return new Deletion() as this
  }

  snapshot(): null {
    return null
  }

  invariantsHold(): boolean {
    return true
  }
}

/** The deletion in the registry; wire form `['x']`. */
export const deletionType: ObjectType<DeletionDeclaration, Deletion> = {
  name: 'deletion',
  code: 'x',
  encode: () => ['x'],
  decode(enc) {
    if (enc.length !== 1) throw new SteadError('malformed', 'a deletion declaration is [x]')
    return { type: 'deletion' }
  },
  validateOp: (op) => (Array.isArray(op) && op.length === 1 && op[0] === 'x' ? null : "a deletion op is ['x']"),
  create: () => new Deletion(),
  restore: () => new Deletion(),
  hasInvariants: () => false,
  ordered: true,
  deletes: true,
  mustBeSafe: () => true,
}
