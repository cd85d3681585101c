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

// startWriteTimeout bounds one write of starts.
const startWriteTimeout = 5 * time.Second

// ErrStartsFailing is what RecordStart returns, at once, while the last
// write of starts failed and no write has succeeded since: a run then
// starts without waiting on a database that does not answer. Its row is
// still queued for the next write of starts, which goes on trying, and
// goes with the next flush too.
var ErrStartsFailing = errors.New("the last write of run starts failed; this run's start goes with the next flush")

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
	pending []jobs.Run
	waiters []chan error
	writing bool
	failing bool // the last write failed
	writes  int64
}

// RecordStart writes the row of run r, which starts now, and returns once
// it is committed (or ctx is done, or the write failed). r must also have
// been queued with PutRun, which writes it anyway with the next flush.
// While writes fail, it queues r and returns ErrStartsFailing at once.
func (s *Store) RecordStart(ctx context.Context, r jobs.Run) error {
	w := &s.starts
	done := make(chan error, 1)
	w.mu.Lock()
	failing := w.failing
	w.pending = append(w.pending, r)
	w.waiters = append(w.waiters, done)
	if !w.writing {
		w.writing = true
		if !s.Go(s.writeStarts) {
			w.writing = false
			w.pending, w.waiters = w.pending[:len(w.pending)-1], w.waiters[:len(w.waiters)-1]
			w.mu.Unlock()
			return errors.New("record a run's start: the run store is stopped")
		}
	}
	w.mu.Unlock()
	if failing {
		// Written as soon as the database answers again (the first write
		// that succeeds clears the mark), without holding the run back.
		return ErrStartsFailing
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("record a run's start: %w", context.Cause(ctx))
	}
}

// writeStarts writes the pending starts, batch after batch, until none is
// left. It runs on one goroutine of the store at a time.
func (s *Store) writeStarts() {
	w := &s.starts
	for {
		w.mu.Lock()
		batch, waiters := w.pending, w.waiters
		w.pending, w.waiters = nil, nil
		if len(batch) == 0 {
			w.writing = false
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), startWriteTimeout)
		err := s.insertStarts(ctx, batch)
		cancel()
		w.mu.Lock()
		w.writes++
		if err != nil && !w.failing {
			s.log.Warn("jobs: writing the start of runs failed; runs start without waiting for it until a write succeeds", "error", err)
		}
		w.failing = err != nil
		w.mu.Unlock()
		for _, c := range waiters {
			c <- err
		}
	}
}

// startsRecovered clears the failing mark once the flush has written to
// the database again: the next start waits for its write.
func (s *Store) startsRecovered() {
	w := &s.starts
	w.mu.Lock()
	if w.failing {
		w.failing = false
		s.log.Info("jobs: writing the start of runs recovered")
	}
	w.mu.Unlock()
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
