package migrate_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/studioctl/studioctl/internal/migrate"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
	"github.com/studioctl/studioctl/migrations"
)

// Migration 00007 drops an index of studio_job_run. Behind a transaction
// that reads the table (an operator's psql left open), it fails within its
// lock_timeout and changes nothing, instead of waiting without bound while
// it holds the migration lock every other starting replica waits for; once
// the reader is gone it applies. (Written as DROP INDEX CONCURRENTLY, it
// waited for as long as the reader stayed.)
func TestMigration7GivesUpBehindALongReaderAndAppliesLater(t *testing.T) {
	ctx := t.Context()
	url := pgtest.NewEmptyDB(t)
	pool := openPool(t, ctx, url)
	p, err := goose.NewProvider(goose.DialectPostgres, stdlib.OpenDBFromPool(pool), migrations.FS)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 6); err != nil {
		t.Fatal(err)
	}
	reader, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Rollback(context.WithoutCancel(ctx))
	if _, err := reader.Exec(ctx, `SELECT count(*) FROM studio_job_run`); err != nil {
		t.Fatal(err)
	}

	began := time.Now()
	bounded, cancel := context.WithTimeout(ctx, 60*time.Second) // the old migration waited here for good
	defer cancel()
	_, err = migrate.Up(bounded, pool)
	if err == nil || !strings.Contains(err.Error(), "lock timeout") {
		t.Fatalf("migrate up behind a reader of studio_job_run = %v; want it to fail on the lock timeout", err)
	}
	if d := time.Since(began); d > 30*time.Second {
		t.Errorf("it gave up after %v; want about 5 s", d)
	}
	var version int64
	var index bool
	if err := pool.QueryRow(ctx, `SELECT max(version_id), to_regclass('studio_job_run_job_seq') IS NOT NULL FROM goose_db_version`).Scan(&version, &index); err != nil {
		t.Fatal(err)
	}
	if version != 6 || !index {
		t.Fatalf("after the failed attempt: version %d, index there %v; want 6 and the index untouched", version, index)
	}

	if err := reader.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := migrate.Up(ctx, pool); err != nil {
		t.Fatalf("migrate up once the reader is gone: %v", err)
	}
	var fill string
	if err := pool.QueryRow(ctx, `SELECT max(version_id), to_regclass('studio_job_run_job_seq') IS NOT NULL,
  coalesce((SELECT array_to_string(reloptions, ',') FROM pg_class WHERE relname = 'studio_job_status'), '')
FROM goose_db_version`).Scan(&version, &index, &fill); err != nil {
		t.Fatal(err)
	}
	if version < 7 || index || fill != "fillfactor=70" {
		t.Fatalf("after 00007: version %d, index there %v, studio_job_status options %q; want 7 or later, gone, fillfactor=70", version, index, fill)
	}
}
