package jobstore_test

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
)

func TestReadStatusAndMergeAcrossLiveReplicas(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	insertReplica(t, pool, "replica-1", "ready", 0)
	insertReplica(t, pool, "replica-2", "draining", 0)
	insertReplica(t, pool, "replica-3", "ready", time.Minute) // gone
	now := dbNow(t, pool)
	at := func(d time.Duration) *time.Time { return ptr(now.Add(d)) }
	const minute = "every 1m"

	put := func(replica string, sts ...jobs.Status) {
		s := jobstore.NewStore(pool, replica, nil)
		for _, st := range sts {
			st.UpdatedAt = now
			s.PutStatus(st)
		}
		mustFlush(t, s)
	}
	put("replica-1",
		jobs.Status{JobID: "report", Scope: jobs.ScopeInstallation, Schedule: minute, NextFireAt: at(40 * time.Second),
			LastStartedAt: at(-30 * time.Second), LastFinishedAt: at(-20 * time.Second), LastOutcome: jobs.OutcomeSucceeded,
			Runs: 5, Failures: 1, Timeouts: 1, LockLost: 0, Overruns: 2, SkippedElsewhere: 3},
		// Last finished 10 minutes ago: stalled, unless another replica skipped recently.
		jobs.Status{JobID: "stuck", Scope: jobs.ScopeInstallation, Schedule: minute, NextFireAt: at(time.Second),
			LastStartedAt: at(-11 * time.Minute), LastFinishedAt: at(-10 * time.Minute), LastOutcome: jobs.OutcomeSucceeded, Runs: 1},
		jobs.Status{JobID: "skipping", Scope: jobs.ScopeInstallation, Schedule: minute,
			LastStartedAt: at(-11 * time.Minute), LastFinishedAt: at(-10 * time.Minute), LastOutcome: jobs.OutcomeSucceeded, Runs: 1},
		jobs.Status{JobID: "cache", Scope: jobs.ScopeInstance, Schedule: "every 10s", Running: true,
			LastStartedAt: at(-time.Second), LastFinishedAt: at(-9 * time.Second), LastOutcome: jobs.OutcomeFailed, Runs: 9, Failures: 9},
	)
	put("replica-2",
		jobs.Status{JobID: "report", Scope: jobs.ScopeInstallation, Schedule: minute, NextFireAt: at(10 * time.Second),
			LastStartedAt: at(-2 * time.Minute), LastFinishedAt: at(-110 * time.Second), LastOutcome: jobs.OutcomeFailed, LastError: "exit status 1",
			Runs: 3, Failures: 2, Timeouts: 0, LockLost: 1, Overruns: 0, SkippedElsewhere: 4, Paused: false},
		jobs.Status{JobID: "skipping", Scope: jobs.ScopeInstallation, Schedule: minute,
			LastSkippedElsewhereAt: at(-20 * time.Second), SkippedElsewhere: 12},
	)
	put("replica-3", // gone: its latest start, counters and earliest next fire must not count
		jobs.Status{JobID: "report", Scope: jobs.ScopeInstallation, Schedule: minute, NextFireAt: at(time.Second),
			LastStartedAt: at(-5 * time.Second), LastFinishedAt: at(-4 * time.Second), LastOutcome: jobs.OutcomeTimedOut,
			Runs: 100, Failures: 100, Timeouts: 100, LockLost: 100, Overruns: 100, SkippedElsewhere: 100, Paused: true,
			InvalidSchedule: "stale cause"},
		jobs.Status{JobID: "orphan", Scope: jobs.ScopeInstallation, Schedule: "cron 0 2 * * *", NextFireAt: at(time.Hour),
			LastStartedAt: at(-time.Hour), LastFinishedAt: at(-time.Hour + time.Second), LastOutcome: jobs.OutcomeSucceeded, Runs: 7},
	)

	rows, dbnow, err := jobstore.ReadStatus(t.Context(), pool, "")
	if err != nil {
		t.Fatal(err)
	}
	if dbnow.Location() != time.UTC || dbnow.Before(now) || dbnow.Sub(now) > waitFor {
		t.Errorf("ReadStatus now = %s, want database time in UTC just after %s", dbnow, now)
	}
	live := map[string]bool{}
	for _, r := range rows {
		live[r.ReplicaID] = r.Live
	}
	if want := map[string]bool{"replica-1": true, "replica-2": true, "replica-3": false}; !maps.Equal(live, want) {
		t.Errorf("ReadStatus liveness = %v, want %v", live, want)
	}
	if len(rows) != 8 {
		t.Errorf("ReadStatus gave %d rows, want 8", len(rows))
	}

	views := map[string]jobstore.View{}
	var order []string
	for _, v := range jobstore.Merge(rows, dbnow) {
		views[v.ID] = v
		order = append(order, v.ID)
	}
	if want := []string{"cache", "orphan", "report", "skipping", "stuck"}; !slices.Equal(order, want) {
		t.Fatalf("Merge gave jobs %v, want %v (sorted)", order, want)
	}

	t.Run("counters of live replicas only, the latest run, the earliest next fire", func(t *testing.T) {
		v := views["report"]
		want := jobstore.View{ID: "report", Scope: jobs.ScopeInstallation, Schedule: minute, Health: jobs.HealthOK,
			LastOutcome: jobs.OutcomeSucceeded, LastStartedAt: at(-30 * time.Second), LastFinishedAt: at(-20 * time.Second),
			LastReplica: "replica-1", NextFireAt: at(10 * time.Second),
			Runs: 8, Failures: 3, Timeouts: 1, LockLost: 1, Overruns: 2, SkippedElsewhere: 7, Replicas: 2}
		if g, w := viewText(v), viewText(want); g != w {
			t.Errorf("report:\n got %s\nwant %s", g, w)
		}
	})
	t.Run("a job whose only replica is gone still shows", func(t *testing.T) {
		v := views["orphan"]
		if v.Replicas != 0 || v.Runs != 7 || v.LastReplica != "replica-3" || v.LastOutcome != jobs.OutcomeSucceeded || v.Schedule != "cron 0 2 * * *" {
			t.Errorf("orphan = %s, want replica-3's last state with 0 live replicas", viewText(v))
		}
	})
	t.Run("stalled when the newest completion is older than three intervals", func(t *testing.T) {
		if v := views["stuck"]; v.Health != jobs.HealthStalled {
			t.Errorf("stuck = %s, want stalled", viewText(v))
		}
	})
	t.Run("a recent skip on another replica counts as a completion", func(t *testing.T) {
		if v := views["skipping"]; v.Health != jobs.HealthOK || v.SkippedElsewhere != 12 || v.Replicas != 2 {
			t.Errorf("skipping = %s, want ok with 12 skips on 2 replicas", viewText(v))
		}
	})
	t.Run("a job running now shows running, and its last completed run judges its health", func(t *testing.T) {
		if v := views["cache"]; v.LastOutcome != jobs.OutcomeRunning || v.Health != jobs.HealthFailing {
			t.Errorf("cache = %s, want running and failing (its last completed run failed)", viewText(v))
		}
	})
	t.Run("the next fire of a gone replica is not shown", func(t *testing.T) {
		if v := views["orphan"]; v.NextFireAt != nil {
			t.Errorf("orphan = %s, want no next fire (no live replica will fire it)", viewText(v))
		}
	})

	one, _, err := jobstore.ReadStatus(t.Context(), pool, "report")
	if err != nil {
		t.Fatal(err)
	}
	if len(one) != 3 || one[0].JobID != "report" || one[0].ReplicaID != "replica-1" || one[2].ReplicaID != "replica-3" {
		t.Errorf("ReadStatus(report) = %d rows (%+v), want replica-1..3 in order", len(one), one)
	}
}

