package jobstore

// Jobs belong to the replica's current configuration (issue 20): a
// replica's status rows are its declarations. At start the runner removes
// the rows of its replica id that its configuration no longer declares
// (RetireUndeclared), so a job removed or renamed in the configuration of a
// replica restarted under the same id is not left behind as stalled or
// failing; every row of a live replica is then a job it hosts now. What a
// replica that no longer runs left behind is removed by `studioctl jobs
// forget` (Forget), refused while a live replica declares the job.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/studioctl/studioctl/internal/audit"
	"github.com/studioctl/studioctl/internal/bus"
	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/liveness"
)

// jobRowsSQL matches the status rows of job $n: its own, and those of its
// per-cluster duties (job@cluster, jobs.DutyKey).
func jobRowsSQL(alias string, n int) string {
	return fmt.Sprintf("(%[1]s.job_id = $%[2]d OR starts_with(%[1]s.job_id, $%[2]d || '@'))", alias, n)
}

// retireUndeclaredSQL deletes the status rows of replica $1 but those of
// the jobs $2 and the duties (job@cluster) of the per-cluster jobs $3.
const retireUndeclaredSQL = `
DELETE FROM studio_job_status s
WHERE s.replica_id = $1 AND NOT (s.job_id = ANY($2::text[])
  OR (strpos(s.job_id, '@') > 0 AND split_part(s.job_id, '@', 1) = ANY($3::text[])))
RETURNING s.job_id`

// RetireUndeclared removes this replica id's status rows of jobs its
// configuration no longer declares: every row but those of jobIDs and of
// the duties of the per-cluster jobs perCluster, and marks the rest not
// running and without a next fire (an earlier process wrote them). It
// returns the job ids of the rows it removed. Their run history stays (jobs history), and goes
// as housekeeping's retention says.
func (s *Store) RetireUndeclared(ctx context.Context, jobIDs, perCluster []string) ([]string, error) {
	return RetireUndeclared(ctx, s.q, s.replicaID, jobIDs, perCluster)
}

