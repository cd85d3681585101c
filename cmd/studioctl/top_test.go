package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/config"
	"github.com/studioctl/studioctl/internal/output"
	"github.com/studioctl/studioctl/internal/top"
)

// A job's drill-down in top lists its occurrences, each on the line its
// Occurrence names, and tells jobs why of the one selected: the same text
// as jobs why JOB --at NOMINAL --scope KEY prints.
func TestTopDrillDownOfAJobTellsJobsWhyOfTheSelectedOccurrence(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t, output.Table, nil)
	e.exec(t, `INSERT INTO studio_replica (id, incarnation, host, pid, version, state) VALUES ('web-1', gen_random_uuid(), 'h', 1, 'dev', 'ready')`)
	e.exec(t, `INSERT INTO studio_job_status (replica_id, job_id, scope, schedule) VALUES ('web-1', 'nightly', 'installation', 'every 1m')`)
	e.exec(t, `INSERT INTO studio_occurrence (job_id, nominal_at, outcome, reason, replica_id, holder, holder_known) VALUES
		('nightly', date_trunc('minute', now()) - interval '3 minutes', 'skipped', 'paused', 'web-1', NULL, NULL),
		('nightly', date_trunc('minute', now()) - interval '2 minutes', 'skipped', 'held-elsewhere', 'web-1', 'java-node-1', false),
		('nightly', date_trunc('minute', now()) - interval '1 minute', 'skipped', 'overrun', 'web-1', NULL, NULL)`)
	src := &topSource{d: e.deps, cfg: &config.Config{}, pool: e.pool}
	d, err := src.Detail(ctx, top.Jobs, "nightly", nil)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(d.Text, "\n")
	reasons := []string{"overrun", "held-elsewhere", "paused"} // newest first
	if len(d.Occurrences) != len(reasons) {
		t.Fatalf("%d occurrences, want %d:\n%s", len(d.Occurrences), len(reasons), d.Text)
	}
	for i, o := range d.Occurrences {
		if o.Line >= len(lines) || !strings.Contains(lines[o.Line], reasons[i]) || o.Job != "nightly" || o.Scope != "" {
			t.Errorf("occurrence %d %+v: its line does not show it (want %s):\n%s", i, o, reasons[i], d.Text)
		}
	}
	// jobs why of the oldest, as the verb prints it.
	sel := d.Occurrences[2]
	var want bytes.Buffer
	wd := e.deps
	wd.IO = &streams{In: strings.NewReader(""), Out: &want, Err: &want}
	wd.Printer = func() *output.Printer {
		return output.New(&want, output.Table, output.Options{Terminal: true, NoColor: true, Now: e.deps.Now})
	}
	scope := ""
	if err := jobsWhyRun(ctx, &jobsWhyOptions{deps: wd, ID: "nightly", At: sel.At, Scope: &scope}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(want.String(), "paused") {
		t.Fatalf("jobs why of the paused occurrence says %q", want.String())
	}
	d2, err := src.Detail(ctx, top.Jobs, "nightly", &sel)
	if err != nil {
		t.Fatal(err)
	}
	cmdLine := "why: studioctl jobs why nightly --at " + sel.At.UTC().Format("2006-01-02T15:04:05Z") + " --scope ''"
	if !strings.Contains(d2.Text, cmdLine+"\n"+want.String()) {
		t.Errorf("the drill-down does not end with %q and jobs why's text %q:\n%s", cmdLine, want.String(), d2.Text)
	}
	if strings.Contains(d.Text, want.String()) {
		t.Errorf("the default drill-down already told of the oldest occurrence: the test shows nothing")
	}
}

