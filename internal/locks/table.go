package locks

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// Table names the lock table and its columns. ShedLock lets users rename
// both, so studioctl does too (locks.table, locks.columns.*).
//
// Each value is read as PostgreSQL reads an identifier in SQL, because that
// is how ShedLock's unquoted SQL (withTableName, withColumnNames) resolves
// it: an unquoted name folds to lower case (MixedCaseLocks is the table
// mixedcaselocks), and a name in double quotes keeps its case ("MixedCase";
// "" inside quotes is one quote). The table may be schema-qualified
// (ops.shedlock, "Ops"."JobLocks").
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

// maxIdentBytes is PostgreSQL's identifier length (NAMEDATALEN - 1); a
// longer one would be truncated silently.
const maxIdentBytes = 63

// parseIdent reads raw as a possibly qualified SQL identifier of at most
// maxParts parts and returns the parts as PostgreSQL resolves them.
func parseIdent(raw string, maxParts int) ([]string, error) {
	s := strings.TrimSpace(raw)
	if s == "" {
		return nil, errors.New("must not be empty")
	}
	var parts []string
	for {
		var part string
		if s[0] == '"' {
			// A quoted identifier: up to the closing quote, "" is a quote.
			var b strings.Builder
			i, closed := 1, false
			for i < len(s) {
				if s[i] == '"' {
					if i+1 < len(s) && s[i+1] == '"' {
						b.WriteByte('"')
						i += 2
						continue
					}
					closed = true
					i++
					break
				}
				b.WriteByte(s[i])
				i++
			}
			if !closed {
				return nil, fmt.Errorf("%q has an unterminated double quote", raw)
			}
			part, s = b.String(), s[i:]
			if part == "" {
				return nil, fmt.Errorf("%q has an empty quoted name", raw)
			}
		} else {
			// An unquoted identifier: a letter or _ first, then letters,
			// digits, _ and $; ASCII letters fold to lower case, as
			// PostgreSQL's downcase_identifier does.
			i := 0
			for i < len(s) && s[i] != '.' {
				c := s[i]
				ok := c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80 ||
					i > 0 && (c >= '0' && c <= '9' || c == '$')
				if !ok {
					if c == '"' {
						return nil, fmt.Errorf("%q: a double quote may only enclose a whole name (\"MixedCase\")", raw)
					}
					return nil, fmt.Errorf("%q is not a valid unquoted identifier (letters, digits, _ and $, not starting with a digit); write it in double quotes to use it as it is", raw)
				}
				i++
			}
			if i == 0 {
				return nil, fmt.Errorf("%q has an empty name before or after a dot", raw)
			}
			part, s = foldASCII(s[:i]), s[i:]
		}
		if strings.ContainsRune(part, 0) || !utf8.ValidString(part) {
			return nil, fmt.Errorf("%q contains a character not allowed in an identifier", raw)
		}
		if len(part) > maxIdentBytes {
			return nil, fmt.Errorf("%q is longer than PostgreSQL's identifier limit of %d bytes", raw, maxIdentBytes)
		}
		parts = append(parts, part)
		if s == "" {
			break
		}
		if s[0] != '.' {
			return nil, fmt.Errorf("%q: unexpected %q after a quoted name", raw, s[:1])
		}
		s = s[1:]
		if s == "" {
			return nil, fmt.Errorf("%q has an empty name before or after a dot", raw)
		}
	}
	if len(parts) > maxParts {
		if maxParts == 1 {
			return nil, fmt.Errorf("%q: a column name has no dot (quote it, \"a.b\", if the dot is part of the name)", raw)
		}
		return nil, fmt.Errorf("%q: use table or schema.table", raw)
	}
	return parts, nil
}

// foldASCII folds A-Z only: PostgreSQL leaves other letters as they are in
// a multibyte encoding such as UTF-8.
func foldASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + ('a' - 'A')
		}
	}
	return string(b)
}

func (t Table) fields() []struct{ key, val string } {
	return []struct{ key, val string }{
		{"locks.table", t.Name}, {"locks.columns.name", t.NameCol}, {"locks.columns.lock_until", t.LockUntil},
		{"locks.columns.locked_at", t.LockedAt}, {"locks.columns.locked_by", t.LockedBy},
	}
}

// Validate checks that every identifier is set and valid SQL; each error
// names its configuration key.
func (t Table) Validate() error {
	for _, f := range t.fields() {
		maxParts := 1
		if f.key == "locks.table" {
			maxParts = 2
		}
		if _, err := parseIdent(f.val, maxParts); err != nil {
			return fmt.Errorf("%s: %w", f.key, err)
		}
	}
	return nil
}

