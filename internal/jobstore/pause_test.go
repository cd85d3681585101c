package jobstore_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
)

// withPause adds a pause change's audit detail (migration 00014) to d.
func withPause(d map[string]any, byBefore, reasonBefore, untilBefore, byAfter, reasonAfter, untilAfter any) map[string]any {
	d["paused_by_before"], d["paused_reason_before"], d["paused_until_before"] = byBefore, reasonBefore, untilBefore
	d["paused_by_after"], d["paused_reason_after"], d["paused_until_after"] = byAfter, reasonAfter, untilAfter
	return d
}

// pauseRow is the pause columns of job's setting row.
func pauseRow(t testing.TB, q jobstore.Querier, job string) (paused bool, by, reason *string, until *time.Time) {
	t.Helper()
	if err := q.QueryRow(t.Context(), `SELECT paused, paused_by, paused_reason, paused_until FROM studio_job_setting WHERE job_id = $1`, job).
		Scan(&paused, &by, &reason, &until); err != nil {
		t.Fatal(err)
	}
	return paused, by, reason, until
}

func TestAPauseForADurationStoresWhoWhyAndUntilInDatabaseTime(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	reportJob(t, pool, "report")
	before := dbNow(t, pool)
	got, err := jobstore.ApplyChange(t.Context(), pool, "report", jobstore.Change{Pause: ptr(true), PauseFor: time.Hour, Actor: "ana@ops", Reason: "incident 4521"})
	if err != nil {
		t.Fatal(err)
	}
	after := dbNow(t, pool)
	if !got.Paused || got.PausedBy != "ana@ops" || got.PausedReason != "incident 4521" ||
		got.PausedUntil.Before(before.Add(time.Hour)) || got.PausedUntil.After(after.Add(time.Hour)) {
		t.Fatalf("ApplyChange = %+v, want paused by ana@ops for incident 4521 until an hour after %s", got, before)
	}
	paused, by, reason, until := pauseRow(t, pool, "report")
	if !paused || by == nil || *by != "ana@ops" || reason == nil || *reason != "incident 4521" || until == nil || !until.Equal(got.PausedUntil) {
		t.Errorf("row = paused %v, by %v, reason %v, until %v; want what ApplyChange returned", paused, by, reason, until)
	}
	a := auditRows(t, pool)[0]
	if a.Action != "jobs.pause" || a.Detail["paused_until_after"] != got.PausedUntil.Format(time.RFC3339Nano) || a.Detail["paused_reason_after"] != "incident 4521" {
		t.Errorf("audit row = %+v, want jobs.pause with the end and the reason", a)
	}
	// The commands' view: who, why and until when; the cache reads the same.
	p, err := jobstore.PausesAt(t.Context(), pool, []string{"report", "other"}, after)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := p["report"]; !ok || v.By != "ana@ops" || v.Reason != "incident 4521" || v.Until == nil || !v.Until.Equal(got.PausedUntil) || len(p) != 1 {
		t.Errorf("PausesAt = %+v", p)
	}
	if p, _ := jobstore.PausesAt(t.Context(), pool, []string{"report"}, got.PausedUntil); len(p) != 0 {
		t.Errorf("PausesAt at the end = %+v, want no pause: it ends there", p)
	}
	cache := jobstore.NewSettingsCache(pool)
	s, err := cache.Get(t.Context(), "report")
	if err != nil || !jobs.SamePause(s, got) {
		t.Errorf("cache Get = %+v, %v; want %+v", s, err, got)
	}
	if end, ok := cache.NextPauseEnd(); !ok || !end.Equal(got.PausedUntil) {
		t.Errorf("NextPauseEnd = %s, %v", end, ok)
	}
}

