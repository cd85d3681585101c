package e2eupgrade

import (
	"context"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
	"github.com/studioctl/studioctl/migrations"
)

const (
	// queryTimeout bounds one statement of the test.
	queryTimeout = 10 * time.Second
	// progressTimeout bounds each wait for the jobs to make progress.
	progressTimeout = 40 * time.Second
	// oldVersion is the newest migration of the old binary (the new one's
	// is newestMigration's).
	oldVersion = 6
	// exitUsage is run's exit code for a start it refuses before it
	// registers, a schema newer than it knows included (docs/replica-start.md).
	exitUsage = 2
)

// schema is the workload's own record: one row per execution of a job,
// with the replica (the application_name of its connection, which the test
// sets to the replica id) and its own start and end in database time.
const schema = `CREATE TABLE upgrade_run (
    id         bigserial   PRIMARY KEY,
    job        text        NOT NULL,
    replica    text        NOT NULL,
    started_at timestamptz NOT NULL,
    ended_at   timestamptz NOT NULL
)`

// config declares the workload: stamp, an installation job every 1 s whose
// runs last 0.3 s (so two at once would show as an overlap), and beat, an
// instance job every 1 s that shows each replica is still running its
// jobs. Both are sql: tasks, which both binaries have.
const config = `jobs:
  - id: stamp
    scope: installation
    every: 1s
    run:
      sql: >-
        INSERT INTO upgrade_run (job, replica, started_at, ended_at)
        VALUES ('stamp', current_setting('application_name'), clock_timestamp(), clock_timestamp());
        SELECT pg_sleep(0.3);
        UPDATE upgrade_run SET ended_at = clock_timestamp() WHERE id = currval('upgrade_run_id_seq')
  - id: beat
    scope: instance
    every: 1s
    run:
      sql: >-
        INSERT INTO upgrade_run (job, replica, started_at, ended_at)
        VALUES ('beat', current_setting('application_name'), clock_timestamp(), clock_timestamp())
`

