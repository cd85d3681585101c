package locks_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/locks"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

func TestTableNamesFoldAsPostgreSQLReadsThem(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, raw, resolved, sql string
	}{
		{"an unquoted name folds to lower case", "MixedCaseLocks", "mixedcaselocks", `"mixedcaselocks"`},
		{"a quoted name keeps its case", `"MixedCaseLocks"`, "MixedCaseLocks", `"MixedCaseLocks"`},
		{"a schema-qualified name folds each unquoted part", "Ops.JobLocks", "ops.joblocks", `"ops"."joblocks"`},
		{"quoted and unquoted parts mix", `ops."JobLocks"`, "ops.JobLocks", `"ops"."JobLocks"`},
		{"a dot inside quotes is part of the name", `"My.Schema"."Job Locks"`, "My.Schema.Job Locks", `"My.Schema"."Job Locks"`},
		{"two double quotes inside quotes are one quote", `"a""b"`, `a"b`, `"a""b"`},
		{"only ASCII letters fold, as in a UTF-8 database", "ÄrgerLocks", "Ärgerlocks", `"Ärgerlocks"`},
		{"digits, _ and $ may follow the first letter", "_Locks$2", "_locks$2", `"_locks$2"`},
		{"surrounding spaces are ignored", "  shedlock ", "shedlock", `"shedlock"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tbl := locks.DefaultTable()
			tbl.Name = tt.raw
			if err := tbl.Validate(); err != nil {
				t.Fatal(err)
			}
			if got := tbl.Resolved().Name; got != tt.resolved {
				t.Errorf("Resolved().Name = %q, want %q", got, tt.resolved)
			}
			if got := locks.TableSQL(tbl); got != tt.sql {
				t.Errorf("SQL name = %s, want %s", got, tt.sql)
			}
		})
	}
	t.Run("columns fold the same way", func(t *testing.T) {
		t.Parallel()
		tbl := locks.Table{Name: "shedlock", NameCol: "lockName", LockUntil: `"lockUntil"`, LockedAt: "LOCKED_AT", LockedBy: "locked_by"}
		want := locks.Table{Name: "shedlock", NameCol: "lockname", LockUntil: "lockUntil", LockedAt: "locked_at", LockedBy: "locked_by"}
		if err := tbl.Validate(); err != nil {
			t.Fatal(err)
		}
		if got := tbl.Resolved(); got != want {
			t.Errorf("Resolved() = %+v, want %+v", got, want)
		}
	})
}

func TestAnInvalidTableOrColumnNameIsAnErrorNamingTheKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		set  func(*locks.Table)
		want []string
	}{
		{"a hyphen needs quotes", func(t *locks.Table) { t.Name = "my-locks" }, []string{"locks.table", `"my-locks"`, "double quotes"}},
		{"a leading digit needs quotes", func(t *locks.Table) { t.Name = "1locks" }, []string{"locks.table", "not a valid unquoted identifier"}},
		{"an unterminated quote", func(t *locks.Table) { t.Name = `"locks` }, []string{"locks.table", "unterminated"}},
		{"an empty quoted name", func(t *locks.Table) { t.Name = `""` }, []string{"locks.table", "empty quoted name"}},
		{"a quote inside an unquoted name", func(t *locks.Table) { t.Name = `shed"lock` }, []string{"locks.table", "double quote"}},
		{"three parts", func(t *locks.Table) { t.Name = "a.b.shedlock" }, []string{"locks.table", "schema.table"}},
		{"an empty part", func(t *locks.Table) { t.Name = "ops..shedlock" }, []string{"locks.table", "empty name"}},
		{"a trailing dot", func(t *locks.Table) { t.Name = "ops." }, []string{"locks.table", "empty name"}},
		{"text after a quoted name", func(t *locks.Table) { t.Name = `"ops"x` }, []string{"locks.table", "unexpected"}},
		{"a name over 63 bytes", func(t *locks.Table) { t.Name = strings.Repeat("l", 64) }, []string{"locks.table", "63 bytes"}},
		{"an empty column", func(t *locks.Table) { t.LockUntil = " " }, []string{"locks.columns.lock_until", "must not be empty"}},
		{"a column with a dot", func(t *locks.Table) { t.LockedBy = "l.locked_by" }, []string{"locks.columns.locked_by", "no dot"}},
		{"a column with a space", func(t *locks.Table) { t.NameCol = "lock name" }, []string{"locks.columns.name", "double quotes"}},
		{"a NUL in a quoted column", func(t *locks.Table) { t.LockedAt = "\"a\x00b\"" }, []string{"locks.columns.locked_at", "not allowed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tbl := locks.DefaultTable()
			tt.set(&tbl)
			for _, err := range []error{tbl.Validate(), newErr(locks.NewAdmin(nil, tbl)), newErr(locks.NewProvider(nil, tbl, "replica-a"))} {
				if err == nil {
					t.Fatalf("%+v is accepted", tbl)
				}
				if !strings.HasPrefix(err.Error(), tt.want[0]+": ") {
					t.Errorf("error %q does not start with the key %s", err, tt.want[0])
				}
				for _, w := range tt.want[1:] {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not mention %q", err, w)
					}
				}
			}
		})
	}
}

