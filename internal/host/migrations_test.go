package host_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/host"
	"github.com/studioctl/studioctl/internal/migrate"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

// holdMigrationLock takes the migration lock on a session of its own,
// named application_name=name, and returns the release.
func holdMigrationLock(t *testing.T, url, name string) func() {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = name
	conn, err := pgx.ConnectConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(t.Context(), `SELECT pg_advisory_lock($1)`, int64(migrate.LockID)); err != nil {
		t.Fatal(err)
	}
	return func() {
		if _, err := conn.Exec(context.Background(), `SELECT pg_advisory_unlock($1)`, int64(migrate.LockID)); err != nil {
			t.Fatal(err)
		}
	}
}

// applied reports whether the schema exists (studio_replica).
func applied(t *testing.T, pool *pgxpool.Pool) bool {
	t.Helper()
	var ok bool
	if err := pool.QueryRow(t.Context(), `SELECT to_regclass('studio_replica') IS NOT NULL`).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// (The databases are empty: goose takes the lock only when something is
// pending.)

// A replica that must migrate while another session holds the migration
// lock says who holds it, and a drain ends the wait at once, with nothing
// registered. Before, it waited in silence for up to 5 minutes and a drain
// (SIGTERM) waited with it.
func TestADrainWhileWaitingForTheMigrationLockEndsCleanly(t *testing.T) {
	url := pgtest.NewEmptyDB(t)
	pool := openPool(t, url)
	holdMigrationLock(t, url, "forgotten-psql")
	var logs syncBuffer
	h, err := host.New(host.Options{ConnString: url, ID: "migration-waiter", Migrate: true, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan error, 1)
	go func() { started <- prepareStart(context.Background(), h) }()
	var holder string
	waitUntil(t, 30*time.Second, "the log line that names the lock's holder", func() bool {
		var ok bool
		holder, ok = logAttr(logs.String(), "waiting for the migration lock", "holder")
		return ok
	})
	if !strings.Contains(holder, `application_name "forgotten-psql"`) || !strings.HasPrefix(holder, "pid ") {
		t.Errorf("holder %q; want its pid and application_name forgotten-psql", holder)
	}
	began := time.Now()
	h.Drain("test")
	select {
	case <-h.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the replica waiting for the migration lock did not end after a drain")
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Errorf("the drain took %v; want it to end the wait at its next try (1 s)", d)
	}
	if err := h.Wait(); err != nil {
		t.Errorf("Wait after a drain while waiting = %v, want nil", err)
	}
	if err := <-started; err == nil || !strings.Contains(err.Error(), "waiting for the migration lock") {
		t.Errorf("Start = %v; want it to say it stopped while waiting for the migration lock", err)
	}
	if applied(t, pool) {
		t.Error("the schema exists: something was applied while another session held the migration lock")
	}
}

// Once the holder lets go, the waiting replica migrates and starts, and
// says how long it waited.
func TestAReplicaWaitingForTheMigrationLockStartsOnceItIsReleased(t *testing.T) {
	url := pgtest.NewEmptyDB(t)
	pool := openPool(t, url)
	release := holdMigrationLock(t, url, "migrate-up-elsewhere")
	var logs syncBuffer
	ready := make(chan string, 1)
	h, err := host.New(host.Options{ConnString: url, ID: "migration-patient", Migrate: true, DrainDelay: host.NoDrainDelay,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil)), OnReady: func(a string) { ready <- a }})
	if err != nil {
		t.Fatal(err)
	}
	go prepareStart(context.Background(), h)
	waitUntil(t, 30*time.Second, "the waiting log line", func() bool {
		_, ok := logAttr(logs.String(), "waiting for the migration lock", "holder")
		return ok
	})
	if applied(t, pool) {
		t.Fatal("the schema exists while another session holds the migration lock")
	}
	release()
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		t.Fatal("the replica did not start after the migration lock was released")
	}
	if _, ok := logAttr(logs.String(), "took the migration lock", "waited"); !ok {
		t.Error("no log line says the replica took the lock and how long it waited")
	}
	h.Drain("test")
	<-h.Done()
	if err := h.Wait(); err != nil {
		t.Errorf("Wait = %v", err)
	}
	if s := replicaState(t, pool, "migration-patient"); s != "stopped" {
		t.Errorf("row state %q after the drain; want stopped", s)
	}
}

// A drain that comes while the migrations are being applied (here, goose
// blocked behind another session's lock on its version table) is not
// lost: the migrations finish, and the replica drains as it starts
// instead of running on.
func TestADrainWhileTheMigrationsAreAppliedStillDrains(t *testing.T) {
	url := pgtest.NewEmptyDB(t)
	pool := openPool(t, url)
	ctx := t.Context()
	if _, err := pool.Exec(ctx, `CREATE TABLE goose_db_version (id integer PRIMARY KEY GENERATED BY DEFAULT AS IDENTITY,
		version_id bigint NOT NULL, is_applied boolean NOT NULL, tstamp timestamp NOT NULL DEFAULT now());
		INSERT INTO goose_db_version (version_id, is_applied) VALUES (0, true)`); err != nil {
		t.Fatal(err)
	}
	blocker, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Rollback(context.Background())
	if _, err := blocker.Exec(ctx, `LOCK TABLE goose_db_version IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	h, err := host.New(host.Options{ConnString: url, ID: "migration-drained", Migrate: true, DrainDelay: host.NoDrainDelay,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan error, 1)
	go func() { started <- prepareStart(context.Background(), h) }()
	waitUntil(t, 30*time.Second, "the migrations to wait behind the version table's lock", func() bool {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock' AND query ILIKE '%goose_db_version%'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
	h.Drain("test")
	if err := blocker.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.Done():
	case <-time.After(60 * time.Second):
		t.Fatal("the replica drained while migrating did not end: the drain was lost")
	}
	if err := h.Wait(); err != nil {
		t.Errorf("Wait = %v; want nil after a drain", err)
	}
	t.Logf("Start = %v", <-started)
	if !applied(t, pool) {
		t.Error("the migrations were not applied")
	}
}

// A stop at once while the replica waits for the migration lock ends the
// wait too: Wait says interrupted, and nothing was applied.
func TestAStopNowWhileWaitingForTheMigrationLockEndsTheWait(t *testing.T) {
	url := pgtest.NewEmptyDB(t)
	pool := openPool(t, url)
	holdMigrationLock(t, url, "forgotten-psql")
	var logs syncBuffer
	h, err := host.New(host.Options{ConnString: url, ID: "migration-stopped", Migrate: true, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan error, 1)
	go func() { started <- prepareStart(context.Background(), h) }()
	waitUntil(t, 30*time.Second, "the waiting log line", func() bool {
		_, ok := logAttr(logs.String(), "waiting for the migration lock", "holder")
		return ok
	})
	h.StopNow()
	select {
	case <-h.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the replica waiting for the migration lock did not end after StopNow")
	}
	if err := h.Wait(); !errors.Is(err, host.ErrInterrupted) {
		t.Errorf("Wait = %v; want ErrInterrupted", err)
	}
	if err := <-started; err == nil {
		t.Error("Start = nil; want it to say it stopped while waiting")
	}
	if applied(t, pool) {
		t.Error("something was applied")
	}
}