// TestOldReplicasRunBesideANewOneThatMigrated is docs/upgrades.md's rolling
// upgrade: two replicas of the old binary on a fresh database (they
// migrate it to 00006), then one of the new binary, which migrates it to
// 00007 while they run. The old ones keep running their jobs beside it,
// the installation job never on two replicas at once; an old replica that
// restarts meanwhile is refused (exit 2, naming the newer migration); the
// last old one stopped, the new one runs everything. Then the rollback:
// the new one stopped and 00007 undone by hand, the old binary starts
// again.
func TestOldReplicasRunBesideANewOneThatMigrated(t *testing.T) {
	<-old.done
	if old.err != nil {
		t.Fatalf("build the old studioctl: %v", old.err)
	}
	t.Logf("old studioctl: commit %s, built in %s", old.commit, old.took.Round(time.Millisecond))
	start := time.Now()

	dbURL := pgtest.NewEmptyDB(t)
	pool := testPool(t, dbURL)
	cfgPath := filepath.Join(t.TempDir(), "studio.yaml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	execSQL(t, pool, schema)
	newVersion := newestMigration(t)
	startReplica := func(bin *replicaproc.Binary, id string, failOnRace bool) *replicaproc.Proc {
		t.Helper()
		// The jobs record application_name, the replica's: they run as its
		// role. The environment, not the file: the old binary refuses a
		// key it does not know in the file, and ignores the variable.
		return bin.Start(t, replicaproc.Options{ID: id, DatabaseURL: withAppName(t, dbURL, id), Args: []string{"--config", cfgPath}, FailOnRace: failOnRace,
			Env: []string{"STUDIO_DATABASE_SQL_AS_REPLICA=true"}})
	}

	// Phase 1: two old replicas migrate the fresh database to 00006 and
	// run the jobs.
	old1 := startReplica(old.bin, "old-1", false)
	old1.WaitReady(t)
	old2 := startReplica(old.bin, "old-2", false)
	old2.WaitReady(t)
	if v := schemaVersion(t, pool); v != oldVersion {
		t.Fatalf("schema version after the old replicas started = %d, want %d", v, oldVersion)
	}
	waitRuns(t, pool, "each old replica runs beat", time.Time{}, func(c counts) bool {
		return c.beat["old-1"] >= 2 && c.beat["old-2"] >= 2 && c.stamps >= 2
	})

	// Phase 2: a new replica migrates to the newest migration while the old ones run.
	new1 := startReplica(newBin, "new-1", true)
	new1.WaitReady(t)
	if v := schemaVersion(t, pool); v != newVersion {
		t.Fatalf("schema version after the new replica started = %d, want %d", v, newVersion)
	}
	migrated := dbNow(t, pool)
	took := waitRuns(t, pool, "the old replicas keep running their jobs beside the new one", migrated, func(c counts) bool {
		// Which replica takes stamp's lock at a fire is a race, so only
		// an old one is required here; new-1 runs it alone in phase 4.
		return c.beat["old-1"] >= 3 && c.beat["old-2"] >= 3 && c.beat["new-1"] >= 3 &&
			c.stamps >= 3 && c.stampBy["old-1"]+c.stampBy["old-2"] >= 1
	})
	t.Logf("after the migration, every replica ran its jobs within %s", took.Round(time.Millisecond))

	// Phase 3: an old replica that restarts now is refused.
	old2.Signal(t, syscall.SIGTERM)
	if code := old2.WaitExit(t, replicaproc.ExitTimeout); code != 0 {
		t.Fatalf("old-2 exited %d on SIGTERM, want 0", code)
	}
	again := startReplica(old.bin, "old-2", false)
	if code := again.WaitExit(t, replicaproc.ReadyTimeout); code != exitUsage {
		t.Fatalf("old-2 restarted on the migrated database exited %d, want %d:\n%s", code, exitUsage, again.Stderr())
	}
	// It names every applied version it does not know.
	var unknown []string
	for _, v := range migrationVersions(t) { // numbers may have gaps
		if v > int64(oldVersion) {
			unknown = append(unknown, fmt.Sprintf("%05d", v))
		}
	}
	refusal := fmt.Sprintf("the database schema is newer than this studioctl: the database has migration %s applied, this binary knows migrations up to %05d; run a studioctl at least as new as the one that migrated it", strings.Join(unknown, ", "), oldVersion)
	if !strings.Contains(again.Stderr(), refusal) {
		t.Fatalf("old-2's refusal does not say %q:\n%s", refusal, again.Stderr())
	}
	if again.Logged("replica ready") {
		t.Fatalf("old-2 got ready on a schema newer than it knows:\n%s", again.Stderr())
	}
	refused := dbNow(t, pool)
	waitRuns(t, pool, "old-1 and new-1 keep running after old-2's refusal", refused, func(c counts) bool {
		return c.beat["old-1"] >= 2 && c.beat["new-1"] >= 2 && c.beat["old-2"] == 0 && c.stamps >= 2
	})

	// Phase 4: the last old replica stops; the new one runs everything.
	old1.Signal(t, syscall.SIGTERM)
	if code := old1.WaitExit(t, replicaproc.ExitTimeout); code != 0 {
		t.Fatalf("old-1 exited %d on SIGTERM, want 0", code)
	}
	replaced := dbNow(t, pool)
	waitRuns(t, pool, "new-1 runs the installation job alone", replaced, func(c counts) bool {
		return c.stampBy["new-1"] >= 2 && c.beat["new-1"] >= 2
	})
	new1.Signal(t, syscall.SIGTERM)
	if code := new1.WaitExit(t, replicaproc.ExitTimeout); code != 0 {
		t.Fatalf("new-1 exited %d on SIGTERM, want 0", code)
	}

	// Phase 5: the rollback of docs/upgrades.md. With every new replica
	// stopped, 00007's Down section and the removal of its goose row take
	// the schema back to 00006, and the old binary starts again.
	versions := migrationVersions(t)
	for i := len(versions) - 1; i >= 0 && versions[i] > int64(oldVersion); i-- {
		rollBack(t, pool, versions[i])
	}
	if v := schemaVersion(t, pool); v != oldVersion {
		t.Fatalf("schema version after the rollback = %d, want %d", v, oldVersion)
	}
	old3 := startReplica(old.bin, "old-3", false)
	old3.WaitReady(t)
	rolledBack := dbNow(t, pool)
	waitRuns(t, pool, "old-3 runs the jobs after the rollback", rolledBack, func(c counts) bool {
		return c.stampBy["old-3"] >= 2 && c.beat["old-3"] >= 2
	})
	old3.Signal(t, syscall.SIGTERM)
	if code := old3.WaitExit(t, replicaproc.ExitTimeout); code != 0 {
		t.Fatalf("old-3 exited %d on SIGTERM, want 0", code)
	}

	// The checker: from the job's own records only, no two executions of
	// the installation job overlapped, before, during or after the upgrade.
	checkNoOverlap(t, pool)
	t.Logf("the upgrade and the rollback took %s (the builds not included)", time.Since(start).Round(time.Millisecond))
}

// rollBack undoes migration version the way docs/upgrades.md says: its
// file's Down section and the removal of its goose_db_version row, in one
// transaction.
func rollBack(t *testing.T, pool *pgxpool.Pool, version int64) {
	t.Helper()
	names, err := fs.Glob(migrations.FS, fmt.Sprintf("%05d_*.sql", version))
	if err != nil || len(names) != 1 {
		t.Fatalf("find migration %05d: %v %v", version, names, err)
	}
	text, err := fs.ReadFile(migrations.FS, names[0])
	if err != nil {
		t.Fatal(err)
	}
	_, down, ok := strings.Cut(string(text), "-- +goose Down")
	if !ok {
		t.Fatalf("%s has no Down section", names[0])
	}
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, down); err != nil {
			return fmt.Errorf("the Down section of %s: %w", names[0], err)
		}
		_, err := tx.Exec(ctx, `DELETE FROM goose_db_version WHERE version_id = $1`, version)
		return err
	})
	if err != nil {
		t.Fatalf("roll back migration %05d: %v", version, err)
	}
}

