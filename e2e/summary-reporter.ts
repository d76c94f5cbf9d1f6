import type { FullResult, Reporter, TestCase, TestResult } from '@playwright/test/reporter'

/** Ends the run with one plain line, `e2e: N passed, N failed, N skipped`, that CI logs can be read by. */
export default class SummaryReporter implements Reporter {
  private passed = 0
  private failed = 0
  private skipped = 0

  onTestEnd(test: TestCase, result: TestResult): void {
    if (result.retry < test.retries && result.status !== 'passed' && result.status !== 'skipped') return
    if (result.status === 'passed') this.passed++
    else if (result.status === 'skipped') this.skipped++
    else this.failed++
  }

  onEnd(result: FullResult): void {
    if (result.status === 'interrupted' || result.status === 'timedout') this.failed = Math.max(this.failed, 1)
    process.stdout.write(`\ne2e: ${this.passed} passed, ${this.failed} failed, ${this.skipped} skipped\n`)
  }

  printsToStdio(): boolean {
    return false
  }
}
