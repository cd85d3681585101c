package locks_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/locks"
	"github.com/studioctl/studioctl/internal/migrate"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

// javaTable is a shedlock table made by a Java installation.
type javaTable struct {
	name string // the column type, as a subtest name
	ddl  string
	// javaTimeZone is the session zone of the simulated Java node; "" keeps
	// the server's default (America/Los_Angeles in the harness). Columns
	// without time zone do not care; with timestamptz, ShedLock's UTC wall
	// clock is read in the session zone, so the Java node must run in UTC
	// (as studioctl's sessions do).
	javaTimeZone string
}

// javaTables are the shedlock tables the Java library documents (TIMESTAMP(3)) and its timestamptz variant.
var javaTables = []javaTable{
	{
		name: "timestamp(3)",
		ddl: `CREATE TABLE shedlock(name VARCHAR(64) NOT NULL, lock_until TIMESTAMP(3) NOT NULL,
			locked_at TIMESTAMP(3) NOT NULL, locked_by VARCHAR(255) NOT NULL, PRIMARY KEY (name))`,
	},
	{
		name: "timestamptz",
		ddl: `CREATE TABLE shedlock(name VARCHAR(64) NOT NULL, lock_until TIMESTAMPTZ NOT NULL,
			locked_at TIMESTAMPTZ NOT NULL, locked_by VARCHAR(255) NOT NULL, PRIMARY KEY (name))`,
		javaTimeZone: "UTC",
	},
}

