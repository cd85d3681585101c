package doctor

import (
	"context"
	"errors"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/locks"
	"github.com/studioctl/studioctl/internal/runner"
	"github.com/studioctl/studioctl/internal/testkit/faultproxy"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.MainNoLeaks(m)) }

// fixture is one test database and the options doctor runs with on it.
type fixture struct {
	t    *testing.T
	pool *pgxpool.Pool
	o    Options
}

func newFixture(t *testing.T, migrated bool) *fixture {
	t.Helper()
	url := pgtest.NewDB(t)
	if !migrated {
		url = pgtest.NewEmptyDB(t)
	}
	cfg, err := db.ParsePoolConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := db.OpenConfig(context.Background(), cfg, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return &fixture{t: t, pool: pool, o: Options{Pool: pool, ConnConfig: cfg.ConnConfig, LockTable: locks.DefaultTable(), ReplicaID: "doctor-test-1"}}
}

func (f *fixture) exec(sql string, args ...any) {
	f.t.Helper()
	if _, err := f.pool.Exec(context.Background(), sql, args...); err != nil {
		f.t.Fatalf("%s: %v", sql, err)
	}
}

// run runs doctor and returns its results by check name.
func (f *fixture) run() map[string]Result {
	f.t.Helper()
	rs := Run(context.Background(), f.o)
	if got := len(rs); got != len(checks) {
		f.t.Fatalf("got %d results, want %d", got, len(checks))
	}
	out := map[string]Result{}
	for _, r := range rs {
		out[r.Check] = r
	}
	return out
}

// expect runs doctor and checks that name has status and a detail that
// contains every one of want; every other check must be ok.
func (f *fixture) expect(name string, status Status, want ...string) Result {
	f.t.Helper()
	rs := f.run()
	r := rs[name]
	if r.Status != status {
		f.t.Fatalf("%s: status %s, want %s (detail %q)", name, r.Status, status, r.Detail)
	}
	for _, w := range want {
		if !strings.Contains(r.Detail, w) {
			f.t.Errorf("%s: detail %q does not contain %q", name, r.Detail, w)
		}
	}
	if status != OK && r.Hint == "" {
		f.t.Errorf("%s: %s without a hint", name, status)
	}
	for n, other := range rs {
		if n != name && other.Status != OK {
			f.t.Errorf("%s: status %s (%s), want ok: only %s was provoked", n, other.Status, other.Detail, name)
		}
	}
	return r
}

// Replica rows: live (heartbeat now), gone (a minute ago) and crashed.
const (
	liveReplica = `INSERT INTO studio_replica (id, incarnation, host, pid, version, state, started_at, heartbeat_at)
VALUES ($1, gen_random_uuid(), 'h1', 7, 'dev', 'ready', now() - interval '1 hour', now())`
	goneReplica = `INSERT INTO studio_replica (id, incarnation, host, pid, version, state, started_at, heartbeat_at)
VALUES ($1, gen_random_uuid(), 'h2', 8, 'dev', 'ready', now() - interval '1 hour', now() - $2::interval)`
	stoppedReplica = `INSERT INTO studio_replica (id, incarnation, host, pid, version, state, started_at, heartbeat_at, stopped_at)
VALUES ($1, gen_random_uuid(), 'h3', 9, 'dev', 'stopped', now() - interval '1 hour', now() - interval '10 minutes', now() - interval '10 minutes')`
)

func TestAHealthyDatabaseIsAllOK(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	f.exec(liveReplica, "web-1")
	f.exec(stoppedReplica, "web-old")
	rs := f.expect(CheckDatabase, OK, "reachable; PostgreSQL ")
	_ = rs
	got := f.run()
	if got[CheckCrashedReplicas].Detail != "no crash in the last 24h (1 live replica)" {
		t.Errorf("crashed_replicas: %q", got[CheckCrashedReplicas].Detail)
	}
	if !strings.HasPrefix(got[CheckTLS].Detail, "on this machine (127.0.0.1)") {
		t.Errorf("tls: %q", got[CheckTLS].Detail)
	}
	if len(Failed(Run(context.Background(), f.o))) != 0 {
		t.Error("Failed is not empty")
	}
	if !slices.Equal(Names(), []string{"database", "schema", "clock", "tls", "pooler", "bus", "shedlock_table", "stale_locks", "unknown_holders",
		"crashed_replicas", "starting_replicas", "leases", "failing_jobs", "stalled_jobs", "near_timeout", "overdue_jobs", "config_drift"}) {
		t.Errorf("check names changed: %v", Names())
	}
}

func TestAnUnreachableDatabaseFailsAndSkipsTheRest(t *testing.T) {
	t.Parallel()
	cfg, err := pgx.ParseConfig("postgres://u:s3cret-pw@127.0.0.1:1/x?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	rs := Run(context.Background(), Options{OpenErr: errors.New("connect to database u@127.0.0.1:1/x: connection refused"), ConnConfig: cfg})
	for _, r := range rs {
		want := Skip
		switch r.Check {
		case CheckDatabase:
			want = Fail
		case CheckTLS:
			want = OK // the configuration alone says it
		}
		if r.Status != want {
			t.Errorf("%s: %s (%s), want %s", r.Check, r.Status, r.Detail, want)
		}
		if strings.Contains(r.Detail+r.Hint, "s3cret") {
			t.Errorf("%s shows the password: %q", r.Check, r.Detail)
		}
	}
	if !strings.Contains(rs[0].Detail, "connection refused") {
		t.Errorf("database detail %q does not say why", rs[0].Detail)
	}
	if got := Failed(rs); !slices.Equal(got, []string{CheckDatabase}) {
		t.Errorf("Failed = %v", got)
	}
}

func TestPendingMigrationsFailTheSchemaAndSkipTableChecks(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	rs := f.run()
	// Every migration pending, whichever is the latest.
	if r := rs[CheckSchema]; r.Status != Fail || !strings.Contains(r.Detail, " migrations pending: 00001, 00002, 00003, 00004, 00005, 00006, 00007, 00008, 00009, 00010, 00011") {
		t.Errorf("schema: %s %q", r.Status, r.Detail)
	}
	for _, name := range []string{CheckStaleLocks, CheckCrashedReplicas, CheckLeases, CheckFailingJobs, CheckNearTimeout} {
		if r := rs[name]; r.Status != Skip {
			t.Errorf("%s: %s (%s), want skip", name, r.Status, r.Detail)
		}
	}
	if r := rs[CheckShedlockTable]; r.Status != Fail || !strings.Contains(r.Detail, "does not exist") {
		t.Errorf("shedlock_table: %s %q", r.Status, r.Detail)
	}
}

func TestASchemaNewerThanThisBinaryFails(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	f.exec(`INSERT INTO goose_db_version (version_id, is_applied) VALUES (99999, true)`)
	f.expect(CheckSchema, Fail, "newer than this studioctl", "99999")
}

func TestClockOffsets(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	for _, tc := range []struct {
		name   string
		skew   time.Duration
		status Status
		want   string
	}{
		{"agrees", 0, OK, "agrees"},
		{"five seconds behind warns", -5 * time.Second, Warn, "5.0s behind"},
		{"a minute ahead fails", time.Minute, Fail, "1m0s ahead"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.t = t
			f.o.Now = func() time.Time { return time.Now().Add(tc.skew) }
			f.expect(CheckClock, tc.status, tc.want)
		})
	}
}

func TestAReplicaWhoseClockIsOffWarns(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	f.exec(liveReplica, "web-1")
	f.exec(`UPDATE studio_replica SET clock_offset_seconds = 0.002`)
	f.expect(CheckClock, OK, "agrees", "; 1 live replica's clock within 1s of it")
	f.exec(liveReplica, "web-2")
	f.exec(`UPDATE studio_replica SET clock_offset_seconds = -42.5 WHERE id = 'web-2'`)
	r := f.expect(CheckClock, Warn, "replica clocks, as their heartbeats measure them: web-2 is 42.5s ahead of the database; warn above 1s")
	if !strings.Contains(r.Hint, "that replica's host clock") {
		t.Errorf("hint %q", r.Hint)
	}
	// A gone replica's last measure does not count.
	f.exec(`UPDATE studio_replica SET heartbeat_at = now() - interval '1 hour', state = 'stopped', stopped_at = now() WHERE id = 'web-2'`)
	f.expect(CheckClock, OK, "; 1 live replica's clock within 1s of it")
}

func TestSSLModes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		conn string
		want []string // host:port=mode
	}{
		{"postgres://u:pw@db.example.com/x?sslmode=disable", []string{"db.example.com:5432=disable"}},
		{"postgres://u:pw@db.example.com/x?sslmode=allow", []string{"db.example.com:5432=allow"}},
		{"postgres://u:pw@db.example.com/x", []string{"db.example.com:5432=prefer"}},
		{"postgres://u:pw@db.example.com/x?sslmode=require", []string{"db.example.com:5432=require"}},
		{"postgres://u:pw@db.example.com/x?sslmode=verify-full", []string{"db.example.com:5432=verify-full"}},
		{"postgres://u:pw@a.example.com:5433,b.example.com/x?sslmode=prefer", []string{"a.example.com:5433=prefer", "b.example.com:5432=prefer"}},
		{"host=/tmp/sock dbname=x sslmode=disable", []string{"/tmp/sock:5432=disable"}},
	} {
		cfg, err := pgx.ParseConfig(tc.conn)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, tg := range connTargets(cfg) {
			got = append(got, tg.String()+"="+tg.mode)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.conn, got, tc.want)
		}
	}
}