func TestMergeOfFailingPausedAndInvalidJobs(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { return ptr(now.Add(d)) }
	row := func(replica string, live bool, st jobs.Status) jobstore.ReplicaStatus {
		st.ReplicaID, st.JobID, st.Scope, st.Schedule = replica, "j", jobs.ScopeInstallation, "every 1m"
		return jobstore.ReplicaStatus{Status: st, Live: live}
	}
	tests := []struct {
		name string
		rows []jobstore.ReplicaStatus
		want jobs.Health
	}{
		{"the latest run failed on one replica: failing", []jobstore.ReplicaStatus{
			row("a", true, jobs.Status{LastStartedAt: at(-2 * time.Minute), LastFinishedAt: at(-2 * time.Minute), LastOutcome: jobs.OutcomeSucceeded}),
			row("b", true, jobs.Status{LastStartedAt: at(-time.Minute), LastFinishedAt: at(-time.Minute), LastOutcome: jobs.OutcomeFailed}),
		}, jobs.HealthFailing},
		{"an older failure is healed by a later success elsewhere: ok", []jobstore.ReplicaStatus{
			row("a", true, jobs.Status{LastStartedAt: at(-time.Minute), LastFinishedAt: at(-time.Minute), LastOutcome: jobs.OutcomeSucceeded}),
			row("b", true, jobs.Status{LastStartedAt: at(-2 * time.Minute), LastFinishedAt: at(-2 * time.Minute), LastOutcome: jobs.OutcomeLockLost}),
		}, jobs.HealthOK},
		{"paused on one live replica: paused", []jobstore.ReplicaStatus{
			row("a", true, jobs.Status{Paused: true, LastFinishedAt: at(-time.Minute)}),
			row("b", true, jobs.Status{LastFinishedAt: at(-time.Minute)}),
		}, jobs.HealthPaused},
		{"an invalid schedule on one live replica: invalid-schedule", []jobstore.ReplicaStatus{
			row("a", true, jobs.Status{InvalidSchedule: "bad cron", LastFinishedAt: at(-time.Minute)}),
			row("b", true, jobs.Status{LastFinishedAt: at(-time.Minute)}),
		}, jobs.HealthInvalidSchedule},
		{"paused only on a gone replica: ok", []jobstore.ReplicaStatus{
			row("a", true, jobs.Status{LastFinishedAt: at(-time.Minute)}),
			row("gone", false, jobs.Status{Paused: true, LastFinishedAt: at(-time.Minute)}),
		}, jobs.HealthOK},
		{"ran a moment ago on a replica that then crashed, the live one ran it long ago: ok", []jobstore.ReplicaStatus{
			row("live", true, jobs.Status{LastStartedAt: at(-time.Hour), LastFinishedAt: at(-time.Hour), LastOutcome: jobs.OutcomeSucceeded}),
			row("crashed", false, jobs.Status{LastStartedAt: at(-30 * time.Second), LastFinishedAt: at(-30 * time.Second), LastOutcome: jobs.OutcomeSucceeded}),
		}, jobs.HealthOK},
		{"no completion anywhere within three intervals, gone replicas included: stalled", []jobstore.ReplicaStatus{
			row("live", true, jobs.Status{LastStartedAt: at(-time.Hour), LastFinishedAt: at(-time.Hour), LastOutcome: jobs.OutcomeSucceeded}),
			row("crashed", false, jobs.Status{LastStartedAt: at(-10 * time.Minute), LastFinishedAt: at(-10 * time.Minute), LastOutcome: jobs.OutcomeSucceeded}),
		}, jobs.HealthStalled},
		{"never completed, started 10m ago: stalled", []jobstore.ReplicaStatus{
			row("a", true, jobs.Status{Running: true, LastStartedAt: at(-10 * time.Minute)}),
		}, jobs.HealthStalled},
		{"running now after a success: ok", []jobstore.ReplicaStatus{
			row("a", true, jobs.Status{Running: true, LastStartedAt: at(-time.Second), LastFinishedAt: at(-time.Minute), LastOutcome: jobs.OutcomeSucceeded}),
		}, jobs.HealthOK},
		{"running now after a timeout: failing until it completes", []jobstore.ReplicaStatus{
			row("a", true, jobs.Status{Running: true, LastStartedAt: at(-time.Second), LastFinishedAt: at(-time.Minute), LastOutcome: jobs.OutcomeTimedOut}),
		}, jobs.HealthFailing},
		{"running now on a replica that never finished it, after a timeout on another: failing", []jobstore.ReplicaStatus{
			row("a", true, jobs.Status{Running: true, LastStartedAt: at(-time.Second)}),
			row("b", true, jobs.Status{LastStartedAt: at(-time.Minute), LastFinishedAt: at(-30 * time.Second), LastOutcome: jobs.OutcomeTimedOut}),
		}, jobs.HealthFailing},
		{"running now on a replica whose own last run succeeded, after a later failure on another: failing", []jobstore.ReplicaStatus{
			row("a", true, jobs.Status{Running: true, LastStartedAt: at(-time.Second), LastFinishedAt: at(-3 * time.Minute), LastOutcome: jobs.OutcomeSucceeded}),
			row("b", true, jobs.Status{LastStartedAt: at(-time.Minute), LastFinishedAt: at(-30 * time.Second), LastOutcome: jobs.OutcomeFailed}),
		}, jobs.HealthFailing},
		{"running now on a replica whose own last run failed, after a later success on another: ok", []jobstore.ReplicaStatus{
			row("a", true, jobs.Status{Running: true, LastStartedAt: at(-time.Second), LastFinishedAt: at(-3 * time.Minute), LastOutcome: jobs.OutcomeFailed}),
			row("b", true, jobs.Status{LastStartedAt: at(-time.Minute), LastFinishedAt: at(-30 * time.Second), LastOutcome: jobs.OutcomeSucceeded}),
		}, jobs.HealthOK},
		{"never started anywhere: ok", []jobstore.ReplicaStatus{
			row("a", true, jobs.Status{}),
		}, jobs.HealthOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			views := jobstore.Merge(tt.rows, now)
			if len(views) != 1 || views[0].Health != tt.want {
				t.Errorf("Merge = %+v, want one view with health %s", views, tt.want)
			}
		})
	}
}