func TestAPauseEndThatIsNotInTheFutureWritesNothing(t *testing.T) {
	t.Parallel()
	pool, url := newPool(t)
	reportJob(t, pool, "report")
	conn := listen(t, url)
	for _, c := range []jobstore.Change{
		{Pause: ptr(true), PauseUntil: dbNow(t, pool).Add(-time.Minute), Actor: "ana@ops"},
		{Pause: ptr(true), PauseFor: -time.Second, Actor: "ana@ops"},
	} {
		if _, err := jobstore.ApplyChange(t.Context(), pool, "report", c); !errors.Is(err, jobstore.ErrPauseEndPassed) {
			t.Errorf("ApplyChange(%+v) = %v, want ErrPauseEndPassed", c, err)
		}
	}
	if _, _, _, ok := settingRow(t, pool, "report"); ok {
		t.Error("a refused pause left a setting row")
	}
	if a := auditRows(t, pool); len(a) != 0 {
		t.Errorf("audit rows = %+v, want none", a)
	}
	expectNoMessage(t, pool, conn)
}

func TestARepeatedPauseKeepsItsReasonAndAPlainOneDropsTheEnd(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	reportJob(t, pool, "report")
	ctx := t.Context()
	first, err := jobstore.ApplyChange(ctx, pool, "report", jobstore.Change{Pause: ptr(true), PauseFor: time.Hour, Actor: "ana@ops", Reason: "incident"})
	if err != nil {
		t.Fatal(err)
	}
	// The same end again: nothing changes.
	if _, err := jobstore.ApplyChange(ctx, pool, "report", jobstore.Change{Pause: ptr(true), PauseUntil: first.PausedUntil, Actor: "bo@ops"}); !errors.Is(err, jobstore.ErrUnchanged) {
		t.Errorf("the same pause again = %v, want ErrUnchanged", err)
	}
	// A plain pause: no end any more, the reason kept, by its author.
	got, err := jobstore.ApplyChange(ctx, pool, "report", jobstore.Change{Pause: ptr(true), Actor: "bo@ops"})
	if err != nil {
		t.Fatal(err)
	}
	if !got.PausedUntil.IsZero() || got.PausedReason != "incident" || got.PausedBy != "bo@ops" {
		t.Errorf("plain pause = %+v, want no end, reason kept, by bo@ops", got)
	}
	// A resume clears every pause column.
	if _, err := jobstore.ApplyChange(ctx, pool, "report", jobstore.Change{Pause: ptr(false), Actor: "bo@ops"}); err != nil {
		t.Fatal(err)
	}
	if paused, by, reason, until := pauseRow(t, pool, "report"); paused || by != nil || reason != nil || until != nil {
		t.Errorf("after resume: paused %v, by %v, reason %v, until %v", paused, by, reason, until)
	}
	if n := len(auditRows(t, pool)); n != 3 {
		t.Errorf("%d audit rows, want 3 (pause, plain pause, resume)", n)
	}
}

func TestAResumeWrittenWithoutThePauseColumnsClearsThemAndOlderReplicasStillReadThePause(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	reportJob(t, pool, "report")
	ctx := t.Context()
	if _, err := jobstore.ApplyChange(ctx, pool, "report", jobstore.Change{Pause: ptr(true), PauseFor: time.Hour, Actor: "ana@ops", Reason: "r"}); err != nil {
		t.Fatal(err)
	}
	// An older replica's read (before migration 00014) still works, and
	// sees the job paused.
	var paused bool
	var by string
	if err := pool.QueryRow(ctx, `SELECT job_id, coalesce(schedule, ''), paused, updated_at, updated_by FROM studio_job_setting`).Scan(new(string), new(string), &paused, new(time.Time), &by); err != nil || !paused {
		t.Fatalf("an older replica's read = paused %v, %v", paused, err)
	}
	// An older studioctl's resume and pause: it writes only paused and
	// updated_*; the end of the earlier pause must not come back.
	for _, p := range []bool{false, true} {
		if _, err := pool.Exec(ctx, `UPDATE studio_job_setting SET paused = $1, updated_at = now(), updated_by = 'old@ops' WHERE job_id = 'report'`, p); err != nil {
			t.Fatal(err)
		}
	}
	if paused, by, reason, until := pauseRow(t, pool, "report"); !paused || by != nil || reason != nil || until != nil {
		t.Errorf("after an old resume and pause: paused %v, by %v, reason %v, until %v; want paused without end", paused, by, reason, until)
	}
	s, err := jobstore.NewSettingsCache(pool).Get(ctx, "report")
	if err != nil || !s.Paused || s.PausedBy != "old@ops" || !s.PausedUntil.IsZero() {
		t.Errorf("setting = %+v, %v; want paused by old@ops (its updated_by), no end", s, err)
	}
}

