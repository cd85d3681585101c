package runner

import (
	"context"
	"errors"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/locks"
)

// The runner's dependencies are these small interfaces, so its timing tests
// can run against fakes; internal/jobstore and internal/locks implement
// them against PostgreSQL.

// Locker takes a job's lock (SPEC §5.3). TryLock fails with
// locks.ErrHeldElsewhere when another replica holds it.
type Locker interface {
	TryLock(ctx context.Context, name string, atMostFor, atLeastFor time.Duration) (Lock, error)
}

// Lock is a held lock: Extend keeps it (returning the lock to extend next),
// Unlock gives it up. Token is its fencing token (locks.Lock.Token; 0:
// none).
type Lock interface {
	Extend(ctx context.Context, atMostFor, atLeastFor time.Duration) (Lock, error)
	Unlock(ctx context.Context) error
	// Release ends the lock now, with no minimum gap (giveBack).
	Release(ctx context.Context) error
	Token() int64
}

// Recorder records runs and status: the batching writer of internal/jobstore.
type Recorder interface {
	// LoadStatus reads the status rows a previous process with the same
	// replica id left.
	LoadStatus(ctx context.Context) (map[string]jobs.Status, error)
	// RetireUndeclared removes the status rows of this replica id but those
	// of the jobs jobIDs and of the duties of the per-cluster jobs
	// perCluster, and returns the job ids of the rows it removed.
	RetireUndeclared(ctx context.Context, jobIDs, perCluster []string) ([]string, error)
	NextSeq(ctx context.Context) (int64, error)
	PutRun(jobs.Run)
	PutStatus(jobs.Status)
}

// Settings are the operator's settings of each job (pause, schedule
// override), cached: internal/jobstore's SettingsCache.
type Settings interface {
	Get(ctx context.Context, job string) (jobs.Setting, error)
	Invalidate(job string)
	InvalidateAll()
	// Refresh reads every setting again and returns the ids of the jobs
	// whose setting changed (the fallback poll).
	Refresh(ctx context.Context) ([]string, error)
}

// Schedules is the installation-wide schedule of installation jobs
// (jobstore.Schedules): the end of each job's last run anywhere, in
// database time.
type Schedules interface {
	// Load returns the end of the last run anywhere of each job (absent:
	// never ran) and the database's now.
	Load(ctx context.Context, jobIDs []string) (map[string]time.Time, time.Time, error)
	// RecordEnd records that a run ended now in database time and signals
	// every replica; it returns the end recorded.
	RecordEnd(ctx context.Context, job, replica string, seq int64, started time.Time) (time.Time, error)
}

// RunLoader is what a Schedules may also do (jobstore.Schedules does):
// read one job's last end anywhere with the start of that run
// (last_started_at) and the database's now, in one statement. With it, a
// tick that found the lock held waits for the next read of the schedule
// before it records a skip: a run of that due time that ended on another
// replica meanwhile says the occurrence ran (occurrence.go).
type RunLoader interface {
	LoadRun(ctx context.Context, job string) (end, started, dbNow time.Time, err error)
}

// RunFinder is what a Recorder may also do (jobstore.Store does): the
// start of a job's newest run after a time, a backfill's aside (zero:
// none). A catch-up asks it under the lock (catchUpLock).
type RunFinder interface {
	LastStartAfter(ctx context.Context, id string, since time.Time) (time.Time, error)
}

// LocksOf is the Locker of a lock provider; nil for nil.
func LocksOf(p *locks.Provider) Locker {
	if p == nil {
		return nil
	}
	return providerLocks{p}
}

type providerLocks struct{ p *locks.Provider }

func (l providerLocks) TryLock(ctx context.Context, name string, atMostFor, atLeastFor time.Duration) (Lock, error) {
	k, err := l.p.TryLock(ctx, name, atMostFor, atLeastFor)
	var mh *locks.MaybeHeldError
	if errors.As(err, &mh) {
		return nil, &MaybeHeldError{Lock: heldLock{mh.Lock}, Err: err}
	}
	if err != nil {
		return nil, err
	}
	return heldLock{k}, nil
}

// MaybeHeldError is a Locker's TryLock error when the lock may have been
// taken all the same (locks.MaybeHeldError: the answer was lost). The
// runner keeps Lock as the job's stale lock, given back before the job's
// next try (releaseStale): otherwise the lock, if taken, would hold every
// replica off until its lockAtMostFor, the holder included.
type MaybeHeldError struct {
	Lock Lock
	Err  error
}

func (e *MaybeHeldError) Error() string { return e.Err.Error() }

func (e *MaybeHeldError) Unwrap() error { return e.Err }

type heldLock struct{ l *locks.Lock }

func (h heldLock) Extend(ctx context.Context, atMostFor, atLeastFor time.Duration) (Lock, error) {
	next, err := h.l.Extend(ctx, atMostFor, atLeastFor)
	if err != nil {
		return nil, err
	}
	return heldLock{next}, nil
}

func (h heldLock) Unlock(ctx context.Context) error { return h.l.Unlock(ctx) }

func (h heldLock) Release(ctx context.Context) error { return h.l.Release(ctx) }

func (h heldLock) Token() int64 { return h.l.Token() }
