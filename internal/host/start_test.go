package host_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/host"
	"github.com/studioctl/studioctl/internal/locks"
	"github.com/studioctl/studioctl/internal/migrate"
	"github.com/studioctl/studioctl/internal/replicas"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
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

// syncBuffer is a log destination safe for the host's goroutines and the
// test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// logAttr finds the first JSON log line whose msg starts with prefix and
// returns its key attribute ("" when there is none yet).
func logAttr(out, prefix, key string) (string, bool) {
	for _, line := range strings.Split(out, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil {
			continue
		}
		if msg, _ := m["msg"].(string); strings.HasPrefix(msg, prefix) {
			v, _ := m[key].(string)
			return v, true
		}
	}
	return "", false
}

const setReadOnly = `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET default_transaction_read_only = on', current_database()); END $$`

// A replica started on a read-only database (as on a standby) used to exit 1
// at registration ("cannot execute INSERT in a read-only transaction"). It
// now waits: it says once what it waits for, writes nothing, answers
// /livez ok and /readyz 503 with the reason on its listen address, and
// starts, on the same address, once the database accepts writes.
func TestAReplicaOnAReadOnlyDatabaseWaitsAndStartsOnceItAcceptsWrites(t *testing.T) {
	url := pgtest.NewDB(t)
	pool := openPool(t, url)
	if _, err := pool.Exec(t.Context(), setReadOnly); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	h, err := host.New(host.Options{ConnString: url, ID: "read-only", DrainDelay: host.NoDrainDelay,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	sigs := make(chan os.Signal, 1)
	done := make(chan error, 1)
	go func() { done <- runHost(h, context.Background(), sigs) }()
	var addr string
	waitUntil(t, 30*time.Second, "the waiting log line", func() bool {
		a, ok := logAttr(logs.String(), "waiting for a writable primary", "listen")
		addr = a
		return ok
	})
	if reason, _ := logAttr(logs.String(), "waiting for a writable primary", "reason"); !strings.Contains(reason, "read-only") {
		t.Errorf("the waiting line's reason %q does not say read-only", reason)
	}
	if code, body := get(t, "http://"+addr+"/readyz"); code != 503 || !strings.Contains(body, "waiting for a writable primary") || !strings.Contains(body, "read-only") {
		t.Errorf("/readyz while waiting = %d %q", code, body)
	}
	if code, _ := get(t, "http://"+addr+"/livez"); code != 200 {
		t.Errorf("/livez while waiting = %d", code)
	}
	if s := replicaState(t, pool, "read-only"); s != "" {
		t.Fatalf("a waiting replica wrote its row (state %q)", s)
	}
	select {
	case err := <-done:
		t.Fatalf("the replica ended instead of waiting: %v", err)
	default:
	}
	if n := strings.Count(logs.String(), "waiting for a writable primary before registering"); n != 1 {
		t.Errorf("said %d times what it waits for, want once", n)
	}

	if _, err := pool.Exec(t.Context(), strings.Replace(setReadOnly, "= on", "= off", 1)); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 30*time.Second, "the replica to be ready", func() bool { return h.State() == replicas.StateReady })
	if h.Addr() != addr {
		t.Errorf("ready on %s, but waited on %s", h.Addr(), addr)
	}
	if code, body := get(t, "http://"+addr+"/readyz"); code != 200 {
		t.Errorf("/readyz once started = %d %q", code, body)
	}
	if !strings.Contains(logs.String(), "a writable primary answers; starting") {
		t.Error("no log line says the wait ended")
	}
	sigs <- os.Interrupt
	if err := <-done; err != nil {
		t.Fatalf("drain: %v", err)
	}
}

// A drain while the replica waits for a writable primary ends it cleanly,
// with nothing written.
func TestADrainWhileWaitingForAWritablePrimaryEndsCleanly(t *testing.T) {
	url := pgtest.NewDB(t)
	pool := openPool(t, url)
	if _, err := pool.Exec(t.Context(), setReadOnly); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	h, err := host.New(host.Options{ConnString: url, ID: "read-only-drained", Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan error, 1)
	go func() { started <- prepareStart(context.Background(), h) }()
	waitUntil(t, 30*time.Second, "the waiting log line", func() bool {
		_, ok := logAttr(logs.String(), "waiting for a writable primary", "listen")
		return ok
	})
	h.Drain("test")
	select {
	case <-h.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting replica did not end after a drain")
	}
	if err := h.Wait(); err != nil {
		t.Errorf("Wait after a drain while waiting = %v, want nil", err)
	}
	if err := <-started; err == nil {
		t.Error("Start returned nil for a replica that never started")
	}
	if s := replicaState(t, pool, "read-only-drained"); s != "" {
		t.Errorf("row state %q, want no row", s)
	}
}
