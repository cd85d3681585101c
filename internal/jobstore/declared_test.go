package jobstore_test

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/bus"
	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
)

// statusOf writes status rows of replica for the job ids given.
func statusOf(t testing.TB, pool *pgxpool.Pool, replica string, ids ...string) {
	t.Helper()
	s := jobstore.NewStore(pool, replica, nil)
	now := time.Now()
	for _, id := range ids {
		s.PutStatus(jobs.Status{JobID: id, Scope: jobs.ScopeInstance, Schedule: "every 1m", Running: true, NextFireAt: &now})
	}
	mustFlush(t, s)
}

func jobRows(t testing.TB, pool *pgxpool.Pool, replica string) []string {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT job_id FROM studio_job_status WHERE replica_id = $1 ORDER BY job_id`, replica)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		out = append(out, id)
	}
	return out
}

func TestARestartedReplicaRemovesItsRowsOfJobsItNoLongerDeclares(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	// Config X: a, b, and the per-cluster job sync on c1 and c2; the
	// replica other has b as well.
	statusOf(t, pool, "web-1", "a", "b", "sync@c1", "sync@c2", "synced@c1")
	statusOf(t, pool, "other", "b")

	// Config Y: a and sync (which owns no cluster yet).
	s := jobstore.NewStore(pool, "web-1", nil)
	removed, err := s.RetireUndeclared(t.Context(), []string{"a"}, []string{"sync"})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	if want := []string{"b", "synced@c1"}; !reflect.DeepEqual(removed, want) {
		t.Errorf("removed %v, want %v", removed, want)
	}
	if got, want := jobRows(t, pool, "web-1"), []string{"a", "sync@c1", "sync@c2"}; !reflect.DeepEqual(got, want) {
		t.Errorf("web-1's rows: %v, want %v", got, want)
	}
	if got := jobRows(t, pool, "other"); !reflect.DeepEqual(got, []string{"b"}) {
		t.Errorf("other's rows: %v, want only b: a replica removes its own rows only", got)
	}
	// What stays was an earlier process's: not running, no timer.
	if n := count(t, pool, `SELECT count(*) FROM studio_job_status WHERE replica_id = 'web-1' AND (running OR next_fire_at IS NOT NULL)`); n != 0 {
		t.Errorf("%d rows of web-1 still running or with a next fire", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM studio_job_status WHERE replica_id = 'other' AND running`); n != 1 {
		t.Errorf("other's row was reset too")
	}
}

