package jobstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
)

// The start of a run is written before its task starts (RecordStart), so
// that a replica killed while the task runs, or before the next flush,
// cannot take the run's row with it: the task's own effects may have
// committed, and a run without a row is a run nobody can see (`jobs
// history`, `jobs why`, the overdue check). The end still goes through the
// batching writer; housekeeping marks the row of a run whose replica died
// interrupted (docs/history.md, "A run's row is written before it starts").
//
// Starts are written by group commit: the runs that start while one write
// is under way go together in the next, one statement for all of them, so
// the statements a second stay bounded by round trips, not by the number
// of jobs.

// startWriteTimeout bounds one write of starts. A write that fails is
// tried again, after startRetryFirst doubling up to startRetryMax, with
// the starts that arrived meanwhile, until it succeeds or its starts have
// waited startKeepFor (the flush writes them too). So a run waits for its
// row through a short fault of the database (a restart takes 2 to 3 s),
// and a run that stopped waiting (its wait is bounded by the runner) has
// its row written as soon as the database answers, not at the next flush.
const (
	startWriteTimeout = 5 * time.Second
	startRetryFirst   = 50 * time.Millisecond
	startRetryMax     = time.Second
	startKeepFor      = time.Minute
)

// insertStartsSQL writes the rows of runs that start. A row that exists
// already (a flush got there first) is left as it is.
const insertStartsSQL = `
INSERT INTO studio_job_run (seq, job_id, replica_id, cluster, started_at, outcome, nominal_at, scope_key, triggered, backfill)
SELECT seq, job_id, replica_id, NULLIF(cluster, ''), started_at, 'running', nominal_at, scope_key, triggered, backfill
FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::timestamptz[], $6::timestamptz[], $7::text[], $8::boolean[], $9::boolean[])
  AS t(seq, job_id, replica_id, cluster, started_at, nominal_at, scope_key, triggered, backfill)
ON CONFLICT (seq) DO NOTHING`

// startWriter is the group commit of RecordStart.
type startWriter struct {
	mu      sync.Mutex
	pending []pendingStart
	writing bool
	failing bool  // the last write failed
	lastErr error // its error
	writes  int64
	quit    chan struct{} // closed by Store.Stop: a retry's wait ends
	quitted sync.Once
}

// pendingStart is a start waiting for its write, and its waiter.
type pendingStart struct {
	run    jobs.Run
	done   chan error // buffered: nil once written
	queued time.Time
}

// RecordStart writes the row of run r, which starts now, and returns nil
// once it is committed, or an error when ctx is done first (the write goes
// on in the background until it succeeds). r must also have been queued
// with PutRun, which writes it anyway with the next flush.
func (s *Store) RecordStart(ctx context.Context, r jobs.Run) error {
	w := &s.starts
	done := make(chan error, 1)
	w.mu.Lock()
	w.pending = append(w.pending, pendingStart{run: r, done: done, queued: time.Now()})
	if !w.writing {
		w.writing = true
		if !s.Go(s.writeStarts) {
			w.writing = false
			w.pending = w.pending[:len(w.pending)-1]
			w.mu.Unlock()
			return errors.New("record a run's start: the run store is stopped")
		}
	}
	w.mu.Unlock()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		w.mu.Lock()
		last := w.lastErr
		w.mu.Unlock()
		if last != nil {
			return fmt.Errorf("record a run's start: not written yet (%w), tried again in the background: %w", context.Cause(ctx), last)
		}
		return fmt.Errorf("record a run's start: %w", context.Cause(ctx))
	}
}

// writeStarts writes the pending starts, batch after batch, trying a
// failed batch again with the next, until none is left. It runs on one
// goroutine of the store at a time.
func (s *Store) writeStarts() {
	w := &s.starts
	var retry []pendingStart
	backoff := startRetryFirst
	for {
		w.mu.Lock()
		batch := append(retry, w.pending...)
		w.pending = nil
		kept := batch[:0] // starts that waited startKeepFor are left to the flush
		for _, p := range batch {
			if time.Since(p.queued) < startKeepFor {
				kept = append(kept, p)
			} else {
				p.done <- fmt.Errorf("record a run's start: not written within %s, left to the flush: %w", startKeepFor, w.lastErr)
			}
		}
		batch = kept
		if len(batch) == 0 {
			w.writing = false
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		runs := make([]jobs.Run, len(batch))
		for i, p := range batch {
			runs[i] = p.run
		}
		ctx, cancel := context.WithTimeout(context.Background(), startWriteTimeout)
		err := s.insertStarts(ctx, runs)
		cancel()
		w.mu.Lock()
		w.writes++
		switch {
		case err != nil && !w.failing:
			s.log.Warn("jobs: writing the start of runs failed; trying again (a run waits for it up to its bound)", "error", err)
		case err == nil && w.failing:
			s.log.Info("jobs: writing the start of runs recovered")
		}
		w.failing, w.lastErr = err != nil, err
		w.mu.Unlock()
		if err == nil {
			for _, p := range batch {
				p.done <- nil
			}
			retry, backoff = nil, startRetryFirst
			continue
		}
		retry = batch
		select {
		case <-time.After(backoff):
		case <-w.quitC():
			for _, p := range retry {
				p.done <- fmt.Errorf("record a run's start: the run store stopped: %w", err)
			}
			retry = nil
			w.mu.Lock()
			for _, p := range w.pending {
				p.done <- fmt.Errorf("record a run's start: the run store stopped: %w", err)
			}
			w.pending, w.writing = nil, false
			w.mu.Unlock()
			return
		}
		backoff = min(2*backoff, startRetryMax)
	}
}

// quitC is closed once the store stops.
func (w *startWriter) quitC() chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.quit == nil {
		w.quit = make(chan struct{})
	}
	return w.quit
}

// stop ends a retry's wait (Store.Stop, before it waits for the writer).
func (w *startWriter) stop() {
	c := w.quitC()
	w.quitted.Do(func() { close(c) })
}

// StartWrites is how many writes of starts the store has made (for
// measurements and tests).
func (s *Store) StartWrites() int64 {
	s.starts.mu.Lock()
	defer s.starts.mu.Unlock()
	return s.starts.writes
}

func (s *Store) insertStarts(ctx context.Context, batch []jobs.Run) error {
	n := len(batch)
	seq := make(pgArray[pgInt8], 0, n)
	job, rep, cl, scope := make(pgArray[pgText], 0, n), make(pgArray[pgText], 0, n), make(pgArray[pgText], 0, n), make(pgArray[pgText], 0, n)
	started, nominal := make(pgArray[pgTime], 0, n), make(pgArray[pgTime], 0, n)
	triggered, backfill := make(pgArray[pgBool], 0, n), make(pgArray[pgBool], 0, n)
	for _, r := range batch {
		seq = append(seq, pgInt8(r.Seq))
		job, rep, cl = append(job, pgText(r.JobID)), append(rep, pgText(r.ReplicaID)), append(cl, pgText(r.Cluster))
		started, nominal = append(started, pgTime{t: r.StartedAt}), append(nominal, pgTime{t: r.NominalAt, null: r.NominalAt.IsZero()})
		scope, triggered, backfill = append(scope, pgText(r.ScopeKey)), append(triggered, pgBool(r.Triggered)), append(backfill, pgBool(r.Backfill))
	}
	args := []any{seq, job, rep, cl, started, nominal, scope, triggered, backfill}
	if s.execMode {
		args = plainArgs(args)
	}
	if _, err := s.q.Exec(ctx, insertStartsSQL, args...); err != nil {
		return fmt.Errorf("record the start of %d runs: %w", n, err)
	}
	return nil
}
