package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os/user"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/audit"
	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/locks"
	"github.com/studioctl/studioctl/internal/output"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

// testNow is the display clock of these tests.
var testNow = time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC)

// testEnv is a run function's dependencies over a fresh database, with its
// output in buffers and an environment of its own.
type testEnv struct {
	deps
	pool     *pgxpool.Pool
	out, err *bytes.Buffer
}

func newTestEnv(t *testing.T, format output.Format, env map[string]string) *testEnv {
	t.Helper()
	ctx := context.Background()
	pool, err := db.Open(ctx, pgtest.NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	e := &testEnv{pool: pool, out: &bytes.Buffer{}, err: &bytes.Buffer{}}
	getenv := func(k string) string { return env[k] }
	e.deps = deps{
		IO:        &streams{In: strings.NewReader(""), Out: e.out, Err: e.err},
		DB:        func(context.Context) (*pgxpool.Pool, error) { return pool, nil },
		SessionDB: func(context.Context) (*pgxpool.Pool, error) { return pool, nil },
		Printer: func() *output.Printer {
			return output.New(e.out, format, output.Options{Now: func() time.Time { return testNow }})
		},
		Now:       func() time.Time { return testNow },
		NowFixed:  true,
		Getenv:    getenv,
		Actor:     func() string { return audit.DefaultActor(getenv) },
		LockTable: locks.DefaultTable,
	}
	return e
}

func (e *testEnv) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := e.pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatal(err)
	}
}

func TestLocksListRunPrintsTabSeparatedRowsWithRemainingFromTheDisplayClock(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, output.Table, nil)
	e.exec(t, `INSERT INTO shedlock VALUES ('nightly report', '2099-01-01 00:00:00', '2026-11-30 06:59:00', 'java-node-1'),
		('old', '2026-11-30 05:01:00', '2026-11-30 05:00:00', 'java-node-2')`)
	if err := locksListRun(context.Background(), &locksListOptions{deps: e.deps}); err != nil {
		t.Fatal(err)
	}
	want := "NAME\tSTATE\tLOCKED BY\tHOLDER\tLOCKED AT\tLOCK UNTIL\tREMAINING\n" +
		"nightly report\theld\tjava-node-1\tunknown\t2026-11-30T06:59:00Z\t2099-01-01T00:00:00Z\t26329d17h\n" +
		"old\tfree\tjava-node-2\tunknown\t2026-11-30T05:00:00Z\t2026-11-30T05:01:00Z\t\n"
	if got := e.out.String(); got != want {
		t.Errorf("stdout =\n%q\nwant\n%q", got, want)
	}
	if e.err.Len() != 0 {
		t.Errorf("stderr = %q, want nothing", e.err.String())
	}
}

func TestLocksReleaseRunAuditsTheActorOfTheInjectedEnvironment(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"USER names the actor", map[string]string{"USER": "alice", "LOGNAME": "bob"}, "alice@"},
		{"LOGNAME names it without USER", map[string]string{"LOGNAME": "bob"}, "bob@"},
		{"neither is the uid's name, never unknown", nil, currentUserName(t) + "@"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newTestEnv(t, output.Table, tt.env)
			e.exec(t, `INSERT INTO shedlock VALUES ('sweep', timezone('utc', now()) + interval '5 minutes', timezone('utc', now()), 'java-node-1')`)
			o := &locksReleaseOptions{deps: e.deps, Name: "sweep", Force: true, Reason: "test"}
			if err := locksReleaseRun(context.Background(), o); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(e.out.String(), `released lock "sweep": was held by java-node-1 (unknown)`) {
				t.Errorf("stdout = %q", e.out.String())
			}
			var actor string
			if err := e.pool.QueryRow(context.Background(), `SELECT actor FROM studio_audit WHERE action = 'locks.release'`).Scan(&actor); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(actor, tt.want) {
				t.Errorf("audit actor = %q, want it to start with %q", actor, tt.want)
			}
		})
	}
}

func TestLocksReleaseRunRefusesALiveLockWithoutForce(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, output.Table, nil)
	e.exec(t, `INSERT INTO shedlock VALUES ('sweep', timezone('utc', now()) + interval '5 minutes', timezone('utc', now()), 'java-node-1')`)
	err := locksReleaseRun(context.Background(), &locksReleaseOptions{deps: e.deps, Name: "sweep"})
	if !errors.Is(err, locks.ErrRefused) || exitCode(err) != exitRefused {
		t.Fatalf("err = %v (exit %d), want locks.ErrRefused (exit 3)", err, exitCode(err))
	}
	if e.out.Len() != 0 {
		t.Errorf("stdout = %q, want nothing", e.out.String())
	}
}

func TestJobsHistoryRunOfAnUnknownJobIsNotFound(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, output.JSON, nil)
	err := jobsHistoryRun(context.Background(), &jobsHistoryOptions{deps: e.deps, ID: "nosuch", Limit: 5})
	if exitCode(err) != exitNotFound {
		t.Fatalf("err = %v (exit %d), want exit 4", err, exitCode(err))
	}
}

