package host_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/host"
	"github.com/studioctl/studioctl/internal/locks"
	"github.com/studioctl/studioctl/internal/migrate"
	"github.com/studioctl/studioctl/internal/pgtest"
	"github.com/studioctl/studioctl/internal/replicas"
)

func openPool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := db.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// replicaState is the row's state, or "" when there is no row.
func replicaState(t *testing.T, pool *pgxpool.Pool, id string) string {
	t.Helper()
	var state string
	err := pool.QueryRow(context.WithoutCancel(t.Context()), `SELECT state FROM studio_replica WHERE id = $1`, id).Scan(&state)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		t.Fatal(err)
	}
	return state
}

// runUntilReady runs a host and drains it once ready.
func runUntilReady(t *testing.T, o host.Options) {
	t.Helper()
	ready := make(chan string, 1)
	o.OnReady = func(a string) { ready <- a }
	o.DrainDelay = host.NoDrainDelay
	h, err := host.New(o)
	if err != nil {
		t.Fatal(err)
	}
	sigs := make(chan os.Signal, 1)
	done := make(chan error, 1)
	go func() { done <- runHost(h, context.Background(), sigs) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("host stopped before ready: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("host not ready after 30s")
	}
	sigs <- os.Interrupt
	if err := <-done; err != nil {
		t.Fatalf("drain: %v", err)
	}
}

func TestNewRefusesAnInvalidReplicaIDNamingTheKey(t *testing.T) {
	tests := []struct {
		name string
		id   string
	}{
		{"upper case", "Web-1"},
		{"over 64 bytes", strings.Repeat("r", 65)},
		{"over 255 bytes", strings.Repeat("r", 256)},
		{"a space", "web 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := host.New(host.Options{ID: tt.id})
			if err == nil || !strings.Contains(err.Error(), "replica.id (STUDIO_REPLICA_ID)") {
				t.Fatalf("New(ID %q) = %v, want an error naming replica.id", tt.id, err)
			}
		})
	}
}

func TestAMissingLockTableFailsBeforeRegistering(t *testing.T) {
	url := pgtest.NewDB(t)
	pool := openPool(t, url)
	table := locks.DefaultTable()
	table.Name = "no_such_locks"
	h, err := host.New(host.Options{ConnString: url, ID: "no-table", LockTable: table})
	if err != nil {
		t.Fatal(err)
	}
	err = runHost(h, context.Background(), make(chan os.Signal))
	if !errors.Is(err, locks.ErrSchema) {
		t.Fatalf("Run = %v, want locks.ErrSchema", err)
	}
	if s := replicaState(t, pool, "no-table"); s != "" {
		t.Fatalf("a start refused for its lock table left a row in state %q", s)
	}
	// Fixed, the same id starts at once.
	runUntilReady(t, host.Options{ConnString: url, ID: "no-table"})
	if s := replicaState(t, pool, "no-table"); s != "stopped" {
		t.Fatalf("state %q after the corrected start, want stopped", s)
	}
}

func TestAStartThatFailsAfterRegisteringRecordsStopped(t *testing.T) {
	url := pgtest.NewDB(t)
	pool := openPool(t, url)
	// The runner reads its job status after the replica registered: take
	// the table away so that read fails.
	if _, err := pool.Exec(t.Context(), `ALTER TABLE studio_job_status RENAME TO studio_job_status_away`); err != nil {
		t.Fatal(err)
	}
	h, err := host.New(host.Options{ConnString: url, ID: "late-fail"})
	if err != nil {
		t.Fatal(err)
	}
	err = runHost(h, context.Background(), make(chan os.Signal))
	if err == nil || !strings.Contains(err.Error(), "studio_job_status") {
		t.Fatalf("Run = %v, want the job status read to fail", err)
	}
	if s := replicaState(t, pool, "late-fail"); s != "stopped" {
		t.Fatalf("a start that failed after registering left state %q, want stopped", s)
	}
	// The corrected restart with the same id is not refused as a live
	// duplicate.
	if _, err := pool.Exec(t.Context(), `ALTER TABLE studio_job_status_away RENAME TO studio_job_status`); err != nil {
		t.Fatal(err)
	}
	runUntilReady(t, host.Options{ConnString: url, ID: "late-fail"})
}

func TestASchemaNewerThanTheBinaryStopsTheStartBeforeRegistering(t *testing.T) {
	for _, migrateOn := range []bool{true, false} {
		name := "with migrate off"
		if migrateOn {
			name = "with migrate on"
		}
		t.Run(name, func(t *testing.T) {
			url := pgtest.NewDB(t)
			pool := openPool(t, url)
			if _, err := pool.Exec(t.Context(), `INSERT INTO goose_db_version (version_id, is_applied) VALUES (99, true)`); err != nil {
				t.Fatal(err)
			}
			h, err := host.New(host.Options{ConnString: url, ID: "old-binary", Migrate: migrateOn})
			if err != nil {
				t.Fatal(err)
			}
			err = runHost(h, context.Background(), make(chan os.Signal))
			if !errors.Is(err, migrate.ErrNewerSchema) || !strings.Contains(err.Error(), "00099") {
				t.Fatalf("Run = %v, want ErrNewerSchema naming 00099", err)
			}
			if s := replicaState(t, pool, "old-binary"); s != "" {
				t.Fatalf("state %q, want no row", s)
			}
		})
	}
}

func TestRegisteringOnAReadOnlyDatabaseSaysSo(t *testing.T) {
	url := pgtest.NewDB(t)
	pool := openPool(t, url)
	if _, err := pool.Exec(t.Context(), `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET default_transaction_read_only = on', current_database()); END $$`); err != nil {
		t.Fatal(err)
	}
	h, err := host.New(host.Options{ConnString: url, ID: "read-only"})
	if err != nil {
		t.Fatal(err)
	}
	err = runHost(h, context.Background(), make(chan os.Signal))
	if !errors.Is(err, db.ErrReadOnly) || !strings.HasPrefix(err.Error(), "cannot register replica: the database is read-only") {
		t.Fatalf("Run = %v, want it to say the database is read-only", err)
	}
	if errors.Is(err, replicas.ErrLiveDuplicate) {
		t.Fatal("a read-only refusal is not a live duplicate")
	}
}
