package e2ejobs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"gopkg.in/yaml.v3"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

const (
	// queryTimeout bounds one statement of the test.
	queryTimeout = 10 * time.Second
	// testAppName marks the test's own sessions in pg_stat_activity.
	testAppName = "studioctl-e2ejobs"
)

// schema is what the job commands write to: exp holds one row per
// execution of a command (its run seq, its own start and end in database
// time), inst one row per execution of an instance job.
const schema = `
CREATE TABLE exp (
    seq        bigint      PRIMARY KEY,
    job_id     text        NOT NULL,
    replica    text        NOT NULL,
    started_at timestamptz NOT NULL,
    ended_at   timestamptz NULL
);
CREATE TABLE inst (
    replica text        NOT NULL,
    at      timestamptz NOT NULL
);`

// Shell fragments of the job commands. A command gets EXP_DB, the test
// database, and EXP_DIR, a folder for pid files, through its env:, and the
// runner adds STUDIO_JOB_ID, STUDIO_REPLICA_ID and STUDIO_RUN_SEQ.
const (
	// notePIDs records the command's process group (its leader is sh, so
	// the group id is $$) for the cleanup, and the leader's pid per run.
	notePIDs = `echo $$ >> "$EXP_DIR/pgids"; echo $$ > "$EXP_DIR/leader-$STUDIO_RUN_SEQ.pid"; `
	psqlExp  = `psql "$EXP_DB" -qX -v ON_ERROR_STOP=1 -c `
	// insertExp and updateExp write the command's own start and end.
	insertExp   = `"INSERT INTO exp(seq, job_id, replica, started_at) VALUES ($STUDIO_RUN_SEQ, '$STUDIO_JOB_ID', '$STUDIO_REPLICA_ID', clock_timestamp())"`
	updateExp   = `"UPDATE exp SET ended_at = clock_timestamp() WHERE seq = $STUDIO_RUN_SEQ"`
	recordStart = psqlExp + insertExp
	recordInst  = "exec " + psqlExp + `"INSERT INTO inst(replica, at) VALUES ('$STUDIO_REPLICA_ID', clock_timestamp())"`
)

// recordRun is a command that records its start, sleeps for seconds and
// records its end, in one psql session that replaces the shell: starting a
// process costs 0.1-0.3 s on a small VM (more under load), and a job that
// runs every 1s counted from the END of its run must stay short, or the
// fixed delay rather than the lock decides how often it runs.
func recordRun(seconds string) string {
	return "exec " + psqlExp + insertExp + ` -c "SELECT pg_sleep(` + seconds + `)" -o /dev/null -c ` + updateExp
}

// jobConf is one job of the configuration file.
type jobConf struct {
	ID      string  `yaml:"id"`
	Scope   string  `yaml:"scope"`
	Every   string  `yaml:"every,omitempty"`
	Cron    string  `yaml:"cron,omitempty"`
	TZ      string  `yaml:"tz,omitempty"`
	Timeout string  `yaml:"timeout,omitempty"`
	Missed  string  `yaml:"missed,omitempty"`
	Run     runConf `yaml:"run"`
	// Env is the job's env: (set by newFixture: a command gets a clean
	// environment).
	Env map[string]string `yaml:"env,omitempty"`
	// CatchUp is catch_up: {max, within} (missed: catch-up).
	CatchUp map[string]string `yaml:"catch_up,omitempty"`

	// Jitter and Deadline are jitter: and deadline: (jitter_test.go).
	Jitter   string `yaml:"jitter,omitempty"`
	Deadline string `yaml:"deadline,omitempty"`
}

type runConf struct {
	Command []string `yaml:"command"`
}

// shJob is a job whose command is `sh -c script`.
func shJob(id, scope, every, timeout, script string) jobConf {
	return jobConf{ID: id, Scope: scope, Every: every, Timeout: timeout, Run: runConf{Command: []string{"sh", "-c", script}}}
}