func TestARemoteHostWithoutVerifyFullWarns(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		conn   string
		status Status
	}{
		{"postgres://u:s3cret-pw@db.example.com/x?sslmode=prefer", Warn},
		{"postgres://u:s3cret-pw@db.example.com/x?sslmode=require", Warn},
		{"postgres://u:s3cret-pw@db.example.com/x?sslmode=verify-full", OK},
		{"postgres://u:s3cret-pw@localhost/x?sslmode=disable", OK},
		{"postgres://u:s3cret-pw@[::1]/x?sslmode=disable", OK},
		{"host=/var/run/postgresql user=u password=s3cret-pw", OK},
	} {
		cfg, err := pgx.ParseConfig(tc.conn)
		if err != nil {
			t.Fatal(err)
		}
		r := Run(context.Background(), Options{ConnConfig: cfg})[3]
		if r.Check != CheckTLS || r.Status != tc.status {
			t.Errorf("%s: %s %s (%s), want %s", tc.conn, r.Check, r.Status, r.Detail, tc.status)
		}
		if strings.Contains(r.Detail+r.Hint, "s3cret") {
			t.Errorf("%s: the detail shows the password: %q", tc.conn, r.Detail)
		}
	}
}

func TestTheLockTableShape(t *testing.T) {
	t.Parallel()
	t.Run("a NOT NULL column without a default fails", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, true)
		f.exec(`ALTER TABLE shedlock ADD COLUMN owner_team text NOT NULL`)
		f.expect(CheckShedlockTable, Fail, "owner_team", "NOT NULL")
	})
	t.Run("timestamptz columns warn", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, true)
		f.exec(`ALTER TABLE shedlock ALTER COLUMN lock_until TYPE timestamptz, ALTER COLUMN locked_at TYPE timestamptz`)
		f.expect(CheckShedlockTable, Warn, "timestamptz")
	})
}

