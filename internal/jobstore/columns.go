package jobstore

import (
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/studioctl/studioctl/internal/jobs"
)

// statusColumn is one column of studio_job_status and the field of
// jobs.Status it holds. statusTable lists them once: the SELECT list, the
// scan targets, the upsert's columns and its arrays are all made from it.
type statusColumn struct {
	name    string
	sqlType string // of the unnest array the upsert sends
	// nullIfEmpty: "" is stored as NULL (and read back as "").
	nullIfEmpty bool
	// scan returns the scan target of st's field (read).
	scan func(st *jobs.Status) any
	// array returns an empty array of the field's values with room for n,
	// and add appends st's value to it (write).
	array func(n int) statusArray
}

// statusArray collects one column's values for the upsert.
type statusArray interface {
	add(st *jobs.Status)
	value() any
}

type typedArray[T any] struct {
	get  func(st *jobs.Status) T
	vals []T
}

func (a *typedArray[T]) add(st *jobs.Status) { a.vals = append(a.vals, a.get(st)) }
func (a *typedArray[T]) value() any          { return a.vals }

// elemArray collects one column's values as the element type E of a
// pgArray (pgarray.go), which pgx encodes without an allocation per value.
type elemArray[E any] struct {
	get  func(st *jobs.Status) E
	vals pgArray[E]
}

func (a *elemArray[E]) add(st *jobs.Status) { a.vals = append(a.vals, a.get(st)) }
func (a *elemArray[E]) value() any          { return a.vals }

// col builds a column whose field, of type T, field returns a pointer to.
func col[T any](name, sqlType string, field func(st *jobs.Status) *T) statusColumn {
	return statusColumn{
		name: name, sqlType: sqlType,
		scan: func(st *jobs.Status) any {
			switch f := any(field).(type) {
			case func(*jobs.Status) **time.Time:
				return optTimeScanner{f(st)}
			case func(*jobs.Status) *time.Time:
				return timeScanner{f(st)}
			}
			return field(st)
		},
		array: func(n int) statusArray {
			switch f := any(field).(type) {
			case func(*jobs.Status) **time.Time:
				return &elemArray[pgTime]{get: func(st *jobs.Status) pgTime { return pgTimeOf(*f(st)) }, vals: make(pgArray[pgTime], 0, n)}
			case func(*jobs.Status) *time.Time:
				return &elemArray[pgTime]{get: func(st *jobs.Status) pgTime { return pgTime{t: *f(st)} }, vals: make(pgArray[pgTime], 0, n)}
			case func(*jobs.Status) *int64:
				return &elemArray[pgInt8]{get: func(st *jobs.Status) pgInt8 { return pgInt8(*f(st)) }, vals: make(pgArray[pgInt8], 0, n)}
			case func(*jobs.Status) *bool:
				return &elemArray[pgBool]{get: func(st *jobs.Status) pgBool { return pgBool(*f(st)) }, vals: make(pgArray[pgBool], 0, n)}
			}
			return &typedArray[T]{get: func(st *jobs.Status) T { return *field(st) }, vals: make([]T, 0, n)}
		},
	}
}

// textCol is a text column read and written through a string-kinded field
// (Scope, Outcome), NULL for "" when nullIfEmpty.
func textCol[T ~string](name string, nullIfEmpty bool, field func(st *jobs.Status) *T) statusColumn {
	return statusColumn{
		name: name, sqlType: "text", nullIfEmpty: nullIfEmpty,
		scan: func(st *jobs.Status) any { return textScanner[T]{field(st)} },
		array: func(n int) statusArray {
			return &elemArray[pgText]{get: func(st *jobs.Status) pgText { return pgText(*field(st)) }, vals: make(pgArray[pgText], 0, n)}
		},
	}
}

// msCol is a duration field stored as whole milliseconds (bigint; 0 is
// unknown).
func msCol(name string, field func(st *jobs.Status) *time.Duration) statusColumn {
	return statusColumn{
		name: name, sqlType: "bigint",
		scan: func(st *jobs.Status) any { return msScanner{field(st)} },
		array: func(n int) statusArray {
			return &elemArray[pgInt8]{get: func(st *jobs.Status) pgInt8 { return pgInt8(field(st).Milliseconds()) }, vals: make(pgArray[pgInt8], 0, n)}
		},
	}
}

// optTimeScanner scans a nullable timestamptz into a *time.Time, in UTC.
// 'infinity' and '-infinity', which no replica writes (a hostile or
// corrupt row), read as NULL: no time, shown as none ("-"), so that one
// such row cannot make a command fail for every job.
type optTimeScanner struct{ p **time.Time }

func (s optTimeScanner) ScanTimestamptz(v pgtype.Timestamptz) error {
	*s.p = nil
	if v.Valid && v.InfinityModifier == pgtype.Finite {
		t := v.Time.UTC()
		*s.p = &t
	}
	return nil
}

// timeScanner scans a timestamptz NOT NULL into a time.Time, in UTC; an
// infinite one reads as the zero time (unknown), as optTimeScanner's.
type timeScanner struct{ p *time.Time }

func (s timeScanner) ScanTimestamptz(v pgtype.Timestamptz) error {
	*s.p = time.Time{}
	if v.Valid && v.InfinityModifier == pgtype.Finite {
		*s.p = v.Time.UTC()
	}
	return nil
}

// msScanner scans a bigint of milliseconds (NULL as 0) into a duration.
type msScanner struct{ p *time.Duration }

func (s msScanner) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*s.p = 0
	case int64:
		*s.p = time.Duration(v) * time.Millisecond
	default:
		return fmt.Errorf("scan %T into milliseconds", src)
	}
	return nil
}

