package db_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

func TestAWriteOnAReadOnlyDatabaseIsExplained(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := pgtest.NewDB(t)
	pool, err := db.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE t (x int)`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET default_transaction_read_only = on', current_database()); END $$`); err != nil {
		t.Fatal(err)
	}
	pool.Reset() // new sessions read the database setting
	_, werr := pool.Exec(ctx, `INSERT INTO t VALUES (1)`)
	if !db.IsReadOnly(werr) {
		t.Fatalf("IsReadOnly(%v) = false", werr)
	}
	wrapped := fmt.Errorf("write t: %w", werr)
	got := db.ExplainReadOnly(wrapped)
	if !strings.HasPrefix(got.Error(), "the database is read-only (a standby or default_transaction_read_only=on): write t: ") {
		t.Errorf("ExplainReadOnly text %q", got)
	}
	var pgErr *pgconn.PgError
	if !errors.Is(got, db.ErrReadOnly) || !errors.As(got, &pgErr) || pgErr.Code != "25006" {
		t.Errorf("ExplainReadOnly lost the chain: %#v", got)
	}
	if again := db.ExplainReadOnly(fmt.Errorf("run: %w", got)); strings.Count(again.Error(), "read-only (") != 1 {
		t.Errorf("explained twice: %q", again)
	}
	// Reads still work, and other errors are left alone.
	if _, err := pool.Exec(ctx, `SELECT * FROM t`); err != nil {
		t.Fatalf("a read failed on the read-only database: %v", err)
	}
	_, serr := pool.Exec(ctx, `SELECT * FROM no_such_table`)
	if db.IsReadOnly(serr) || db.ExplainReadOnly(serr) != serr {
		t.Errorf("a missing table is taken for read-only: %v", serr)
	}
	if db.ExplainReadOnly(nil) != nil {
		t.Error("ExplainReadOnly(nil) != nil")
	}
}