func newErr[T any](_ T, err error) error { return err }

// ShedLock puts withTableName/withColumnNames into its SQL unquoted, so a
// Java node configured with MixedCaseLocks and lockName uses mixedcaselocks
// and lockname. studioctl with the same configuration must find that table.
func TestAnUnquotedMixedCaseTableIsTheOneJavaUses(t *testing.T) {
	t.Parallel()
	pool := openPool(t, pgtest.NewEmptyDB(t), 0)
	// The Java side's DDL and statements, unquoted.
	exec(t, pool, `CREATE TABLE MixedCaseLocks (lockName VARCHAR(64) PRIMARY KEY, lockUntil TIMESTAMP(3) NOT NULL,
		lockedAt TIMESTAMP(3) NOT NULL, lockedBy VARCHAR(255) NOT NULL)`)
	tbl := locks.Table{Name: "MixedCaseLocks", NameCol: "lockName", LockUntil: "lockUntil", LockedAt: "lockedAt", LockedBy: "lockedBy"}
	if _, err := locks.CheckTable(t.Context(), pool, tbl, "replica-a"); err != nil {
		t.Fatal(err)
	}
	mustLock(t, newProvider(t, pool, tbl, "replica-a"), "report", time.Minute, 0)
	var by string
	if err := pool.QueryRow(t.Context(), `SELECT lockedBy FROM MixedCaseLocks WHERE lockName = 'report'`).Scan(&by); err != nil || by != "replica-a" {
		t.Fatalf("the Java side's unquoted SELECT sees %q, %v; want replica-a", by, err)
	}
	in, err := newAdmin(t, pool, tbl).Get(t.Context(), "report")
	if err != nil || in.LockedBy != "replica-a" {
		t.Fatalf("Get = %+v, %v", in, err)
	}

	// The same name in double quotes is another table, which is not there;
	// the error shows how the name was read.
	quoted := tbl
	quoted.Name = `"MixedCaseLocks"`
	err = locks.CheckSchema(t.Context(), pool, quoted)
	if !errors.Is(err, locks.ErrSchema) || !strings.Contains(err.Error(), `table "MixedCaseLocks" does not exist`) {
		t.Errorf("quoted name: %v; want does not exist", err)
	}
	exec(t, pool, `CREATE TABLE "Quoted" (name VARCHAR(64) PRIMARY KEY, lock_until TIMESTAMP NOT NULL, locked_at TIMESTAMP NOT NULL, locked_by VARCHAR(255) NOT NULL)`)
	unquoted := locks.DefaultTable()
	unquoted.Name = "Quoted"
	err = locks.CheckSchema(t.Context(), pool, unquoted)
	if !errors.Is(err, locks.ErrSchema) || !strings.Contains(err.Error(), `table Quoted (read as "quoted") does not exist`) {
		t.Errorf("unquoted name of a quoted table: %v; want it read as \"quoted\", which does not exist", err)
	}
	unquoted.Name = `"Quoted"`
	if err := locks.CheckSchema(t.Context(), pool, unquoted); err != nil {
		t.Error(err)
	}
}