func TestAStaleLockFails(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	f.exec(goneReplica, "web-2", "1 minute")
	f.exec(`INSERT INTO shedlock VALUES ('sweep', timezone('utc', now()) + interval '5 minutes', timezone('utc', now()), 'web-2')`)
	// The gone replica is a crash as well: only stale_locks is asserted here.
	r := f.run()[CheckStaleLocks]
	if r.Status != Fail || !strings.Contains(r.Detail, "1 stale lock of crashed replicas: sweep held by gone replica web-2") || !strings.Contains(r.Hint, "studioctl locks release sweep") {
		t.Errorf("stale_locks: %+v", r)
	}
}

func TestALockHeldAfterACleanStopWarns(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	f.exec(stoppedReplica, "web-3")
	f.exec(`INSERT INTO shedlock VALUES ('tick', timezone('utc', now()) + interval '20 seconds', timezone('utc', now()) - interval '10 seconds', 'web-3')`)
	r := f.expect(CheckStaleLocks, Warn, "1 lock held after a clean stop: tick held by stopped replica web-3 until", "expires by itself")
	if !strings.Contains(r.Hint, "studioctl locks release tick") {
		t.Errorf("hint %q", r.Hint)
	}
}

func TestLocksOfUnknownHolders(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	// A Java node's lock of an hour is plausible.
	f.exec(`INSERT INTO shedlock VALUES ('report', timezone('utc', now()) + interval '1 hour', timezone('utc', now()) - interval '1 hour', 'java-node-1')`)
	f.expect(CheckUnknownHolders, OK, "(1 lock held by unknown holders, within it)")
	// Held for two days: past any run.
	f.exec(`INSERT INTO shedlock VALUES ('nightly', timezone('utc', now()) + interval '1 hour', timezone('utc', now()) - interval '2 days', 'java-node-2')`)
	f.expect(CheckUnknownHolders, Fail, "nightly held by java-node-2 (not a replica)", "2d0h ago")
	// Held until next year, from a moment ago, is as implausible.
	f.exec(`DELETE FROM shedlock WHERE name = 'nightly'`)
	f.exec(`INSERT INTO shedlock VALUES ('forever', timezone('utc', now()) + interval '1 year', timezone('utc', now()), 'java-node-3')`)
	f.expect(CheckUnknownHolders, Fail, "forever held by java-node-3 (not a replica) until")
}

func TestCrashedReplicas(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	f.exec(liveReplica, "web-1")
	f.exec(goneReplica, "web-old", "3 days")
	f.expect(CheckCrashedReplicas, OK, "1 live replica", "1 crashed row older than 24h")
	f.exec(goneReplica, "web-2", "2 minutes")
	f.expect(CheckCrashedReplicas, Fail, "1 crashed replica in the last 24h", "web-2 on h2 (pid 8, ready): last heartbeat 2m", "s ago, no stop recorded")
}

func TestAReplicaStartingTooLongWarns(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	f.exec(`INSERT INTO studio_replica (id, incarnation, host, pid, version, state, started_at, heartbeat_at)
VALUES ('web-3', gen_random_uuid(), 'h', 1, 'dev', 'starting', now() - interval '10 seconds', now())`)
	f.expect(CheckStartingReplicas, OK)
	f.exec(`UPDATE studio_replica SET started_at = now() - interval '5 minutes' WHERE id = 'web-3'`)
	f.expect(CheckStartingReplicas, Warn, "web-3 on h (pid 1) starting for 5m")
}