func viewText(v jobstore.View) string {
	b, _ := json.Marshal(v.JSON())
	return string(b) + " replicas=" + strconv.Itoa(v.Replicas) + " last_error=" + v.LastError
}

func TestHistoryReturnsTheNewestRunsFirst(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	s := jobstore.NewStore(pool, "replica-1", nil)
	la, err := time.LoadLocation("America/Los_Angeles")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 11, 30, 1, 0, 0, 0, la)
	var seqs []int64
	for i := range 5 {
		seq := mustSeq(t, s)
		seqs = append(seqs, seq)
		started := start.Add(time.Duration(i) * time.Minute)
		finished := started.Add(time.Second)
		s.PutRun(jobs.Run{Seq: seq, JobID: "report", ReplicaID: "replica-1", StartedAt: started, FinishedAt: &finished,
			Outcome: jobs.OutcomeSucceeded, OutputTail: "run " + strconv.Itoa(i)})
		other := mustSeq(t, s)
		s.PutRun(jobs.Run{Seq: other, JobID: "other", ReplicaID: "replica-1", StartedAt: started, Outcome: jobs.OutcomeRunning})
	}
	last := mustSeq(t, s)
	seqs = append(seqs, last)
	s.PutRun(jobs.Run{Seq: last, JobID: "report", ReplicaID: "replica-2", Cluster: "eu-1", StartedAt: start.Add(time.Hour),
		Outcome: jobs.OutcomeRunning})
	mustFlush(t, s)

	got, err := jobstore.History(t.Context(), pool, "report", 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("History(limit 3) gave %d runs, want 3", len(got))
	}
	for i, r := range got {
		if want := seqs[len(seqs)-1-i]; r.Seq != want || r.JobID != "report" {
			t.Errorf("History[%d] = seq %d of %s, want seq %d of report", i, r.Seq, r.JobID, want)
		}
		if r.StartedAt.Location() != time.UTC || (r.FinishedAt != nil && r.FinishedAt.Location() != time.UTC) {
			t.Errorf("History[%d] times are not in UTC: %s, %v", i, r.StartedAt, r.FinishedAt)
		}
	}
	if r := got[0]; r.Outcome != jobs.OutcomeRunning || r.FinishedAt != nil || r.Cluster != "eu-1" || r.ReplicaID != "replica-2" ||
		!r.StartedAt.Equal(start.Add(time.Hour)) {
		t.Errorf("History[0] = %+v, want the running run on replica-2 for eu-1", r)
	}
	if r := got[1]; r.Outcome != jobs.OutcomeSucceeded || r.OutputTail != "run 4" || r.FinishedAt == nil ||
		!r.FinishedAt.Equal(start.Add(4*time.Minute+time.Second)) || r.Cluster != "" || r.Error != "" {
		t.Errorf("History[1] = %+v, want run 4, succeeded", r)
	}
	all, err := jobstore.History(t.Context(), pool, "report", 100)
	if err != nil || len(all) != 6 {
		t.Errorf("History(limit 100) = %d runs, %v; want 6", len(all), err)
	}
	none, err := jobstore.History(t.Context(), pool, "never-ran", 10)
	if err != nil || len(none) != 0 {
		t.Errorf("History(never-ran) = %+v, %v; want none", none, err)
	}
}