// Resolved is t with every name as PostgreSQL resolves it (folded or
// unquoted), the table as schema.table when qualified: what the catalog
// holds. It assumes t is valid.
func (t Table) Resolved() Table {
	one := func(raw string) string {
		p, _ := parseIdent(raw, 1)
		if len(p) == 0 {
			return raw
		}
		return p[0]
	}
	parts, _ := parseIdent(t.Name, 2)
	name := strings.Join(parts, ".")
	if name == "" {
		name = t.Name
	}
	return Table{Name: name, NameCol: one(t.NameCol), LockUntil: one(t.LockUntil), LockedAt: one(t.LockedAt), LockedBy: one(t.LockedBy)}
}

// ident is the quoted, possibly schema-qualified table name for SQL.
func (t Table) ident() string {
	parts, err := parseIdent(t.Name, 2)
	if err != nil {
		return pgx.Identifier{t.Name}.Sanitize()
	}
	return pgx.Identifier(parts).Sanitize()
}

// col is a configured column name, resolved and quoted for SQL.
func col(raw string) string {
	parts, err := parseIdent(raw, 1)
	if err != nil {
		return pgx.Identifier{raw}.Sanitize()
	}
	return pgx.Identifier(parts).Sanitize()
}

// shown is the table's name for messages: as configured, and as resolved
// when that differs (MixedCaseLocks, read as mixedcaselocks).
func (t Table) shown() string {
	raw := strings.TrimSpace(t.Name)
	if !folds(raw) {
		return raw
	}
	return fmt.Sprintf("%s (read as %s)", raw, t.ident())
}

// folds says whether raw has an upper-case ASCII letter outside double
// quotes, which PostgreSQL folds to lower case.
func folds(raw string) bool {
	quoted := false
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; {
		case c == '"':
			quoted = !quoted // "" inside quotes toggles twice
		case !quoted && c >= 'A' && c <= 'Z':
			return true
		}
	}
	return false
}

// ErrSchema is returned when the lock table is missing or has the wrong shape.
var ErrSchema = errors.New("lock table schema")

// column is one column of the lock table as the catalog describes it.
type column struct {
	name       string
	typ        string // format_type without modifier
	notNull    bool
	hasDefault bool // a default, an identity or a generated column
	length     int  // declared length of a varchar or char column; 0 when unlimited
}

const columnsSQL = `
SELECT a.attname, format_type(a.atttypid, NULL), a.attnotnull,
  a.atthasdef OR a.attidentity <> '' OR a.attgenerated <> '',
  CASE WHEN a.atttypid IN ('varchar'::regtype, 'bpchar'::regtype) AND a.atttypmod > 4 THEN a.atttypmod - 4 ELSE 0 END
FROM pg_attribute a
WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum`

const timestamptzType = "timestamp with time zone"

// shape reads the table's columns and checks what every user of the table
// needs: it exists, has the four columns with usable types, and name has a
// unique index the acquire statement's ON CONFLICT can use.
func shape(ctx context.Context, q Querier, t Table) ([]column, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	r := t.Resolved()
	var exists bool
	if err := q.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, t.ident()).Scan(&exists); err != nil {
		return nil, fmt.Errorf("check lock table %s: %w", t.shown(), err)
	}
	if !exists {
		return nil, fmt.Errorf("%w: table %s does not exist (run `studioctl migrate up`, or set locks.table)", ErrSchema, t.shown())
	}
	rows, err := q.Query(ctx, columnsSQL, t.ident())
	if err != nil {
		return nil, fmt.Errorf("check lock table %s: %w", t.shown(), err)
	}
	var cols []column
	byName := map[string]column{}
	for rows.Next() {
		var c column
		if err := rows.Scan(&c.name, &c.typ, &c.notNull, &c.hasDefault, &c.length); err != nil {
			return nil, fmt.Errorf("check lock table %s: %w", t.shown(), err)
		}
		cols = append(cols, c)
		byName[c.name] = c
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("check lock table %s: %w", t.shown(), err)
	}
	text := []string{"character varying", "text", "character"}
	times := []string{"timestamp without time zone", timestamptzType}
	want := []struct {
		key, col string
		ok       []string
	}{
		{"locks.columns.name", r.NameCol, text},
		{"locks.columns.lock_until", r.LockUntil, times},
		{"locks.columns.locked_at", r.LockedAt, times},
		{"locks.columns.locked_by", r.LockedBy, text},
	}
	for _, w := range want {
		c, ok := byName[w.col]
		if !ok {
			return nil, fmt.Errorf("%w: table %s has no column %q (%s)", ErrSchema, t.shown(), w.col, w.key)
		}
		good := false
		for _, o := range w.ok {
			good = good || c.typ == o
		}
		if !good {
			return nil, fmt.Errorf("%w: column %s.%s is %s, want one of %s", ErrSchema, r.Name, w.col, c.typ, strings.Join(w.ok, ", "))
		}
	}
	var unique bool
	err = q.QueryRow(ctx, `
SELECT EXISTS (
  SELECT 1 FROM pg_index i
  WHERE i.indrelid = to_regclass($1) AND i.indisunique AND i.indimmediate AND i.indisvalid
    AND i.indpred IS NULL AND i.indnkeyatts = 1
    AND i.indkey[0] = (SELECT attnum FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = $2))`,
		t.ident(), r.NameCol).Scan(&unique)
	if err != nil {
		return nil, fmt.Errorf("check lock table %s: %w", t.shown(), err)
	}
	if !unique {
		return nil, fmt.Errorf("%w: column %s.%s is not a primary key or unique", ErrSchema, r.Name, r.NameCol)
	}
	return cols, nil
}

