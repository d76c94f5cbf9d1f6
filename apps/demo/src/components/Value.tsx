/** A number with its caption, e.g. a prospective or a stable balance. */
export function Value({ label, value, testId, kind }: { label: string; value: number | string; testId: string; kind: 'prospective' | 'stable' }) {
  return (
    <div className={`value value-${kind}`}>
      <span className="value-label">{label}</span>
      <span className="value-number" data-testid={testId}>
        {value}
      </span>
    </div>
  )
}
