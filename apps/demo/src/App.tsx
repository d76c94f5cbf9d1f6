import { useEffect, useState } from 'react'
import { ClusterPanel } from './components/ClusterPanel.tsx'
import { CodeNotes } from './components/CodeNotes.tsx'
import { Notes } from './components/Notes.tsx'
import { OperationsLog } from './components/OperationsLog.tsx'
import { Poll } from './components/Poll.tsx'
import { RichNotes } from './components/RichNotes.tsx'
import { SharedList } from './components/SharedList.tsx'
import { StatusBar } from './components/StatusBar.tsx'
import { Team } from './components/Team.tsx'
import { Treasury } from './components/Treasury.tsx'

type Page = 'treasury' | 'notes' | 'team'

/** The page the URL's hash names (`#notes`, `#team`, an invitation's `#join=…`), the treasury otherwise: a link or a reload keeps it. */
function pageOf(hash: string): Page {
  if (hash === '#team' || hash.startsWith('#join=')) return 'team'
  return hash === '#notes' ? 'notes' : 'treasury'
}

export function App() {
  const [page, setPage] = useState<Page>(() => pageOf(window.location.hash))
  useEffect(() => {
    const follow = () => setPage(pageOf(window.location.hash))
    window.addEventListener('hashchange', follow)
    return () => window.removeEventListener('hashchange', follow)
  }, [])
  return (
    <div className="app" data-testid="app">
      <StatusBar />
      <nav className="pages">
        <a href="#treasury" data-testid="page-treasury" aria-current={page === 'treasury' ? 'page' : undefined}>
          Treasury
        </a>
        <a href="#notes" data-testid="page-notes" aria-current={page === 'notes' ? 'page' : undefined}>
          Notes
        </a>
        <a href="#team" data-testid="page-team" aria-current={page === 'team' ? 'page' : undefined}>
          Team
        </a>
      </nav>
      {page === 'team' ? (
        <main className="single">
          <Team />
        </main>
      ) : page === 'notes' ? (
        <main className="single">
          <RichNotes />
          <CodeNotes />
        </main>
      ) : (
        <main>
          <div className="column wide">
            <Treasury />
            <OperationsLog />
          </div>
          <div className="column">
            <ClusterPanel />
            <Poll />
            <SharedList />
            <Notes />
          </div>
        </main>
      )}
    </div>
  )
}