func TestLeasesWithoutALiveOwnerFail(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	f.exec(liveReplica, "web-1")
	f.exec(`INSERT INTO cluster_lease (cluster, owner, acquired_at, renewed_at, generation) VALUES ('eu-1', 'web-1', now(), now(), 1)`)
	f.expect(CheckLeases, OK, "every one of 1 cluster owned and renewed")
	f.exec(`INSERT INTO cluster_lease (cluster) VALUES ('eu-2')`)
	f.expect(CheckLeases, Fail, "1 of 2 clusters without a live owner: eu-2 unowned")
	f.exec(`UPDATE cluster_lease SET owner = 'web-1', renewed_at = now() - interval '1 minute' WHERE cluster = 'eu-2'`)
	f.expect(CheckLeases, Fail, "eu-2 expired (owner web-1 live, renewed 1m")
}

// statusRow inserts a status row of a live replica's job.
const statusRow = `INSERT INTO studio_job_status (replica_id, job_id, scope, schedule, next_fire_at, last_started_at, last_finished_at, last_outcome, last_error, runs, failures, invalid_schedule)
VALUES ('web-1', $1, 'installation', 'every 10s', now() + interval '5 seconds', now() - interval '2 seconds', now() - interval '1 second', $2, $3, 3, $4, $5)`

func TestFailingJobs(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	f.exec(liveReplica, "web-1")
	f.exec(statusRow, "fine", "succeeded", nil, 0, nil)
	f.expect(CheckFailingJobs, OK, "1 job on live replicas, none failing")
	f.exec(statusRow, "broken", "failed", "exit status 3", 2, nil)
	f.expect(CheckFailingJobs, Warn, "broken (2 failures, last error: exit status 3)")
	f.exec(statusRow, "odd", "succeeded", nil, 0, "every banana: not a duration")
	f.expect(CheckFailingJobs, Fail, "odd (every banana: not a duration)", "failing: broken")
}

func TestStalledJobs(t *testing.T) {
	t.Parallel()
	t.Run("no completion within three intervals", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, true)
		f.exec(liveReplica, "web-1")
		f.exec(statusRow, "sweep", "succeeded", nil, 0, nil)
		f.exec(`UPDATE studio_job_status SET last_finished_at = now() - interval '2 minutes', next_fire_at = NULL`)
		f.expect(CheckStalledJobs, Fail, "sweep: no run completed within three intervals of every 10s (last finished 2m")
		// A run going on (within its timeout) is progress, not a stall.
		f.exec(`UPDATE studio_job_status SET running = true, last_started_at = now() - interval '1 minute'`)
		f.expect(CheckStalledJobs, OK)
	})
	t.Run("an installation job another replica ran is not stalled", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, true)
		f.exec(liveReplica, "web-1")
		// web-1's own row: its last completion is a skip ten minutes ago
		// (another replica has run the job since, and web-1 reschedules
		// from that end instead of firing).
		f.exec(statusRow, "sweep", "succeeded", nil, 0, nil)
		f.exec(`UPDATE studio_job_status SET last_started_at = NULL, last_finished_at = NULL, last_outcome = NULL,
  last_skipped_elsewhere_at = now() - interval '10 minutes'`)
		f.expect(CheckStalledJobs, Fail, "sweep: no run completed within three intervals of every 10s (none finished)")
		f.exec(`INSERT INTO studio_job_schedule (job_id, last_ended_at, last_replica_id) VALUES ('sweep', now() - interval '3 seconds', 'web-9')`)
		f.expect(CheckStalledJobs, OK)
		f.exec(`UPDATE studio_job_schedule SET last_ended_at = now() - interval '2 minutes'`)
		f.expect(CheckStalledJobs, Fail, "sweep: no run completed within three intervals of every 10s (last finished 2m")
	})
	t.Run("no live replica runs anything", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, true)
		f.exec(stoppedReplica, "web-1")
		f.exec(statusRow, "sweep", "succeeded", nil, 0, nil)
		f.exec(statusRow, "report", "succeeded", nil, 0, nil)
		f.expect(CheckStalledJobs, Fail, "no replica is live: 2 jobs reported in the last 24h run nowhere (report; sweep)")
		// Rows older than a day are history, not an outage.
		f.exec(`UPDATE studio_job_status SET updated_at = now() - interval '2 days'`)
		f.expect(CheckStalledJobs, OK)
	})
	t.Run("a next fire long past due", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, true)
		f.exec(liveReplica, "web-1")
		f.exec(statusRow, "sweep", "succeeded", nil, 0, nil)
		f.exec(`UPDATE studio_job_status SET schedule = 'every 1h', next_fire_at = now() - interval '5 minutes'`)
		// A draining replica fires nothing new: not judged stalled. The
		// job is overdue all the same (nothing runs it).
		f.exec(`UPDATE studio_replica SET state = 'draining'`)
		rs := f.run()
		if rs[CheckStalledJobs].Status != OK || rs[CheckOverdueJobs].Status != Fail {
			t.Fatalf("draining: stalled_jobs %s, overdue_jobs %s; want ok and fail", rs[CheckStalledJobs].Status, rs[CheckOverdueJobs].Status)
		}
		f.exec(`UPDATE studio_replica SET state = 'ready'`)
		rs = f.run()
		for name, want := range map[string]string{CheckStalledJobs: "sweep on web-1: due 5m", CheckOverdueJobs: "1 job past the due time by more than 1m0s with no run started: sweep: due 5m"} {
			if r := rs[name]; r.Status != Fail || !strings.Contains(r.Detail, want) || r.Hint == "" {
				t.Errorf("%s: %+v, want fail with %q and a hint", name, r, want)
			}
		}
	})
	t.Run("a run past its timeout", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, true)
		f.exec(liveReplica, "web-1")
		f.exec(statusRow, "sweep", "succeeded", nil, 0, nil)
		f.exec(`INSERT INTO studio_job_run (seq, job_id, replica_id, started_at, outcome) VALUES (41, 'sweep', 'web-1', now() - interval '7 minutes', 'running')`)
		// The default timeout of every 10s is 5m; the configured one wins.
		f.o.Jobs = []jobs.Job{{ID: "sweep", Timeout: 10 * time.Minute}}
		f.expect(CheckStalledJobs, OK)
		f.o.Jobs = nil
		f.expect(CheckStalledJobs, Fail, "sweep run 41 on web-1: running for 7m", "s, past its 5m0s timeout")
	})
}

