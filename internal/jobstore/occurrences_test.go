package jobstore_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
)

// occurrenceFixture writes one installation job's occurrences of the last
// hour (every case of issue 22), older ones, an instance job's and a
// per-cluster job's, all relative to database now.
const occurrenceFixture = `
` + eventCheckWorkaround + `
INSERT INTO studio_replica (id, incarnation, host, pid, version, state, started_at, heartbeat_at, stopped_at, last_crash_at) VALUES
  ('web-1', gen_random_uuid(), 'h1', 1, 'v', 'ready', now() - interval '2 hours', now(), NULL, now() - interval '3 hours'),
  ('web-2', gen_random_uuid(), 'h2', 2, 'v', 'ready', now() - interval '2 hours', now() - interval '4 minutes', NULL, NULL),
  ('web-0', gen_random_uuid(), 'h0', 3, 'v', 'stopped', now() - interval '5 hours', now() - interval '19 minutes', now() - interval '19 minutes', NULL);
INSERT INTO studio_job_status (replica_id, job_id, scope, schedule) VALUES
  ('web-1', 'nightly', 'installation', 'every 1m'), ('web-2', 'nightly', 'installation', 'every 1m'),
  ('web-1', 'cache', 'instance', 'every 10s'), ('web-2', 'cache', 'instance', 'every 10s'),
  ('web-1', 'compact@eu-1', 'installation', 'every 1m'), ('web-1', 'compact@eu-2', 'installation', 'every 1m'),
  ('web-1', 'quiet', 'installation', 'every 1m');
INSERT INTO studio_job_run (seq, job_id, replica_id, cluster, started_at, finished_at, outcome, error, nominal_at, scope_key, triggered) VALUES
  (101, 'nightly', 'web-1', NULL, now() - interval '50 minutes' + interval '2.5 seconds', now() - interval '49 minutes', 'succeeded', NULL, date_trunc('milliseconds', now() - interval '50 minutes'), '', false),
  (102, 'nightly', 'web-1', NULL, now() - interval '40 minutes', now() - interval '39 minutes', 'failed', 'exit status 3', date_trunc('milliseconds', now() - interval '40 minutes'), '', true),
  (103, 'nightly', 'web-1', NULL, now() - interval '10 minutes', now() - interval '9 minutes', 'lock_lost', 'lost the lock', date_trunc('milliseconds', now() - interval '10 minutes'), '', false),
  (104, 'nightly', 'web-2', NULL, now() - interval '5 minutes' + interval '1 second', NULL, 'running', NULL, date_trunc('milliseconds', now() - interval '5 minutes'), '', false),
  (105, 'nightly', 'web-1', NULL, now() - interval '2 days', now() - interval '2 days', 'succeeded', NULL, NULL, NULL, false),
  (201, 'compact', 'web-1', 'eu-1', now() - interval '3 minutes', now() - interval '3 minutes', 'succeeded', NULL, date_trunc('milliseconds', now() - interval '3 minutes'), 'eu-1', false);
INSERT INTO studio_occurrence (job_id, scope_key, nominal_at, outcome, reason, replica_id, holder, holder_known, paused_by, count, last_nominal_at) VALUES
  ('nightly', '', date_trunc('milliseconds', now() - interval '30 minutes'), 'skipped', 'paused', 'web-1', NULL, NULL, 'alice', 1, NULL),
  ('nightly', '', date_trunc('milliseconds', now() - interval '20 minutes'), 'skipped', 'held-elsewhere', 'web-1', 'java-node-3', false, NULL, 1, NULL),
  ('nightly', '', date_trunc('milliseconds', now() - interval '19 minutes'), 'missed', 'down', 'web-1', NULL, NULL, NULL, 9, date_trunc('milliseconds', now() - interval '11 minutes')),
  ('nightly', '', now() - interval '30 hours', 'missed', 'down', 'web-1', NULL, NULL, NULL, 5, now() - interval '23 hours'),
  ('nightly', '', now() - interval '31 hours', 'skipped', 'paused', 'web-1', NULL, NULL, 'bob', 1, NULL),
  ('cache', 'web-1', now() - interval '1 minute', 'skipped', 'overrun', 'web-1', NULL, NULL, NULL, 1, NULL),
  ('cache', 'web-2', now() - interval '2 minutes', 'missed', 'down', 'web-2', NULL, NULL, NULL, 3, now() - interval '90 seconds'),
  ('compact', 'eu-1', now() - interval '4 minutes', 'skipped', 'held-elsewhere', 'web-1', 'web-1', true, NULL, 1, NULL),
  ('compact', 'eu-2', now() - interval '1 minute', 'missed', 'down', 'web-1', NULL, NULL, NULL, 2, now() - interval '30 seconds');
INSERT INTO studio_audit (actor, action, target, reason, at) VALUES
  ('alice', 'jobs.pause', 'nightly', 'incident 4521', now() - interval '35 minutes'),
  ('bob', 'jobs.pause', 'nightly', '', now() - interval '32 hours');
`

