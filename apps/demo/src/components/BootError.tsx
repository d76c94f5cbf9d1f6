import { Component, type ReactNode } from 'react'

/** Shows why the client could not start (e.g. storage unavailable) instead of a blank page. */
export class BootError extends Component<{ children: ReactNode }, { error: Error | null }> {
  override state = { error: null as Error | null }

  static getDerivedStateFromError(error: Error) {
    return { error }
  }

  override render() {
    if (!this.state.error) return this.props.children
    return (
      <div className="boot" data-testid="boot-error">
        <h1>The Stead demo could not start</h1>
        <pre>{this.state.error.message}</pre>
      </div>
    )
  }
}
