package jobstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/bus"
	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
)

// reportJob makes job known: a replica has reported it.
func reportJob(t testing.TB, pool *pgxpool.Pool, job string) {
	t.Helper()
	s := jobstore.NewStore(pool, "replica-1", nil)
	s.PutStatus(jobs.Status{JobID: job, Scope: jobs.ScopeInstallation, Schedule: "every 1m"})
	mustFlush(t, s)
}

func setSetting(t testing.TB, pool *pgxpool.Pool, job, schedule string, paused bool) {
	t.Helper()
	var sched any
	if schedule != "" {
		sched = schedule
	}
	_, err := pool.Exec(t.Context(), `INSERT INTO studio_job_setting (job_id, schedule, paused, updated_by) VALUES ($1, $2, $3, 'test')
ON CONFLICT (job_id) DO UPDATE SET schedule = EXCLUDED.schedule, paused = EXCLUDED.paused`, job, sched, paused)
	if err != nil {
		t.Fatal(err)
	}
}

func mustGet(t testing.TB, c *jobstore.SettingsCache, job string) jobs.Setting {
	t.Helper()
	s, err := c.Get(t.Context(), job)
	if err != nil {
		t.Fatalf("Get(%q): %v", job, err)
	}
	return s
}

func TestSettingsCacheLoadsEverySettingInOneQueryThenAnswersFromMemory(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	setSetting(t, pool, "report", "every 45s", false)
	setSetting(t, pool, "reaper", "", true)
	q := &countingQuerier{Querier: pool}
	c := jobstore.NewSettingsCache(q)

	if s := mustGet(t, c, "report"); s.JobID != "report" || s.Schedule != "every 45s" || s.Paused || s.UpdatedBy != "test" || s.UpdatedAt.IsZero() {
		t.Errorf("Get(report) = %+v", s)
	}
	if n, texts, _ := q.calls(); n != 1 || strings.Contains(texts[0], "WHERE") {
		t.Errorf("the first Get ran %d statements %q, want one query of every setting", n, texts)
	}
	for range 100 {
		mustGet(t, c, "report")
		mustGet(t, c, "reaper")
		mustGet(t, c, "no-setting")
	}
	if s := mustGet(t, c, "reaper"); s.Schedule != "" || !s.Paused {
		t.Errorf("Get(reaper) = %+v, want paused without a schedule", s)
	}
	if s := mustGet(t, c, "no-setting"); s != (jobs.Setting{}) {
		t.Errorf("Get(no-setting) = %+v, want the zero Setting", s)
	}
	if n, texts, _ := q.calls(); n != 0 {
		t.Errorf("302 later Gets ran %d statements %q, want none", n, texts)
	}

	// A change in the database is not seen until the job is invalidated.
	setSetting(t, pool, "report", "every 2m", true)
	setSetting(t, pool, "reaper", "cron 0 2 * * *", false)
	if s := mustGet(t, c, "report"); s.Schedule != "every 45s" {
		t.Errorf("Get(report) before Invalidate = %+v, want the cached every 45s", s)
	}
	q.calls()

	c.Invalidate("report")
	if s := mustGet(t, c, "reaper"); s.Schedule != "" || !s.Paused {
		t.Errorf("Get(reaper) after Invalidate(report) = %+v, want its cached value", s)
	}
	if n, texts, _ := q.calls(); n != 0 {
		t.Errorf("Get of another job after Invalidate(report) ran %q, want nothing", texts)
	}
	if s := mustGet(t, c, "report"); s.Schedule != "every 2m" || !s.Paused {
		t.Errorf("Get(report) after Invalidate = %+v, want the new every 2m, paused", s)
	}
	n, texts, args := q.calls()
	if n != 1 || !strings.Contains(texts[0], "WHERE job_id = $1") || !reflect.DeepEqual(args[0], []any{"report"}) {
		t.Errorf("Get after Invalidate ran %d statements %q %v, want one query of report only", n, texts, args)
	}
	mustGet(t, c, "report")
	if n, _, _ := q.calls(); n != 0 {
		t.Errorf("a second Get after the reload ran %d statements, want none", n)
	}

	// A setting deleted in the database disappears on reload.
	if _, err := pool.Exec(t.Context(), `DELETE FROM studio_job_setting WHERE job_id = 'report'`); err != nil {
		t.Fatal(err)
	}
	c.Invalidate("report")
	if s := mustGet(t, c, "report"); s != (jobs.Setting{}) {
		t.Errorf("Get(report) after its row was deleted = %+v, want the zero Setting", s)
	}

	// InvalidateAll reloads everything, in one query.
	q.calls()
	c.InvalidateAll()
	if s := mustGet(t, c, "reaper"); s.Schedule != "cron 0 2 * * *" || s.Paused {
		t.Errorf("Get(reaper) after InvalidateAll = %+v, want cron 0 2 * * *, not paused", s)
	}
	if n, texts, _ := q.calls(); n != 1 || strings.Contains(texts[0], "WHERE") {
		t.Errorf("Get after InvalidateAll ran %d statements %q, want one query of every setting", n, texts)
	}
}