// The marks change with every write the jobs view or the header would
// show, whether or not the bus said so, and not with a heartbeat.
func TestTopMarksChangeWithWhatTheViewAndTheHeaderRead(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t, output.Table, nil)
	e.exec(t, `INSERT INTO studio_replica (id, incarnation, host, pid, version, state) VALUES ('web-1', gen_random_uuid(), 'h', 1, 'dev', 'ready')`)
	e.exec(t, `INSERT INTO studio_job_status (replica_id, job_id, scope, schedule) VALUES ('web-1', 'nightly', 'installation', 'every 1m')`)
	src := &topSource{d: e.deps, cfg: &config.Config{}, pool: e.pool}
	mark := func() top.Marks {
		t.Helper()
		m := readMarks(t, src)
		if m.View == "" || m.Header == "" {
			t.Fatalf("marks %+v, want both", m)
		}
		return m
	}
	last := mark()
	for _, c := range []struct {
		name         string
		sql          string
		view, header bool
	}{
		{"nothing written", `SELECT 1`, false, false},
		{"a heartbeat", `UPDATE studio_replica SET heartbeat_at = now()`, false, false},
		{"a status row written", `UPDATE studio_job_status SET runs = runs + 1`, true, true},
		{"a status row added", `INSERT INTO studio_job_status (replica_id, job_id, scope) VALUES ('web-1', 'other', 'installation')`, true, true},
		{"a job paused", `INSERT INTO studio_job_setting (job_id, paused, updated_by) VALUES ('nightly', true, 'ops')`, true, true},
		{"a lock taken", `INSERT INTO shedlock (name, lock_until, locked_at, locked_by) VALUES ('nightly', now() + interval '1 hour', now(), 'web-1')`, false, true},
		// A lease's change is an event, which the jobs view's mark takes too.
		{"a lease owned", `INSERT INTO cluster_lease (cluster, owner) VALUES ('c1', 'web-1')`, true, true},
		{"a replica gone", `UPDATE studio_replica SET heartbeat_at = now() - interval '1 hour'`, true, true},
		{"a status row removed", `DELETE FROM studio_job_status WHERE job_id = 'other'`, true, true},
	} {
		e.exec(t, c.sql)
		m := mark()
		if (m.View != last.View) != c.view || (m.Header != last.Header) != c.header {
			t.Errorf("%s: view mark changed %v (want %v), header's %v (want %v)", c.name, m.View != last.View, c.view, m.Header != last.Header, c.header)
		}
		last = m
	}
	if m, err := src.Mark(ctx, top.Replicas); err != nil || m.View != "" || m.Header == "" {
		t.Errorf("replicas view marks %+v, %v: want no view mark (read every time), a header mark", m, err)
	}
}

// What the header judges by time alone, with nothing written, changes
// the marks when the database's clock crosses it: a job becoming overdue
// (its due time plus doctor's grace passed), a pause's end passing, a
// lease expiring. So top reads it at the next poll, not at the refresh
// (up to 5 minutes at 10,000 jobs).
func TestTopMarksChangeWhenTimeAloneCrossesWhatTheHeaderJudges(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t, output.Table, nil)
	// Stopped: its liveness, which the marks take, does not change with
	// time (a ready one's would, 15 s after its heartbeat).
	e.exec(t, `INSERT INTO studio_replica (id, incarnation, host, pid, version, state) VALUES ('web-1', gen_random_uuid(), 'h', 1, 'dev', 'stopped')`)
	src := &topSource{d: e.deps, cfg: &config.Config{}, pool: e.pool}
	mark := func() top.Marks { t.Helper(); return readMarks(t, src) }
	for _, c := range []struct {
		name string
		// setup writes a row whose threshold the clock crosses $1 seconds
		// from now; crossed says whether it did.
		setup, crossed string
		view           bool
	}{
		{"a job becomes overdue",
			`INSERT INTO studio_job_status (replica_id, job_id, scope, schedule, next_fire_at) VALUES ('web-1', 'late', 'installation', 'every 1h', now() - interval '1 minute' + $1::float8 * interval '1 second')`,
			`SELECT next_fire_at + interval '1 minute' < now() FROM studio_job_status WHERE job_id = 'late'`, true},
		{"a pause's end passes",
			`INSERT INTO studio_job_setting (job_id, paused, updated_by, paused_until) VALUES ('late', true, 'ops', now() + $1::float8 * interval '1 second')`,
			`SELECT paused_until <= now() FROM studio_job_setting WHERE job_id = 'late'`, true},
		{"a lease expires",
			`INSERT INTO cluster_lease (cluster, owner, acquired_at, renewed_at, generation) VALUES ('c1', 'web-1', now(), now() - interval '15 seconds' + $1::float8 * interval '1 second', 1)`,
			`SELECT renewed_at < now() - interval '15 seconds' FROM cluster_lease WHERE cluster = 'c1'`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			crossed := func() bool {
				t.Helper()
				var b bool
				if err := e.pool.QueryRow(ctx, c.crossed).Scan(&b); err != nil {
					t.Fatal(err)
				}
				return b
			}
			// A mark read before the crossing: the clock's margin doubles
			// until the machine is fast enough for it.
			var before top.Marks
			var margin float64
			for margin = 1; ; margin *= 2 {
				e.exec(t, `DELETE FROM studio_job_status WHERE job_id = 'late'`)
				e.exec(t, `DELETE FROM studio_job_setting WHERE job_id = 'late'`)
				e.exec(t, `DELETE FROM cluster_lease`)
				e.exec(t, c.setup, margin)
				before = mark()
				if !crossed() {
					break
				}
				if margin >= 16 {
					t.Fatalf("crossed within %gs of the write", margin)
				}
			}
			deadline := time.Now().Add(time.Duration(margin)*time.Second + 30*time.Second)
			after := mark()
			for after.Header == before.Header {
				if time.Now().After(deadline) {
					t.Fatalf("the header's mark did not change when time crossed (crossed: %v)", crossed())
				}
				time.Sleep(50 * time.Millisecond) // polling the mark with a deadline, not synchronising
				after = mark()
			}
			if !crossed() {
				t.Errorf("the header's mark changed before the crossing")
			}
			if (after.View != before.View) != c.view {
				t.Errorf("the jobs view's mark changed %v, want %v", after.View != before.View, c.view)
			}
			if again := mark(); again != after {
				t.Errorf("the marks changed again with nothing crossed: %+v, then %+v", after, again)
			}
		})
	}
}

