import { useEffect, useState, type FormEvent } from 'react'
import type { Space, SteadClient } from '@stead/client'
import { SteadProvider, useMembers, useSet, useStatus } from '@stead/react'
import { useDemo } from '../demo-context.ts'
import { messageOf } from '../operations.ts'

/** The team space this page last created or joined, so a reload shows it again. */
const remembered = (database: string) => `stead-demo-team:${database}`

/** Joins once per token, whatever React renders twice (StrictMode). */
const joining = new Map<string, Promise<Space>>()

/** The invitation token a `#join=` link carries, if the page was opened from one. */
function tokenOf(hash: string): string | undefined {
  return hash.startsWith('#join=') ? decodeURIComponent(hash.slice('#join='.length)) : undefined
}

/**
 * A team space with members at runtime (issue 46): create one (you are its
 * admin), invite someone with a link (a single-use invitation), see who is
 * in, take someone out. A page opened from the link joins the space and can
 * write to its board until it is taken out; then its writes are refused and
 * it says why. The admin may delete the space: it empties everywhere and
 * takes no more writes.
 */
export function Team() {
  const { client, config } = useDemo()
  const [space, setSpace] = useState<Space>()
  const [problem, setProblem] = useState<string>()

  useEffect(() => {
    const token = tokenOf(window.location.hash)
    const name = localStorage.getItem(remembered(config.database))
    let open: Promise<Space> | undefined
    if (token) {
      open = joining.get(token) ?? client.join(token)
      joining.set(token, open)
    } else if (name) {
      open = client.space(name)
    }
    if (!open) return
    let live = true
    open.then(
      (s) => {
        if (!live) return
        localStorage.setItem(remembered(config.database), s.space)
        setSpace(s)
      },
      (err: unknown) => live && setProblem(`could not join: ${messageOf(err)}`),
    )
    return () => {
      live = false
    }
  }, [client, config.database])

  const create = () => {
    setProblem(undefined)
    client.createSpace(`team-${Math.random().toString(36).slice(2, 10)}`).then(
      (s) => {
        localStorage.setItem(remembered(config.database), s.space)
        setSpace(s)
      },
      (err: unknown) => setProblem(messageOf(err)),
    )
  }

  return (
    <section className="panel team" data-testid="team">
      <h2>Team</h2>
      {space ? (
        <SteadProvider space={space}>
          <TeamSpace client={client} space={space} />
        </SteadProvider>
      ) : (
        <p className="row">
          <button data-testid="team-create" onClick={create}>
            Create a team space
          </button>
          <span className="muted">or open an invitation link</span>
        </p>
      )}
      {problem ? (
        <p className="problem" data-testid="team-problem">
          {problem}
        </p>
      ) : null}
    </section>
  )
}

function TeamSpace({ client, space }: { client: SteadClient; space: Space }) {
  const { value, myRole, revoke, invite, handle: members } = useMembers(space)
  const { values: board, handle } = useSet<string>('board')
  const status = useStatus()
  const [link, setLink] = useState<string>()
  const [refused, setRefused] = useState<string>()
  const [text, setText] = useState('')

  // Why a write of ours was refused (a member taken out of the space sees it here).
  useEffect(() => space.onError((err) => setRefused(`${err.reason}: ${err.message}`)), [space])

  const makeLink = () => {
    setLink(undefined)
    invite('writer').then(
      (token) => setLink(`${window.location.origin}${window.location.pathname}${window.location.search}#join=${encodeURIComponent(token)}`),
      (err: unknown) => setRefused(messageOf(err)),
    )
  }
  const deleteSpace = () => {
    if (!window.confirm(`Delete ${space.space} for everyone? Its board goes, and nobody can write to it again.`)) return
    setRefused(undefined)
    members.deleteSpace().then(
      (r) => r.status === 'rejected' && setRefused(`${r.reason}: ${r.detail}`),
      (err: unknown) => setRefused(messageOf(err)),
    )
  }
  const add = (e: FormEvent) => {
    e.preventDefault()
    const item = text.trim()
    if (!item) return
    setRefused(undefined)
    handle.add(item, { safe: true }).then(
      (r) => r.status === 'rejected' && setRefused(`${r.reason}: ${r.detail}`),
      (err: unknown) => setRefused(messageOf(err)),
    )
    setText('')
  }

  return (
    <div data-testid="team-space" data-space={space.space} data-role={myRole ?? ''}>
      <p className="muted">
        {space.space} · you are <strong data-testid="team-role">{myRole ?? 'not a member'}</strong> ({client.userId})
      </p>
      <ul className="items" data-testid="team-members">
        {Object.entries(value?.members ?? {}).map(([user, role]) => (
          <li key={user} data-testid="team-member" data-user={user} data-role={role}>
            <span>
              {user === client.userId ? 'you' : user} · {role}
            </span>
            {myRole === 'admin' && user !== client.userId ? (
              <button className="link" data-testid="team-revoke" aria-label={`take ${user} out`} onClick={() => void revoke(user)}>
                take out
              </button>
            ) : null}
          </li>
        ))}
      </ul>
      {value?.deleted ? (
        <p className="problem" data-testid="team-deleted">
          An admin deleted this space: it holds nothing, and takes no more writes.
        </p>
      ) : null}
      {myRole === 'admin' && !value?.deleted ? (
        <p className="row">
          <button data-testid="team-invite" onClick={makeLink}>
            Invite a writer
          </button>
          {link ? <input readOnly aria-label="invitation link" data-testid="team-link" value={link} onFocus={(e) => e.currentTarget.select()} /> : null}
          <button className="link" data-testid="team-delete" onClick={deleteSpace}>
            Delete the space
          </button>
        </p>
      ) : null}
      <form className="row" onSubmit={add}>
        <input aria-label="new board item" data-testid="team-input" placeholder="Ship it" value={text} onChange={(e) => setText(e.target.value)} />
        <button data-testid="team-add" type="submit">
          Add
        </button>
      </form>
      <ul className="items" data-testid="team-board">
        {[...board].sort().map((item) => (
          <li key={item} data-testid="team-item" data-value={item}>
            {item}
          </li>
        ))}
      </ul>
      {refused || status.problem ? (
        <p className="problem" data-testid="team-problem">
          {refused ?? status.problem}
        </p>
      ) : null}
    </div>
  )
}