// auditRow is a studio_audit row.
type auditRow struct {
	Actor, Action, Target, Reason string
	Detail                        map[string]any
}

func auditRows(t testing.TB, pool *pgxpool.Pool) []auditRow {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT actor, action, target, reason, detail FROM studio_audit ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (auditRow, error) {
		var a auditRow
		var detail []byte
		if err := r.Scan(&a.Actor, &a.Action, &a.Target, &a.Reason, &detail); err != nil {
			return a, err
		}
		return a, json.Unmarshal(detail, &a.Detail)
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func settingRow(t testing.TB, pool *pgxpool.Pool, job string) (schedule *string, paused bool, by string, ok bool) {
	t.Helper()
	err := pool.QueryRow(t.Context(), `SELECT schedule, paused, updated_by FROM studio_job_setting WHERE job_id = $1`, job).Scan(&schedule, &paused, &by)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	return schedule, paused, by, true
}

func TestApplyChangeWritesTheSettingAnAuditRowAndASignal(t *testing.T) {
	t.Parallel()
	pool, url := newPool(t)
	conn := listen(t, url)
	reportJob(t, pool, "report")
	every45 := every(t, 45*time.Second)
	daily := cron(t, "0 2 * * *")

	steps := []struct {
		name         string
		change       jobstore.Change
		wantSchedule string
		wantPaused   bool
		action       string
		detail       map[string]any
	}{
		{"pause", jobstore.Change{Pause: ptr(true), Actor: "ana@ops", Reason: "incident 42"}, "", true, "jobs.pause",
			withPause(map[string]any{"schedule_before": "", "paused_before": false, "schedule_after": "", "paused_after": true},
				nil, nil, nil, "ana@ops", "incident 42", nil)},
		{"set every 45s", jobstore.Change{Schedule: &every45, Actor: "ana@ops", Reason: "slower"}, "every 45s", true, "jobs.set",
			map[string]any{"schedule_before": "", "paused_before": true, "schedule_after": "every 45s", "paused_after": true}},
		{"resume", jobstore.Change{Pause: ptr(false), Actor: "bo@ops", Reason: "fixed"}, "every 45s", false, "jobs.resume",
			withPause(map[string]any{"schedule_before": "every 45s", "paused_before": true, "schedule_after": "every 45s", "paused_after": false},
				"ana@ops", "incident 42", nil, nil, nil, nil)},
		{"set a cron", jobstore.Change{Schedule: &daily, Actor: "bo@ops"}, "cron 0 2 * * *", false, "jobs.set",
			map[string]any{"schedule_before": "every 45s", "paused_before": false, "schedule_after": "cron 0 2 * * *", "paused_after": false}},
		{"clear", jobstore.Change{Schedule: &jobs.Schedule{}, Actor: "bo@ops", Reason: "back to config"}, "", false, "jobs.set",
			map[string]any{"schedule_before": "cron 0 2 * * *", "paused_before": false, "schedule_after": "", "paused_after": false}},
	}
	for i, st := range steps {
		before := dbNow(t, pool)
		got, err := jobstore.ApplyChange(t.Context(), pool, "report", st.change)
		if err != nil {
			t.Fatalf("%s: ApplyChange: %v", st.name, err)
		}
		if got.JobID != "report" || got.Schedule != st.wantSchedule || got.Paused != st.wantPaused || got.UpdatedBy != st.change.Actor ||
			got.UpdatedAt.Before(before) {
			t.Errorf("%s: ApplyChange = %+v, want schedule %q, paused %v, by %s, at or after %s", st.name, got, st.wantSchedule, st.wantPaused, st.change.Actor, before)
		}
		sched, paused, by, ok := settingRow(t, pool, "report")
		if !ok || paused != st.wantPaused || by != st.change.Actor || (sched == nil) != (st.wantSchedule == "") || (sched != nil && *sched != st.wantSchedule) {
			t.Errorf("%s: setting row = schedule %v, paused %v, by %q (exists %v)", st.name, sched, paused, by, ok)
		}
		audits := auditRows(t, pool)
		if len(audits) != i+1 {
			t.Fatalf("%s: %d audit rows, want %d", st.name, len(audits), i+1)
		}
		want := auditRow{Actor: st.change.Actor, Action: st.action, Target: "report", Reason: st.change.Reason, Detail: st.detail}
		if a := audits[i]; !reflect.DeepEqual(a, want) {
			t.Errorf("%s: audit row = %+v\nwant %+v", st.name, a, want)
		}
		if m := nextMessage(t, conn); m.Type != bus.TypeSignal || m.Kind != bus.KindJobSettings || m.Key != "report" {
			t.Errorf("%s: bus message = %+v, want a job.settings signal for report", st.name, m)
		}
	}
	expectNoMessage(t, pool, conn)
}

// failingCommit is a pool whose transactions roll back at commit.
type failingCommit struct{ *pgxpool.Pool }

func (f failingCommit) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := f.Pool.Begin(ctx)
	return rollbackTx{tx}, err
}

type rollbackTx struct{ pgx.Tx }

var errCommit = errors.New("injected commit failure")

func (tx rollbackTx) Commit(ctx context.Context) error {
	tx.Tx.Rollback(ctx)
	return errCommit
}

func TestApplyChangeAndTriggerChangeNothingWhenTheirTransactionFails(t *testing.T) {
	t.Parallel()
	pool, url := newPool(t)
	conn := listen(t, url)
	reportJob(t, pool, "report")
	insertReplica(t, pool, "replica-1", "ready", 0)

	_, err := jobstore.ApplyChange(t.Context(), failingCommit{pool}, "report", jobstore.Change{Pause: ptr(true), Actor: "ana@ops"})
	if !errors.Is(err, errCommit) {
		t.Errorf("ApplyChange = %v, want the commit error", err)
	}
	_, err = jobstore.Trigger(t.Context(), failingCommit{pool}, "report", "ana@ops", "now")
	if !errors.Is(err, errCommit) {
		t.Errorf("Trigger = %v, want the commit error", err)
	}
	if _, _, _, ok := settingRow(t, pool, "report"); ok {
		t.Error("a setting row was written outside the transaction")
	}
	if a := auditRows(t, pool); len(a) != 0 {
		t.Errorf("audit rows were written outside the transaction: %+v", a)
	}
	if n := count(t, pool, `SELECT count(*) FROM studio_request`); n != 0 {
		t.Errorf("%d request rows were written outside the transaction", n)
	}
	expectNoMessage(t, pool, conn)
}

func TestApplyChangeAndTriggerOnAnUnknownJobChangeNothing(t *testing.T) {
	t.Parallel()
	pool, url := newPool(t)
	conn := listen(t, url)
	reportJob(t, pool, "report")

	_, err := jobstore.ApplyChange(t.Context(), pool, "nope", jobstore.Change{Pause: ptr(true), Actor: "ana@ops"})
	if !errors.Is(err, jobstore.ErrUnknownJob) {
		t.Errorf("ApplyChange(nope) = %v, want ErrUnknownJob", err)
	} else if want := `job "nope": no such job (no replica has reported it)`; err.Error() != want {
		t.Errorf("ApplyChange(nope) = %q, want %q", err, want)
	}
	if _, err := jobstore.Trigger(t.Context(), pool, "nope", "ana@ops", "now"); !errors.Is(err, jobstore.ErrUnknownJob) {
		t.Errorf("Trigger(nope) = %v, want ErrUnknownJob", err)
	}
	if n := count(t, pool, `SELECT count(*) FROM studio_job_setting`); n != 0 {
		t.Errorf("%d setting rows, want none", n)
	}
	if a := auditRows(t, pool); len(a) != 0 {
		t.Errorf("audit rows for an unknown job: %+v", a)
	}
	expectNoMessage(t, pool, conn)

	if err := jobstore.Known(t.Context(), pool, "report"); err != nil {
		t.Errorf("Known(report) = %v, want nil", err)
	}
}

func TestTriggerSendsASignalAndAnAuditRow(t *testing.T) {
	t.Parallel()
	pool, url := newPool(t)
	conn := listen(t, url)
	reportJob(t, pool, "report")
	insertReplica(t, pool, "replica-1", "ready", 0)

	if n, err := jobstore.Trigger(t.Context(), pool, "report", "ana@ops", "rerun after fix"); err != nil || n != 1 {
		t.Fatalf("Trigger = %d, %v; want one request row", n, err)
	}
	if m := nextMessage(t, conn); m.Type != bus.TypeSignal || m.Kind != bus.KindJobTrigger || m.Key != "report" {
		t.Errorf("bus message = %+v, want a job.trigger signal for report", m)
	}
	expectNoMessage(t, pool, conn)
	want := []auditRow{{Actor: "ana@ops", Action: "jobs.trigger", Target: "report", Reason: "rerun after fix", Detail: map[string]any{}}}
	if got := auditRows(t, pool); !reflect.DeepEqual(got, want) {
		t.Errorf("audit rows = %+v, want %+v", got, want)
	}
	if n := count(t, pool, `SELECT count(*) FROM studio_job_setting`); n != 0 {
		t.Errorf("Trigger wrote %d setting rows, want none", n)
	}
}

// A zone change (`jobs set --tz`) is stored with the schedule override, so
// it is audited and read like one: a zone alone, a schedule that keeps the
// zone, "" back to the configured zone, and a clear of both. A stored
// override that does not parse is not silently replaced by a zone change.
func TestApplyChangeStoresAZoneWithTheScheduleOverride(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	reportJob(t, pool, "report")
	cron, err := jobs.ParseCron("0 4 * * *")
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		change jobstore.Change
		want   string
	}{
		{jobstore.Change{Zone: ptr("Europe/Berlin")}, "tz Europe/Berlin"},
		{jobstore.Change{Schedule: &cron}, "cron 0 4 * * * tz Europe/Berlin"},
		{jobstore.Change{Zone: ptr("America/New_York")}, "cron 0 4 * * * tz America/New_York"},
		{jobstore.Change{Zone: ptr("")}, "cron 0 4 * * *"},
		{jobstore.Change{Zone: ptr("UTC")}, "cron 0 4 * * * tz UTC"},
		{jobstore.Change{Schedule: &jobs.Schedule{}, Zone: ptr("")}, ""},
	}
	for i, st := range steps {
		st.change.Actor = "ana@ops"
		got, err := jobstore.ApplyChange(t.Context(), pool, "report", st.change)
		if err != nil || got.Schedule != st.want {
			t.Fatalf("step %d: ApplyChange = %q, %v; want %q", i, got.Schedule, err, st.want)
		}
	}
	var audits int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM studio_audit WHERE action = 'jobs.set' AND target = 'report'`).Scan(&audits); err != nil || audits != len(steps) {
		t.Fatalf("%d jobs.set audit rows (%v), want %d", audits, err, len(steps))
	}
	if _, err := jobstore.ApplyChange(t.Context(), pool, "report", jobstore.Change{Zone: ptr("Mars/Olympus"), Actor: "ana@ops"}); err == nil || !strings.Contains(err.Error(), "Mars/Olympus") {
		t.Errorf("an unknown zone: %v", err)
	}
	setSetting(t, pool, "report", "cron 61 * * * *", false)
	if _, err := jobstore.ApplyChange(t.Context(), pool, "report", jobstore.Change{Zone: ptr("Europe/Berlin"), Actor: "ana@ops"}); err == nil || !strings.Contains(err.Error(), "malformed") {
		t.Errorf("a zone over a malformed override: %v", err)
	}
}