func TestForgetIsRefusedWhileALiveReplicaDeclaresTheJob(t *testing.T) {
	t.Parallel()
	pool, url := newPool(t)
	insertReplica(t, pool, "web-1", "ready", 0)
	insertReplica(t, pool, "web-2", "stopped", time.Minute)
	statusOf(t, pool, "web-1", "keep")
	statusOf(t, pool, "web-2", "keep", "gone", "sync@c1")
	if _, err := pool.Exec(t.Context(), `INSERT INTO studio_job_setting (job_id, paused, updated_by) VALUES ('gone', true, 'ana'), ('sync', true, 'ana'), ('keep', true, 'ana')`); err != nil {
		t.Fatal(err)
	}

	if live, err := jobstore.LiveDeclarers(t.Context(), pool, "keep"); err != nil || !reflect.DeepEqual(live, []string{"web-1"}) {
		t.Errorf("LiveDeclarers(keep) = %v, %v; want [web-1]", live, err)
	}
	if live, err := jobstore.LiveDeclarers(t.Context(), pool, "gone"); err != nil || len(live) != 0 {
		t.Errorf("LiveDeclarers(gone) = %v, %v; want none", live, err)
	}
	// web-2's row of keep is left behind, but web-1 runs keep: refused,
	// with --replica too.
	for _, replica := range []string{"", "web-2"} {
		_, err := jobstore.Forget(t.Context(), pool, "keep", replica, "ana@ops", "")
		if !errors.Is(err, jobstore.ErrDeclared) {
			t.Errorf("Forget(keep, %q) = %v, want ErrDeclared", replica, err)
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM studio_job_status WHERE job_id = 'keep'`); n != 2 {
		t.Errorf("a refused forget removed rows: %d left", n)
	}
	// Nothing of a replica that has no row: not found.
	if _, err := jobstore.Forget(t.Context(), pool, "gone", "web-1", "ana@ops", ""); !errors.Is(err, jobstore.ErrUnknownJob) {
		t.Errorf("Forget(gone, web-1) = %v, want ErrUnknownJob", err)
	}

	conn := listen(t, url)
	f, err := jobstore.Forget(t.Context(), pool, "gone", "", "ana@ops", "removed")
	if err != nil {
		t.Fatal(err)
	}
	if want := []jobstore.ForgottenRow{{ReplicaID: "web-2", JobID: "gone"}}; !reflect.DeepEqual(f.Rows, want) || !f.Settings {
		t.Errorf("Forget(gone) = %+v, want web-2's row and the setting", f)
	}
	if m := nextMessage(t, conn); m.Type != bus.TypeSignal || m.Kind != bus.KindJobSettings || m.Key != "gone" {
		t.Errorf("bus message %+v, want a job.settings signal for gone", m)
	}
	// The duties of a per-cluster job go with its id.
	f, err = jobstore.Forget(t.Context(), pool, "sync", "web-2", "ana@ops", "")
	if err != nil || len(f.Rows) != 1 || f.Rows[0].JobID != "sync@c1" || !f.Settings {
		t.Errorf("Forget(sync) = %+v, %v; want the duty row and the setting", f, err)
	}
	if got := jobRows(t, pool, "web-2"); !reflect.DeepEqual(got, []string{"keep"}) {
		t.Errorf("web-2's rows after forget: %v", got)
	}
	if n := count(t, pool, `SELECT count(*) FROM studio_job_setting WHERE job_id = 'keep'`); n != 1 {
		t.Error("the setting of a job still declared was removed")
	}
	audits := auditRows(t, pool)
	if len(audits) != 2 || audits[0].Action != "jobs.forget" || audits[0].Target != "gone" || audits[0].Reason != "removed" ||
		audits[1].Target != "sync" || audits[1].Detail["replica"] != "web-2" {
		t.Errorf("audit rows: %+v", audits)
	}
}

func TestAResumeThatFindsTheJobResumedStillSignals(t *testing.T) {
	t.Parallel()
	pool, url := newPool(t)
	reportJob(t, pool, "report")
	// Resumed in SQL, without a signal.
	setSetting(t, pool, "report", "", false)
	conn := listen(t, url)
	_, err := jobstore.ApplyChange(t.Context(), pool, "report", jobstore.Change{Pause: ptr(false), Actor: "ana@ops"})
	if !errors.Is(err, jobstore.ErrUnchanged) {
		t.Fatalf("ApplyChange = %v, want ErrUnchanged", err)
	}
	if m := nextMessage(t, conn); m.Type != bus.TypeSignal || m.Kind != bus.KindJobSettings || m.Key != "report" {
		t.Errorf("bus message %+v, want a job.settings signal for report", m)
	}
	if a := auditRows(t, pool); len(a) != 0 {
		t.Errorf("an unchanged resume was audited: %+v", a)
	}
}

func TestTheSettingsPollFindsASettingChangedInSQL(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	c := jobstore.NewSettingsCache(pool)
	setSetting(t, pool, "a", "", true)
	if _, err := c.Get(t.Context(), "a"); err != nil {
		t.Fatal(err)
	}
	changed, err := c.Refresh(t.Context())
	if err != nil || len(changed) != 0 {
		t.Fatalf("Refresh with nothing changed = %v, %v", changed, err)
	}
	// In SQL, no signal: a resumed, b paused, c's row with default values.
	setSetting(t, pool, "a", "", false)
	setSetting(t, pool, "b", "every 5m", true)
	setSetting(t, pool, "c", "", false)
	changed, err = c.Refresh(t.Context())
	slices.Sort(changed)
	if err != nil || !reflect.DeepEqual(changed, []string{"a", "b"}) {
		t.Errorf("Refresh = %v, %v; want [a b]", changed, err)
	}
	if s, _ := c.Get(t.Context(), "a"); s.Paused {
		t.Error("the cache still says a is paused")
	}
	if _, err := pool.Exec(t.Context(), `DELETE FROM studio_job_setting WHERE job_id = 'b'`); err != nil {
		t.Fatal(err)
	}
	if changed, err = c.Refresh(t.Context()); err != nil || !reflect.DeepEqual(changed, []string{"b"}) {
		t.Errorf("Refresh after a delete = %v, %v; want [b]", changed, err)
	}
}

func TestReadStatusOfAPerClusterJobReadsItsDuties(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	insertReplica(t, pool, "web-1", "ready", 0)
	statusOf(t, pool, "web-1", "sync@c1", "sync@c2", "syncer", "sync")
	for _, tt := range []struct {
		id   string
		want []string
	}{
		{"sync", []string{"sync", "sync@c1", "sync@c2"}},
		{"sync@c2", []string{"sync@c2"}},
		{"syncer", []string{"syncer"}},
		{"sync@c9", nil},
	} {
		rows, _, err := jobstore.ReadStatus(t.Context(), pool, tt.id)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range rows {
			got = append(got, r.JobID)
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ReadStatus(%s) = %v, want %v", tt.id, got, tt.want)
		}
	}
}

func TestARunInProgressWithinItsTimeoutIsNotStalled(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { t := now.Add(-d); return &t }
	// A 30 s duty every 2 s, 25 s into its run; its last run ended 26 s ago.
	running := jobstore.ReplicaStatus{Live: true, Status: jobs.Status{ReplicaID: "web-1", JobID: "sync@c1", Schedule: "every 2s",
		Running: true, LastStartedAt: at(25 * time.Second), LastFinishedAt: at(26 * time.Second), LastOutcome: jobs.OutcomeSucceeded}}
	// The same job's row on a replica whose lease moved away.
	moved := jobstore.ReplicaStatus{Live: true, Status: jobs.Status{ReplicaID: "web-2", JobID: "sync@c1", Schedule: "every 2s",
		LastStartedAt: at(time.Hour), LastFinishedAt: at(time.Hour), LastOutcome: jobs.OutcomeSucceeded}}
	if v := jobstore.Merge([]jobstore.ReplicaStatus{moved, running}, now)[0]; v.Health != jobs.HealthOK || v.LastOutcome != jobs.OutcomeRunning {
		t.Errorf("merged: health %s, outcome %s; want ok, running", v.Health, v.LastOutcome)
	}
	// Past the schedule's default timeout (5m): stalled.
	running.LastStartedAt, running.LastFinishedAt = at(6*time.Minute), at(7*time.Minute)
	if v := jobstore.Merge([]jobstore.ReplicaStatus{moved, running}, now)[0]; v.Health != jobs.HealthStalled {
		t.Errorf("a run 6m into a 5m default timeout: health %s, want stalled", v.Health)
	}
}

func TestAJobNoLiveReplicaDeclaresIsRetiredNeverStalledOrFailing(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	hourAgo := now.Add(-time.Hour)
	gone := jobstore.ReplicaStatus{Live: false, Status: jobs.Status{ReplicaID: "web-2", JobID: "broken-import", Schedule: "every 10s",
		LastStartedAt: &hourAgo, LastFinishedAt: &hourAgo, LastOutcome: jobs.OutcomeFailed, Failures: 12}}
	v := jobstore.Merge([]jobstore.ReplicaStatus{gone}, now)[0]
	if v.Health != jobs.HealthRetired || v.Replicas != 0 || v.LastOutcome != jobs.OutcomeFailed || v.Failures != 12 {
		t.Errorf("a job only a gone replica reports: health %s, replicas %d, outcome %s, failures %d; want retired, 0, its last state",
			v.Health, v.Replicas, v.LastOutcome, v.Failures)
	}
	// A live replica declaring it makes it judged again.
	live := gone
	live.Live, live.ReplicaID = true, "web-1"
	if v := jobstore.Merge([]jobstore.ReplicaStatus{gone, live}, now)[0]; v.Health != jobs.HealthFailing {
		t.Errorf("with a live replica: health %s, want failing", v.Health)
	}
}

// The timeout in force travels with the status row, so jobs list and the
// page judge a run in progress by the configured timeout, not by the
// schedule's default (5m here): a run 10m into a 1h timeout is not stalled.
func TestTheStoredTimeoutJudgesARunInProgress(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	insertReplica(t, pool, "web-1", "ready", 0)
	started := time.Now().Add(-10 * time.Minute)
	write := func(timeout time.Duration) {
		s := jobstore.NewStore(pool, "web-1", nil)
		s.PutStatus(jobs.Status{JobID: "export", Scope: jobs.ScopeInstance, Schedule: "every 2s", Running: true,
			LastStartedAt: &started, LastFinishedAt: ptr(started.Add(-time.Second)), LastOutcome: jobs.OutcomeSucceeded, Timeout: timeout})
		mustFlush(t, s)
	}
	judge := func() jobstore.View {
		rows, now, err := jobstore.ReadStatus(t.Context(), pool, "export")
		if err != nil {
			t.Fatal(err)
		}
		return jobstore.Merge(rows, now)[0]
	}
	write(time.Hour)
	rows, _, err := jobstore.ReadStatus(t.Context(), pool, "export")
	if err != nil || len(rows) != 1 || rows[0].Timeout != time.Hour {
		t.Fatalf("the stored timeout reads back as %v (%v), want 1h", rows, err)
	}
	if v := judge(); v.Health != jobs.HealthOK {
		t.Errorf("a run 10m into its 1h timeout: health %s, want ok", v.Health)
	}
	// A row without it (an older replica's): the schedule's default.
	write(0)
	if v := judge(); v.Health != jobs.HealthStalled {
		t.Errorf("a run 10m in with no stored timeout (default 5m): health %s, want stalled", v.Health)
	}
}

func TestForgetRefusalNamesTheLiveReplicasInPlainWords(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	insertReplica(t, pool, "web-1", "ready", 0)
	insertReplica(t, pool, "web-2", "ready", 0)
	statusOf(t, pool, "web-1", "both", "one")
	statusOf(t, pool, "web-2", "both")
	for _, tc := range []struct{ job, want string }{
		{"one", "live replica web-1 hosts it; "},
		{"both", "live replicas web-1, web-2 host it; "},
	} {
		_, err := jobstore.Forget(t.Context(), pool, tc.job, "", "ana@ops", "")
		if !errors.Is(err, jobstore.ErrDeclared) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Forget(%s) = %v, want ErrDeclared saying %q", tc.job, err, tc.want)
		}
	}
}