func TestARunNearItsTimeoutWarns(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	f.exec(liveReplica, "web-1")
	f.exec(statusRow, "report", "succeeded", nil, 0, nil)
	// 4m30s of the default 5m timeout of every 10s.
	f.exec(`INSERT INTO studio_job_run (seq, job_id, replica_id, started_at, finished_at, outcome) VALUES
  (7, 'report', 'web-1', now() - interval '10 minutes', now() - interval '10 minutes' + interval '4 minutes 30 seconds', 'succeeded'),
  (8, 'report', 'web-1', now() - interval '5 minutes', now() - interval '5 minutes' + interval '1 second', 'succeeded')`)
	f.expect(CheckNearTimeout, Warn, "report: run 7 on web-1 took 4m30s of its 5m0s timeout (default, 90%)")
	f.o.Jobs, f.o.JobsSource = []jobs.Job{{ID: "report", Timeout: time.Hour}}, "studio.yaml"
	f.expect(CheckNearTimeout, OK, "timeouts: 1 configured in studio.yaml, defaults for the rest")
	// A run older than the window does not count.
	f.o.Jobs = nil
	f.exec(`UPDATE studio_job_run SET started_at = started_at - interval '2 days', finished_at = finished_at - interval '2 days' WHERE seq = 7`)
	f.expect(CheckNearTimeout, OK, "default timeouts: no configuration file declares jobs")
}