// endPause gives job's pause an end that has passed, as if time went by.
func endPause(t testing.TB, q jobstore.Querier, job string) {
	t.Helper()
	if _, err := q.Exec(t.Context(), `UPDATE studio_job_setting SET paused_until = now() - interval '1 second' WHERE job_id = $1`, job); err != nil {
		t.Fatal(err)
	}
}

func TestReplicasRacingToEndPausesResumeEachOnceWithOneAuditRow(t *testing.T) {
	t.Parallel()
	pool, url := newPool(t)
	ctx := t.Context()
	ended := []string{"a", "b", "c"}
	for _, job := range append([]string{"forever", "later"}, ended...) {
		reportJob(t, pool, job)
		c := jobstore.Change{Pause: ptr(true), PauseFor: time.Hour, Actor: "ana@ops", Reason: "maintenance"}
		if job == "forever" {
			c.PauseFor = 0
		}
		if _, err := jobstore.ApplyChange(ctx, pool, job, c); err != nil {
			t.Fatal(err)
		}
	}
	for _, job := range ended {
		endPause(t, pool, job)
	}
	conn := listen(t, url)
	const replicas = 6
	pools := make([]*jobstore.SettingsCache, replicas)
	for i := range pools {
		pools[i] = jobstore.NewSettingsCache(openPool(t, url))
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	got := make([][]string, replicas)
	errs := make([]error, replicas)
	for i := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			got[i], errs[i] = pools[i].EndPauses(ctx, jobs.PauseEndActor("r"+string(rune('0'+i))))
		}()
	}
	close(start)
	wg.Wait()
	var all []string
	for i := range replicas {
		if errs[i] != nil {
			t.Fatalf("replica %d: %v", i, errs[i])
		}
		all = append(all, got[i]...)
	}
	slices.Sort(all)
	if !slices.Equal(all, ended) {
		t.Errorf("resumed across the replicas = %v, want each of %v once", all, ended)
	}
	var resumes []auditRow
	for _, a := range auditRows(t, pool) {
		if a.Action == "jobs.resume" {
			resumes = append(resumes, a)
		}
	}
	if len(resumes) != len(ended) {
		t.Fatalf("resume audit rows = %+v, want one for each of %v", resumes, ended)
	}
	for _, a := range resumes {
		if a.Reason != "its pause ended" || a.Detail["pause_ended"] != true || a.Detail["paused_by_before"] != "ana@ops" ||
			a.Detail["paused_reason_before"] != "maintenance" || a.Detail["paused_until_before"] == nil || len(a.Actor) < len("replica:r0") {
			t.Errorf("resume audit row = %+v", a)
		}
	}
	for _, job := range ended {
		if paused, by, _, until := pauseRow(t, pool, job); paused || by != nil || until != nil {
			t.Errorf("%s: still paused %v, by %v, until %v", job, paused, by, until)
		}
	}
	for _, job := range []string{"forever", "later"} {
		if paused, _, _, _ := pauseRow(t, pool, job); !paused {
			t.Errorf("%s: resumed; its pause has not ended", job)
		}
	}
	signalled := map[string]bool{}
	for range ended {
		signalled[nextMessage(t, conn).Key] = true
	}
	for _, job := range ended {
		if !signalled[job] {
			t.Errorf("no job.settings signal for %s (got %v)", job, signalled)
		}
	}
	// Again: nothing left to end.
	if again, err := jobstore.EndPauses(ctx, pool, "replica:late"); err != nil || len(again) != 0 {
		t.Errorf("EndPauses again = %v, %v; want nothing", again, err)
	}
}