// counts are the executions recorded since a moment: beat per replica,
// stamp per replica and in all.
type counts struct {
	beat    map[string]int
	stampBy map[string]int
	stamps  int
}

// waitRuns polls the workload's records until ok holds for the executions
// that started after since, and returns how long that took.
func waitRuns(t *testing.T, pool *pgxpool.Pool, what string, since time.Time, ok func(counts) bool) time.Duration {
	t.Helper()
	return replicaproc.Eventually(t, progressTimeout, what, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
		defer cancel()
		rows, err := pool.Query(ctx, `SELECT job, replica, count(*) FROM upgrade_run WHERE started_at > $1 GROUP BY job, replica`, since)
		if err != nil {
			return err
		}
		c := counts{beat: map[string]int{}, stampBy: map[string]int{}}
		var job, replica string
		var n int
		_, err = pgx.ForEachRow(rows, []any{&job, &replica, &n}, func() error {
			if job == "beat" {
				c.beat[replica] = n
			} else {
				c.stampBy[replica] = n
				c.stamps += n
			}
			return nil
		})
		if err != nil {
			return err
		}
		if !ok(c) {
			return fmt.Errorf("not yet: beat %v, stamp %v", c.beat, c.stampBy)
		}
		return nil
	})
}

// checkNoOverlap fails the test when an execution of stamp started before
// the one before it had ended.
func checkNoOverlap(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	rows, err := pool.Query(ctx, `SELECT replica, started_at, ended_at FROM upgrade_run WHERE job = 'stamp' ORDER BY started_at, id`)
	if err != nil {
		t.Fatal(err)
	}
	type run struct {
		replica    string
		start, end time.Time
	}
	runs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (run, error) {
		var x run
		return x, r.Scan(&x.replica, &x.start, &x.end)
	})
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]int{}
	for i, r := range runs {
		by[r.replica]++
		if i > 0 && r.start.Before(runs[i-1].end) {
			p := runs[i-1]
			t.Errorf("stamp ran twice at once: on %s %s to %s, and on %s from %s",
				p.replica, p.start.Format(time.RFC3339Nano), p.end.Format(time.RFC3339Nano), r.replica, r.start.Format(time.RFC3339Nano))
		}
	}
	t.Logf("stamp: %d executions, none overlapping, by replica %v", len(runs), by)
}

// schemaVersion is the highest applied migration.
func schemaVersion(t *testing.T, pool *pgxpool.Pool) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	var v int64
	if err := pool.QueryRow(ctx, `SELECT coalesce(max(version_id), 0) FROM goose_db_version WHERE is_applied`).Scan(&v); err != nil {
		t.Fatalf("read the schema version: %v", err)
	}
	return v
}

func dbNow(t *testing.T, pool *pgxpool.Pool) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	var now time.Time
	if err := pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	return now
}

func execSQL(t *testing.T, pool *pgxpool.Pool, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	if _, err := pool.Exec(ctx, sql); err != nil {
		t.Fatalf("exec: %v", err)
	}
}

// withAppName is dbURL with application_name=id: a replica's sql: tasks
// connect with its settings, so the workload records which replica ran it.
func withAppName(t *testing.T, dbURL, id string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("parse database url: %v", err)
	}
	q := u.Query()
	q.Set("application_name", id)
	u.RawQuery = q.Encode()
	return u.String()
}

// testPool opens the test's own pool on dbURL.
func testPool(t *testing.T, dbURL string) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := db.Open(ctx, withAppName(t, dbURL, "studioctl-e2eupgrade"))
	if err != nil {
		t.Fatalf("open test pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// newestMigration is the number of the newest migration of this tree.
func newestMigration(t *testing.T) int64 {
	t.Helper()
	versions := migrationVersions(t)
	return versions[len(versions)-1]
}

// migrationVersions lists the versions of the shipped migrations, oldest
// first; the numbers may have gaps (a number kept for a branch that did
// not add one).
func migrationVersions(t *testing.T) []int64 {
	t.Helper()
	names, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil || len(names) == 0 {
		t.Fatalf("list the migrations: %v %v", names, err)
	}
	var out []int64
	for _, n := range names {
		var v int64
		if _, err := fmt.Sscanf(n, "%05d_", &v); err != nil {
			t.Fatalf("migration file %s: %v", n, err)
		}
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}