func TestAReadOnlyDatabaseFails(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	f := newFixture(t, true)
	// newFixture's database is not url's: make url's sessions read-only
	// from a pool opened before, then doctor it with a fresh pool.
	before, err := db.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()
	if _, err := before.Exec(context.Background(), `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET default_transaction_read_only = on', current_database()); END $$`); err != nil {
		t.Fatal(err)
	}
	cfg, err := db.ParsePoolConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := db.OpenConfig(context.Background(), cfg, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	f.pool, f.o.Pool, f.o.ConnConfig = pool, pool, cfg.ConnConfig
	rs := f.run()
	if r := rs[CheckDatabase]; r.Status != Fail || !strings.Contains(r.Detail, "sessions are read-only") {
		t.Errorf("database: %+v", r)
	}
	for _, name := range []string{CheckSchema, CheckBus, CheckStaleLocks, CheckFailingJobs, CheckNearTimeout} {
		if r := rs[name]; r.Status != OK {
			t.Errorf("%s: %+v, want ok: reading works", name, r)
		}
	}
}

// A listener connection that cannot reach the server (a black hole between
// this host and the database: packets dropped, nothing closed) fails the
// bus check within BusTimeout; the rest, on a direct pool, is fine.
func TestTheBusFailsWhenItsListenerCannotHear(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	proxy, err := faultproxy.Start(net.JoinHostPort(f.o.ConnConfig.Host, strconv.Itoa(int(f.o.ConnConfig.Port))))
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	cfg := f.o.ConnConfig.Copy()
	cfg.Host, cfg.Port = "127.0.0.1", uint16(proxy.Port())
	f.o.ConnConfig = cfg
	f.expect(CheckBus, OK)
	proxy.Blackhole()
	start := time.Now()
	r := f.expect(CheckBus, Fail, "LISTEN failed")
	if took := time.Since(start); took > BusTimeout+5*time.Second {
		t.Errorf("the bus check took %s, more than its %s", took, BusTimeout)
	}
	if !strings.Contains(r.Hint, "PgBouncer") {
		t.Errorf("hint %q", r.Hint)
	}
	proxy.Restore()

	// Cut after LISTEN: the NOTIFY (on the direct pool) is sent, and the
	// notification never reaches the listener.
	f.o.afterListen = proxy.Blackhole
	start = time.Now()
	f.expect(CheckBus, Fail, "a NOTIFY on a temporary channel did not reach its LISTEN on another connection within 5s")
	if took := time.Since(start); took > BusTimeout+5*time.Second {
		t.Errorf("the bus check took %s, more than its %s", took, BusTimeout)
	}
	proxy.Restore()
}

func TestJobsThatCouldNotBeReadWarnAndFallBackToDefaultTimeouts(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	f.o.JobsErr = errors.New("studio.yaml:3: job \"x\": timeout: \"soon\" is not a duration")
	f.expect(CheckNearTimeout, Warn, "default timeouts: the configuration's jobs could not be read (studio.yaml:3:")
}

// Issue 21, finding 4: a row whose heartbeat is ahead of database time
// (planted by a role with the replica's grants) is named, with the command
// that removes it; one within liveness.FutureTolerance is a live replica.
func TestARowWithAHeartbeatAheadFailsCrashedReplicas(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	f.exec(liveReplica, "web-1")
	f.exec(`INSERT INTO studio_replica (id, incarnation, host, pid, version, state, heartbeat_at)
VALUES ('skewed', gen_random_uuid(), 'h3', 3, 'dev', 'ready', now() + interval '3 seconds')`)
	f.expect(CheckCrashedReplicas, OK, "no crash in the last 24h (2 live replicas)")
	f.exec(`INSERT INTO studio_replica (id, incarnation, host, pid, version, state, heartbeat_at) VALUES
  ('ghost', gen_random_uuid(), 'elsewhere', 4242, 'dev', 'ready', 'infinity'),
  ('later', gen_random_uuid(), 'elsewhere', 4243, 'dev', 'ready', '2999-01-01T00:00:00Z')`)
	r := f.expect(CheckCrashedReplicas, Fail, "2 rows with a heartbeat ahead of database time, which no replica's heartbeat writes (not live, owns nothing): "+
		"ghost on elsewhere (pid 4242, ready): heartbeat at 9999-12-31T23:59:59Z; later on elsewhere (pid 4243, ready): heartbeat at 2999-01-01T00:00:00Z")
	if !strings.Contains(r.Hint, "then studioctl replicas forget ghost --force") {
		t.Errorf("hint = %q, want the forget --force command", r.Hint)
	}
	// With a crash as well, both are named.
	f.exec(goneReplica, "web-2", "2 minutes")
	r = f.expect(CheckCrashedReplicas, Fail, "later on elsewhere", "; 1 crashed replica in the last 24h: web-2 on h2")
	if !strings.Contains(r.Hint, "--force; read that host's log") {
		t.Errorf("hint = %q, want both hints", r.Hint)
	}
}

// Issue 21, finding 8: a live replica that recorded an HTTP address beyond
// loopback (0.0.0.0 listens on every interface, IPv6 included, and records
// [::]) warns in the tls check; a gone replica's old address says nothing.
func TestAReplicaServingBeyondLoopbackWarnsInTheTLSCheck(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	f.exec(liveReplica, "web-3")
	f.exec(`UPDATE studio_replica SET http_addr = '127.0.0.1:8080' WHERE id = 'web-3'`)
	f.exec(goneReplica, "web-old", "3 days")
	f.exec(`UPDATE studio_replica SET http_addr = '[::]:8080' WHERE id = 'web-old'`)
	f.expect(CheckTLS, OK, "on this machine (127.0.0.1): TLS not needed")
	f.exec(liveReplica, "web-1")
	f.exec(liveReplica, "web-2")
	f.exec(`UPDATE studio_replica SET http_addr = CASE id WHEN 'web-1' THEN '[::]:8080' ELSE '10.0.0.5:8080' END WHERE id IN ('web-1', 'web-2')`)
	r := f.expect(CheckTLS, Warn, "on this machine (127.0.0.1): TLS not needed; this connection is not encrypted; "+
		"web-1 serves its page and event stream on every interface ([::]:8080); web-2 serves its page and event stream beyond loopback (10.0.0.5:8080), without TLS or authentication")
	if !strings.HasPrefix(r.Hint, "set replica.listen to a loopback address (127.0.0.1:PORT)") {
		t.Errorf("hint = %q", r.Hint)
	}
}

// The leases check warns when the per-cluster duties need more runs at
// once than the live replicas may run (clusters x mean run time /
// interval against live replicas x runner.max_concurrent_runs): 5,000
// clusters over 3 replicas started hundreds of processes at once and lost
// leases (issue 21). Before, it said every cluster was owned and renewed.
func TestLeasesWarnWhenTheDutiesOutnumberWhatTheReplicasCanRun(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	f.exec(liveReplica, "web-1")
	f.exec(`INSERT INTO cluster_lease (cluster, owner, acquired_at, renewed_at, generation)
SELECT 'c-' || i, 'web-1', now(), now(), 1 FROM generate_series(1, 100) i`)
	f.expect(CheckLeases, OK, "every one of 100 clusters owned and renewed")
	f.o.Jobs = []jobs.Job{{ID: "sweep", Scope: jobs.ScopeInstance, PerCluster: true, Schedule: mustEvery(t, 10*time.Second)}}
	f.o.JobsSource = "studio.yaml"
	// No run yet: 1 s assumed, 100 x 1 s / 10 s = 10 runs at once > 8.
	r := f.expect(CheckLeases, Warn, "every one of 100 clusters owned and renewed; but the per-cluster duties need about 10 runs at once and 1 live replica run at most 8 (runner.max_concurrent_runs 8 each)")
	if !strings.Contains(r.Hint, "runner.max_concurrent_runs") || !strings.Contains(r.Hint, "add replicas") {
		t.Errorf("hint %q", r.Hint)
	}
	// Runs of 0.5 s: 5 at once, within 8.
	f.exec(`INSERT INTO studio_job_run (job_id, replica_id, cluster, started_at, finished_at, outcome)
SELECT 'sweep', 'web-1', 'c-' || i, now() - interval '1 minute', now() - interval '1 minute' + interval '500 milliseconds', 'succeeded' FROM generate_series(1, 10) i`)
	f.expect(CheckLeases, OK, "every one of 100 clusters owned and renewed")
	// A cap of 4 each: 5 > 4.
	f.o.MaxConcurrentRuns = 4
	f.expect(CheckLeases, Warn, "need about 5 runs at once and 1 live replica run at most 4")
}

func mustEvery(t *testing.T, d time.Duration) jobs.Schedule {
	t.Helper()
	s, err := jobs.Every(d)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// doctor's default cap is the runner's (doctor does not import it).
func TestDoctorsDefaultCapIsTheRunners(t *testing.T) {
	if defaultMaxConcurrentRuns != runner.DefaultMaxConcurrentRuns {
		t.Fatalf("doctor's %d != runner's %d", defaultMaxConcurrentRuns, runner.DefaultMaxConcurrentRuns)
	}
}

// Adversarial finding A of issue 20: placement ignores which replicas
// declare a per-cluster job, so with configurations that differ the
// clusters placed on a replica without the job never run it. The leases
// check names them.
func TestLeasesFailWhenAClustersOwnerDoesNotDeclareADuty(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	f.exec(liveReplica, "web-1")
	f.exec(liveReplica, "web-2")
	f.exec(`INSERT INTO cluster_lease (cluster, owner, acquired_at, renewed_at, generation) VALUES
  ('eu-1', 'web-1', now() - interval '5 minutes', now(), 1),
  ('eu-2', 'web-2', now() - interval '5 minutes', now(), 1),
  ('eu-3', 'web-2', now() - interval '5 seconds', now(), 1)`)
	duty := `INSERT INTO studio_job_status (replica_id, job_id, scope, schedule) VALUES ($1, $2, 'instance', 'every 10s')`
	f.exec(duty, "web-1", "sync@eu-1")
	f.exec(duty, "web-2", "sync@eu-2")
	f.expect(CheckLeases, OK, "every one of 3 clusters owned and renewed")
	// web-1 declares a second per-cluster job that web-2 lacks: eu-2 does
	// not run it (eu-3 was acquired within the grace: not yet judged).
	f.exec(duty, "web-1", "audit@eu-1")
	r := f.expect(CheckLeases, Fail, "1 per-cluster duty does not run: audit on eu-2 (owner web-2 does not declare it)")
	if !strings.Contains(r.Hint, "web-2's configuration lacks audit") {
		t.Errorf("hint %q", r.Hint)
	}
	// A stopped replica's rows declare nothing.
	f.exec(`UPDATE studio_replica SET state = 'stopped' WHERE id = 'web-1'`)
	f.exec(`UPDATE cluster_lease SET owner = 'web-2' WHERE cluster = 'eu-1'`)
	f.exec(duty, "web-2", "sync@eu-1")
	f.expect(CheckLeases, OK, "every one of 3 clusters owned and renewed")
}

// overdue_jobs: the database's answer (studio_overdue_jobs), with no live
// replica: a job whose replicas stopped cleanly is still watched; a paused
// one is not.
func TestOverdueJobsCheck(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	f.exec(stoppedReplica, "web-1")
	f.exec(statusRow, "sweep", "succeeded", nil, 0, nil)
	// The row is older than stalled_jobs' window of 24h, and due in the
	// future: nothing is provoked.
	f.exec(`UPDATE studio_job_status SET next_fire_at = now() + interval '1 minute', updated_at = now() - interval '2 days'`)
	f.expect(CheckOverdueJobs, OK, "no job is past its due time by more than 1m0s without a run started")
	f.exec(`UPDATE studio_job_status SET next_fire_at = now() - interval '5 minutes'`)
	r := f.expect(CheckOverdueJobs, Fail, "1 job past the due time by more than 1m0s with no run started: sweep: due 5m")
	if !strings.Contains(r.Hint, "studioctl jobs overdue") {
		t.Errorf("hint %q does not name jobs overdue", r.Hint)
	}
	f.exec(`INSERT INTO studio_job_setting (job_id, paused, updated_by) VALUES ('sweep', true, 'alice')`)
	f.expect(CheckOverdueJobs, OK)
}

// Rows with infinite times (no replica writes one; a hostile or corrupt
// row) fail no job check with an error: they are left out, and a job
// overdue beside them is still found.
func TestJobChecksWithInfiniteTimes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	f.exec(liveReplica, "web-1")
	f.exec(statusRow, "sweep", "succeeded", nil, 0, nil)
	f.exec(`UPDATE studio_job_status SET next_fire_at = now() - interval '5 minutes'`)
	f.exec(`INSERT INTO studio_job_status (replica_id, job_id, scope, schedule, next_fire_at, last_started_at, last_finished_at, updated_at) VALUES
  ('web-1', 'bad-past', 'installation', 'every 10s', '-infinity', '-infinity', '-infinity', '-infinity'),
  ('web-1', 'bad-future', 'installation', 'every 10s', 'infinity', 'infinity', 'infinity', 'infinity')`)
	f.exec(`INSERT INTO studio_job_schedule (job_id, last_ended_at) VALUES ('bad-past', '-infinity'), ('bad-future', 'infinity')`)
	f.exec(`INSERT INTO studio_job_run (job_id, replica_id, started_at, finished_at, outcome) VALUES
  ('bad-past', 'web-1', '-infinity', NULL, 'running'), ('bad-future', 'web-1', 'infinity', NULL, 'running'),
  ('bad-future', 'web-1', now() - interval '1 minute', 'infinity', 'succeeded')`)
	rs := f.run()
	for _, name := range []string{CheckFailingJobs, CheckStalledJobs, CheckNearTimeout, CheckOverdueJobs} {
		if r := rs[name]; strings.Contains(r.Detail, "infinite") || strings.Contains(r.Detail, "Infinity") || strings.Contains(r.Detail, "could not") {
			t.Errorf("%s: %+v", name, r)
		}
	}
	if r := rs[CheckOverdueJobs]; r.Status != Fail || !strings.Contains(r.Detail, "sweep: due 5m") {
		t.Errorf("overdue_jobs: %+v, want sweep", r)
	}
}

// A database without migration 00011 (an older studioctl migrated it):
// overdue_jobs says skip and how to add it.
func TestOverdueJobsCheckWithoutTheFunction(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	f.exec(`DROP FUNCTION studio_overdue_jobs(interval)`)
	r := f.run()[CheckOverdueJobs]
	if r.Status != Skip || !strings.Contains(r.Detail, "studio_overdue_jobs") || !strings.Contains(r.Hint, "migrate up") {
		t.Fatalf("got %+v, want skip naming the function and migrate up", r)
	}
}

// config_drift: live replicas that published different definitions of a
// job, or one that no longer declares it (migration 00015); a stopped
// replica and one that publishes nothing (an older version) are not
// compared.
func TestConfigDriftCheck(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	f.exec(liveReplica, "web-1")
	f.exec(liveReplica, "web-2")
	f.exec(liveReplica, "web-old") // publishes nothing
	f.exec(stoppedReplica, "web-gone")
	const publish = `INSERT INTO studio_job_definition (replica_id, job_id, digest, definition) VALUES ($1, $2, $3, $4::jsonb)
ON CONFLICT (replica_id, job_id) DO UPDATE SET digest = EXCLUDED.digest, definition = EXCLUDED.definition`
	f.exec(publish, "web-1", "nightly", "d30", `{"schedule": "every 30m", "timeout": "1h30m"}`)
	f.exec(publish, "web-2", "nightly", "d30", `{"schedule": "every 30m", "timeout": "1h30m"}`)
	f.exec(publish, "web-gone", "nightly", "d5", `{"schedule": "every 5m", "timeout": "15m"}`)
	f.expect(CheckConfigDrift, OK, "the live replicas agree on every job's definition")
	f.exec(publish, "web-2", "nightly", "d1h", `{"schedule": "every 1h", "timeout": "3h"}`)
	f.exec(publish, "web-1", "old", "x", `{"schedule": "every 1m"}`)
	r := f.expect(CheckConfigDrift, Warn,
		"2 jobs with live replicas that disagree: nightly: schedule, timeout differ between web-1, web-2; old: defined on web-1, absent on web-2")
	if !strings.Contains(r.Hint, "studioctl jobs diff nightly") {
		t.Errorf("hint %q does not name jobs diff", r.Hint)
	}
}

// A database before migration 00015: config_drift says skip.
func TestConfigDriftCheckWithoutTheTable(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	f.exec(`DROP TABLE studio_job_definition`)
	r := f.run()[CheckConfigDrift]
	if r.Status != Skip || !strings.Contains(r.Detail, "studio_job_definition") || !strings.Contains(r.Hint, "migrate up") {
		t.Fatalf("got %+v, want skip naming the table and migrate up", r)
	}
}
