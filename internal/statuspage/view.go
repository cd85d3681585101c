package statuspage

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
	"github.com/studioctl/studioctl/internal/leases"
	"github.com/studioctl/studioctl/internal/locks"
	"github.com/studioctl/studioctl/internal/replicas"
)

// view is what the template renders: one consistent snapshot.
type view struct {
	ReplicaID string
	Now       time.Time // database time of the snapshot
	Err       string    // the snapshot could not be read

	Replicas []replicaRow
	Jobs     []jobRow
	Runs     []runRow
	Leases   []leases.Info
	Locks    []locks.Info

	// Totals and what the limits left out.
	ReplicasLive, JobsTotal, JobsUnhealthy, RunsRunning   int
	ReplicasHidden, JobsHidden, LeasesHidden, LocksHidden int

	CSS    any // template.CSS
	Script any // template.JS
}

type replicaRow struct {
	replicas.Info
	Leases int
}

type jobRow struct {
	jobstore.View
}

// runRow is a run and whether it stored output (the page links to it; the
// text itself is read on demand, from Handler.Output).
type runRow struct {
	jobs.Run
	HasOutput bool
}

// latestRunsSQL reads the newest runs of every job, newest start first.
// Not by seq: each replica numbers its runs from a block of seqs of its
// own (jobstore.Store.NextSeq), so seqs do not follow time across
// replicas. The started_at index (migrations/00002) keeps it cheap however
// long the history is.
const latestRunsSQL = `SELECT seq, job_id, replica_id, coalesce(cluster, ''), started_at, finished_at, outcome, coalesce(error, ''),
  output_tail IS NOT NULL
FROM studio_job_run ORDER BY started_at DESC, seq DESC LIMIT $1`

// load reads everything in one READ ONLY, REPEATABLE READ transaction: the
// sections agree with each other (one database now, one set of rows), and
// the page cannot write even by mistake.
func (h *Handler) load(ctx context.Context) (*view, error) {
	tx, err := h.o.DB.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("read status: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, `SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY`); err != nil {
		return nil, fmt.Errorf("read status: %w", err)
	}
	v := &view{}
	infos, err := replicas.List(ctx, tx)
	if err != nil {
		return nil, err
	}
	counts, err := leases.CountByOwner(ctx, tx)
	if err != nil {
		return nil, err
	}
	for _, in := range infos {
		if in.Live {
			v.ReplicasLive++
		}
	}
	// Live replicas first, then the others, each by id.
	sort.SliceStable(infos, func(i, j int) bool { return infos[i].Live && !infos[j].Live })
	infos, v.ReplicasHidden = capped(infos, MaxRows)
	for _, in := range infos {
		v.Replicas = append(v.Replicas, replicaRow{Info: in, Leases: counts[in.ID]})
	}

	rows, now, err := jobstore.ReadStatus(ctx, tx, "")
	if err != nil {
		return nil, err
	}
	v.Now = now
	views := jobstore.Merge(rows, now)
	v.JobsTotal = len(views)
	// The jobs that need a look first, then by id (Merge sorts by id).
	sort.SliceStable(views, func(i, j int) bool { return healthRank(views[i].Health) < healthRank(views[j].Health) })
	for _, jv := range views {
		if jv.Health != jobs.HealthOK {
			v.JobsUnhealthy++
		}
	}
	views, v.JobsHidden = capped(views, MaxRows)
	// The last occurrence and the skips and misses of 24 h of the jobs
	// shown (one statement; docs/occurrences.md).
	if err := jobstore.AddOccurrenceSummaries(ctx, tx, views); err != nil {
		return nil, err
	}
	// Who paused each job shown, why and until when, and whether the live
	// replicas run different definitions of it: what jobs list's PAUSED
	// column and "ok (drift)" say.
	if err := jobstore.AddPauses(ctx, tx, views, now); err != nil {
		return nil, err
	}
	if err := addDrift(ctx, tx, views); err != nil {
		return nil, err
	}
	for _, jv := range views {
		v.Jobs = append(v.Jobs, jobRow{View: jv})
	}

	if v.Runs, err = latestRuns(ctx, tx, MaxRuns); err != nil {
		return nil, err
	}
	if err := tx.QueryRow(ctx, `SELECT count(*)::int FROM studio_job_run WHERE outcome = 'running'`).Scan(&v.RunsRunning); err != nil {
		return nil, fmt.Errorf("count running runs: %w", err)
	}

	ls, err := leases.List(ctx, tx)
	if err != nil {
		return nil, err
	}
	v.Leases, v.LeasesHidden = capped(ls, MaxRows)

	admin, err := locks.NewAdmin(tx, h.o.LockTable)
	if err != nil {
		return nil, err
	}
	lk, err := admin.List(ctx)
	if err != nil {
		return nil, err
	}
	// Held and stale locks first: free rows are history.
	sort.SliceStable(lk, func(i, j int) bool { return lk[i].State != locks.StateFree && lk[j].State == locks.StateFree })
	v.Locks, v.LocksHidden = capped(lk, MaxRows)
	return v, nil
}

// addDrift sets the views' Drift where the schema has the definitions
// (migration 00015; a replica with database.migrate off may run on an
// older one). Asked first: a failed statement would end the snapshot's
// transaction.
func addDrift(ctx context.Context, q Querier, views []jobstore.View) error {
	var has bool
	if err := q.QueryRow(ctx, `SELECT to_regclass('studio_job_definition') IS NOT NULL`).Scan(&has); err != nil {
		return fmt.Errorf("read job definitions: %w", err)
	}
	if !has {
		return nil
	}
	return jobstore.AddDrift(ctx, q, views)
}

func latestRuns(ctx context.Context, q Querier, limit int) ([]runRow, error) {
	rows, err := q.Query(ctx, latestRunsSQL, limit)
	if err != nil {
		return nil, fmt.Errorf("read latest runs: %w", err)
	}
	defer rows.Close()
	var out []runRow
	for rows.Next() {
		var r runRow
		var outcome string
		if err := rows.Scan(&r.Seq, &r.JobID, &r.ReplicaID, &r.Cluster, &r.StartedAt, &r.FinishedAt, &outcome, &r.Error, &r.HasOutput); err != nil {
			return nil, fmt.Errorf("read latest runs: %w", err)
		}
		r.Outcome = jobs.Outcome(outcome)
		r.StartedAt = r.StartedAt.UTC()
		if r.FinishedAt != nil {
			t := r.FinishedAt.UTC()
			r.FinishedAt = &t
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read latest runs: %w", err)
	}
	return out, nil
}

func capped[T any](s []T, n int) ([]T, int) {
	if len(s) <= n {
		return s, 0
	}
	return s[:n], len(s) - n
}

func healthRank(h jobs.Health) int {
	switch h {
	case jobs.HealthFailing, jobs.HealthInvalidSchedule:
		return 0
	case jobs.HealthStalled:
		return 1
	case jobs.HealthPaused:
		return 2
	default:
		return 3
	}
}
