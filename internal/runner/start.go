package runner

import (
	"context"

	"github.com/studioctl/studioctl/internal/jobs"
)

// StartRecorder is what a Recorder may also do (jobstore.Store does):
// write a run's row before its task starts, and return once it is
// committed.
type StartRecorder interface {
	RecordStart(ctx context.Context, r jobs.Run) error
}

// recordStart writes run's row before its task starts, when the runner
// keeps durable starts (Options.DurableStarts): a replica killed while
// the task runs, or before the store's next flush, then leaves the row
// behind, and housekeeping marks it interrupted. The wait is bounded by
// lockStatementTimeout: a run whose row is not written by then (the
// database does not answer) starts anyway, and the store writes the row
// as soon as the database answers (it logs the failing stretch once).
func (r *Runner) recordStart(js *jobState, run jobs.Run) {
	if !r.o.DurableStarts {
		return
	}
	sr, ok := r.o.Store.(StartRecorder)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.runsCtx, lockStatementTimeout)
	err := sr.RecordStart(ctx, run)
	cancel()
	if err != nil && r.runsCtx.Err() == nil { // the store logs a failing stretch once

		r.log.Debug("runner: a run starts before its row is written", "job_id", js.job.ID, "run_seq", run.Seq, "error", err)
	}
}
