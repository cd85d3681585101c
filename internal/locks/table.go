package locks

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Table names the lock table and its columns. ShedLock lets users rename
// both, so studioctl does too (locks.table, locks.columns.*).
type Table struct {
	Name      string // table, optionally schema-qualified: "shedlock" or "ops.shedlock"
	NameCol   string // name
	LockUntil string // lock_until
	LockedAt  string // locked_at
	LockedBy  string // locked_by
}

// DefaultTable is ShedLock's documented table.
func DefaultTable() Table {
	return Table{Name: "shedlock", NameCol: "name", LockUntil: "lock_until", LockedAt: "locked_at", LockedBy: "locked_by"}
}

// Validate checks that every identifier is set and plausible.
func (t Table) Validate() error {
	fields := []struct{ key, val string }{
		{"locks.table", t.Name}, {"locks.columns.name", t.NameCol}, {"locks.columns.lock_until", t.LockUntil},
		{"locks.columns.locked_at", t.LockedAt}, {"locks.columns.locked_by", t.LockedBy},
	}
	for _, f := range fields {
		if strings.TrimSpace(f.val) == "" {
			return fmt.Errorf("%s: must not be empty", f.key)
		}
		if len(f.val) > 127 {
			return fmt.Errorf("%s: %q is longer than an identifier can be", f.key, f.val)
		}
		if strings.ContainsAny(f.val, "\x00\"") {
			return fmt.Errorf("%s: %q contains a character not allowed in an identifier", f.key, f.val)
		}
	}
	if strings.Count(t.Name, ".") > 1 {
		return fmt.Errorf("locks.table: %q: use table or schema.table", t.Name)
	}
	return nil
}

// ident is the quoted, possibly schema-qualified table name.
func (t Table) ident() string {
	return pgx.Identifier(strings.Split(t.Name, ".")).Sanitize()
}

func col(name string) string { return pgx.Identifier{name}.Sanitize() }

// ErrSchema is returned when the lock table is missing or has the wrong shape.
var ErrSchema = errors.New("lock table schema")

// CheckSchema verifies that the table exists with the four columns, that the
// two time columns are timestamp or timestamptz, the text columns are text
// or varchar, and that name has a unique index the acquire statement's
// ON CONFLICT can use: immediate (not deferrable), valid, not partial, on
// that one key column (INCLUDE columns are fine).
func CheckSchema(ctx context.Context, q Querier, t Table) error {
	var exists bool
	if err := q.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, t.ident()).Scan(&exists); err != nil {
		return fmt.Errorf("check lock table %s: %w", t.Name, err)
	}
	if !exists {
		return fmt.Errorf("%w: table %s does not exist (run `studioctl migrate up`, or set locks.table)", ErrSchema, t.Name)
	}
	rows, err := q.Query(ctx, `
SELECT a.attname, format_type(a.atttypid, NULL), a.attnotnull
FROM pg_attribute a
WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped`, t.ident())
	if err != nil {
		return fmt.Errorf("check lock table %s: %w", t.Name, err)
	}
	types := map[string]string{}
	for rows.Next() {
		var name, typ string
		var notNull bool
		if err := rows.Scan(&name, &typ, &notNull); err != nil {
			return fmt.Errorf("check lock table %s: %w", t.Name, err)
		}
		types[name] = typ
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("check lock table %s: %w", t.Name, err)
	}
	want := []struct {
		key, col string
		ok       []string
	}{
		{"locks.columns.name", t.NameCol, []string{"character varying", "text", "character"}},
		{"locks.columns.lock_until", t.LockUntil, []string{"timestamp without time zone", "timestamp with time zone"}},
		{"locks.columns.locked_at", t.LockedAt, []string{"timestamp without time zone", "timestamp with time zone"}},
		{"locks.columns.locked_by", t.LockedBy, []string{"character varying", "text", "character"}},
	}
	for _, w := range want {
		typ, ok := types[w.col]
		if !ok {
			return fmt.Errorf("%w: table %s has no column %q (%s)", ErrSchema, t.Name, w.col, w.key)
		}
		good := false
		for _, o := range w.ok {
			if typ == o {
				good = true
			}
		}
		if !good {
			return fmt.Errorf("%w: column %s.%s is %s, want one of %s", ErrSchema, t.Name, w.col, typ, strings.Join(w.ok, ", "))
		}
	}
	var unique bool
	err = q.QueryRow(ctx, `
SELECT EXISTS (
  SELECT 1 FROM pg_index i
  WHERE i.indrelid = to_regclass($1) AND i.indisunique AND i.indimmediate AND i.indisvalid
    AND i.indpred IS NULL AND i.indnkeyatts = 1
    AND i.indkey[0] = (SELECT attnum FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = $2))`,
		t.ident(), t.NameCol).Scan(&unique)
	if err != nil {
		return fmt.Errorf("check lock table %s: %w", t.Name, err)
	}
	if !unique {
		return fmt.Errorf("%w: column %s.%s is not a primary key or unique", ErrSchema, t.Name, t.NameCol)
	}
	return nil
}
