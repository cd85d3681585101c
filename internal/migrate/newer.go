package migrate

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/migrations"
)

// ErrNewerSchema: the database holds migrations this binary does not have,
// so a newer studioctl migrated it. `run` stops (exit 2) rather than work
// on a schema it does not know.
var ErrNewerSchema = errors.New("the database schema is newer than this studioctl")

// NewerSchemaError lists the applied versions above the highest embedded one.
type NewerSchemaError struct {
	Unknown []Status // applied in the database, unknown to this binary
	Latest  int64    // the highest version this binary embeds
}

func (e *NewerSchemaError) Error() string {
	vs := make([]string, len(e.Unknown))
	for i, u := range e.Unknown {
		vs[i] = fmt.Sprintf("%05d", u.Version)
	}
	return fmt.Sprintf("%s: the database has migration %s applied, this binary knows migrations up to %05d; run a studioctl at least as new as the one that migrated it",
		ErrNewerSchema, strings.Join(vs, ", "), e.Latest)
}

func (e *NewerSchemaError) Unwrap() error { return ErrNewerSchema }

// LatestVersion is the highest version among the embedded migrations
// (NNNNN_description.sql), read from the files themselves.
func LatestVersion() (int64, error) {
	names, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil {
		return 0, fmt.Errorf("list embedded migrations: %w", err)
	}
	var latest int64
	for _, n := range names {
		num, _, ok := strings.Cut(n, "_")
		if !ok {
			continue
		}
		v, err := strconv.ParseInt(num, 10, 64)
		if err != nil {
			continue
		}
		latest = max(latest, v)
	}
	if latest == 0 {
		return 0, errors.New("list embedded migrations: none found")
	}
	return latest, nil
}

// unknownSQL lists the versions above $1 whose latest goose_db_version row
// says applied (older goose versions recorded a rollback as a new row).
const unknownSQL = `
SELECT version_id, tstamp FROM (
  SELECT DISTINCT ON (version_id) version_id, is_applied, tstamp
  FROM goose_db_version WHERE version_id > $1 ORDER BY version_id, id DESC
) v WHERE is_applied ORDER BY version_id`

// Unknown lists the migrations applied in the database that this binary
// does not embed (versions above LatestVersion). A database without the
// goose table has none. doctor reports these.
func Unknown(ctx context.Context, pool *pgxpool.Pool) ([]Status, error) {
	latest, err := LatestVersion()
	if err != nil {
		return nil, err
	}
	return unknown(ctx, pool, latest)
}

func unknown(ctx context.Context, pool *pgxpool.Pool, latest int64) ([]Status, error) {
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('goose_db_version') IS NOT NULL`).Scan(&exists); err != nil {
		return nil, fmt.Errorf("read migration versions: %w", err)
	}
	if !exists {
		return nil, nil
	}
	rows, err := pool.Query(ctx, unknownSQL, latest)
	if err != nil {
		return nil, fmt.Errorf("read migration versions: %w", err)
	}
	defer rows.Close()
	var out []Status
	for rows.Next() {
		var v int64
		var at time.Time
		if err := rows.Scan(&v, &at); err != nil {
			return nil, fmt.Errorf("read migration versions: %w", err)
		}
		at = at.UTC()
		out = append(out, Status{Version: v, Name: "(unknown to this binary)", Applied: true, AppliedAt: &at, Unknown: true})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read migration versions: %w", err)
	}
	return out, nil
}

// CheckNotNewer returns a *NewerSchemaError (errors.Is ErrNewerSchema) when
// the database holds migrations this binary does not know.
func CheckNotNewer(ctx context.Context, pool *pgxpool.Pool) error {
	latest, err := LatestVersion()
	if err != nil {
		return err
	}
	u, err := unknown(ctx, pool, latest)
	if err != nil {
		return err
	}
	if len(u) > 0 {
		return &NewerSchemaError{Unknown: u, Latest: latest}
	}
	return nil
}