// textScanner scans text (NULL as "") into a string-kinded field.
type textScanner[T ~string] struct{ p *T }

func (s textScanner[T]) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*s.p = ""
	case string:
		*s.p = T(v)
	case []byte:
		*s.p = T(v)
	default:
		return fmt.Errorf("scan %T into text", src)
	}
	return nil
}

// statusTable is every stored column of jobs.Status (Since is not
// stored).
// replica_id comes first: the upsert sends it once, as $1.
var statusTable = []statusColumn{
	textCol("replica_id", false, func(s *jobs.Status) *string { return &s.ReplicaID }),
	textCol("job_id", false, func(s *jobs.Status) *string { return &s.JobID }),
	textCol("scope", false, func(s *jobs.Status) *jobs.Scope { return &s.Scope }),
	textCol("schedule", false, func(s *jobs.Status) *string { return &s.Schedule }),
	col("next_fire_at", "timestamptz", func(s *jobs.Status) **time.Time { return &s.NextFireAt }),
	col("running", "bool", func(s *jobs.Status) *bool { return &s.Running }),
	col("last_started_at", "timestamptz", func(s *jobs.Status) **time.Time { return &s.LastStartedAt }),
	col("last_finished_at", "timestamptz", func(s *jobs.Status) **time.Time { return &s.LastFinishedAt }),
	textCol("last_outcome", true, func(s *jobs.Status) *jobs.Outcome { return &s.LastOutcome }),
	textCol("last_error", true, func(s *jobs.Status) *string { return &s.LastError }),
	col("last_success_at", "timestamptz", func(s *jobs.Status) **time.Time { return &s.LastSuccessAt }),
	col("last_skipped_elsewhere_at", "timestamptz", func(s *jobs.Status) **time.Time { return &s.LastSkippedElsewhereAt }),
	col("runs", "bigint", func(s *jobs.Status) *int64 { return &s.Runs }),
	col("failures", "bigint", func(s *jobs.Status) *int64 { return &s.Failures }),
	col("timeouts", "bigint", func(s *jobs.Status) *int64 { return &s.Timeouts }),
	col("lock_lost", "bigint", func(s *jobs.Status) *int64 { return &s.LockLost }),
	col("overruns", "bigint", func(s *jobs.Status) *int64 { return &s.Overruns }),
	col("skipped_elsewhere", "bigint", func(s *jobs.Status) *int64 { return &s.SkippedElsewhere }),
	textCol("invalid_schedule", true, func(s *jobs.Status) *string { return &s.InvalidSchedule }),
	col("paused", "bool", func(s *jobs.Status) *bool { return &s.Paused }),
	col("updated_at", "timestamptz", func(s *jobs.Status) *time.Time { return &s.UpdatedAt }),
	msCol("timeout_ms", func(s *jobs.Status) *time.Duration { return &s.Timeout }),
}

// statusColumns is the SELECT list of statusTable, from the table aliased s.
var statusColumns = func() string {
	names := make([]string, len(statusTable))
	for i, c := range statusTable {
		names[i] = "s." + c.name
	}
	return strings.Join(names, ", ")
}()

// upsertStatusSQL writes a batch: $1 is the replica id, $2... one array per
// other column, in statusTable's order.
var upsertStatusSQL = func() string {
	var cols, sel, arrays, as, set []string
	for i, c := range statusTable {
		cols = append(cols, c.name)
		if i == 0 {
			sel = append(sel, "$1")
			continue
		}
		if c.nullIfEmpty {
			sel = append(sel, "NULLIF("+c.name+", '')")
		} else {
			sel = append(sel, c.name)
		}
		arrays = append(arrays, fmt.Sprintf("$%d::%s[]", i+1, c.sqlType))
		as = append(as, c.name)
		if c.name != "job_id" {
			set = append(set, c.name+" = EXCLUDED."+c.name)
		}
	}
	return "INSERT INTO studio_job_status (" + strings.Join(cols, ", ") + ")\nSELECT " + strings.Join(sel, ", ") +
		"\nFROM unnest(" + strings.Join(arrays, ", ") + ")\n  AS t(" + strings.Join(as, ", ") + ")" +
		"\nON CONFLICT (replica_id, job_id) DO UPDATE SET " + strings.Join(set, ", ")
}()

// statusArgs are the upsert's arguments for status rows of replicaID.
func statusArgs(replicaID string, status map[string]jobs.Status) []any {
	arrays := make([]statusArray, len(statusTable)-1)
	for i := range arrays {
		arrays[i] = statusTable[i+1].array(len(status))
	}
	for _, st := range status {
		for _, a := range arrays {
			a.add(&st)
		}
	}
	args := make([]any, 0, len(statusTable))
	args = append(args, replicaID)
	for _, a := range arrays {
		args = append(args, a.value())
	}
	return args
}

// scanStatus reads rows that start with statusColumns; extra receives the
// columns after them, and each is called once per row. Times come back
// in UTC.
func scanStatus(rows pgx.Rows, extra []any, each func(jobs.Status)) error {
	for rows.Next() {
		var st jobs.Status
		dest := make([]any, 0, len(statusTable)+len(extra))
		for _, c := range statusTable {
			dest = append(dest, c.scan(&st))
		}
		if err := rows.Scan(append(dest, extra...)...); err != nil {
			return fmt.Errorf("read job status: %w", err)
		}
		for _, p := range []**time.Time{&st.NextFireAt, &st.LastStartedAt, &st.LastFinishedAt, &st.LastSuccessAt, &st.LastSkippedElsewhereAt} {
			if *p != nil {
				t := (*p).UTC()
				*p = &t
			}
		}
		st.UpdatedAt = st.UpdatedAt.UTC()
		each(st)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read job status: %w", err)
	}
	return nil
}