// CheckSchema verifies what the operator commands need of the lock table:
// that it exists with the four columns, that the two time columns are
// timestamp or timestamptz, the text columns are text or varchar, and that
// name has a unique index the acquire statement's ON CONFLICT can use:
// immediate (not deferrable), valid, not partial, on that one key column
// (INCLUDE columns are fine). A replica checks more: see CheckTable.
func CheckSchema(ctx context.Context, q Querier, t Table) error {
	_, err := shape(ctx, q, t)
	return err
}

// CheckTable verifies the lock table before replica replicaID starts: what
// CheckSchema checks, and what would make every acquire fail:
//
//   - the name column holds MaxNameChars characters (varchar(64) or longer,
//     or text);
//   - the locked_by column holds replicaID (a warning when it holds fewer
//     than ShedLock's 255 characters);
//   - no other column is NOT NULL without a default (ShedLock's INSERT
//     names only the four columns).
//
// The warnings are for the log: a column shorter than ShedLock's, and for a
// timestamptz table the time zone caveat of TimeZoneWarnings.
func CheckTable(ctx context.Context, q Querier, t Table, replicaID string) (warnings []string, err error) {
	cols, err := shape(ctx, q, t)
	if err != nil {
		return nil, err
	}
	r := t.Resolved()
	tz := false
	for _, c := range cols {
		switch c.name {
		case r.NameCol:
			if c.length > 0 && c.length < MaxNameChars {
				return nil, fmt.Errorf("%w: column %s.%s is %s(%d): lock names take up to %d characters (ShedLock's varchar(%d)); widen it",
					ErrSchema, r.Name, c.name, c.typ, c.length, MaxNameChars, MaxNameChars)
			}
		case r.LockedBy:
			if n := utf8.RuneCountInString(replicaID); c.length > 0 && c.length < n {
				return nil, fmt.Errorf("%w: column %s.%s is %s(%d), too short for this replica's id %q (%d characters); widen it to varchar(%d)",
					ErrSchema, r.Name, c.name, c.typ, c.length, replicaID, n, MaxLockedByChars)
			}
			if c.length > 0 && c.length < MaxLockedByChars {
				warnings = append(warnings, fmt.Sprintf("lock table %s: column %s is %s(%d), shorter than ShedLock's varchar(%d): a holder with a longer id or host name cannot take a lock",
					r.Name, c.name, c.typ, c.length, MaxLockedByChars))
			}
		case r.LockUntil, r.LockedAt:
			tz = tz || c.typ == timestamptzType
		default:
			if c.notNull && !c.hasDefault {
				return nil, fmt.Errorf("%w: column %s.%s is NOT NULL without a default: the lock statements insert only %s, %s, %s and %s, so every acquire would fail; give it a default or drop NOT NULL",
					ErrSchema, r.Name, c.name, r.NameCol, r.LockUntil, r.LockedAt, r.LockedBy)
			}
		}
	}
	if tz {
		w, err := timeZoneWarnings(ctx, q, t)
		if err != nil {
			return nil, err
		}
		warnings = append(warnings, w...)
	}
	return warnings, nil
}

// Time zone evidence in a timestamptz table: a locked_at later than
// database time by more than zoneTolerance, or earlier by a whole number of
// zoneStep (up to zoneMax) within zoneTolerance.
const (
	zoneTolerance = 5 * time.Second
	zoneStep      = 15 * time.Minute
	zoneMax       = 14 * time.Hour
)