func TestViewJSONHasStableKeysAndUTCTimes(t *testing.T) {
	t.Parallel()
	la, err := time.LoadLocation("America/Los_Angeles")
	if err != nil {
		t.Fatal(err)
	}
	started := time.Date(2026, 11, 30, 1, 0, 0, 0, la)
	full := jobstore.View{ID: "report", Scope: jobs.ScopeInstallation, Schedule: "every 1m", Health: jobs.HealthFailing,
		LastOutcome: jobs.OutcomeFailed, LastError: "exit status 1", LastStartedAt: &started, LastFinishedAt: ptr(started.Add(time.Second)),
		LastReplica: "replica-1", NextFireAt: ptr(started.Add(time.Minute)), Runs: 1, Failures: 2, Timeouts: 3, LockLost: 4,
		Overruns: 5, SkippedElsewhere: 6, InvalidSchedule: "bad", Paused: true, Replicas: 2,
		Occurrences: &jobstore.OccurrenceSummary{Last: &jobstore.LastOccurrence{Outcome: "skipped", Reason: "paused",
			NominalAt: time.Date(2026, 11, 30, 1, 0, 0, 500e6, la)}, Skipped24h: 7, Missed24h: 8}, Drift: true,
		Pause: &jobstore.PauseView{By: "ana", Reason: "db", Until: ptr(started.Add(2 * time.Hour))}}
	wantKeys := []string{"deadline_seconds", "drift", "failures", "health", "id", "invalid_schedule", "jitter_seconds", "last_error", "last_finished_at", "last_occurrence", "last_outcome", "last_replica",
		"last_started_at", "lock_lost", "missed_24h", "next_fire_at", "overruns", "paused", "paused_by", "paused_reason", "paused_until", "runs", "schedule", "scope", "skipped_24h",
		"skipped_elsewhere", "timeouts", "tz"}

	for _, v := range []jobstore.View{full, {ID: "fresh", Scope: jobs.ScopeInstance, Schedule: "every 10s", Health: jobs.HealthOK}} {
		b, err := json.Marshal(v.JSON())
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		if keys := slices.Sorted(maps.Keys(m)); !slices.Equal(keys, wantKeys) {
			t.Errorf("JSON of %s has keys %v, want %v", v.ID, keys, wantKeys)
		}
		if v.ID == "fresh" {
			for _, k := range []string{"last_outcome", "last_started_at", "last_finished_at", "last_replica", "next_fire_at", "last_error", "invalid_schedule", "last_occurrence",
				"paused_by", "paused_reason", "paused_until"} {
				if m[k] != nil {
					t.Errorf("JSON of a job that never ran: %s = %v, want null", k, m[k])
				}
			}
		}
	}

	b, err := json.Marshal(full.JSON())
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"report","scope":"installation","schedule":"every 1m","tz":"UTC","jitter_seconds":0,"deadline_seconds":0,"health":"failing","last_outcome":"failed",` +
		`"last_started_at":"2026-11-30T09:00:00Z","last_finished_at":"2026-11-30T09:00:01Z","last_replica":"replica-1",` +
		`"next_fire_at":"2026-11-30T09:01:00Z","runs":1,"failures":2,"timeouts":3,"lock_lost":4,"overruns":5,"skipped_elsewhere":6,` +
		`"last_error":"exit status 1","invalid_schedule":"bad","paused":true,"paused_by":"ana","paused_reason":"db","paused_until":"2026-11-30T11:00:00Z",` +
		`"last_occurrence":{"outcome":"skipped","reason":"paused","nominal_at":"2026-11-30T09:00:00.500Z"},"skipped_24h":7,"missed_24h":8,"drift":true}`
	if string(b) != want {
		t.Errorf("JSON =\n%s\nwant\n%s", b, want)
	}
	if strings.Contains(string(b), "-08:00") {
		t.Errorf("JSON has a local time: %s", b)
	}
	// A cron read in a zone: the schedule without it, the zone as tz.
	zoned := jobstore.View{ID: "berlin", Scope: jobs.ScopeInstallation, Schedule: "cron 30 2 * * * tz Europe/Berlin"}.JSON()
	if zoned.Schedule != "cron 30 2 * * *" || zoned.TZ != "Europe/Berlin" {
		t.Errorf("zoned JSON: schedule %q, tz %q; want cron 30 2 * * * and Europe/Berlin", zoned.Schedule, zoned.TZ)
	}
	// A jitter and a deadline: their own keys, in seconds; the schedule
	// and the zone without them.
	opts := jobstore.View{ID: "billing", Scope: jobs.ScopeInstallation, Schedule: "cron 0 * * * * tz Europe/Berlin jitter 1m30s deadline 10m"}.JSON()
	if opts.Schedule != "cron 0 * * * *" || opts.TZ != "Europe/Berlin" || opts.JitterSeconds != 90 || opts.DeadlineSeconds != 600 {
		t.Errorf("JSON with options: schedule %q, tz %q, jitter_seconds %v, deadline_seconds %v", opts.Schedule, opts.TZ, opts.JitterSeconds, opts.DeadlineSeconds)
	}
	// JSON does not change the view it renders.
	if full.LastStartedAt.Location() != la {
		t.Errorf("JSON changed the view's time zone")
	}
}

func TestHistoryOfAJobThatRunsOnTwoReplicasIsNewestFirst(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	// Each replica takes its seqs in blocks: replica-a's runs all have
	// lower seqs than replica-b's, whenever they started.
	a, b := jobstore.NewStore(pool, "replica-a", nil), jobstore.NewStore(pool, "replica-b", nil)
	seqA, seqB := mustSeq(t, a), mustSeq(t, b)
	start := time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC)
	var newestFirst []time.Time
	for i := range 4 {
		s, seq := a, &seqA
		if i%2 == 1 {
			s, seq = b, &seqB
		}
		if i >= 2 {
			*seq = mustSeq(t, s)
		}
		started := start.Add(time.Duration(i) * time.Minute)
		s.PutRun(jobs.Run{Seq: *seq, JobID: "report", ReplicaID: "replica-" + string(rune('a'+i%2)), StartedAt: started,
			FinishedAt: &started, Outcome: jobs.OutcomeSucceeded})
		newestFirst = append([]time.Time{started}, newestFirst...)
	}
	mustFlush(t, a)
	mustFlush(t, b)

	got, err := jobstore.History(t.Context(), pool, "report", 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !got[0].StartedAt.Equal(newestFirst[0]) || !got[1].StartedAt.Equal(newestFirst[1]) {
		var seen []string
		for _, r := range got {
			seen = append(seen, r.ReplicaID+"@"+r.StartedAt.Format("15:04"))
		}
		t.Errorf("History(limit 2) = %v, want the runs of 01:03 and 01:02", seen)
	}
}

// A status row with infinite times (no replica writes one: a hostile or
// corrupt row) does not make the read fail for every job: its infinite
// times read as none, and the other rows as they are. The replica's own
// read of its rows at start (Store.LoadStatus) takes them the same way.
func TestStatusRowsWithInfiniteTimesReadAsNone(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	ctx := context.Background()
	insertReplica(t, pool, "replica-1", "ready", 0)
	if _, err := pool.Exec(ctx, `INSERT INTO studio_job_status (replica_id, job_id, scope, schedule, next_fire_at, last_started_at, last_finished_at, last_success_at, last_skipped_elsewhere_at, updated_at, last_outcome) VALUES
  ('replica-1', 'bad-future', 'installation', 'every 1m', 'infinity', 'infinity', 'infinity', 'infinity', 'infinity', 'infinity', 'succeeded'),
  ('replica-1', 'bad-past', 'installation', 'every 1m', '-infinity', '-infinity', '-infinity', '-infinity', '-infinity', '-infinity', 'succeeded'),
  ('replica-1', 'good', 'installation', 'every 1m', now() + interval '30 seconds', now() - interval '30 seconds', now() - interval '29 seconds', now() - interval '29 seconds', NULL, now(), 'succeeded')`); err != nil {
		t.Fatal(err)
	}
	rows, now, err := jobstore.ReadStatus(ctx, pool, "")
	if err != nil {
		t.Fatalf("read status: %v", err)
	}
	if len(rows) != 3 {
		t.Fatalf("got %d rows, want 3", len(rows))
	}
	for _, r := range rows {
		switch r.JobID {
		case "good":
			if r.NextFireAt == nil || r.LastStartedAt == nil || r.UpdatedAt.IsZero() {
				t.Errorf("good: %+v, want its times", r.Status)
			}
		default:
			if r.NextFireAt != nil || r.LastStartedAt != nil || r.LastFinishedAt != nil || r.LastSuccessAt != nil ||
				r.LastSkippedElsewhereAt != nil || !r.UpdatedAt.IsZero() {
				t.Errorf("%s: %+v, want no times", r.JobID, r.Status)
			}
		}
	}
	views := jobstore.Merge(rows, now)
	if len(views) != 3 {
		t.Fatalf("merged %d views, want 3", len(views))
	}
	for _, v := range views {
		if _, err := json.Marshal(v.JSON()); err != nil {
			t.Errorf("%s: %v", v.ID, err)
		}
	}
	// The occurrence summary of jobs list and the page leaves out a due
	// time that is not finite.
	if _, err := pool.Exec(ctx, `INSERT INTO studio_job_run (job_id, replica_id, started_at, finished_at, outcome, nominal_at, scope_key) VALUES
  ('bad-future', 'replica-1', now(), now(), 'succeeded', 'infinity', ''), ('good', 'replica-1', now(), now(), 'succeeded', now() - interval '1 second', '')`); err != nil {
		t.Fatal(err)
	}
	sums, err := jobstore.OccurrenceSummaries(ctx, pool, views)
	if err != nil {
		t.Fatalf("occurrence summaries: %v", err)
	}
	if sums["bad-future"].Last != nil || sums["good"].Last == nil {
		t.Errorf("summaries: bad-future %+v, good %+v; want none and the run", sums["bad-future"].Last, sums["good"].Last)
	}
	// jobs status and jobs history read its runs: an infinite time reads
	// as none there too.
	if _, err := pool.Exec(ctx, `INSERT INTO studio_job_run (job_id, replica_id, started_at, finished_at, outcome) VALUES
  ('bad-past', 'replica-1', '-infinity', '-infinity', 'succeeded'), ('bad-past', 'replica-1', 'infinity', 'infinity', 'succeeded')`); err != nil {
		t.Fatal(err)
	}
	runs, err := jobstore.History(ctx, pool, "bad-past", 10)
	if err != nil || len(runs) != 2 || !runs[0].StartedAt.IsZero() || runs[0].FinishedAt != nil {
		t.Fatalf("history: %+v, %v; want two runs without times", runs, err)
	}
	got, err := jobstore.NewStore(pool, "replica-1", nil).LoadStatus(ctx)
	if err != nil || len(got) != 3 {
		t.Fatalf("load status: %d rows, %v; want 3", len(got), err)
	}
}