func TestJobsStatusRunPrintsTheMergedJobAsJSON(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, output.JSON, nil)
	e.exec(t, `INSERT INTO studio_replica (id, incarnation, host, pid, version, state) VALUES ('web-1', gen_random_uuid(), 'h', 1, 'dev', 'ready')`)
	e.exec(t, `INSERT INTO studio_job_status (replica_id, job_id, scope, schedule, runs, failures, last_outcome, last_error, last_started_at, last_finished_at)
		VALUES ('web-1', 'sweep', 'instance', 'every 10s', 3, 1, 'failed', 'boom', '2026-11-30T06:59:50Z', '2026-11-30T06:59:51Z')`)
	if err := jobsStatusRun(context.Background(), &jobsStatusOptions{deps: e.deps, ID: "sweep"}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"id": "sweep"`, `"health": "failing"`, `"last_started_at": "2026-11-30T06:59:50Z"`, `"runs": 3`} {
		if !strings.Contains(e.out.String(), want) {
			t.Errorf("stdout lacks %s:\n%s", want, e.out.String())
		}
	}
}

func TestReplicasListRunCountsAgesFromTheDisplayClock(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, output.Table, nil)
	e.exec(t, `INSERT INTO studio_replica (id, incarnation, host, pid, version, state, started_at, heartbeat_at)
		VALUES ('web-2', gen_random_uuid(), 'h2', 2, 'dev', 'ready', '2026-11-30T06:10:00Z', '2026-11-30T06:40:00Z')`)
	if err := replicasListRun(context.Background(), &replicasListOptions{deps: e.deps}); err != nil {
		t.Fatal(err)
	}
	want := "ID\tHOST\tVERSION\tSTATE\tHEARTBEAT\tUPTIME\tRUNS\tLEASES\nweb-2\th2\tdev\tcrashed\t2026-11-30T06:40:00Z\t\t0\t0\n"
	if got := e.out.String(); got != want {
		t.Errorf("stdout =\n%q\nwant\n%q", got, want)
	}
}

// Usage errors are typed, not matched by their text: an unknown command or
// flag at any level exits 2.
func TestUsageErrorsExitTwo(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
	}{
		{"an unknown command at the root", []string{"frobnicate"}},
		{"an unknown verb under a noun", []string{"locks", "frobnicate"}},
		{"an unknown flag", []string{"version", "--bogus"}},
		{"a flag value of the wrong type", []string{"jobs", "history", "x", "--limit", "many"}},
		{"a missing argument", []string{"locks", "show"}},
		{"an -o the verb does not print", []string{"version", "-o", "json"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var stderr bytes.Buffer
			a := &app{stdin: strings.NewReader(""), stdout: &bytes.Buffer{}, stderr: &stderr, getenv: func(string) string { return "" }, now: time.Now}
			if code := a.run(context.Background(), tt.args); code != exitUsage {
				t.Fatalf("exit %d, want 2; stderr %q", code, stderr.String())
			}
		})
	}
}

// BenchmarkLocksListRunPiped10k is locks list's work after start-up: the
// query, the judging and the tab-separated output of 10,000 rows.
func BenchmarkLocksListRunPiped10k(b *testing.B) {
	pool, err := db.Open(context.Background(), pgtest.NewDB(b))
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(context.Background(), `INSERT INTO shedlock(name, lock_until, locked_at, locked_by)
SELECT 'job-' || lpad(g::text, 5, '0'), timezone('utc', now()) + interval '1 hour', timezone('utc', now()), 'replica-' || (g % 20)
FROM generate_series(1, 10000) g`); err != nil {
		b.Fatal(err)
	}
	var out bytes.Buffer
	d := deps{
		IO:        &streams{Out: &out, Err: io.Discard},
		DB:        func(context.Context) (*pgxpool.Pool, error) { return pool, nil },
		Printer:   func() *output.Printer { return output.New(&out, output.Table, output.Options{}) },
		Now:       time.Now,
		LockTable: locks.DefaultTable,
	}
	for b.Loop() {
		out.Reset()
		if err := locksListRun(context.Background(), &locksListOptions{deps: d}); err != nil {
			b.Fatal(err)
		}
	}
}

// The terminal override names streams one by one, and the display clock
// parses RFC 3339; both come from the injected environment only.
func TestApplyEnvReadsTheTestHooksPerStream(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                string
		env                 map[string]string
		wantIn, wantOut     bool
		wantErr, wantNowSet bool
	}{
		{name: "nothing set leaves the streams as they are"},
		{name: "stdout alone", env: map[string]string{envForceTTY: "stdout"}, wantOut: true},
		{name: "stdin and stderr", env: map[string]string{envForceTTY: "stdin, stderr"}, wantIn: true},
		{name: "1 means all three", env: map[string]string{envForceTTY: "1"}, wantIn: true, wantOut: true},
		{name: "an unknown stream is a usage error", env: map[string]string{envForceTTY: "stdout,tty"}, wantErr: true},
		{name: "a fixed clock", env: map[string]string{envNow: "2026-11-30T07:00:00Z"}, wantNowSet: true},
		{name: "a clock that does not parse is a usage error", env: map[string]string{envNow: "now"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := &app{getenv: func(k string) string { return tt.env[k] }, now: time.Now}
			err := a.applyEnv()
			if tt.wantErr {
				if exitCode(err) != exitUsage {
					t.Fatalf("err = %v, want a usage error", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if a.stdinTTY != tt.wantIn || a.stdoutTTY != tt.wantOut {
				t.Errorf("stdin, stdout terminal = %t, %t; want %t, %t", a.stdinTTY, a.stdoutTTY, tt.wantIn, tt.wantOut)
			}
			if tt.env[envForceTTY] == "stdin, stderr" && !a.stderrTTY {
				t.Error("stderr is not a terminal")
			}
			if a.nowFixed != tt.wantNowSet || (tt.wantNowSet && !a.now().Equal(testNow)) {
				t.Errorf("clock fixed = %t at %v, want %t", a.nowFixed, a.now(), tt.wantNowSet)
			}
		})
	}
}

// currentUserName is the name of this process's uid, the default actor's
// user without USER and LOGNAME.
func currentUserName(t *testing.T) string {
	u, err := user.Current()
	if err != nil {
		t.Fatalf("this test needs a named uid: %v", err)
	}
	return u.Username
}