// fixture is one test's database, its configuration file and the folder
// its job commands write pid files to.
type fixture struct {
	t      *testing.T
	dbURL  string
	pool   *pgxpool.Pool
	dir    string // EXP_DIR
	config string // the YAML file given to run --config
}

// newFixture creates the test's database with the exp and inst tables and
// a configuration file declaring list. Every process group a job command
// started is SIGKILLed when the test ends (after the replicas: a replica
// killed with SIGKILL leaves its commands running).
func newFixture(t *testing.T, list ...jobConf) *fixture {
	t.Helper()
	f := &fixture{t: t, dbURL: pgtest.NewDB(t), dir: t.TempDir()}
	f.pool = testPool(t, f.dbURL)
	f.exec(schema)
	for i := range list {
		list[i].Env = map[string]string{"EXP_DB": f.dbURL, "EXP_DIR": f.dir}
	}
	b, err := yaml.Marshal(struct {
		Jobs []jobConf `yaml:"jobs"`
	}{list})
	if err != nil {
		t.Fatalf("marshal config: %v", err)
	}
	f.config = filepath.Join(t.TempDir(), "studio.yaml")
	if err := os.WriteFile(f.config, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, pgid := range readPIDs(filepath.Join(f.dir, "pgids")) {
			if len(groupMembers(pgid)) > 0 {
				syscall.Kill(-pgid, syscall.SIGKILL)
			}
		}
	})
	return f
}

// exec runs one statement of the test (or several without arguments).
func (f *fixture) exec(sql string, args ...any) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	if _, err := f.pool.Exec(ctx, sql, args...); err != nil {
		f.t.Fatalf("exec %q: %v", firstLine(sql), err)
	}
}

// pauseJob pauses a job the way `studioctl jobs pause` does: a row in
// studio_job_setting, read by the runner at every fire.
func (f *fixture) pauseJob(id string) {
	f.t.Helper()
	f.exec(`INSERT INTO studio_job_setting (job_id, paused, updated_by) VALUES ($1, true, $2)
ON CONFLICT (job_id) DO UPDATE SET paused = true, updated_by = EXCLUDED.updated_by, updated_at = now()`, id, testAppName)
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " ..."
	}
	return s
}

// startReplica starts `studioctl run --config <the fixture's file>` with
// replica id. The job commands see EXP_DB and EXP_DIR. The process is
// killed (after a SIGCONT, in case it is stopped) when the test ends, a
// data race it reports fails the test, and its log is shown if the test
// failed.
func (f *fixture) startReplica(id string) *replicaproc.Proc {
	f.t.Helper()
	return studioctlBin.Start(f.t, replicaproc.Options{
		ID:          id,
		DatabaseURL: f.dbURL,
		Args:        []string{"--config", f.config},
		Env:         []string{"EXP_DB=" + f.dbURL, "EXP_DIR=" + f.dir},
		FailOnRace:  true, // the binary is built with -race for this
	})
}

