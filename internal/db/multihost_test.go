package db_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

// TestAMultiHostURLFindsTheWritableServerAndNeverShowsItsPassword: a URL
// listing a dead host and then the test server, with
// target_session_attrs=read-write, connects to the second; while the
// database is read-only it is refused with an error that says so, names
// both hosts and hides the password; Redact keeps every host.
func TestAMultiHostURLFindsTheWritableServerAndNeverShowsItsPassword(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	single := pgtest.NewDB(t)
	const pw = "Multi-Host-Secret"
	// postgres://postgres@127.0.0.1:PORT/db?sslmode=disable
	multi := strings.Replace(single, "postgres://postgres@127.0.0.1:", "postgres://postgres:"+pw+"@127.0.0.1:1,127.0.0.1:", 1) +
		"&target_session_attrs=read-write&connect_timeout=2"
	if multi == single {
		t.Fatalf("unexpected harness URL %q", single)
	}
	cfg, err := db.ParseConnConfig(multi)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Fallbacks) == 0 || cfg.ValidateConnect == nil {
		t.Fatalf("ParseConnConfig(%q): fallbacks %d, ValidateConnect set %v: want the second host and target_session_attrs", db.Redact(multi), len(cfg.Fallbacks), cfg.ValidateConnect != nil)
	}
	target := db.Describe(cfg)
	if !strings.HasPrefix(target, "postgres@127.0.0.1:1,127.0.0.1:") {
		t.Errorf("Describe = %q, want both hosts", target)
	}
	if r := db.Redact(multi); strings.Contains(r, pw) || !strings.Contains(r, "@127.0.0.1:1,127.0.0.1:") {
		t.Errorf("Redact(multi-host URL) = %q", r)
	}

	pool, err := db.Open(ctx, multi)
	if err != nil {
		t.Fatalf("open through the multi-host URL: %v", err)
	}
	if ro, err := db.ReadOnly(ctx, pool); err != nil || ro {
		t.Errorf("ReadOnly on the writable server = %v, %v", ro, err)
	}
	if _, err := pool.Exec(ctx, `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET default_transaction_read_only = on', current_database()); END $$`); err != nil {
		t.Fatal(err)
	}
	pool.Close()

	plain, err := db.Open(ctx, single)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if ro, err := db.ReadOnly(ctx, plain); err != nil || !ro {
		t.Errorf("ReadOnly on the read-only database = %v, %v; want true", ro, err)
	}

	pool, err = db.Open(ctx, multi)
	if err == nil {
		pool.Close()
		t.Fatal("the multi-host URL connected to a read-only database despite target_session_attrs=read-write")
	}
	var ce *db.ConnectError
	if !errors.As(err, &ce) || !db.IsReadOnly(err) || !errors.Is(err, db.ErrReadOnly) {
		t.Errorf("error %T %v: want a *db.ConnectError that IsReadOnly", err, err)
	}
	if strings.Contains(err.Error(), pw) {
		t.Errorf("the error shows the password: %v", err)
	}
	for _, want := range []string{target, "read-only", "target_session_attrs"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	// A refused host alone is not read-only.
	dead, err := db.Open(ctx, "postgres://postgres:"+pw+"@127.0.0.1:1/x?connect_timeout=2&target_session_attrs=read-write")
	if err == nil {
		dead.Close()
		t.Fatal("connected to port 1")
	}
	if db.IsReadOnly(err) {
		t.Errorf("a refused connection is taken for read-only: %v", err)
	}
}
