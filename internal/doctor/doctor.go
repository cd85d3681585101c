// Package doctor holds the health checks of `studioctl doctor` (SPEC §9):
// one function per check, over the database pool and an injected clock,
// each returning ok, warn or fail with a one-line detail and a hint. It
// reads only; it never changes a row. docs/doctor.md documents every check,
// its thresholds and its status choices.
package doctor

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/locks"
	"github.com/studioctl/studioctl/internal/output"
)

// Status of one check.
type Status string

const (
	OK   Status = "ok"
	Warn Status = "warn"
	Fail Status = "fail"
	// Skip: not checked, because what it needs is missing (the database is
	// unreachable, or its table does not exist); the detail says what.
	Skip Status = "skip"
)

// Check names: a stable interface (scripts select on them).
const (
	CheckDatabase         = "database"
	CheckSchema           = "schema"
	CheckClock            = "clock"
	CheckTLS              = "tls"
	CheckPooler           = "pooler"
	CheckBus              = "bus"
	CheckShedlockTable    = "shedlock_table"
	CheckStaleLocks       = "stale_locks"
	CheckUnknownHolders   = "unknown_holders"
	CheckCrashedReplicas  = "crashed_replicas"
	CheckStartingReplicas = "starting_replicas"
	CheckLeases           = "leases"
	CheckFailingJobs      = "failing_jobs"
	CheckStalledJobs      = "stalled_jobs"
	CheckNearTimeout      = "near_timeout"
	CheckOverdueJobs      = "overdue_jobs"
	CheckConfigDrift      = "config_drift"
)

// Thresholds (docs/doctor.md says why each is what it is).
const (
	// MinServerVersionNum is the oldest PostgreSQL the migrations run on
	// (pg_current_xact_id, in 00005, is PostgreSQL 13).
	MinServerVersionNum = 130000
	// ClockWarnAbove and ClockFailAbove bound the offset between this
	// host's clock and the database's.
	ClockWarnAbove = time.Second
	ClockFailAbove = 10 * time.Second
	// clockSamples: the clock is read this many times and the sample with
	// the shortest round trip is kept.
	clockSamples = 3
	// BusTimeout is how long the round trip may take before it fails;
	// BusWarnAbove makes a slow one a warning.
	BusTimeout   = 5 * time.Second
	BusWarnAbove = time.Second
	// UnknownHolderMaxHeld: a lock held by a holder that is not a replica
	// (a Java ShedLock node) since longer than this, or until further
	// ahead than this, is past any plausible run: no studioctl job may
	// run longer (jobs.MaxTimeout).
	UnknownHolderMaxHeld = jobs.MaxTimeout
	// CrashWindow: crashed replicas whose last heartbeat is this recent
	// fail the check; older crash rows are only counted.
	CrashWindow = 24 * time.Hour
	// StartingTooLong: a live replica starting for longer than this is
	// stuck (a start takes seconds).
	StartingTooLong = time.Minute
	// OverdueGrace: a next fire this far in the past on a live replica
	// that is not running the job means its timer is stuck; overdue_jobs
	// uses it as its grace (jobs overdue's default).
	OverdueGrace = time.Minute
	// PastTimeoutGrace: a run still running this long after its timeout
	// was not stopped by it.
	PastTimeoutGrace = time.Minute
	// NearTimeoutShare and NearTimeoutWindow: a job whose longest run of
	// the window took this share of its timeout or more.
	NearTimeoutShare  = 0.8
	NearTimeoutWindow = 24 * time.Hour
	// checkTimeout bounds each check.
	checkTimeout = 15 * time.Second
	// maxListed bounds how many items a detail names.
	maxListed = 5
)

// Result is one check's outcome; its JSON is the interface of doctor -o json.
type Result struct {
	Check  string `json:"check" yaml:"check"`
	Status Status `json:"status" yaml:"status"`
	Detail string `json:"detail" yaml:"detail"`
	Hint   string `json:"hint" yaml:"hint"`
}

