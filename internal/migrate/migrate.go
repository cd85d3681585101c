// Package migrate applies the embedded migrations with goose, under a
// PostgreSQL session advisory lock, so that several processes starting at the
// same moment migrate once.
package migrate

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/studioctl/studioctl/migrations"
)

// Lock polling: try every lockPollSeconds, give up after lockPollTries.
const (
	lockPollSeconds = 1
	lockPollTries   = 300
)

// Status of one migration.
type Status struct {
	Version   int64      `json:"version" yaml:"version"`
	Name      string     `json:"name" yaml:"name"`
	Applied   bool       `json:"applied" yaml:"applied"`
	AppliedAt *time.Time `json:"applied_at" yaml:"applied_at"`
	// Unknown: applied in the database, but not a migration of this binary
	// (a newer studioctl applied it).
	Unknown bool `json:"unknown" yaml:"unknown"`
}

// Migrator applies the embedded migrations to one database.
type Migrator struct {
	pool     *pgxpool.Pool
	db       *sql.DB
	provider *goose.Provider
	// reader is the same provider without the session lock, for Status:
	// reading the version table needs no lock, and goose's Status takes
	// it, so any role that holds the advisory lock would make status hang.
	reader *goose.Provider
}

// New builds a Migrator over pool. Close it when done.
func New(pool *pgxpool.Pool) (*Migrator, error) { return NewWith(pool, Options{}) }

// NewWith is New whose wait for the migration lock o reports and can end.
func NewWith(pool *pgxpool.Pool, o Options) (*Migrator, error) {
	db := stdlib.OpenDBFromPool(pool)
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS, goose.WithSessionLocker(sessionLocker{o: o}))
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("load migrations: %w", err)
	}
	r, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("load migrations: %w", err)
	}
	return &Migrator{pool: pool, db: db, provider: p, reader: r}, nil
}

// Close releases the database/sql handle (not the pool).
func (m *Migrator) Close() error { return m.db.Close() }

// Up applies every pending migration and returns the versions applied. It
// refuses (ErrNewerSchema) a database that a newer studioctl migrated.
func (m *Migrator) Up(ctx context.Context) ([]Status, error) {
	if err := CheckNotNewer(ctx, m.pool); err != nil {
		return nil, err
	}
	res, err := m.provider.Up(ctx)
	if err != nil {
		return nil, fmt.Errorf("apply migrations: %w", err)
	}
	out := make([]Status, 0, len(res))
	for _, r := range res {
		out = append(out, Status{Version: r.Source.Version, Name: baseName(r.Source.Path), Applied: true})
	}
	return out, nil
}

// Status lists every migration and whether it is applied, then the
// versions applied in the database that this binary does not know.
func (m *Migrator) Status(ctx context.Context) ([]Status, error) {
	st, err := m.reader.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("read migration status: %w", err)
	}
	out := make([]Status, 0, len(st))
	for _, s := range st {
		row := Status{Version: s.Source.Version, Name: baseName(s.Source.Path), Applied: s.State == goose.StateApplied}
		if row.Applied {
			t := s.AppliedAt.UTC()
			row.AppliedAt = &t
		}
		out = append(out, row)
	}
	u, err := Unknown(ctx, m.pool)
	if err != nil {
		return nil, err
	}
	return append(out, u...), nil
}

func baseName(path string) string {
	for i := len(path) - 1; i >= 0; i-- {
		if path[i] == '/' {
			return path[i+1:]
		}
	}
	return path
}

// Up is a convenience: build a Migrator, apply, close.
func Up(ctx context.Context, pool *pgxpool.Pool) ([]Status, error) {
	return UpWith(ctx, pool, Options{})
}

// UpWith is Up whose wait for the migration lock o reports and can end.
func UpWith(ctx context.Context, pool *pgxpool.Pool, o Options) ([]Status, error) {
	m, err := NewWith(pool, o)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	return m.Up(ctx)
}
