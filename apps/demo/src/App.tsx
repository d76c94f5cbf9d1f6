import { ClusterPanel } from './components/ClusterPanel.tsx'
import { Notes } from './components/Notes.tsx'
import { OperationsLog } from './components/OperationsLog.tsx'
import { Poll } from './components/Poll.tsx'
import { SharedList } from './components/SharedList.tsx'
import { StatusBar } from './components/StatusBar.tsx'
import { Treasury } from './components/Treasury.tsx'

export function App() {
  return (
    <div className="app" data-testid="app">
      <StatusBar />
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
    </div>
  )
}