// testPool opens the test's own pool on dbURL, marked with testAppName.
func testPool(t *testing.T, dbURL string) *pgxpool.Pool {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("parse database url: %v", err)
	}
	q := u.Query()
	q.Set("application_name", testAppName)
	u.RawQuery = q.Encode()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := db.Open(ctx, u.String())
	if err != nil {
		t.Fatalf("open test pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// lockRow is a shedlock row with its times as instants (the columns are
// UTC timestamps without a zone) and the database's now() of the same read.
type lockRow struct {
	LockedBy  string
	LockedAt  time.Time
	LockUntil time.Time
	Now       time.Time
}

func (f *fixture) readLock(name string) (lockRow, error) {
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	var l lockRow
	err := f.pool.QueryRow(ctx, `
SELECT locked_by, locked_at AT TIME ZONE 'UTC', lock_until AT TIME ZONE 'UTC', now()
FROM shedlock WHERE name = $1`, name).Scan(&l.LockedBy, &l.LockedAt, &l.LockUntil, &l.Now)
	if err != nil {
		return lockRow{}, fmt.Errorf("read shedlock %q: %w", name, err)
	}
	return l, nil
}

func (f *fixture) mustReadLock(name string) lockRow {
	f.t.Helper()
	l, err := f.readLock(name)
	if err != nil {
		f.t.Fatal(err)
	}
	return l
}

// runRow is a studio_job_run row.
type runRow struct {
	Seq        int64
	ReplicaID  string
	StartedAt  time.Time
	FinishedAt *time.Time
	Outcome    string
	Error      string
}

// runs returns the runs of job, oldest first.
func (f *fixture) runs(job string) ([]runRow, error) {
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	rows, err := f.pool.Query(ctx, `
SELECT seq, replica_id, started_at, finished_at, outcome, coalesce(error, '')
FROM studio_job_run WHERE job_id = $1 ORDER BY started_at, seq`, job)
	if err != nil {
		return nil, fmt.Errorf("read runs of %q: %w", job, err)
	}
	defer rows.Close()
	var out []runRow
	for rows.Next() {
		var r runRow
		if err := rows.Scan(&r.Seq, &r.ReplicaID, &r.StartedAt, &r.FinishedAt, &r.Outcome, &r.Error); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// runsBy keeps the runs of replica id.
func runsBy(list []runRow, id string) []runRow {
	var out []runRow
	for _, r := range list {
		if r.ReplicaID == id {
			out = append(out, r)
		}
	}
	return out
}

// status returns the studio_job_status counters of (replica, job).
func (f *fixture) status(replica, job string) (st jobs.Status, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	err = f.pool.QueryRow(ctx, `
SELECT runs, failures, timeouts, lock_lost, skipped_elsewhere, coalesce(last_outcome, ''), last_finished_at, last_skipped_elsewhere_at
FROM studio_job_status WHERE replica_id = $1 AND job_id = $2`, replica, job).
		Scan(&st.Runs, &st.Failures, &st.Timeouts, &st.LockLost, &st.SkippedElsewhere, &st.LastOutcome, &st.LastFinishedAt, &st.LastSkippedElsewhereAt)
	if err != nil {
		return st, fmt.Errorf("read status of %s on %s: %w", job, replica, err)
	}
	return st, nil
}

// expStart is when the command of run seq recorded its own start
// (database time), and whether it has.
func (f *fixture) expStart(seq int64) (time.Time, bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	var at time.Time
	err := f.pool.QueryRow(ctx, `SELECT started_at FROM exp WHERE seq = $1`, seq).Scan(&at)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, false, nil
	}
	return at, err == nil, err
}

// dbNow is the database's clock.
func (f *fixture) dbNow() time.Time {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	var now time.Time
	if err := f.pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		f.t.Fatalf("read now(): %v", err)
	}
	return now
}

// leaderPID is the pid of the sh that ran the command of run seq.
func (f *fixture) leaderPID(seq int64) (int, error) {
	return readPID(filepath.Join(f.dir, fmt.Sprintf("leader-%d.pid", seq)))
}

func readPID(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// readPIDs reads a file of one pid a line; a missing file has none.
func readPIDs(path string) []int {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// procStat reads the state and process group of pid from /proc.
func procStat(pid int) (state byte, pgrp int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// "pid (comm) S ppid pgrp ...": comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	fs := strings.Fields(string(b[i+1:]))
	if len(fs) < 3 || len(fs[0]) != 1 {
		return 0, 0, false
	}
	pgrp, err = strconv.Atoi(fs[2])
	if err != nil {
		return 0, 0, false
	}
	return fs[0][0], pgrp, true
}

// alive reports whether pid is a live process. A zombie is dead: it only
// waits to be reaped, and an orphan's new parent (PID 1 of a container is
// often no init) may never reap it.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	state, _, ok := procStat(pid)
	return ok && state != 'Z' && state != 'X'
}

// groupMembers lists the live processes of process group pgid.
func groupMembers(pgid int) []int {
	if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
		return nil
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if state, g, ok := procStat(pid); ok && g == pgid && state != 'Z' && state != 'X' {
			out = append(out, pid)
		}
	}
	return out
}