// Issue 7 defect 8: the check at replica start missed column lengths and
// extra NOT NULL columns, so the replica became ready and every tick failed.
func TestCheckTableRefusesWhatWouldMakeEveryAcquireFail(t *testing.T) {
	t.Parallel()
	pool := openPool(t, pgtest.NewEmptyDB(t), 0)
	const cols = `lock_until TIMESTAMP NOT NULL, locked_at TIMESTAMP NOT NULL`
	tests := []struct {
		name  string
		ddl   string // of table "tbl"
		want  []string
		warns []string // when the table is accepted
	}{
		{name: "a locked_by too short for the replica id is refused",
			ddl:  `name VARCHAR(64) PRIMARY KEY, ` + cols + `, locked_by VARCHAR(5) NOT NULL`,
			want: []string{"tbl.locked_by", "character varying(5)", `"replica-a"`}},
		{name: "a name column shorter than 64 characters is refused",
			ddl:  `name VARCHAR(32) PRIMARY KEY, ` + cols + `, locked_by VARCHAR(255) NOT NULL`,
			want: []string{"tbl.name", "character varying(32)", "64 characters"}},
		{name: "a char(10) name column is refused",
			ddl:  `name CHAR(10) PRIMARY KEY, ` + cols + `, locked_by TEXT NOT NULL`,
			want: []string{"tbl.name", "character(10)"}},
		{name: "an extra NOT NULL column without a default is refused",
			ddl:  `name VARCHAR(64) PRIMARY KEY, ` + cols + `, locked_by VARCHAR(255) NOT NULL, tenant TEXT NOT NULL`,
			want: []string{"tbl.tenant", "NOT NULL without a default"}},
		{name: "extra columns with a default, an identity, generated or nullable are fine",
			ddl: `name VARCHAR(64) PRIMARY KEY, ` + cols + `, locked_by VARCHAR(255) NOT NULL, tenant TEXT NOT NULL DEFAULT 'a',
				id BIGINT GENERATED ALWAYS AS IDENTITY, n INT GENERATED ALWAYS AS (1) STORED, note TEXT`},
		{name: "text columns are fine",
			ddl: `name TEXT PRIMARY KEY, ` + cols + `, locked_by TEXT NOT NULL`},
		{name: "a locked_by that fits the id but is shorter than ShedLock's is a warning",
			ddl:   `name VARCHAR(64) PRIMARY KEY, ` + cols + `, locked_by VARCHAR(100) NOT NULL`,
			warns: []string{"locked_by is character varying(100), shorter than ShedLock's varchar(255)"}},
		{name: "a longer name column is fine",
			ddl: `name VARCHAR(200) PRIMARY KEY, ` + cols + `, locked_by VARCHAR(255) NOT NULL`},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tbl := locks.DefaultTable()
			tbl.Name = "tbl" + string(rune('a'+i))
			exec(t, pool, "CREATE TABLE "+tbl.Name+" ("+tt.ddl+")")
			warnings, err := locks.CheckTable(t.Context(), pool, tbl, "replica-a")
			if tt.want != nil {
				if !errors.Is(err, locks.ErrSchema) {
					t.Fatalf("CheckTable = %v, %v; want locks.ErrSchema", warnings, err)
				}
				for _, w := range tt.want {
					if w = strings.Replace(w, "tbl", tbl.Name, 1); !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not mention %q", err, w)
					}
				}
				// The provider's check is the same; the operator's is not
				// (it only reads and updates).
				if err := newProvider(t, pool, tbl, "replica-a").CheckSchema(t.Context()); !errors.Is(err, locks.ErrSchema) {
					t.Errorf("Provider.CheckSchema = %v, want locks.ErrSchema", err)
				}
				if err := newAdmin(t, pool, tbl).CheckSchema(t.Context()); err != nil {
					t.Errorf("Admin.CheckSchema = %v, want nil", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(warnings, "\n") != strings.Join(tt.warns, "\n") && (len(tt.warns) == 0 || len(warnings) != 1 || !strings.Contains(warnings[0], tt.warns[0])) {
				t.Errorf("warnings %q, want %q", warnings, tt.warns)
			}
			// Accepted means the replica can really take a lock.
			mustUnlock(t, mustLock(t, newProvider(t, pool, tbl, "replica-a"), "job", time.Minute, 0))
		})
	}
}