func TestCheckSchemaAcceptsTheMigratedTable(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	if err := locks.CheckSchema(t.Context(), pool, defaultTable); err != nil {
		t.Fatal(err)
	}
	if err := newAdmin(t, pool, defaultTable).CheckSchema(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// A database with only ShedLock's table, no studioctl migration: the
// provider and the operator side both work on it.
func TestCheckSchemaAcceptsATableCreatedAsJavaDocumentsIt(t *testing.T) {
	t.Parallel()
	for _, jt := range javaTables {
		t.Run(jt.name, func(t *testing.T) {
			t.Parallel()
			url := pgtest.NewEmptyDB(t)
			pool := openPool(t, url, 0)
			exec(t, pool, jt.ddl)
			a := newProvider(t, pool, defaultTable, "replica-a")
			if err := a.CheckSchema(t.Context()); err != nil {
				t.Fatal(err)
			}

			l := mustLock(t, a, "job", time.Minute, 0)
			mustBeRefused(t, newProvider(t, pool, defaultTable, "replica-b"), "job")
			admin := newAdmin(t, pool, defaultTable)
			in, err := admin.Get(t.Context(), "job")
			if err != nil {
				t.Fatal(err)
			}
			// Without studio_replica every holder is unknown.
			if in.LockedBy != "replica-a" || in.HolderState != locks.HolderUnknown || in.State != locks.StateHeld {
				t.Errorf("Get = %+v, want replica-a, unknown, held", in)
			}
			res, err := admin.Release(t.Context(), pool, locks.ReleaseRequest{Info: in, Force: true, Actor: "ops", Reason: "test"})
			if err != nil {
				t.Fatal(err)
			}
			if !res.Changed || res.Audited {
				t.Errorf("Release = %+v, want changed and not audited (no studio_audit table)", res)
			}
			if err := l.Unlock(t.Context()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestMigrationLeavesAJavaTableAsItIs(t *testing.T) {
	t.Parallel()
	pool := openPool(t, pgtest.NewEmptyDB(t), 0)
	exec(t, pool, javaTables[0].ddl,
		`INSERT INTO shedlock VALUES ('java-job', timezone('utc', CURRENT_TIMESTAMP) + interval '1 hour', timezone('utc', CURRENT_TIMESTAMP), 'java-node-1')`)
	if _, err := migrate.Up(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(t.Context(), `
SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute
WHERE attrelid = 'shedlock'::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var name, typ string
		if err := rows.Scan(&name, &typ); err != nil {
			t.Fatal(err)
		}
		got = append(got, name+" "+typ)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := "name character varying(64), lock_until timestamp(3) without time zone, locked_at timestamp(3) without time zone, locked_by character varying(255)"
	if strings.Join(got, ", ") != want {
		t.Errorf("after migration shedlock is\n  %s\nwant\n  %s", strings.Join(got, ", "), want)
	}
	if r := readRow(t, pool, defaultTable, "java-job"); r.LockedBy != "java-node-1" {
		t.Errorf("the Java lock row changed: %+v", r)
	}
	if err := locks.CheckSchema(t.Context(), pool, defaultTable); err != nil {
		t.Error(err)
	}
}

func TestCustomTableAndColumnNamesWorkEndToEnd(t *testing.T) {
	t.Parallel()
	pool := openPool(t, pgtest.NewDB(t), 0)
	exec(t, pool, `CREATE SCHEMA ops`, `CREATE TABLE ops."JobLocks" (
		"lockName" VARCHAR(64)  PRIMARY KEY,
		held_until TIMESTAMPTZ  NOT NULL,
		taken_at   TIMESTAMPTZ  NOT NULL,
		taken_by   TEXT         NOT NULL)`)
	// Mixed case needs double quotes, as it would in SQL.
	custom := locks.Table{Name: `ops."JobLocks"`, NameCol: `"lockName"`, LockUntil: "held_until", LockedAt: "taken_at", LockedBy: "taken_by"}
	a := newProvider(t, pool, custom, "replica-a")
	b := newProvider(t, pool, custom, "replica-b")
	if err := a.CheckSchema(t.Context()); err != nil {
		t.Fatal(err)
	}
	if a.Table() != custom {
		t.Errorf("Table() = %+v", a.Table())
	}

	l := mustLock(t, a, "job", time.Minute, 0)
	mustBeRefused(t, b, "job")
	l, err := l.Extend(t.Context(), 2*time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	if r := readRow(t, pool, custom, "job"); r.LockedBy != "replica-a" || r.LockUntil.Sub(r.LockedAt) < 2*time.Minute {
		t.Errorf("custom row after extend: %+v", r)
	}
	mustUnlock(t, l)
	lb := mustLock(t, b, "job", time.Minute, 0)

	// The default table saw nothing.
	var n int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM shedlock`).Scan(&n); err != nil || n != 0 {
		t.Errorf("shedlock has %d rows (%v), want 0", n, err)
	}

	admin := newAdmin(t, pool, custom)
	list, err := admin.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Name != "job" || list[0].LockedBy != "replica-b" || list[0].State != locks.StateHeld {
		t.Fatalf("List = %+v, want job held by replica-b", list)
	}
	res, err := admin.Release(t.Context(), pool, locks.ReleaseRequest{Info: list[0], Force: true, Actor: "ops", Reason: "custom table"})
	if err != nil || !res.Changed || !res.Audited {
		t.Fatalf("Release = %+v, %v", res, err)
	}
	waitFree(t, pool, custom, "job")
	mustLock(t, a, "job", time.Minute, 0)
	if err := lb.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if r := readRow(t, pool, custom, "job"); r.LockedBy != "replica-a" || isFree(t, pool, custom, "job") {
		t.Errorf("the former holder's unlock touched the new holder's lock: %+v", r)
	}
}

func TestCheckSchemaRejectsATableOfTheWrongShape(t *testing.T) {
	t.Parallel()
	pool := openPool(t, pgtest.NewEmptyDB(t), 0)
	named := func(name string) locks.Table {
		tbl := locks.DefaultTable()
		tbl.Name = name
		return tbl
	}
	tests := []struct {
		name  string
		ddl   string
		table locks.Table
		want  []string // in the error text
	}{
		{
			name:  "a missing table is an error naming the table",
			table: named("no_such_table"),
			want:  []string{"no_such_table", "does not exist"},
		},
		{
			name:  "a missing lock_until column is an error naming the column",
			ddl:   `CREATE TABLE no_until (name VARCHAR(64) PRIMARY KEY, locked_at TIMESTAMP NOT NULL, locked_by VARCHAR(255) NOT NULL)`,
			table: named("no_until"),
			want:  []string{`"lock_until"`},
		},
		{
			name:  "a configured column the table lacks is an error naming the column",
			ddl:   `CREATE TABLE other_cols (name VARCHAR(64) PRIMARY KEY, lock_until TIMESTAMP NOT NULL, locked_at TIMESTAMP NOT NULL, locked_by VARCHAR(255) NOT NULL)`,
			table: locks.Table{Name: "other_cols", NameCol: "name", LockUntil: "lock_until", LockedAt: "locked_at", LockedBy: "owner"},
			want:  []string{`"owner"`, "locks.columns.locked_by"},
		},
		{
			name:  "a lock_until of type date is an error naming the column",
			ddl:   `CREATE TABLE date_until (name VARCHAR(64) PRIMARY KEY, lock_until DATE NOT NULL, locked_at TIMESTAMP NOT NULL, locked_by VARCHAR(255) NOT NULL)`,
			table: named("date_until"),
			want:  []string{"date_until.lock_until", "date"},
		},
		{
			name:  "a locked_at of type text is an error naming the column",
			ddl:   `CREATE TABLE text_at (name VARCHAR(64) PRIMARY KEY, lock_until TIMESTAMP NOT NULL, locked_at TEXT NOT NULL, locked_by VARCHAR(255) NOT NULL)`,
			table: named("text_at"),
			want:  []string{"text_at.locked_at", "text"},
		},
		{
			name:  "a name of type integer is an error naming the column",
			ddl:   `CREATE TABLE int_name (name INTEGER PRIMARY KEY, lock_until TIMESTAMP NOT NULL, locked_at TIMESTAMP NOT NULL, locked_by VARCHAR(255) NOT NULL)`,
			table: named("int_name"),
			want:  []string{"int_name.name", "integer"},
		},
		{
			name:  "a locked_by of type bigint is an error naming the column",
			ddl:   `CREATE TABLE int_by (name VARCHAR(64) PRIMARY KEY, lock_until TIMESTAMP NOT NULL, locked_at TIMESTAMP NOT NULL, locked_by BIGINT NOT NULL)`,
			table: named("int_by"),
			want:  []string{"int_by.locked_by", "bigint"},
		},
		{
			name:  "a name without a unique key is an error naming the column",
			ddl:   `CREATE TABLE no_key (name VARCHAR(64) NOT NULL, lock_until TIMESTAMP NOT NULL, locked_at TIMESTAMP NOT NULL, locked_by VARCHAR(255) NOT NULL)`,
			table: named("no_key"),
			want:  []string{"no_key.name", "unique"},
		},
		{
			name:  "a name unique only together with locked_by is an error naming the column",
			ddl:   `CREATE TABLE wide_key (name VARCHAR(64) NOT NULL, lock_until TIMESTAMP NOT NULL, locked_at TIMESTAMP NOT NULL, locked_by VARCHAR(255) NOT NULL, PRIMARY KEY (name, locked_by))`,
			table: named("wide_key"),
			want:  []string{"wide_key.name", "unique"},
		},
	}
	for _, tt := range tests {
		if tt.ddl != "" {
			exec(t, pool, tt.ddl)
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := locks.CheckSchema(t.Context(), pool, tt.table)
			if !errors.Is(err, locks.ErrSchema) {
				t.Fatalf("CheckSchema: got %v, want locks.ErrSchema", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}

	t.Run("a name with its own unique constraint is accepted", func(t *testing.T) {
		t.Parallel()
		exec(t, pool, `CREATE TABLE unique_name (name TEXT NOT NULL UNIQUE, lock_until TIMESTAMP NOT NULL, locked_at TIMESTAMP NOT NULL, locked_by TEXT NOT NULL)`)
		if err := locks.CheckSchema(t.Context(), pool, named("unique_name")); err != nil {
			t.Fatal(err)
		}
		mustLock(t, newProvider(t, pool, named("unique_name"), "replica-a"), "job", time.Minute, 0)
	})
}

func TestTableConfigurationIsValidatedBeforeAnyQuery(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		table locks.Table
		want  string
	}{
		{"an empty table name is refused", locks.Table{NameCol: "name", LockUntil: "lock_until", LockedAt: "locked_at", LockedBy: "locked_by"}, "locks.table"},
		{"an empty column name is refused", locks.Table{Name: "shedlock", NameCol: "name", LockUntil: " ", LockedAt: "locked_at", LockedBy: "locked_by"}, "locks.columns.lock_until"},
		{"a quote in a name is refused", locks.Table{Name: `shed"lock`, NameCol: "name", LockUntil: "lock_until", LockedAt: "locked_at", LockedBy: "locked_by"}, "locks.table"},
		{"a name with two dots is refused", locks.Table{Name: "a.b.shedlock", NameCol: "name", LockUntil: "lock_until", LockedAt: "locked_at", LockedBy: "locked_by"}, "locks.table"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// A nil Querier: validation must not reach the database.
			if _, err := locks.NewProvider(nil, tt.table, "replica-a"); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("NewProvider: got %v, want an error about %s", err, tt.want)
			}
			if _, err := locks.NewAdmin(nil, tt.table); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("NewAdmin: got %v, want an error about %s", err, tt.want)
			}
		})
	}
}