// top's R is locks release --force: the plain release of a lock whose
// holder is live is refused, the forced one releases it through the
// verb's run function, audited with the actor and the reason as the verb
// audits it.
func TestTopReleasesALockWithALiveHolderOnlyByForce(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t, output.Table, map[string]string{"STUDIO_ACTOR": "ops@desk"})
	e.exec(t, `INSERT INTO studio_replica (id, incarnation, host, pid, version, state) VALUES ('web-1', gen_random_uuid(), 'h', 1, 'dev', 'ready')`)
	e.exec(t, `INSERT INTO shedlock (name, lock_until, locked_at, locked_by) VALUES ('report', timezone('utc', now()) + interval '1 hour', timezone('utc', now()), 'web-1')`)
	a := &topActor{d: e.deps}
	if _, err := a.Do(ctx, top.Action{Verb: top.ReleaseLock, Target: "report", Reason: "hung"}); err == nil || !strings.HasPrefix(err.Error(), "refused: ") {
		t.Fatalf("the plain release of a live holder's lock: %v, want refused", err)
	}
	out, err := a.Do(ctx, top.Action{Verb: top.ReleaseLock, Target: "report", Reason: "hung", Force: true, Holder: "web-1", HolderState: "live"})
	if err != nil {
		t.Fatalf("the forced release: %v (%s)", err, out)
	}
	var n int
	var actor, reason, detail string
	if err := e.pool.QueryRow(ctx, `SELECT count(*) OVER (), actor, reason, detail::text FROM studio_audit WHERE target = 'report'`).Scan(&n, &actor, &reason, &detail); err != nil {
		t.Fatal(err)
	}
	if n != 1 || actor != e.deps.Actor() || reason != "hung" {
		t.Errorf("audit: %d rows, actor %q, reason %q; want one, %q, hung", n, actor, reason, e.deps.Actor())
	}
	if !strings.Contains(detail, `"force": true`) || !strings.Contains(detail, `"holder_state": "live"`) {
		t.Errorf("audit detail %s: want the force and the live holder, as the verb records them", detail)
	}
	var held bool
	if err := e.pool.QueryRow(ctx, `SELECT lock_until > timezone('utc', now()) FROM shedlock WHERE name = 'report'`).Scan(&held); err != nil {
		t.Fatal(err)
	}
	if held {
		t.Error("the lock is still held after the forced release")
	}
}

// readMarks is the jobs view's marks of src, failing the test on an error.
func readMarks(t *testing.T, src *topSource) top.Marks {
	t.Helper()
	m, err := src.Mark(context.Background(), top.Jobs)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
