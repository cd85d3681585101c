package host

import (
	"context"
	"sort"
	"time"

	"github.com/studioctl/studioctl/internal/jobstore"
)

// Backfill (docs/schedules.md, "Backfill"): a jobs backfill request is a
// studio_request row with one studio_backfill row per occurrence. The
// control-request claimer (requests.go) looks for pending occurrences of
// the jobs this replica hosts when a job.backfill signal arrives, at
// start, after a bus resync, and every backfillPollEvery (the runner
// gives a fire back when the lock is held or the live schedule comes
// first, and a replica that dies leaves the rest to the others), and
// hands each such job to the runner, which claims and runs the oldest
// occurrence under the job's lock (internal/runner/backfill.go).

// backfillPollEvery is how often the claimer looks for pending backfill
// occurrences without a signal: one indexed read per replica.
// backfillBusyEvery is how soon it looks again while one of its jobs has
// one pending (the runner gives a fire back to a live run or a held lock,
// and takes the next occurrence once they are done).
const (
	backfillPollEvery = 5 * time.Second
	backfillBusyEvery = 500 * time.Millisecond
)

// backfillJobs is the runner as the backfill side of the claimer sees it.
type backfillJobs interface {
	Backfill(id string) bool
}

// wantBackfill: look for pending backfill occurrences (a job.backfill
// signal, or the poll).
func (q *requests) wantBackfill() {
	q.mu.Lock()
	q.backfill = true
	q.mu.Unlock()
	q.wake()
}

// claimBackfills hands every hosted job with a pending backfill occurrence
// to the runner, and says whether there was one. The runner claims the
// occurrence itself, under the lock: a replica that is not given the job,
// or gives it back, claims nothing.
func (q *requests) claimBackfills(ctx context.Context, d requestDeps) (bool, error) {
	b, ok := d.Jobs.(backfillJobs)
	if !ok {
		return false, nil
	}
	ids := d.Jobs.JobIDs()
	if len(ids) == 0 {
		return false, nil
	}
	sort.Strings(ids)
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	pending, err := jobstore.PendingBackfills(ctx, d.DB, ids)
	if err != nil {
		return false, err
	}
	for _, id := range pending {
		if b.Backfill(id) {
			d.Logger.Debug("backfill occurrence pending; the runner takes it", "job_id", id)
		}
	}
	return len(pending) > 0, nil
}