// RetireUndeclared is Store.RetireUndeclared for replica.
func RetireUndeclared(ctx context.Context, q Querier, replica string, jobIDs, perCluster []string) ([]string, error) {
	if jobIDs == nil {
		jobIDs = []string{}
	}
	if perCluster == nil {
		perCluster = []string{}
	}
	rows, err := q.Query(ctx, retireUndeclaredSQL, replica, jobIDs, perCluster)
	if err != nil {
		return nil, fmt.Errorf("remove status of jobs no longer configured: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("remove status of jobs no longer configured: %w", err)
		}
		out = append(out, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("remove status of jobs no longer configured: %w", err)
	}
	// What remains was written by an earlier process: none of its runs goes
	// on (the registration closed them) and none of its timers is armed.
	// The runner writes its own rows next; a duty of a cluster this process
	// does not own keeps its row, not running and with no next fire, as a
	// duty that moved away does (docs/leases.md).
	if _, err := q.Exec(ctx, `UPDATE studio_job_status SET running = false, next_fire_at = NULL
WHERE replica_id = $1 AND (running OR next_fire_at IS NOT NULL)`, replica); err != nil {
		return nil, fmt.Errorf("reset the status an earlier process left: %w", err)
	}
	return out, nil
}

// LiveDeclarers returns the live replicas that declare job (a status row
// of it, or of one of its duties), by id.
func LiveDeclarers(ctx context.Context, q Querier, job string) ([]string, error) {
	return declarers(ctx, q, job, "")
}

// notDrainingSQL: the replica aliased r is not draining. A draining replica
// starts no new run and claims no trigger request (docs/control.md).
const notDrainingSQL = " AND r.state <> 'draining'"

// TriggerableDeclarers returns the live replicas that declare job and are
// not draining, by id: those a trigger can reach.
func TriggerableDeclarers(ctx context.Context, q Querier, job string) ([]string, error) {
	return declarers(ctx, q, job, notDrainingSQL)
}

func declarers(ctx context.Context, q Querier, job, and string) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT DISTINCT r.id FROM studio_job_status s JOIN studio_replica r ON r.id = s.replica_id
WHERE `+jobRowsSQL("s", 1)+` AND `+liveness.LiveSQL("r")+and+` ORDER BY r.id`, job)
	if err != nil {
		return nil, fmt.Errorf("look up the replicas of job %q: %w", job, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("look up the replicas of job %q: %w", job, err)
		}
		out = append(out, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("look up the replicas of job %q: %w", job, err)
	}
	return out, nil
}

// ErrDeclared: a live replica declares the job, so its rows are not left
// behind; Forget refuses (exit 3).
var ErrDeclared = errors.New("refused: a live replica declares the job")

// Forgotten is what Forget removed.
type Forgotten struct {
	Job string
	// Rows are the status rows removed, by replica and job id.
	Rows []ForgottenRow
	// Settings: the job's operator setting (studio_job_setting) was removed
	// too, since no replica declares the job any more.
	Settings bool
}

// ForgottenRow is one removed status row.
type ForgottenRow struct {
	ReplicaID string
	JobID     string // the job's id, or a duty's job@cluster
}

// Forget removes the status rows that replicas which no longer declare job
// left behind (of replica only, when replica is not ""), in one transaction
// with its audit row (jobs.forget) and a job.settings signal. It refuses
// with ErrDeclared while any live replica declares the job, whatever
// replica says: forget is for jobs that no live replica runs. When no status row of the
// job remains anywhere, the job's operator setting (pause, schedule
// override) goes too: a job configured again later starts from its
// configuration, not from an override made for another job of the same
// name. Run history (studio_job_run) and the shared schedule
// (studio_job_schedule) stay: history is what happened, and housekeeping
// bounds it; the shared schedule keeps a re-added installation job from
// running at once. ErrUnknownJob when there is nothing to remove.
func Forget(ctx context.Context, q Querier, job, replica, actor, reason string) (Forgotten, error) {
	f := Forgotten{Job: job}
	tx, err := q.Begin(ctx)
	if err != nil {
		return f, fmt.Errorf("forget job %q: %w", job, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	live, err := LiveDeclarers(ctx, tx, job)
	if err != nil {
		return f, err
	}
	if len(live) > 0 {
		who := "live replica " + live[0] + " hosts it"
		if len(live) > 1 {
			who = "live replicas " + strings.Join(live, ", ") + " host it"
		}
		return f, fmt.Errorf("forget job %q: %w: %s; remove the job from that configuration and restart the replica (it then drops the job itself), or stop it first",
			job, ErrDeclared, who)
	}
	// One conditional statement: only rows of replicas that are not live
	// when it runs (a replica that starts meanwhile keeps its rows, and
	// removes those it does not declare itself), so no row lock, and no
	// UPDATE privilege, is needed.
	rows, err := tx.Query(ctx, `DELETE FROM studio_job_status s
WHERE `+jobRowsSQL("s", 1)+` AND ($2 = '' OR s.replica_id = $2)
  AND NOT EXISTS (SELECT 1 FROM studio_replica r WHERE r.id = s.replica_id AND `+liveness.LiveSQL("r")+`)
RETURNING s.replica_id, s.job_id`, job, replica)
	if err != nil {
		return f, fmt.Errorf("forget job %q: %w", job, err)
	}
	f.Rows, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (ForgottenRow, error) {
		var r ForgottenRow
		err := row.Scan(&r.ReplicaID, &r.JobID)
		return r, err
	})
	if err != nil {
		return f, fmt.Errorf("forget job %q: %w", job, err)
	}
	if len(f.Rows) == 0 {
		where := "no replica has left a status row of it"
		if replica != "" {
			where = fmt.Sprintf("replica %q has left no status row of it", replica)
		}
		return f, fmt.Errorf("job %q: %w (%s)", job, ErrUnknownJob, where)
	}
	slices.SortFunc(f.Rows, func(a, b ForgottenRow) int {
		return cmp.Or(cmp.Compare(a.ReplicaID, b.ReplicaID), cmp.Compare(a.JobID, b.JobID))
	})
	reps := make([]string, 0, len(f.Rows))
	for _, r := range f.Rows {
		if len(reps) == 0 || reps[len(reps)-1] != r.ReplicaID {
			reps = append(reps, r.ReplicaID)
		}
	}
	// No row of the job left anywhere: its setting goes too.
	tag, err := tx.Exec(ctx, `DELETE FROM studio_job_setting WHERE job_id = $1
AND NOT EXISTS (SELECT 1 FROM studio_job_status s WHERE `+jobRowsSQL("s", 1)+`)`, job)
	if err != nil {
		return f, fmt.Errorf("forget job %q: %w", job, err)
	}
	f.Settings = tag.RowsAffected() > 0
	detail := map[string]any{"rows": len(f.Rows), "replicas": reps, "setting_removed": f.Settings}
	if replica != "" {
		detail["replica"] = replica
	}
	if err := audit.Write(ctx, tx, audit.Entry{Actor: actor, Action: "jobs.forget", Target: job, Reason: reason, Detail: detail}); err != nil {
		return f, err
	}
	// Watching clients (jobs list --watch) redraw.
	if err := bus.Notify(ctx, tx, bus.Signal(bus.KindJobSettings, job)); err != nil {
		return f, fmt.Errorf("forget job %q: %w", job, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return f, fmt.Errorf("forget job %q: %w", job, err)
	}
	return f, nil
}

// RecentRuns returns the last limit runs of job, newest first, as History
// does; with a cluster, only that cluster's (a per-cluster job's duty,
// jobs status ID@CLUSTER).
func RecentRuns(ctx context.Context, q Querier, job, cluster string, limit int) ([]jobs.Run, error) {
	if cluster == "" {
		return History(ctx, q, job, limit)
	}
	rows, err := q.Query(ctx, `SELECT seq, job_id, replica_id, coalesce(cluster, ''), started_at, finished_at, outcome,
  coalesce(error, ''), coalesce(output_tail, '') FROM studio_job_run WHERE job_id = $1 AND cluster = $2
ORDER BY started_at DESC, seq DESC LIMIT $3`, job, cluster, limit)
	if err != nil {
		return nil, fmt.Errorf("read history of job %q: %w", jobs.DutyKey{Job: job, Cluster: cluster}, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (jobs.Run, error) {
		var r jobs.Run
		var outcome string
		err := row.Scan(&r.Seq, &r.JobID, &r.ReplicaID, &r.Cluster, &r.StartedAt, &r.FinishedAt, &outcome, &r.Error, &r.OutputTail)
		r.Outcome, r.StartedAt = jobs.Outcome(outcome), r.StartedAt.UTC()
		if r.FinishedAt != nil {
			t := r.FinishedAt.UTC()
			r.FinishedAt = &t
		}
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("read history of job %q: %w", jobs.DutyKey{Job: job, Cluster: cluster}, err)
	}
	return out, nil
}
