import { useState, type FormEvent } from 'react'
import { useSet } from '@stead/react'
import { LIST_KEY } from '../accounts.ts'
import { useDemo } from '../demo-context.ts'

/** A shared to-do list: an OR-Set of strings (a concurrent add wins over a remove it did not see). */
export function SharedList() {
  const { values, stable, handle } = useSet<string>(LIST_KEY)
  const { log } = useDemo()
  const [text, setText] = useState('')
  const items = [...values].sort()

  const add = (e: FormEvent) => {
    e.preventDefault()
    const item = text.trim()
    if (!item) return
    void log.track(`add "${item}"`, false, () => handle.add(item))
    setText('')
  }

  return (
    <section className="panel list" data-testid="shared-list">
      <h2>Shared list</h2>
      <form className="row" onSubmit={add}>
        <input aria-label="new item" data-testid="list-input" placeholder="Book the venue" value={text} onChange={(e) => setText(e.target.value)} />
        <button data-testid="list-add" type="submit">
          Add
        </button>
      </form>
      <ul className="items">
        {items.map((item) => {
          const isStable = stable.includes(item)
          return (
            <li key={item} data-testid="list-item" data-value={item} data-stable={isStable}>
              <span>{item}</span>
              {isStable ? null : <span className="hint">not yet stable</span>}
              <button className="link" aria-label={`remove ${item}`} onClick={() => void log.track(`remove "${item}"`, false, () => handle.delete(item))}>
                ×
              </button>
            </li>
          )
        })}
      </ul>
    </section>
  )
}
