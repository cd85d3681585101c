package overdue_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/liveness"
	"github.com/studioctl/studioctl/internal/overdue"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.MainNoLeaks(m)) }

func newPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := db.Open(ctx, pgtest.NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// The fixture's statements, with times written relative to the database's
// now(), as the function judges them.

// replica is a studio_replica row: live (heartbeat now), crashed (state
// ready, heartbeat ago) or stopped (state stopped, heartbeat ago).
func replica(id, state, ago string) string {
	return fmt.Sprintf(`INSERT INTO studio_replica (id, incarnation, host, pid, version, state, heartbeat_at, stopped_at)
VALUES ('%[1]s', gen_random_uuid(), '%[1]s.example', 1, 'v', '%[2]s', now() - interval '%[3]s',
  CASE WHEN '%[2]s' = 'stopped' THEN now() - interval '%[3]s' END)`, id, state, ago)
}

// status is a status row; next and last are intervals before now() or
// "" for NULL.
func status(rep, job, scope, next, last string) string {
	return fmt.Sprintf(`INSERT INTO studio_job_status (replica_id, job_id, scope, schedule, next_fire_at, last_started_at)
VALUES ('%s', '%s', '%s', 'every 1m', %s, %s)`, rep, job, scope, ago(next), ago(last))
}

// run is a run row that started ago.
func run(job, rep, cluster, started string) string {
	c := "NULL"
	if cluster != "" {
		c = "'" + cluster + "'"
	}
	return fmt.Sprintf(`INSERT INTO studio_job_run (job_id, replica_id, cluster, started_at, finished_at, outcome)
VALUES ('%s', '%s', %s, %s, %[4]s, 'succeeded')`, job, rep, c, ago(started))
}

func ago(d string) string {
	if d == "" {
		return "NULL"
	}
	if strings.HasPrefix(d, "+") {
		return "now() + interval '" + d[1:] + "'"
	}
	return "now() - interval '" + d + "'"
}

// dutyRow is a status row of a per-cluster duty (key job@cluster) with no
// due time, as a replica that lost the cluster's lease leaves it;
// finished is an interval before now() or "" for NULL.
func dutyRow(rep, key, schedule, finished string) string {
	return fmt.Sprintf(`INSERT INTO studio_job_status (replica_id, job_id, scope, schedule, next_fire_at, last_finished_at)
VALUES ('%s', '%s', 'installation', '%s', NULL, %s)`, rep, key, schedule, ago(finished))
}

// owned is a cluster_lease row held by owner.
func owned(cluster, owner string) string {
	return fmt.Sprintf(`INSERT INTO cluster_lease (cluster, owner, acquired_at, renewed_at, generation)
VALUES ('%s', '%s', now() - interval '10 minutes', now(), 1)`, cluster, owner)
}

const (
	paused = `INSERT INTO studio_job_setting (job_id, paused, updated_by) VALUES ('%s', true, 'alice')`
	// pausedUntil: a pause with an end (an SQL expression; migration 00014).
	pausedUntil = `INSERT INTO studio_job_setting (job_id, paused, updated_by, paused_by, paused_until) VALUES ('%s', true, 'alice', 'alice', %s)`
	lease       = `INSERT INTO cluster_lease (cluster) VALUES ('%s')`
)

// exec runs stmts in one transaction: one now() for the whole fixture, as
// a run row and its status row carry the same start.
func exec(t *testing.T, pool *pgxpool.Pool, stmts ...string) {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	for _, s := range stmts {
		if _, err := tx.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// got lists the overdue jobs as "job/scope due-ago" strings, the due time
// rounded to the minute before now (the fixture's times are whole
// minutes).
func got(t *testing.T, q overdue.Querier, grace time.Duration) []string {
	t.Helper()
	js, err := overdue.List(context.Background(), q, grace)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, j := range js {
		out = append(out, fmt.Sprintf("%s/%s %dm", j.JobID, j.ScopeKey, int(j.OverdueSeconds/60)))
	}
	return out
}

func TestOverdueJobs(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		rows  []string
		grace time.Duration
		want  []string
	}{
		{
			name: "an installation job past its due time and the grace on a live replica is overdue",
			rows: []string{replica("web-1", "ready", "1 second"), status("web-1", "sweep", "installation", "2 minutes", "")},
			want: []string{"sweep/ 2m"},
		},
		{
			name: "one within the grace is not",
			rows: []string{replica("web-1", "ready", "1 second"), status("web-1", "sweep", "installation", "30 seconds", "")},
		},
		{
			name:  "a longer grace covers it",
			rows:  []string{replica("web-1", "ready", "1 second"), status("web-1", "sweep", "installation", "2 minutes", "")},
			grace: 5 * time.Minute,
		},
		{
			name: "a job due in the future is not",
			rows: []string{replica("web-1", "ready", "1 second"), status("web-1", "sweep", "installation", "+1 minute", "")},
		},
		{
			name: "a paused job (its setting) is not overdue, live or not",
			rows: []string{replica("web-1", "ready", "1 second"), status("web-1", "sweep", "installation", "2 minutes", ""),
				replica("web-2", "ready", "1 hour"), status("web-2", "sweep", "installation", "50 minutes", ""),
				fmt.Sprintf(paused, "sweep")},
		},
		{
			name: "a pause whose end has not come is not overdue",
			rows: []string{replica("web-1", "ready", "1 second"), status("web-1", "sweep", "installation", "2 minutes", ""),
				fmt.Sprintf(pausedUntil, "sweep", ago("+10 minutes"))},
		},
		{
			name: "a pause whose end passed is over, its resume written or not: overdue from its end",
			rows: []string{replica("web-1", "ready", "1 second"), status("web-1", "sweep", "installation", "10 minutes", ""),
				fmt.Sprintf(pausedUntil, "sweep", ago("3 minutes"))},
			want: []string{"sweep/ 3m"},
		},
		{
			name: "a pause that ended before the due time: overdue from the due time",
			rows: []string{replica("web-1", "ready", "1 second"), status("web-1", "sweep", "installation", "5 minutes", ""),
				fmt.Sprintf(pausedUntil, "sweep", ago("20 minutes"))},
			want: []string{"sweep/ 5m"},
		},
		{
			name: "a live replica's fresh row wins over a dead replica's stale one",
			rows: []string{replica("web-1", "ready", "1 second"), status("web-1", "sweep", "installation", "+30 seconds", "30 seconds"),
				replica("web-2", "ready", "1 hour"), status("web-2", "sweep", "installation", "2 hours", "3 hours"),
				run("sweep", "web-1", "", "30 seconds")},
		},
		{
			name: "a job with no live replica is watched: the rows of crashed replicas",
			rows: []string{replica("web-1", "ready", "10 minutes"), status("web-1", "sweep", "installation", "5 minutes", "6 minutes"),
				run("sweep", "web-1", "", "6 minutes")},
			want: []string{"sweep/ 5m"},
		},
		{
			name: "and of replicas stopped cleanly",
			rows: []string{replica("web-1", "stopped", "10 minutes"), status("web-1", "sweep", "installation", "5 minutes", "6 minutes")},
			want: []string{"sweep/ 5m"},
		},
		{
			name: "a dead replica's stale due time is met by a later run of another replica, whose own row decides",
			rows: []string{
				replica("web-1", "ready", "3 hours"), status("web-1", "sweep", "installation", "2 hours", "3 hours"),
				replica("web-2", "ready", "10 minutes"), status("web-2", "sweep", "installation", "7 minutes", "20 minutes"),
				run("sweep", "web-1", "", "3 hours"), run("sweep", "web-2", "", "20 minutes")},
			want: []string{"sweep/ 7m"},
		},
		{
			name: "the fallback timer of a replica that lost the lock is met by the winner's run",
			rows: []string{
				replica("web-1", "ready", "10 minutes"), status("web-1", "sweep", "installation", "+50 minutes", "11 minutes"),
				replica("web-2", "ready", "10 minutes"), status("web-2", "sweep", "installation", "8 minutes", ""),
				run("sweep", "web-1", "", "11 minutes")},
		},
		{
			name: "a run that started after the due time, by a replica without a row, meets it",
			rows: []string{replica("web-1", "ready", "10 minutes"), status("web-1", "sweep", "installation", "8 minutes", "20 minutes"),
				run("sweep", "web-1", "", "20 minutes"), run("sweep", "gone-9", "", "2 minutes")},
		},
		{
			name: "a run of another job or of a duty does not",
			rows: []string{replica("web-1", "ready", "10 minutes"), status("web-1", "sweep", "installation", "8 minutes", "20 minutes"),
				run("sweep", "web-1", "", "20 minutes"), run("other", "web-1", "", "2 minutes"), run("sweep", "web-1", "eu-1", "2 minutes")},
			want: []string{"sweep/ 8m"},
		},
		{
			name: "a job declared within the last 7 days is watched",
			rows: []string{replica("web-1", "ready", "6 days 23 hours"), status("web-1", "sweep", "installation", "6 days 23 hours", "")},
			want: []string{"sweep/ 10020m"},
		},
		{
			name: "one whose replicas were last up more than 7 days ago is not",
			rows: []string{replica("web-1", "stopped", "7 days 1 minute"), status("web-1", "sweep", "installation", "7 days", "")},
		},
		{
			name: "a status row of a forgotten replica (no replica row) is not",
			rows: []string{status("web-9", "sweep", "installation", "5 minutes", "")},
		},
		{
			name: "a heartbeat far ahead of now (not a replica's) declares nothing",
			rows: []string{replica("web-1", "ready", "-1 hour"), status("web-1", "sweep", "installation", "5 minutes", "")},
		},
		{
			name: "not a crashed replica's while a live replica runs the job (a replica replaced under a new id)",
			rows: []string{
				replica("web-1", "ready", "1 second"), status("web-1", "tmp", "instance", "+30 seconds", "30 seconds"),
				replica("web-2", "ready", "10 minutes"), status("web-2", "tmp", "instance", "9 minutes", "10 minutes"),
				run("tmp", "web-1", "", "30 seconds")},
		},
		{
			name: "a crashed replica's when no live replica declares the job",
			rows: []string{
				replica("web-1", "ready", "1 second"), status("web-1", "other", "instance", "+30 seconds", "30 seconds"),
				replica("web-2", "ready", "10 minutes"), status("web-2", "tmp", "instance", "9 minutes", "10 minutes")},
			want: []string{"tmp/web-2 9m"},
		},
		{
			name: "a live replica's own instance job, late, while others run it",
			rows: []string{
				replica("web-1", "ready", "1 second"), status("web-1", "tmp", "instance", "5 minutes", "6 minutes"),
				replica("web-2", "ready", "1 second"), status("web-2", "tmp", "instance", "+30 seconds", "30 seconds"),
				run("tmp", "web-2", "", "30 seconds")},
			want: []string{"tmp/web-1 5m"},
		},
		{
			name: "not a cleanly stopped replica's while another is live (a scale-down)",
			rows: []string{
				replica("web-1", "ready", "1 second"), status("web-1", "tmp", "instance", "+30 seconds", "30 seconds"),
				replica("web-2", "stopped", "10 minutes"), status("web-2", "tmp", "instance", "9 minutes", "10 minutes")},
		},
		{
			name: "every replica's when none is live",
			rows: []string{
				replica("web-1", "stopped", "5 minutes"), status("web-1", "tmp", "instance", "4 minutes", "5 minutes"),
				replica("web-2", "ready", "10 minutes"), status("web-2", "tmp", "instance", "9 minutes", "10 minutes")},
			want: []string{"tmp/web-1 4m", "tmp/web-2 9m"},
		},
		{
			name: "an instance job's run on one replica meets only that replica's due time",
			rows: []string{
				replica("web-1", "stopped", "5 minutes"), status("web-1", "tmp", "instance", "4 minutes", "5 minutes"),
				replica("web-2", "ready", "10 minutes"), status("web-2", "tmp", "instance", "9 minutes", "10 minutes"),
				run("tmp", "web-2", "", "1 minute")},
			want: []string{"tmp/web-1 4m"},
		},
		{
			name: "a per-cluster duty is watched per cluster",
			rows: []string{
				fmt.Sprintf(lease, "eu-1"), fmt.Sprintf(lease, "us-1"),
				replica("web-1", "ready", "10 minutes"), status("web-1", "vacuum@eu-1", "installation", "9 minutes", "10 minutes"),
				status("web-1", "vacuum@us-1", "installation", "3 minutes", "4 minutes"),
				run("vacuum", "web-1", "eu-1", "10 minutes"), run("vacuum", "web-1", "us-1", "4 minutes")},
			want: []string{"vacuum/eu-1 9m", "vacuum/us-1 3m"},
		},
		{
			name: "a duty's run for its cluster meets its due time, another cluster's does not",
			rows: []string{
				fmt.Sprintf(lease, "eu-1"), fmt.Sprintf(lease, "us-1"),
				replica("web-1", "ready", "10 minutes"), status("web-1", "vacuum@eu-1", "installation", "9 minutes", "10 minutes"),
				replica("web-2", "ready", "10 minutes"), status("web-2", "vacuum@us-1", "installation", "8 minutes", "10 minutes"),
				run("vacuum", "web-3", "eu-1", "30 seconds"), run("vacuum", "web-3", "eu-2", "1 minute")},
			want: []string{"vacuum/us-1 8m"},
		},
		{
			name: "a duty of a cluster removed from cluster_lease is not watched",
			rows: []string{
				replica("web-1", "ready", "10 minutes"), status("web-1", "vacuum@eu-1", "installation", "9 minutes", "10 minutes")},
		},
		{
			name: "a duty whose owner died while live replicas hold it with no due time (moved away) is overdue from the owner's row",
			rows: []string{
				fmt.Sprintf(lease, "eu-1"),
				replica("web-1", "ready", "1 second"), status("web-1", "vacuum@eu-1", "installation", "", "1 hour"),
				replica("web-2", "ready", "10 minutes"), status("web-2", "vacuum@eu-1", "installation", "9 minutes", "10 minutes")},
			want: []string{"vacuum/eu-1 9m"},
		},
		{
			name: "a duty whose lease passed to a replica that does not declare it is overdue from the cluster's last end and its schedule",
			rows: []string{
				owned("eu-1", "web-2"),
				replica("web-1", "ready", "1 second"), dutyRow("web-1", "vacuum@eu-1", "every 1m", "10 minutes"),
				replica("web-2", "ready", "1 second"), status("web-2", "other", "installation", "+30 seconds", "")},
			want: []string{"vacuum/eu-1 9m"},
		},
		{
			name: "such a duty within its grace is not",
			rows: []string{
				owned("eu-1", "web-2"), replica("web-2", "ready", "1 second"),
				replica("web-1", "ready", "1 second"), dutyRow("web-1", "vacuum@eu-1", "every 1m", "90 seconds")},
		},
		{
			name: "such a duty with a run started after the last end is not (a run in progress meets it)",
			rows: []string{
				owned("eu-1", "web-2"), replica("web-2", "ready", "1 second"),
				replica("web-1", "ready", "1 second"), dutyRow("web-1", "vacuum@eu-1", "every 1m", "10 minutes"),
				`INSERT INTO studio_job_run (job_id, replica_id, cluster, started_at, outcome) VALUES ('vacuum', 'java-1', 'eu-1', now() - interval '5 minutes', 'running')`},
		},
		{
			name: "such a duty counts from the cluster's last run when it ended after the rows' last end",
			rows: []string{
				owned("eu-1", "web-2"), replica("web-2", "ready", "1 second"),
				replica("web-1", "ready", "1 second"), dutyRow("web-1", "vacuum@eu-1", "every 1m", "20 minutes"),
				run("vacuum", "web-3", "eu-1", "5 minutes"), run("vacuum", "web-3", "us-1", "1 minute")},
			want: []string{"vacuum/eu-1 4m"},
		},
		{
			name: "and from the rows' last end when the cluster's runs were pruned",
			rows: []string{
				owned("eu-1", "web-2"), replica("web-2", "ready", "1 second"),
				replica("web-1", "ready", "1 second"), dutyRow("web-1", "vacuum@eu-1", "every 1m", "20 minutes"),
				replica("web-3", "ready", "1 hour"), dutyRow("web-3", "vacuum@eu-1", "every 1m", "3 minutes")},
			want: []string{"vacuum/eu-1 2m"},
		},
		{
			name: "a cron duty is due at its next cron time after the last end",
			rows: []string{
				owned("eu-1", "web-2"), replica("web-2", "ready", "1 second"),
				replica("web-1", "ready", "1 second"), dutyRow("web-1", "vacuum@eu-1", "cron * * * * *", "10 minutes")},
			want: []string{"vacuum/eu-1 9m"},
		},
		{
			name: "a cron duty with a zone, a jitter and a deadline (issue 24) is due at its next cron time in the zone plus the whole jitter",
			rows: []string{
				owned("eu-1", "web-2"), replica("web-2", "ready", "1 second"),
				replica("web-1", "ready", "1 second"), dutyRow("web-1", "vacuum@eu-1", "cron * * * * * tz Europe/Berlin jitter 1m deadline 30s", "10 minutes")},
			want: []string{"vacuum/eu-1 8m"},
		},
		{
			name: "such a duty of a cluster with no owner is overdue too",
			rows: []string{
				fmt.Sprintf(lease, "eu-1"),
				replica("web-1", "stopped", "10 minutes"), dutyRow("web-1", "vacuum@eu-1", "every 1m tz America/New_York jitter 2m", "12 minutes")},
			want: []string{"vacuum/eu-1 9m"},
		},
		{
			name: "not such a duty within its jitter (the check is never early)",
			rows: []string{
				owned("eu-1", "web-2"), replica("web-2", "ready", "1 second"),
				replica("web-1", "ready", "1 second"), dutyRow("web-1", "vacuum@eu-1", "every 1m jitter 5m", "5 minutes")},
		},
		{
			name: "a duty of a cluster with no owner (every replica stopped cleanly, the leases released) is overdue",
			rows: []string{
				fmt.Sprintf(lease, "eu-1"),
				replica("web-1", "stopped", "10 minutes"), dutyRow("web-1", "vacuum@eu-1", "every 1m", "12 minutes")},
			want: []string{"vacuum/eu-1 11m"},
		},
		{
			name: "not a duty whose owner runs it (its row has a due time ahead), whatever an old owner's row says",
			rows: []string{
				owned("eu-1", "web-2"),
				replica("web-1", "ready", "1 second"), dutyRow("web-1", "vacuum@eu-1", "every 1m", "1 hour"),
				replica("web-2", "ready", "1 second"), status("web-2", "vacuum@eu-1", "installation", "+30 seconds", "30 seconds"),
				run("vacuum", "web-2", "eu-1", "30 seconds")},
		},
		{
			name: "not such a duty when the job is paused",
			rows: []string{
				owned("eu-1", "web-2"), replica("web-2", "ready", "1 second"),
				replica("web-1", "ready", "1 second"), dutyRow("web-1", "vacuum@eu-1", "every 1m", "10 minutes"),
				fmt.Sprintf(paused, "vacuum")},
		},
		{
			name: "such a duty whose pause ended is overdue from the pause's end",
			rows: []string{
				owned("eu-1", "web-2"), replica("web-2", "ready", "1 second"),
				replica("web-1", "ready", "1 second"), dutyRow("web-1", "vacuum@eu-1", "every 1m", "10 minutes"),
				fmt.Sprintf(pausedUntil, "vacuum", ago("2 minutes"))},
			want: []string{"vacuum/eu-1 2m"},
		},
		{
			name: "not such a duty while its pause has not ended",
			rows: []string{
				owned("eu-1", "web-2"), replica("web-2", "ready", "1 second"),
				replica("web-1", "ready", "1 second"), dutyRow("web-1", "vacuum@eu-1", "every 1m", "10 minutes"),
				fmt.Sprintf(pausedUntil, "vacuum", ago("+1 minute"))},
		},
		{
			name: "not such a duty of a cluster removed from cluster_lease",
			rows: []string{
				replica("web-1", "ready", "1 second"), dutyRow("web-1", "vacuum@eu-1", "every 1m", "10 minutes")},
		},
		{
			name: "not such a duty whose rows are of replicas last up more than 7 days ago",
			rows: []string{
				owned("eu-1", "web-2"), replica("web-2", "ready", "1 second"),
				replica("web-1", "stopped", "8 days"), dutyRow("web-1", "vacuum@eu-1", "every 1m", "8 days")},
		},
		{
			name: "such a duty follows the job's schedule override",
			rows: []string{
				owned("eu-1", "web-2"), replica("web-2", "ready", "1 second"),
				replica("web-1", "ready", "1 second"), dutyRow("web-1", "vacuum@eu-1", "every 1m", "10 minutes"),
				`INSERT INTO studio_job_setting (job_id, schedule, updated_by) VALUES ('vacuum', 'every 1h', 'alice')`},
		},
		{
			name: "a duty row whose schedule does not parse is left out, and the other jobs are still listed",
			rows: []string{
				owned("eu-1", "web-2"), replica("web-2", "ready", "1 second"),
				replica("web-1", "ready", "1 second"), dutyRow("web-1", "vacuum@eu-1", "cron 99 * * * *", "10 minutes"),
				dutyRow("web-1", "scrub@eu-1", "every soon", "10 minutes"),
				status("web-1", "sweep", "installation", "2 minutes", "")},
			want: []string{"sweep/ 2m"},
		},
		{
			name: "a next_fire_at of -infinity counts as no due time, and the other jobs are still listed",
			rows: []string{replica("web-1", "ready", "1 second"), status("web-1", "sweep", "installation", "2 minutes", ""),
				`INSERT INTO studio_job_status (replica_id, job_id, scope, next_fire_at, last_started_at) VALUES ('web-1', 'bad', 'installation', '-infinity', '-infinity')`},
			want: []string{"sweep/ 2m"},
		},
		{
			name: "and one of infinity",
			rows: []string{replica("web-1", "ready", "1 second"), status("web-1", "sweep", "installation", "2 minutes", ""),
				`INSERT INTO studio_job_status (replica_id, job_id, scope, next_fire_at) VALUES ('web-1', 'bad', 'installation', 'infinity')`},
			want: []string{"sweep/ 2m"},
		},
		{
			name: "infinite times in a duty's rows and runs are left out",
			rows: []string{
				owned("eu-1", "web-2"), replica("web-2", "ready", "1 second"),
				replica("web-1", "ready", "1 second"), dutyRow("web-1", "vacuum@eu-1", "every 1m", "10 minutes"),
				`INSERT INTO studio_job_status (replica_id, job_id, scope, schedule, next_fire_at, last_finished_at, updated_at) VALUES ('web-1', 'scrub@eu-1', 'installation', 'every 1m', '-infinity', 'infinity', 'infinity')`,
				`INSERT INTO studio_job_run (job_id, replica_id, cluster, started_at, finished_at, outcome) VALUES ('vacuum', 'web-1', 'eu-1', '-infinity', '-infinity', 'succeeded')`,
				status("web-1", "sweep", "installation", "2 minutes", "")},
			want: []string{"sweep/ 2m", "vacuum/eu-1 9m"},
		},
		{
			name: "a live replica's due time passed while another live replica's is ahead: overdue (one replica's timer is stuck)",
			rows: []string{
				replica("web-1", "ready", "1 second"), status("web-1", "sweep", "installation", "+30 seconds", ""),
				replica("web-2", "ready", "1 second"), status("web-2", "sweep", "installation", "3 minutes", "")},
			want: []string{"sweep/ 3m"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			pool := newPool(t)
			grace := c.grace
			if grace == 0 {
				grace = overdue.DefaultGrace
			}
			// The fixture and the read in one transaction: one now(), so a
			// cron's due time (a whole minute) is the same whole number of
			// minutes before it however long the machine takes between them.
			ctx := context.Background()
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			for _, s := range c.rows {
				if _, err := tx.Exec(ctx, s); err != nil {
					t.Fatalf("%s: %v", s, err)
				}
			}
			g := got(t, tx, grace)
			if strings.Join(g, ", ") != strings.Join(c.want, ", ") {
				t.Fatalf("overdue: %q, want %q", g, c.want)
			}
		})
	}
}

// The due time and the overdue seconds are the row's, in database time.
func TestOverdueJobsDueTime(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	exec(t, pool, replica("web-1", "ready", "10 minutes"),
		`INSERT INTO studio_job_status (replica_id, job_id, scope, next_fire_at) VALUES ('web-1', 'sweep', 'installation', '2026-01-02 03:04:05.678+00')`)
	js, err := overdue.List(context.Background(), pool, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var now time.Time
	if err := pool.QueryRow(context.Background(), `SELECT now()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	want := time.Date(2026, 1, 2, 3, 4, 5, 678e6, time.UTC)
	if len(js) != 1 || !js[0].DueAt.Equal(want) || js[0].DueAt.Location() != time.UTC {
		t.Fatalf("got %+v, want due at %s (UTC)", js, want)
	}
	if d := now.Sub(want).Seconds() - js[0].OverdueSeconds; d > 5 || d < -5 {
		t.Fatalf("overdue_seconds %v, want about %v", js[0].OverdueSeconds, now.Sub(want).Seconds())
	}
}

// The inspector of docs/roles.sql reads it (a monitor with read-only
// access), and so does the replica (its metric); a sql job's role may
// not. A session whose search_path does not name the studio schema finds
// the tables all the same.
func TestRolesCallTheFunction(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	roles, err := os.ReadFile("../../docs/roles.sql")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if err := conn.Conn().PgConn().Exec(ctx, string(roles)).Close(); err != nil {
		t.Fatalf("docs/roles.sql: %v", err)
	}
	// A duty whose owner does not run it too: the function then calls its
	// helper studio_schedule_next (migration 00013), which the role must
	// be able to call as well.
	exec(t, pool, replica("web-1", "ready", "10 minutes"), status("web-1", "sweep", "installation", "5 minutes", ""),
		owned("eu-1", "web-1"), dutyRow("web-1", "vacuum@eu-1", "cron */5 * * * *", "20 minutes"))
	var schema string
	if err := conn.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	for _, role := range []string{"studio_inspector", "studio_operator", "studio_replica", "studio_sql_job"} {
		t.Run(role, func(t *testing.T) {
			if _, err := conn.Exec(ctx, `SET ROLE `+role); err != nil {
				t.Fatal(err)
			}
			defer conn.Exec(ctx, `RESET ROLE`)
			js, err := overdue.List(ctx, conn, time.Minute)
			if role == "studio_sql_job" {
				if err == nil || !strings.Contains(err.Error(), "permission denied") {
					t.Fatalf("a sql job's role: %v, %v; want permission denied", js, err)
				}
				return
			}
			if err != nil || len(js) != 2 || js[0].JobID != "sweep" || js[1].JobID != "vacuum" {
				t.Fatalf("got %v, %v; want sweep and vacuum", js, err)
			}
			if _, err := conn.Exec(ctx, `SET search_path = pg_catalog`); err != nil {
				t.Fatal(err)
			}
			defer conn.Exec(ctx, `RESET search_path`)
			var n int
			if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+quoteIdent(schema)+`.studio_overdue_jobs()`).Scan(&n); err != nil || n != 2 {
				t.Fatalf("with search_path pg_catalog: %d rows, %v; want 2", n, err)
			}
		})
	}
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// The function writes the liveness rule out (SQL cannot call
// liveness.LiveSQL): its numbers must be the rule's.
func TestTheFunctionUsesTheLivenessRule(t *testing.T) {
	t.Parallel()
	for _, file := range []string{"00011_overdue.sql", "00013_overdue_duties.sql", "00014_pause_end.sql"} {
		b, err := os.ReadFile("../../migrations/" + file)
		if err != nil {
			t.Fatal(err)
		}
		livenessRuleIn(t, file, string(b))
	}
}

func livenessRuleIn(t *testing.T, file, sql string) {
	t.Helper()
	for _, want := range []string{
		fmt.Sprintf("r.heartbeat_at > now() - interval '%d seconds'", int(liveness.GoneAfter/time.Second)),
		fmt.Sprintf("r.heartbeat_at <= now() + interval '%d seconds'", int(liveness.FutureTolerance/time.Second)),
		"r.state <> 'stopped'",
	} {
		if n := strings.Count(sql, want); n < 2 {
			t.Errorf("migration %s has %q %d times, want it in both liveness tests (liveness.LiveSQL)", file, want, n)
		}
	}
}

// studio_schedule_next (migrations 00013, 00018) reads a stored schedule
// as the replicas do (jobs.ParseSchedule, Schedule.Next): the due time
// after a run that ended at end, with the options after the schedule: the
// cron fields on the zone's wall clock, the whole jitter added (the latest
// time any scope's offset gives), the deadline ignored.
func TestScheduleNextFollowsTheRunner(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ends := []time.Time{
		time.Date(2026, 11, 30, 7, 7, 12, 345e6, time.UTC),
		time.Date(2026, 11, 30, 7, 15, 0, 0, time.UTC), // on a cron time: the next one
		time.Date(2026, 12, 31, 23, 59, 59, 999e6, time.UTC),
		time.Date(2027, 2, 28, 2, 0, 0, 1e6, time.UTC),
	}
	// Around each change of 2026 in the EU (01:00 UTC) and the US (2:00
	// local): the day before, and before, in and after the changed hour.
	for _, c := range []time.Time{
		time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC), time.Date(2026, 10, 25, 1, 0, 0, 0, time.UTC),
		time.Date(2026, 3, 8, 7, 0, 0, 0, time.UTC), time.Date(2026, 11, 1, 6, 0, 0, 0, time.UTC),
	} {
		for _, d := range []time.Duration{-20 * time.Hour, -150 * time.Minute, -90 * time.Minute, -61 * time.Minute,
			-40 * time.Minute, -time.Second, 0, 10 * time.Minute, 59 * time.Minute, 70 * time.Minute, 3 * time.Hour} {
			ends = append(ends, c.Add(d))
		}
	}
	texts := []string{
		"every 1m30s", "every 1h", "every 1.5s", "every 2h5m3.5s", "every 1h0m0.25s",
		"cron */15 * * * *", "cron 0 2 * * *", "cron 5,35 1-3 * * *", "cron 0 9 * * MON-FRI",
		"cron 0 0 13 * 5", "cron 0 0 13 * *", "cron 0 0 * * 5", "cron 30 6 1 JAN,jul ?", "cron 10-50/20 */6 * * *",
		"cron 0 12 29 2 *", "cron @daily", "cron @hourly", "cron @weekly", "cron @monthly", "cron @yearly", "cron 7/10 * * * *",
		// Options (issue 24), as jobs.Schedule.String writes them.
		"every 5m jitter 10s", "every 1h deadline 5m", "every 90s jitter 1m30s deadline 10s",
		"cron 0 2 * * * jitter 10m deadline 5m", "cron */15 * * * * deadline 1m", "cron @hourly jitter 1h",
		"every 1m tz Europe/Berlin", "cron 0 2 * * * tz UTC",
	}
	for _, zone := range []string{"Europe/Berlin", "America/New_York", "Australia/Lord_Howe"} {
		for _, expr := range []string{"30 2 * * *", "30 1 * * *", "0 * * * *", "*/15 * * * *", "0 2,3 * * *", "45 0-4 * * SUN", "0 12 * * *"} {
			texts = append(texts, "cron "+expr+" tz "+zone)
		}
		texts = append(texts, "cron 30 2 * * * tz "+zone+" jitter 10m deadline 5m", "cron 0 * * * * tz "+zone+" jitter 90s")
	}
	for _, text := range texts {
		sched, err := jobs.ParseSchedule(text)
		if err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		for _, end := range ends {
			// No scope: no offset; SQL adds the whole jitter.
			want := sched.Next(end).Add(sched.Jitter())
			var got *time.Time
			if err := pool.QueryRow(context.Background(), `SELECT studio_schedule_next($1::text, $2::timestamptz, $2::timestamptz + interval '10 years')`, text, end).Scan(&got); err != nil {
				t.Fatalf("%s after %s: %v", text, end, err)
			}
			// PostgreSQL keeps microseconds.
			if got == nil || !got.Equal(want.Truncate(time.Microsecond)) {
				t.Errorf("%s after %s: got %v, want %s", text, end.Format(time.RFC3339Nano), got, want.Format(time.RFC3339Nano))
				continue
			}
			// Never before the time of any scope's offset.
			for _, scope := range []string{"eu-1", "us-1", "ap-1"} {
				if due := sched.ForScope("vacuum", scope).Next(end); got.Before(due.Truncate(time.Microsecond)) {
					t.Errorf("%s after %s: got %s, before scope %s's %s", text, end.Format(time.RFC3339Nano), got, scope, due)
				}
			}
		}
	}
}

// A schedule that does not parse, or a cron time after until, is NULL,
// never an error: one bad row must not fail the function for every job.
func TestScheduleNextIsNullForWhatItCannotRead(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	end := time.Date(2026, 11, 30, 7, 7, 12, 0, time.UTC)
	for _, c := range []struct {
		text  string
		until time.Duration
	}{
		{"every soon", time.Hour}, {"every ", time.Hour}, {"every 1x", time.Hour}, {"", time.Hour}, {"weekly", time.Hour},
		{"cron 61 * * * *", time.Hour}, {"cron * * *", time.Hour}, {"cron JUNK * * * *", time.Hour}, {"cron 5-1 * * * *", time.Hour},
		{"cron 0 0 * * 7", time.Hour}, {"cron */0 * * * *", time.Hour}, {"cron 999999999999 * * * *", time.Hour},
		{"cron 0 2 * * *", time.Hour}, // due after until
		// Options it cannot read (migration 00018): an unknown zone, a
		// duration that does not parse, an option given twice, an option
		// with no schedule (an override's "tz ZONE" alone).
		{"cron * * * * * tz Mars/Olympus", time.Hour}, {"every 1m tz Nowhere/Land", time.Hour},
		{"every 1h jitter 5x", time.Hour}, {"cron * * * * * deadline soon", time.Hour}, {"every 1m jitter -5s", time.Hour},
		{"every 1m jitter 5s jitter 5s", time.Hour}, {"cron * * * * * tz UTC tz Europe/Berlin", time.Hour},
		{"tz Europe/Berlin", time.Hour}, {"jitter 5m", time.Hour}, {"cron 0 2 * * * tz", time.Hour},
		{"cron 0 2 * * * tz Europe/Berlin", time.Hour}, // due after until in its zone too
		{"cron 59 7 * * * jitter 1h", time.Hour},       // 07:59 + 1h is after until
	} {
		var got *time.Time
		if err := pool.QueryRow(context.Background(), `SELECT studio_schedule_next($1::text, $2::timestamptz, $2::timestamptz + make_interval(secs => $3))`, c.text, end, c.until.Seconds()).Scan(&got); err != nil {
			t.Fatalf("%q: %v", c.text, err)
		}
		if got != nil {
			t.Errorf("%q: got %s, want NULL", c.text, got)
		}
	}
	for _, q := range []string{
		`SELECT studio_schedule_next('every 1m', '-infinity', now())`,
		`SELECT studio_schedule_next('cron * * * * *', now(), 'infinity')`,
		`SELECT studio_schedule_next('cron * * * * *', NULL, now())`,
	} {
		var got *time.Time
		if err := pool.QueryRow(context.Background(), q).Scan(&got); err != nil || got != nil {
			t.Errorf("%s: %v, %v; want NULL", q, got, err)
		}
	}
}

// The options are read in any order (the replicas write tz, jitter,
// deadline; an edit by hand may not).
func TestScheduleNextReadsOptionsInAnyOrder(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	end := time.Date(2026, 3, 28, 23, 7, 12, 0, time.UTC)
	var want, got1, got2 time.Time
	if err := pool.QueryRow(context.Background(), `SELECT studio_schedule_next('cron 30 2 * * * tz Europe/Berlin jitter 10m deadline 5m', $1::timestamptz, $1::timestamptz + interval '1 day'),
  studio_schedule_next('  cron 30 2 * * *  deadline 5m jitter 10m   tz Europe/Berlin ', $1::timestamptz, $1::timestamptz + interval '1 day'),
  studio_schedule_next('cron 30 2 * * * jitter 10m tz Europe/Berlin', $1::timestamptz, $1::timestamptz + interval '1 day')`, end).Scan(&want, &got1, &got2); err != nil {
		t.Fatal(err)
	}
	// 02:30 does not occur in Berlin on 29 March 2026: the end of the gap,
	// 03:00 CEST (01:00 UTC), plus the jitter.
	if exp := time.Date(2026, 3, 29, 1, 10, 0, 0, time.UTC); !want.Equal(exp) || !got1.Equal(exp) || !got2.Equal(exp) {
		t.Fatalf("got %s, %s, %s; want %s", want, got1, got2, exp)
	}
}

// Migration 00018 keeps the helper's settings (the schema's search_path,
// as 00013 set it), and its Down section gives back 00013's function:
// options unread again, the new helpers gone, the settings kept.
func TestMigration18SettingsAndDown(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := context.Background()
	config := func(fn string) string {
		t.Helper()
		var c *string
		if err := pool.QueryRow(ctx, `SELECT array_to_string(proconfig, ',') FROM pg_proc WHERE oid = to_regprocedure($1)`, fn).Scan(&c); err != nil {
			t.Fatalf("%s: %v", fn, err)
		}
		if c == nil {
			return ""
		}
		return *c
	}
	next := func(text string) *time.Time {
		t.Helper()
		var got *time.Time
		if err := pool.QueryRow(ctx, `SELECT studio_schedule_next($1, '2026-11-30 07:07:12+00', '2026-12-30 07:07:12+00')`, text).Scan(&got); err != nil {
			t.Fatalf("%q: %v", text, err)
		}
		return got
	}
	for _, fn := range []string{"studio_schedule_next(text, timestamptz, timestamptz)", "studio_local_instant(timestamp, text)", "studio_go_duration(text)"} {
		if c := config(fn); !strings.HasPrefix(c, "search_path=") || !strings.HasSuffix(c, ", pg_temp") {
			t.Errorf("%s: settings %q, want the schema's search_path", fn, c)
		}
	}
	if next("every 1m jitter 10s") == nil {
		t.Fatal("00018 does not read a jitter")
	}
	text, err := os.ReadFile("../../migrations/00018_schedule_options.sql")
	if err != nil {
		t.Fatal(err)
	}
	_, down, ok := strings.Cut(string(text), "-- +goose Down")
	if !ok {
		t.Fatal("00018 has no Down section")
	}
	if _, err := pool.Exec(ctx, down); err != nil {
		t.Fatalf("00018's Down section: %v", err)
	}
	if got := next("every 1m jitter 10s"); got != nil {
		t.Errorf("after Down, a jitter gives %s, want NULL (00013's function)", got)
	}
	if got := next("cron 0 2 * * *"); got == nil || !got.Equal(time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC)) {
		t.Errorf("after Down, cron 0 2 * * * gives %v", got)
	}
	if c := config("studio_schedule_next(text, timestamptz, timestamptz)"); !strings.HasPrefix(c, "search_path=") {
		t.Errorf("after Down, settings %q, want the schema's search_path", c)
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_proc WHERE proname IN ('studio_local_instant', 'studio_go_duration')`).Scan(&left); err != nil || left != 0 {
		t.Errorf("after Down, %d of the new helpers left (%v)", left, err)
	}
}