func TestCheckTableAcceptsEveryTimestampTypeShedLockUses(t *testing.T) {
	t.Parallel()
	pool := openPool(t, pgtest.NewEmptyDB(t), 0)
	for i, typ := range []string{"TIMESTAMP", "TIMESTAMP(3)", "TIMESTAMPTZ", "TIMESTAMPTZ(3)"} {
		name := "tbl" + string(rune('a'+i))
		exec(t, pool, "CREATE TABLE "+name+" (name VARCHAR(64) PRIMARY KEY, lock_until "+typ+" NOT NULL, locked_at "+typ+" NOT NULL, locked_by VARCHAR(255) NOT NULL)")
		tbl := locks.DefaultTable()
		tbl.Name = name
		warnings, err := locks.CheckTable(t.Context(), pool, tbl, "replica-a")
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		tz := strings.HasPrefix(typ, "TIMESTAMPTZ")
		if tz != (len(warnings) == 1 && strings.Contains(warnings[0], "must run its database sessions in UTC")) || !tz && len(warnings) != 0 {
			t.Errorf("%s: warnings %q; want the UTC caveat only for timestamptz", typ, warnings)
		}
	}
}

// Issue 7, ShedLock item 4: on a timestamptz table a Java node whose JVM is
// not in UTC writes instants off by its zone, and nothing said so. The rows
// show it; the warning names the holder.
func TestTimeZoneWarningsNameAHolderWritingOutsideUTC(t *testing.T) {
	t.Parallel()
	pool, url := javaInstallation(t, javaTables[1]) // timestamptz
	insertReplica(t, pool, "go-replica-1", "ready", 0)
	kolkata := newJavaNode(t, url, "java-kolkata", "Asia/Kolkata")
	kolkata.mustLock(t, "kolkata-job", 10*time.Minute)
	newJavaNode(t, url, "java-la", "America/Los_Angeles").mustLock(t, "la-job", 10*time.Minute)
	newJavaNode(t, url, "java-utc", "UTC").mustLock(t, "utc-job", 10*time.Minute)
	mustLock(t, newProvider(t, pool, defaultTable, "go-replica-1"), "go-job", 10*time.Minute, 0)

	for _, check := range []struct {
		name string
		run  func() ([]string, error)
	}{
		{"CheckTable", func() ([]string, error) { return locks.CheckTable(t.Context(), pool, defaultTable, "go-replica-1") }},
		{"TimeZoneWarnings", func() ([]string, error) { return locks.TimeZoneWarnings(t.Context(), pool, defaultTable) }},
	} {
		// Kolkata's row is judged within seconds of being written: take
		// it afresh before each check.
		kolkata.mustUnlock(t, "kolkata-job", 0)
		kolkata.mustLock(t, "kolkata-job", 10*time.Minute)
		warnings, err := check.run()
		if err != nil {
			t.Fatalf("%s: %v", check.name, err)
		}
		all := strings.Join(warnings, "\n")
		t.Logf("%s:\n%s", check.name, all)
		if len(warnings) != 3 {
			t.Errorf("%s: %d warnings, want 3 (the caveat, Kolkata, Los Angeles):\n%s", check.name, len(warnings), all)
		}
		for _, w := range []string{
			"has timestamptz columns: every ShedLock node must run its database sessions in UTC",
			`lock "kolkata-job" has locked_at 5h30m`, `holder "java-kolkata"`, "zone 5h30m0s ahead of UTC",
			`lock "la-job" has locked_at`, `holder "java-la"`, "in the future", "zone 8h0m0s behind UTC",
		} {
			if !strings.Contains(all, w) {
				t.Errorf("%s: warnings do not mention %q:\n%s", check.name, w, all)
			}
		}
		for _, w := range []string{"java-utc", "go-replica-1"} {
			if strings.Contains(all, w) {
				t.Errorf("%s: warnings name %s, which writes in UTC:\n%s", check.name, w, all)
			}
		}
	}

	// On a timestamp table the session zone does not matter: no warning.
	pool2, url2 := javaInstallation(t, javaTables[0])
	newJavaNode(t, url2, "java-kolkata", "Asia/Kolkata").mustLock(t, "kolkata-job", 10*time.Minute)
	if w, err := locks.TimeZoneWarnings(t.Context(), pool2, defaultTable); err != nil || len(w) != 0 {
		t.Errorf("timestamp(3) table: TimeZoneWarnings = %q, %v; want none", w, err)
	}
	if w, err := locks.CheckTable(t.Context(), pool2, defaultTable, "go-replica-1"); err != nil || len(w) != 0 {
		t.Errorf("timestamp(3) table: CheckTable = %q, %v; want none", w, err)
	}
}