// Options are what the checks read.
type Options struct {
	// Pool is the database; nil when it could not be reached (OpenErr
	// says why, and must hold no password).
	Pool    *pgxpool.Pool
	OpenErr error
	// ConnConfig is the parsed connection configuration, for the tls
	// check (only hosts, ports and TLS settings are read from it; never
	// the password). nil skips that check.
	ConnConfig *pgx.ConnConfig
	// ListenConnConfig is database.listen_url's (docs/poolers.md): the
	// bus check listens there, and the pooler check asks whether it has
	// sessions of its own. nil: none is set.
	ListenConnConfig *pgx.ConnConfig
	// Now is this host's clock (STUDIO_NOW in the CLI); time.Now if nil.
	Now func() time.Time
	// NowFixed says Now is a fixed test clock (the clock detail says so).
	NowFixed bool
	// LockTable is the configured lock table; ReplicaID the id a replica
	// on this host would check it with.
	LockTable locks.Table
	ReplicaID string
	// Jobs are the jobs the configuration file declares, for their
	// timeouts (which the database does not store); JobsSource names
	// where they came from, JobsErr says why they could not be read.
	Jobs       []jobs.Job
	JobsSource string
	JobsErr    error
	// MaxConcurrentRuns is runner.max_concurrent_runs of this
	// configuration, taken as every live replica's for the leases check's
	// capacity finding (0: runner.DefaultMaxConcurrentRuns's value, 8).
	MaxConcurrentRuns int
	// Only, when not empty, names the checks to run (studioctl top's
	// header); the others are left out of the results.
	Only []string

	// afterListen, when set, runs once the bus check listens (tests cut
	// the network there).
	afterListen func()
}

// env is what the checks share during one Run.
type env struct {
	o      Options
	pool   *pgxpool.Pool
	tables map[string]bool // studio tables that exist
}

// check is one check: its name, the tables it reads, and its function.
type check struct {
	name   string
	tables []string
	// offline: runs without a database (only the configuration).
	offline bool
	run     func(ctx context.Context, e *env) Result
}

// checks are run in this order, which is also the output's.
var checks = []check{
	{name: CheckDatabase, offline: true, run: checkDatabase},
	{name: CheckSchema, run: checkSchema},
	{name: CheckClock, run: checkClock},
	{name: CheckTLS, offline: true, run: checkTLS},
	{name: CheckPooler, run: checkPooler},
	{name: CheckBus, run: checkBus},
	{name: CheckShedlockTable, run: checkShedlockTable},
	{name: CheckStaleLocks, run: checkStaleLocks},
	{name: CheckUnknownHolders, run: checkUnknownHolders},
	{name: CheckCrashedReplicas, tables: []string{"studio_replica", "studio_job_run"}, run: checkCrashedReplicas},
	{name: CheckStartingReplicas, tables: []string{"studio_replica", "studio_job_run"}, run: checkStartingReplicas},
	{name: CheckLeases, tables: []string{"cluster_lease", "studio_replica"}, run: checkLeases},
	{name: CheckFailingJobs, tables: []string{"studio_job_status", "studio_replica"}, run: checkFailingJobs},
	{name: CheckStalledJobs, tables: []string{"studio_job_status", "studio_job_run", "studio_replica"}, run: checkStalledJobs},
	{name: CheckNearTimeout, tables: []string{"studio_job_status", "studio_job_run", "studio_replica"}, run: checkNearTimeout},
	{name: CheckOverdueJobs, tables: []string{"studio_job_status", "studio_job_run", "studio_replica"}, run: checkOverdueJobs},
	{name: CheckConfigDrift, tables: []string{"studio_job_definition", "studio_replica"}, run: checkConfigDrift},
}

// Names lists the check names in the order Run reports them.
func Names() []string {
	out := make([]string, len(checks))
	for i, c := range checks {
		out[i] = c.name
	}
	return out
}