// eventCheckWorkaround lets studio_event take the 'occurrence' events of
// the studio_occurrence trigger when the schema does not yet: 00010 adds
// the trigger but not the event name to studio_event's CHECK (00006), so
// every insert into studio_occurrence fails there (reported to the lead;
// a later migration fixes it, and this then does nothing).
const eventCheckWorkaround = `DO $$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = 'studio_event'::regclass AND contype = 'c'
                   AND pg_get_constraintdef(oid) LIKE '%occurrence%') THEN
    ALTER TABLE studio_event DROP CONSTRAINT IF EXISTS studio_event_event_check;
  END IF;
END $$;`

func occurrencePool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, _ := newPool(t)
	if _, err := pool.Exec(t.Context(), occurrenceFixture); err != nil {
		t.Fatalf("fixture: %v", err)
	}
	return pool
}

func outcomes(os []jobstore.OccurrenceView) []string {
	var out []string
	for _, o := range os {
		out = append(out, o.Outcome+"/"+o.Reason)
	}
	return out
}

func TestListOccurrencesIsNewestFirstWithFilters(t *testing.T) {
	t.Parallel()
	pool := occurrencePool(t)
	now := dbNow(t, pool)
	all, err := jobstore.ListOccurrences(t.Context(), pool, jobstore.OccurrenceQuery{Job: "nightly", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"missed/lost", "missed/lost", "missed/down", "skipped/held-elsewhere", "skipped/paused", "ran/", "ran/", "missed/down", "skipped/paused"}
	if got := outcomes(all); !equal(got, want) {
		t.Fatalf("occurrences: got %v, want %v", got, want)
	}
	// The running run of a replica that is not live is lost; so is a run
	// that lost its lock. The run without a nominal time (before the
	// upgrade) is no occurrence.
	if *all[0].Seq != 104 || *all[1].Seq != 103 || all[0].ReplicaID != "web-2" || all[0].RunOutcome != "running" {
		t.Errorf("lost runs: %+v, %+v", all[0], all[1])
	}
	down := all[2]
	if down.Count != 9 || down.LastNominalAt == nil || down.Last().Sub(down.NominalAt) != 8*time.Minute {
		t.Errorf("down stretch: count %d, first %s, last %v", down.Count, down.NominalAt, down.LastNominalAt)
	}
	if all[3].Holder == nil || *all[3].Holder != "java-node-3" || all[3].HolderKnown == nil || *all[3].HolderKnown {
		t.Errorf("held-elsewhere: holder %v known %v", all[3].Holder, all[3].HolderKnown)
	}
	if all[4].PausedBy == nil || *all[4].PausedBy != "alice" {
		t.Errorf("paused: by %v", all[4].PausedBy)
	}
	if !all[5].Triggered || all[6].Triggered || all[6].LatenessSeconds == nil || *all[6].LatenessSeconds < 2.4 || *all[6].LatenessSeconds > 2.6 {
		t.Errorf("runs: triggered %t/%t, lateness %v", all[5].Triggered, all[6].Triggered, all[6].LatenessSeconds)
	}

	// --since keeps a stretch that ends after it; --limit cuts.
	since, err := jobstore.ListOccurrences(t.Context(), pool, jobstore.OccurrenceQuery{Job: "nightly", Since: now.Add(-12 * time.Minute), Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if got := outcomes(since); !equal(got, []string{"missed/lost", "missed/lost", "missed/down"}) {
		t.Errorf("since: %v", got)
	}
	two, err := jobstore.ListOccurrences(t.Context(), pool, jobstore.OccurrenceQuery{Job: "nightly", Limit: 2})
	if err != nil || len(two) != 2 {
		t.Errorf("limit 2: %d rows, %v", len(two), err)
	}
	scope := "web-2"
	cache, err := jobstore.ListOccurrences(t.Context(), pool, jobstore.OccurrenceQuery{Job: "cache", Scope: &scope, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if got := outcomes(cache); !equal(got, []string{"missed/down"}) || cache[0].ScopeKey != "web-2" {
		t.Errorf("scope web-2: %v", got)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestNearestOccurrence(t *testing.T) {
	t.Parallel()
	pool := occurrencePool(t)
	now := dbNow(t, pool)
	for _, tc := range []struct {
		name string
		at   time.Time
		want string
	}{
		{"without a time, the last that fell due", time.Time{}, "missed/lost 104"},
		{"a time inside a stretch is the stretch", now.Add(-15 * time.Minute), "missed/down"},
		{"otherwise the nearest due time", now.Add(-31 * time.Minute), "skipped/paused"},
		{"a time long before is the oldest", now.Add(-100 * time.Hour), "skipped/paused"},
		{"a time after the last is the last", now.Add(time.Hour), "missed/lost 104"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := jobstore.NearestOccurrence(t.Context(), pool, "nightly", nil, tc.at)
			if err != nil {
				t.Fatal(err)
			}
			got := o.Outcome + "/" + o.Reason
			if o.Seq != nil {
				got += " " + strconv.FormatInt(*o.Seq, 10)
			}
			if got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
	_, err := jobstore.NearestOccurrence(t.Context(), pool, "nosuch", nil, time.Time{})
	if !errors.Is(err, jobstore.ErrUnknownJob) {
		t.Errorf("unknown job: %v, want ErrUnknownJob", err)
	}
	_, err = jobstore.NearestOccurrence(t.Context(), pool, "quiet", nil, time.Time{})
	if !errors.Is(err, jobstore.ErrNoOccurrence) || !errors.Is(err, jobstore.ErrUnknownRun) {
		t.Errorf("job without occurrences: %v, want ErrNoOccurrence (a not-found error)", err)
	}
	// An empty scope key is a scope of its own (an installation job's),
	// not "any": an instance job has none there.
	empty := ""
	if o, err := jobstore.NearestOccurrence(t.Context(), pool, "nightly", &empty, time.Time{}); err != nil || o.ScopeKey != "" {
		t.Errorf("nightly in scope \"\": %+v, %v", o, err)
	}
	if o, err := jobstore.NearestOccurrence(t.Context(), pool, "cache", &empty, time.Time{}); !errors.Is(err, jobstore.ErrNoOccurrence) {
		t.Errorf("cache in scope \"\": %+v, %v; want ErrNoOccurrence", o, err)
	}
}

func TestOccurrenceWhyGathersTheEvidence(t *testing.T) {
	t.Parallel()
	pool := occurrencePool(t)
	now := dbNow(t, pool)
	o, ev, err := jobstore.OccurrenceWhy(t.Context(), pool, "nightly", nil, now.Add(-30*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	// No setting row: neither still paused nor resumed.
	if o.Reason != jobs.ReasonPaused || ev.Pause == nil || ev.Pause.Actor != "alice" || ev.Pause.Reason != "incident 4521" || ev.StillPaused || ev.Resumed {
		t.Errorf("paused: %+v, pause %+v, still %t, resumed %t", o, ev.Pause, ev.StillPaused, ev.Resumed)
	}
	if _, err := pool.Exec(t.Context(), `INSERT INTO studio_job_setting (job_id, paused, updated_by) VALUES ('nightly', false, 'alice')`); err != nil {
		t.Fatal(err)
	}
	if _, ev, err := jobstore.OccurrenceWhy(t.Context(), pool, "nightly", nil, now.Add(-30*time.Minute)); err != nil || ev.StillPaused || !ev.Resumed {
		t.Errorf("with a setting row that is not paused: still %t, resumed %t, %v; want resumed", ev.StillPaused, ev.Resumed, err)
	}
	if len(ev.Replicas) != 3 || ev.Replicas[0].ID != "web-1" || !ev.Replicas[0].Hosts || ev.Replicas[2].ID != "web-0" || ev.Replicas[2].Hosts {
		t.Errorf("replicas: %+v", ev.Replicas)
	}
	o, ev, err = jobstore.OccurrenceWhy(t.Context(), pool, "nightly", nil, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if ev.Run == nil || ev.Run.Seq != 104 || ev.Run.Outcome != jobs.OutcomeRunning {
		t.Errorf("lost run: %+v", ev.Run)
	}
	r, ok := ev.Replica(o.ReplicaID)
	if !ok || r.Live {
		t.Errorf("the lost run's replica: %+v, %t", r, ok)
	}
	// web-0 stopped 19 minutes ago: live 20 minutes ago, not 15.
	web0, _ := ev.Replica("web-0")
	if !web0.LiveAt(now.Add(-20*time.Minute)) || web0.LiveAt(now.Add(-15*time.Minute)) {
		t.Errorf("web-0 LiveAt: %+v", web0)
	}
}

func TestOccurrenceSummariesCountTheLastDay(t *testing.T) {
	t.Parallel()
	pool := occurrencePool(t)
	rows, now, err := jobstore.ReadStatus(t.Context(), pool, "")
	if err != nil {
		t.Fatal(err)
	}
	views := jobstore.Merge(rows, now)
	if err := jobstore.AddOccurrenceSummaries(t.Context(), pool, views); err != nil {
		t.Fatal(err)
	}
	type want struct {
		last            string
		skipped, missed int64
	}
	wants := map[string]want{
		// 2 skips in the window (the paused one 31 h ago is not); misses:
		// the 9 of the stretch, the 5 of the stretch that ends in the
		// window, and 2 runs lost.
		"nightly":      {"missed/lost", 2, 16},
		"cache":        {"skipped/overrun", 1, 3},
		"compact@eu-1": {"ran/", 1, 0},
		"compact@eu-2": {"missed/down", 0, 2},
		"quiet":        {"", 0, 0},
	}
	for _, v := range views {
		w, ok := wants[v.ID]
		if !ok {
			t.Errorf("unexpected view %s", v.ID)
			continue
		}
		s := v.Occurrences
		last := ""
		if s.Last != nil {
			last = s.Last.Outcome + "/" + s.Last.Reason
		}
		if last != w.last || s.Skipped24h != w.skipped || s.Missed24h != w.missed {
			t.Errorf("%s: last %q skipped %d missed %d; want %q %d %d", v.ID, last, s.Skipped24h, s.Missed24h, w.last, w.skipped, w.missed)
		}
		j := v.JSON()
		if (j.LastOccurrence == nil) != (w.last == "") || j.Skipped24h != w.skipped || j.Missed24h != w.missed {
			t.Errorf("%s: JSON %+v", v.ID, j)
		}
	}
}

// Rows with infinite due times (no replica writes one: a hostile or
// corrupt row of studio_occurrence or studio_job_run) are left out: jobs
// occurrences and jobs why, with and without --at, still answer for the
// job from its other rows. Adversarial pass of issue 22: one such row
// failed both for the job ("cannot scan infinity", "cannot subtract
// infinite timestamps").
func TestOccurrencesWithInfiniteDueTimesAreLeftOut(t *testing.T) {
	t.Parallel()
	pool := occurrencePool(t)
	now := dbNow(t, pool)
	if _, err := pool.Exec(t.Context(), `
INSERT INTO studio_occurrence (job_id, scope_key, nominal_at, outcome, reason, replica_id, count, last_nominal_at) VALUES
  ('nightly', 'x1', 'infinity', 'skipped', 'overrun', 'web-1', 1, NULL),
  ('nightly', 'x2', '-infinity', 'missed', 'down', 'web-1', 5, 'infinity'),
  ('nightly', 'x3', now() - interval '45 minutes', 'missed', 'down', 'web-1', 5, 'infinity');
INSERT INTO studio_job_run (seq, job_id, replica_id, started_at, finished_at, outcome, nominal_at, scope_key) VALUES
  (901, 'nightly', 'web-1', now() - interval '1 hour', now() - interval '1 hour', 'succeeded', '-infinity', 'x4')`); err != nil {
		t.Fatal(err)
	}
	all, err := jobstore.ListOccurrences(t.Context(), pool, jobstore.OccurrenceQuery{Job: "nightly", Limit: 100})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	for _, o := range all {
		if o.ScopeKey != "" {
			t.Errorf("listed %+v; want the rows with infinite due times left out", o)
		}
	}
	if len(all) != 9 {
		t.Errorf("%d occurrences, want the fixture's 9", len(all))
	}
	for _, at := range []time.Time{{}, now.Add(-45 * time.Minute), now.Add(time.Hour)} {
		o, err := jobstore.NearestOccurrence(t.Context(), pool, "nightly", nil, at)
		if err != nil {
			t.Fatalf("nearest to %v: %v", at, err)
		}
		if o.ScopeKey != "" {
			t.Errorf("nearest to %v: %+v; want a row with finite due times", at, o)
		}
	}
}

// A row due far in the future (no replica writes one: hostile or corrupt)
// is not the job's last occurrence in jobs list, which is the last that
// has come, as jobs why's default. Adversarial pass of issue 22: a
// skipped/overrun row of year 9999 was nightly's LAST DUE for ever.
func TestOccurrenceSummaryLastIsNotDueInTheFuture(t *testing.T) {
	t.Parallel()
	pool := occurrencePool(t)
	if _, err := pool.Exec(t.Context(), `
INSERT INTO studio_occurrence (job_id, scope_key, nominal_at, outcome, reason, replica_id) VALUES
  ('nightly', '', '9999-12-31T00:00:00Z', 'skipped', 'overrun', 'x');
INSERT INTO studio_job_run (seq, job_id, replica_id, started_at, outcome, nominal_at, scope_key) VALUES
  (902, 'nightly', 'web-1', now(), 'running', now() + interval '10 years', '')`); err != nil {
		t.Fatal(err)
	}
	rows, now, err := jobstore.ReadStatus(t.Context(), pool, "")
	if err != nil {
		t.Fatal(err)
	}
	views := jobstore.Merge(rows, now)
	if err := jobstore.AddOccurrenceSummaries(t.Context(), pool, views); err != nil {
		t.Fatal(err)
	}
	for _, v := range views {
		if v.ID != "nightly" {
			continue
		}
		if l := v.Occurrences.Last; l == nil || l.Outcome+"/"+l.Reason != "missed/lost" || l.NominalAt.After(now) {
			t.Errorf("nightly's last occurrence %+v; want the fixture's missed/lost, not one due in the future", l)
		}
	}
}

// A stretch's last due time is its last_nominal_at: LAST DUE of a job whose
// newest record is a missed/down stretch of ten due times says the tenth,
// not the first (adversarial pass of issue 22).
func TestOccurrenceSummaryLastOfAStretchIsItsLastDueTime(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	var first, last time.Time
	if err := pool.QueryRow(t.Context(), `
WITH s AS (INSERT INTO studio_job_status (replica_id, job_id, scope, runs) VALUES ('web-1', 'sweep', 'installation', 0) RETURNING 1)
INSERT INTO studio_occurrence (job_id, scope_key, nominal_at, outcome, reason, replica_id, count, last_nominal_at)
SELECT 'sweep', '', date_trunc('milliseconds', now()) - interval '10 minutes', 'missed', 'down', 'web-1', 10,
       date_trunc('milliseconds', now()) - interval '1 minute' FROM s
RETURNING nominal_at, last_nominal_at`).Scan(&first, &last); err != nil {
		t.Fatal(err)
	}
	rows, now, err := jobstore.ReadStatus(t.Context(), pool, "")
	if err != nil {
		t.Fatal(err)
	}
	views := jobstore.Merge(rows, now)
	if err := jobstore.AddOccurrenceSummaries(t.Context(), pool, views); err != nil {
		t.Fatal(err)
	}
	for _, v := range views {
		if v.ID != "sweep" {
			continue
		}
		if l := v.Occurrences.Last; l == nil || l.Outcome+"/"+l.Reason != "missed/down" || !l.NominalAt.Equal(last) {
			t.Errorf("sweep's last occurrence %+v; want missed/down at the stretch's last due time %s (not its first, %s)", l, last, first)
		}
		return
	}
	t.Fatalf("no view of sweep in %+v", views)
}