// TimeZoneWarnings is the time zone caveat of a timestamptz lock table
// (none for timestamp columns): one general warning, and one for each row
// that shows a holder writing in a session zone other than UTC.
//
// ShedLock writes timezone('utc', CURRENT_TIMESTAMP), a UTC wall clock
// without zone; a timestamptz column reads it in the writer's session zone,
// and the PostgreSQL JDBC driver sets that zone to the JVM's. A Java node
// whose JVM is not in UTC therefore stores instants off by its zone: ahead
// of UTC (Asia/Kolkata) its live locks look expired, behind UTC its locks
// last hours too long. Evidence in the rows: a locked_at in the future, or
// one that is behind database time by a whole-zone amount (a multiple of 15
// minutes, to within a few seconds). Rows held by known studioctl replicas
// (whose sessions are UTC) are only judged by the first rule.
func TimeZoneWarnings(ctx context.Context, q Querier, t Table) ([]string, error) {
	cols, err := shape(ctx, q, t)
	if err != nil {
		return nil, err
	}
	r := t.Resolved()
	for _, c := range cols {
		if (c.name == r.LockUntil || c.name == r.LockedAt) && c.typ == timestamptzType {
			return timeZoneWarnings(ctx, q, t)
		}
	}
	return nil, nil
}

func timeZoneWarnings(ctx context.Context, q Querier, t Table) ([]string, error) {
	r := t.Resolved()
	warnings := []string{fmt.Sprintf("lock table %s has timestamptz columns: every ShedLock node must run its database sessions in UTC "+
		"(for Java: run the JVM with -Duser.timezone=UTC; the PostgreSQL JDBC driver sets the session zone to the JVM's), "+
		"or its locks are off by its zone offset and two nodes can run one job at once; see docs/locks.md", r.Name)}
	withReplicas, err := hasReplicaTable(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("check lock table %s: %w", t.shown(), err)
	}
	known := "false"
	join := ""
	if withReplicas {
		known = "r.id IS NOT NULL"
		join = " LEFT JOIN studio_replica r ON r.id = l." + col(t.LockedBy)
	}
	// EXTRACT(EPOCH FROM ...) of a timestamptz is the instant whatever the
	// session zone; of a timestamp, the UTC wall clock read as UTC.
	stmt := "SELECT l." + col(t.NameCol) + ", l." + col(t.LockedBy) + ", " + known +
		", (EXTRACT(EPOCH FROM CURRENT_TIMESTAMP) - EXTRACT(EPOCH FROM " + clampTime("l."+col(t.LockedAt)) + "))::float8" +
		" FROM " + t.ident() + " l" + join + " ORDER BY l." + col(t.NameCol)
	rows, err := q.Query(ctx, stmt)
	if err != nil {
		return nil, fmt.Errorf("check lock table %s: %w", t.shown(), err)
	}
	defer rows.Close()
	for rows.Next() {
		var name, by string
		var isReplica bool
		var ageSec float64
		if err := rows.Scan(&name, &by, &isReplica, &ageSec); err != nil {
			return nil, fmt.Errorf("check lock table %s: %w", t.shown(), err)
		}
		if w := zoneEvidence(r.Name, name, by, isReplica, secondsDuration(ageSec)); w != "" {
			warnings = append(warnings, w)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("check lock table %s: %w", t.shown(), err)
	}
	return warnings, nil
}

// zoneEvidence judges one row whose locked_at is age behind database time.
func zoneEvidence(table, name, by string, isReplica bool, age time.Duration) string {
	if age < -zoneTolerance {
		ahead := -age
		return fmt.Sprintf("lock table %s: lock %q has locked_at %s in the future of database time: its holder %q seems to write in a session zone %s behind UTC (a Java node whose JVM is not in UTC?); its lock lasts that much too long",
			table, name, ahead.Round(time.Second), by, roundZone(ahead))
	}
	if isReplica || age < zoneStep-zoneTolerance || age > zoneMax+zoneTolerance {
		return ""
	}
	k := math.Round(float64(age) / float64(zoneStep))
	off := time.Duration(k) * zoneStep
	if d := age - off; d < -zoneTolerance || d > zoneTolerance {
		return ""
	}
	return fmt.Sprintf("lock table %s: lock %q has locked_at %s behind database time, a whole time zone offset: its holder %q seems to write in a session zone %s ahead of UTC (a Java node whose JVM is not in UTC?); its live locks look expired to every other node",
		table, name, age.Round(time.Second), by, off)
}

// roundZone is d rounded to a whole zone step, for messages.
func roundZone(d time.Duration) time.Duration {
	return time.Duration(math.Round(float64(d)/float64(zoneStep))) * zoneStep
}