// studioTables are the tables whose existence Run looks up once.
var studioTables = []string{"studio_replica", "studio_job_run", "studio_job_status", "cluster_lease", "studio_job_schedule", "studio_job_definition"}

// Run runs every check and returns one result per check, in order. A
// check that cannot run reports skip; one whose query fails reports fail.
func Run(ctx context.Context, o Options) []Result {
	if o.Now == nil {
		o.Now = time.Now
	}
	e := &env{o: o, pool: o.Pool}
	var tablesErr error
	if e.pool != nil {
		e.tables, tablesErr = existingTables(ctx, e.pool)
	}
	out := make([]Result, 0, len(checks))
	for _, c := range checks {
		if len(o.Only) > 0 && !slices.Contains(o.Only, c.name) {
			continue
		}
		var r Result
		switch {
		case e.pool == nil && !c.offline:
			r = Result{Status: Skip, Detail: "not checked: the database is unreachable"}
		case tablesErr != nil && !c.offline:
			r = Result{Status: Fail, Detail: "could not check: " + oneLine(tablesErr.Error()), Hint: hintQueryFailed}
		default:
			if missing := e.missing(c.tables); missing != "" {
				r = Result{Status: Skip, Detail: fmt.Sprintf("not checked: table %s does not exist", missing),
					Hint: "run `studioctl migrate up` (see the schema check)"}
				break
			}
			cctx, cancel := context.WithTimeout(ctx, checkTimeout)
			r = c.run(cctx, e)
			cancel()
		}
		r.Check = c.name
		r.Detail, r.Hint = oneLine(r.Detail), oneLine(r.Hint)
		out = append(out, r)
	}
	return out
}

// Failed names the checks that failed.
func Failed(rs []Result) []string {
	var out []string
	for _, r := range rs {
		if r.Status == Fail {
			out = append(out, r.Check)
		}
	}
	return out
}

func (e *env) missing(tables []string) string {
	if e.pool == nil {
		return ""
	}
	for _, t := range tables {
		if !e.tables[t] {
			return t
		}
	}
	return ""
}

func existingTables(ctx context.Context, q *pgxpool.Pool) (map[string]bool, error) {
	rows, err := q.Query(ctx, `SELECT t FROM unnest($1::text[]) t WHERE to_regclass(t) IS NOT NULL`, studioTables)
	if err != nil {
		return nil, fmt.Errorf("look up the studio tables: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("look up the studio tables: %w", err)
	}
	out := map[string]bool{}
	for _, n := range names {
		out[n] = true
	}
	return out, nil
}

// hintQueryFailed is the hint of a check whose query failed.
const hintQueryFailed = "the error says why; a role without SELECT on the studio tables needs the grants of docs/roles.sql"

// failed turns a query error into the check's result.
func failed(err error) Result {
	return Result{Status: Fail, Detail: "could not check: " + err.Error(), Hint: hintQueryFailed}
}

// dbNow is database time, UTC.
func dbNow(ctx context.Context, q *pgxpool.Pool) (time.Time, error) {
	var now time.Time
	if err := q.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("read database time: %w", err)
	}
	return now.UTC(), nil
}

// oneLine keeps a detail or hint on one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// shorten is s on one line, cut to n columns with an ellipsis by
// output.Truncate, the CLI's one cut: a wide character counts two columns
// and none is split.
func shorten(s string, n int) string {
	return output.Truncate(oneLine(s), n)
}

// list joins items, naming at most maxListed and counting the rest.
func list(items []string) string {
	if len(items) <= maxListed {
		return strings.Join(items, "; ")
	}
	return strings.Join(items[:maxListed], "; ") + fmt.Sprintf("; and %d more", len(items)-maxListed)
}

// plural is "1 lock" or "2 locks".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// ago renders an age for a detail: 2m0s, 3h5m, 2d4h.
func ago(d time.Duration) string {
	d = d.Round(time.Second)
	switch {
	case d < 0:
		return "-" + ago(-d)
	case d < 48*time.Hour:
		return d.String()
	default:
		return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
	}
}