func TestAnOperatorsNewEndWinsOverAReplicaEndingTheOldOne(t *testing.T) {
	t.Parallel()
	pool, url := newPool(t)
	ctx := t.Context()
	reportJob(t, pool, "report")
	if _, err := jobstore.ApplyChange(ctx, pool, "report", jobstore.Change{Pause: ptr(true), PauseFor: time.Hour, Actor: "ana@ops"}); err != nil {
		t.Fatal(err)
	}
	endPause(t, pool, "report")
	// The operator's transaction holds the row while it sets a new end; the
	// replica's statement waits for it and then finds the end in the future.
	other := openPool(t, url)
	tx, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, `UPDATE studio_job_setting SET paused_until = now() + interval '1 hour', updated_by = 'bo@ops' WHERE job_id = 'report'`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO studio_audit (actor, action, target) VALUES ('bo@ops', 'jobs.pause', 'report')`); err != nil {
		t.Fatal(err)
	}
	done := make(chan []jobstore.EndedPause, 1)
	go func() {
		e, err := jobstore.EndPauses(ctx, pool, "replica:r1")
		if err != nil {
			t.Error(err)
		}
		done <- e
	}()
	waitLocked(t, pool)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if e := <-done; len(e) != 0 {
		t.Errorf("EndPauses = %+v, want nothing: the pause has a new end", e)
	}
	if paused, _, _, _ := pauseRow(t, pool, "report"); !paused {
		t.Error("the job was resumed despite its new end")
	}
}

// waitLocked waits until a session waits for a lock.
func waitLocked(t testing.TB, q jobstore.Querier) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		var n int
		if err := q.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no session waited for the lock")
		}
		time.Sleep(10 * time.Millisecond) // poll interval
	}
}

// A pause's end reaches the start's trace (the stretch a start records
// while every replica was down): from the end on, the job was not paused,
// although no replica was up to write the resume.
func TestOccurrenceStartKnowsAPausesEnd(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, _ := newPool(t)
	if _, err := pool.Exec(ctx, `INSERT INTO studio_job_status (replica_id, job_id, scope) VALUES ('web-2', 'report', 'installation')`); err != nil {
		t.Fatal(err)
	}
	s, err := jobstore.ApplyChange(ctx, pool, "report", jobstore.Change{Pause: ptr(true), PauseFor: time.Hour, Actor: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	_, tr, err := jobstore.NewStore(pool, "web-1", nil).OccurrenceStart(ctx, []string{"report"})
	if err != nil {
		t.Fatal(err)
	}
	p := tr["report"].Pauses
	if len(p) != 1 || !p[0].Paused || p[0].By != "alice" || !p[0].Until.Equal(s.PausedUntil) {
		t.Fatalf("pause changes %+v; want alice's pause until %s", p, s.PausedUntil)
	}
	if paused, _ := tr["report"].PausedAt(s.PausedUntil.Add(-time.Second)); !paused {
		t.Error("not paused a second before the end")
	}
	if paused, by := tr["report"].PausedAt(s.PausedUntil); paused || by != "" {
		t.Errorf("paused by %q at the end; want not paused", by)
	}
	// An audit row whose end is not a time (a hand-written row) reads as
	// no end, and fails nothing.
	if _, err := pool.Exec(ctx, `INSERT INTO studio_audit (actor, action, target, detail) VALUES ('mallory', 'jobs.pause', 'report', '{"paused_until_after": "soon"}')`); err != nil {
		t.Fatal(err)
	}
	if _, tr, err = jobstore.NewStore(pool, "web-1", nil).OccurrenceStart(ctx, []string{"report"}); err != nil || len(tr["report"].Pauses) != 2 || !tr["report"].Pauses[1].Until.IsZero() {
		t.Errorf("with a malformed end: %+v, %v", tr["report"].Pauses, err)
	}
}
