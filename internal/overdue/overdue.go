// Package overdue reads the jobs that are overdue, as the database computes
// them from its tables alone (studio_overdue_jobs, migrations 00011 and
// 00013, docs/occurrences-overdue.md), so that the answer needs no live replica:
// `studioctl jobs overdue`, doctor's overdue_jobs and a replica's
// studio_job_overdue_seconds (Sampler) all read it here.
package overdue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DefaultGrace is the grace of `jobs overdue`, doctor and the metric: how
// long past its due time a job may be without a run started before it
// counts as overdue.
const DefaultGrace = time.Minute

// Job is one overdue job in one scope (the JSON keys are an interface).
type Job struct {
	JobID string `json:"job_id" yaml:"job_id"`
	// ScopeKey is "" for an installation job, the replica id for an
	// instance job, the cluster for a per-cluster duty.
	ScopeKey string `json:"scope_key" yaml:"scope_key"`
	// DueAt is the due time that passed, in database time.
	DueAt time.Time `json:"due_at" yaml:"due_at"`
	// OverdueSeconds is how long ago DueAt was (the grace included).
	OverdueSeconds float64 `json:"overdue_seconds" yaml:"overdue_seconds"`
}

// Querier is what List needs of a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// listSQL calls the function; the grace goes as seconds so that any
// duration is exact.
const listSQL = `SELECT job_id, scope_key, due_at, overdue_seconds
FROM studio_overdue_jobs(make_interval(secs => $1))`

// ErrNoFunction: the schema has no studio_overdue_jobs (a database
// migrated by an older studioctl); `studioctl migrate up` adds it.
var ErrNoFunction = errors.New("the schema has no studio_overdue_jobs (migration 00011): run `studioctl migrate up`")

// List returns the overdue jobs with grace, ordered by job and scope key.
func List(ctx context.Context, q Querier, grace time.Duration) ([]Job, error) {
	rows, err := q.Query(ctx, listSQL, grace.Seconds())
	if err != nil {
		return nil, wrap(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Job, error) {
		var j Job
		err := r.Scan(&j.JobID, &j.ScopeKey, &j.DueAt, &j.OverdueSeconds)
		j.DueAt = j.DueAt.UTC()
		return j, err
	})
	if err != nil {
		return nil, wrap(err)
	}
	if out == nil {
		out = []Job{}
	}
	return out, nil
}

func wrap(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42883" { // undefined_function
		return ErrNoFunction
	}
	return fmt.Errorf("read overdue jobs: %w", err)
}
