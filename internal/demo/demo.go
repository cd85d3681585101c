// Package demo runs `studioctl demo`: several real `studioctl run`
// processes of this binary, in a database of the demo's own, with jobs
// that record their own executions; with faults, a kill -9, the safe
// release of the stale lock it leaves and a drain; and a report built from
// the jobs' records that says whether an installation job ever overlapped
// itself (docs/demo.md).
//
// The package does not import the command tree: the command
// (cmd/studioctl/demo.go) resolves the database and hands over its
// connection string, this binary's path and the streams.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/locks"
	"github.com/studioctl/studioctl/internal/migrate"
	"github.com/studioctl/studioctl/internal/replicas"
)

// Limits and defaults of the options.
const (
	DefaultReplicas = 3
	MaxReplicas     = 9
	// FaultReplicas: --faults kills one replica and drains another, and
	// needs one more to take their work over.
	FaultReplicas = 3
	// DefaultDuration makes `demo --faults` take about a minute: the kill
	// waits about 15 s for the replica TTL before the release.
	DefaultDuration = 55 * time.Second
	MinDuration     = 5 * time.Second
	MaxDuration     = time.Hour
)

const (
	// readyTimeout bounds the start of the replicas.
	readyTimeout = 60 * time.Second
	// stepTimeout bounds each wait of the fault walk-through.
	stepTimeout = 60 * time.Second
	// pollEvery is how often a wait looks at the tables again.
	pollEvery = 100 * time.Millisecond
	// cleanupTimeout bounds the drop of the demo database.
	cleanupTimeout = 30 * time.Second
	// demoPoolConns bounds the demo's own pool.
	demoPoolConns = 4
)

// ErrOverlap is the demo's failure: an installation job overlapped itself.
var ErrOverlap = errors.New("an installation job overlapped itself")

// ErrInterrupted: the demo was interrupted (Ctrl-C) before its report.
var ErrInterrupted = errors.New("demo interrupted before its report")

// ErrInvalid marks bad options (exit 2); the error's text names the flag.
var ErrInvalid = errors.New("invalid demo option")

type optionError struct{ msg string }

func (e *optionError) Error() string        { return e.msg }
func (e *optionError) Is(target error) bool { return target == ErrInvalid }

func invalid(format string, args ...any) error {
	return &optionError{msg: fmt.Sprintf(format, args...)}
}

// Options are the demo's flags and what it depends on.
type Options struct {
	Replicas int
	Duration time.Duration
	Faults   bool
	Keep     bool

	// ConnString is the database to work on (the embedded default with its
	// password, a configured URL, or "" for the PG* variables). The demo
	// creates a database of its own there and never touches another.
	ConnString string
	// Described names that database for the narration (no password).
	Described string
	// SQLJobUser and SQLJobPassword are a login of studio_sql_job on that
	// server (the embedded default's, docs/embedded.md): the demo grants
	// studio_sql_job its table and its replicas run their sql: jobs as
	// that login (database.sql_url). "" elsewhere: the jobs run as the
	// replica's role (database.sql_as_replica, docs/jobs-sql.md).
	SQLJobUser, SQLJobPassword string
	// Executable is this binary: the replicas and the operator commands run it.
	Executable string
	// Environ is the base environment of the children (os.Environ()); every
	// setting that could carry a password or another database is dropped.
	Environ []string
	// Stderr gets the narration, the live view or the progress lines.
	Stderr   io.Writer
	Terminal bool // Stderr is a terminal: a live view that redraws
	NoColor  bool
}

// Validate checks the options, naming the flag.
func (o *Options) Validate() error {
	switch {
	case o.Replicas < 1 || o.Replicas > MaxReplicas:
		return invalid("--replicas %d: want 1 to %d", o.Replicas, MaxReplicas)
	case o.Faults && o.Replicas < FaultReplicas:
		return invalid("--replicas %d: --faults needs at least %d (one is killed, one drained, one takes over)", o.Replicas, FaultReplicas)
	case o.Duration < MinDuration:
		return invalid("--duration %s: want at least %s", o.Duration, MinDuration)
	case o.Duration > MaxDuration:
		return invalid("--duration %s: want at most %s", o.Duration, MaxDuration)
	}
	return nil
}

// run is one demo in progress.
type run struct {
	o      Options
	scr    *screen
	pool   *pgxpool.Pool // the demo database, as the demo reaches it
	locks  *locks.Admin
	kids   *children
	tgt    *target
	cfg    string // the replicas' configuration file
	ids    []string
	procs  map[string]*proc
	fates  map[string]string
	rep    *Report
	cancel context.CancelCauseFunc
	// stopView ends the observer and waits for it.
	stopView func()

	// execMu orders the narration of executions with the faults': an
	// execution is told before a kill that came after it (narrateExecutions).
	execMu sync.Mutex
	// execLast is the last demo_execution id narrated.
	execLast int64
}

// Run runs the demo and returns its report. The error is ErrOverlap when an
// installation job overlapped itself (the report is complete then); any
// other error means the demo could not finish (the report may be nil).
// Every child is stopped and reaped, and the demo database dropped (unless
// Keep), whatever happens, Ctrl-C (ctx cancelled) included.
func Run(ctx context.Context, o Options) (rep *Report, err error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	name, err := newDatabaseName()
	if err != nil {
		return nil, err
	}
	scr := newScreen(o.Stderr, o.Terminal, o.NoColor)
	admin, err := db.Open(ctx, o.ConnString)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	scr.say("creating the demo database %s on %s", name, o.Described)
	if err := createDatabase(ctx, admin, name); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "studioctl-demo-")
	if err != nil {
		c, cancel := cleanupContext(ctx)
		defer cancel()
		dropDatabase(c, admin, name)
		return nil, err
	}
	var r0 struct{ tgt *target }
	// report is what Run returns; a return of nil still leaves it to the
	// deferred cleanup.
	report := &Report{Database: name, Kept: o.Keep, Faults: o.Faults, Incidents: []Incident{}, Job: MainJob, EverySeconds: mainEvery.Seconds()}
	rep = report
	defer func() {
		// The database goes last, after every child has been reaped.
		if o.Keep {
			report.Connect = connectHint(r0.tgt, dir)
			scr.say("kept the database %s: %s", name, report.Connect)
			return
		}
		os.RemoveAll(dir)
		c, cancel := cleanupContext(ctx)
		defer cancel()
		if derr := dropDatabase(c, admin, name); derr != nil {
			scr.say("could not drop the demo database: %v", derr)
			if err == nil {
				err = derr
			}
			return
		}
		report.Dropped = true
	}()

	tgt, err := newTarget(o.ConnString, name, dir)
	if err != nil {
		return nil, err
	}
	if o.SQLJobUser != "" {
		if err := tgt.addJobsLogin(o.SQLJobUser, o.SQLJobPassword, name, dir); err != nil {
			return nil, err
		}
	}
	r0.tgt = tgt
	cfg, err := db.ParsePoolConfig(tgt.secret)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = demoPoolConns
	pool, err := db.OpenConfig(ctx, cfg, tgt.secret)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	if _, err := migrate.Up(ctx, pool); err != nil {
		return nil, fmt.Errorf("apply the schema to the demo database: %w", err)
	}
	if _, err := pool.Exec(ctx, schemaSQL); err != nil {
		return nil, fmt.Errorf("create demo_execution: %w", err)
	}
	if tgt.jobs != "" {
		if _, err := pool.Exec(ctx, grantSQL); err != nil {
			return nil, fmt.Errorf("grant demo_execution to studio_sql_job: %w", err)
		}
	}
	la, err := locks.NewAdmin(pool, locks.DefaultTable())
	if err != nil {
		return nil, err
	}
	cfgFile := filepath.Join(dir, "demo.yaml")
	if err := os.WriteFile(cfgFile, []byte(configYAML(tgt.jobs == "")), 0o600); err != nil {
		return nil, err
	}
	env := []string{}
	if tgt.passfile != "" {
		env = append(env, "PGPASSFILE="+tgt.passfile)
	}
	r := &run{
		o: o, scr: scr, pool: pool, locks: la, tgt: tgt, cfg: cfgFile, rep: rep,
		kids:  newChildren(o.Executable, childEnv(o.Environ, env...), []string{"--database-url", tgt.public}),
		procs: map[string]*proc{}, fates: map[string]string{},
	}
	defer r.kids.close()
	defer scr.done()
	ctx, r.cancel = context.WithCancelCause(ctx)
	defer r.cancel(nil)
	defer func() {
		if r.stopView != nil {
			r.stopView()
		}
	}()

	err = r.play(ctx)
	// Stop every replica (a drain each) before the report: the last runs
	// are flushed, and the lock row is the one they leave.
	scr.done()
	if err == nil {
		scr.say("stopping the replicas (SIGTERM: each drains and exits)")
	}
	r.kids.stopAll()
	if r.stopView != nil {
		r.stopView()
	}
	scr.done()
	for _, id := range r.ids {
		p, ok := r.procs[id]
		if !ok {
			continue // not started
		}
		fate := r.fates[id]
		if fate == "" {
			fate = "stopped"
		}
		rep.Replicas = append(rep.Replicas, ReplicaReport{ID: id, PID: p.cmd.Process.Pid, Fate: fate})
	}
	rep.Children = r.kids.pids()
	if err != nil {
		if ctx.Err() != nil && context.Cause(ctx) == context.Canceled {
			rep.Interrupted = true
			scr.say("interrupted: every replica is stopped")
			return rep, ErrInterrupted
		}
		if c := context.Cause(ctx); c != nil && !errors.Is(c, context.Canceled) {
			err = c
		}
		return rep, err
	}
	bctx, cancel := cleanupContext(ctx)
	defer cancel()
	if err := rep.build(bctx, pool, la); err != nil {
		return rep, err
	}
	if !rep.OK() {
		return rep, fmt.Errorf("%w: %d overlapping pairs", ErrOverlap, rep.OverlappingPairs)
	}
	return rep, nil
}

// cleanupContext is for the work after ctx may be done (Ctrl-C): the
// report, the drop of the database.
func cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
}

// connectHint says how to reach a kept demo database, without the password.
func connectHint(t *target, dir string) string {
	if t == nil {
		return ""
	}
	if t.passfile == "" {
		return "psql " + shellQuote(t.public)
	}
	return fmt.Sprintf("PGPASSFILE=%s psql %s (remove %s when done)", shellQuote(t.passfile), shellQuote(t.public), dir)
}

// play starts the replicas, walks through the faults and waits out the
// duration. It returns when the demo is over or ctx is done.
func (r *run) play(ctx context.Context) error {
	for i := 1; i <= r.o.Replicas; i++ {
		r.ids = append(r.ids, fmt.Sprintf("demo-%d", i))
	}
	r.scr.say("starting %d replicas, each a real `studioctl run` of this binary: %s", len(r.ids), strings.Join(r.ids, ", "))
	t0 := time.Now()
	for _, id := range r.ids {
		env := []string{"STUDIO_DATABASE_URL=" + r.tgt.withApp(id), "STUDIO_REPLICA_ID=" + id}
		if r.tgt.jobs != "" {
			env = append(env, "STUDIO_DATABASE_SQL_URL="+r.tgt.jobsWithApp(id))
		}
		p, err := r.kids.startReplica([]string{"--config", r.cfg, "run"}, env...)
		if err != nil {
			return err
		}
		r.procs[id] = p
	}
	if err := r.waitFor(ctx, readyTimeout, "the replicas to be ready", func(ctx context.Context) (bool, error) {
		rs, err := replicas.List(ctx, r.pool)
		if err != nil {
			return false, err
		}
		ready := 0
		for _, in := range rs {
			if in.State == replicas.StateReady && in.Live {
				ready++
			}
		}
		return ready == len(r.ids), nil
	}); err != nil {
		return err
	}
	start, err := r.dbNow(ctx)
	if err != nil {
		return err
	}
	r.rep.start = start
	end := time.Now().Add(r.o.Duration)
	r.scr.header = func() string {
		return fmt.Sprintf("studioctl demo · database %s · %s of at least %s", r.rep.Database, time.Since(t0).Round(time.Second), r.o.Duration)
	}
	r.scr.say("all %d replicas ready in %.1fs. They share the installation jobs %s and %s (one replica per tick, through the lock table), each runs %s, and they own %d clusters through leases",
		len(r.ids), time.Since(t0).Seconds(), MainJob, secondJob, instanceJob, len(demoClusters))
	vctx, vcancel := context.WithCancel(ctx)
	vdone := make(chan struct{})
	go func() {
		defer close(vdone)
		r.observe(vctx)
	}()
	r.stopView = func() { vcancel(); <-vdone }

	if r.o.Faults {
		if err := r.faults(ctx); err != nil {
			return err
		}
	}
	if left := time.Until(end); left > 0 {
		r.scr.say("running on for %s", left.Round(time.Second))
		select {
		case <-time.After(left):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	stop, err := r.dbNow(ctx)
	if err != nil {
		return err
	}
	r.rep.stopAt = stop
	r.rep.DurationSeconds = round3(stop.Sub(start).Seconds())
	return nil
}

// observe reads the tables every viewEvery for the live view and the
// progress lines, and stops the demo when a replica ends on its own.
func (r *run) observe(ctx context.Context) {
	var prev snapshot
	first := true
	t := time.NewTicker(viewEvery)
	defer t.Stop()
	for {
		if p, logTail := r.kids.exitedEarly(); p != nil {
			r.cancel(fmt.Errorf("replica %s exited on its own (%s):\n%s", p.id, p.cmd.ProcessState, logTail))
			return
		}
		snap, err := readSnapshot(ctx, r.pool, r.locks)
		if err == nil {
			if !first {
				for _, e := range events(prev, snap) {
					r.scr.event(e)
				}
			}
			prev, first = snap, false
			r.scr.show(snap, r.narrateExecutions(ctx))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// narrateExecutions counts the installation jobs' executions per replica,
// and tells every one that started since the last it told. The faults call
// it right after a kill and before they tell it, so an execution that began
// before the kill is never told after it.
func (r *run) narrateExecutions(ctx context.Context) map[string]map[string]int {
	r.execMu.Lock()
	defer r.execMu.Unlock()
	out := map[string]map[string]int{}
	total := map[string]int{}
	rows, err := r.pool.Query(ctx, `SELECT id, job_id, replica FROM demo_execution WHERE job_id = ANY($1) ORDER BY id`, installationJobs)
	if err != nil {
		return out
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var job, rep string
		if rows.Scan(&id, &job, &rep) != nil {
			return out
		}
		if out[job] == nil {
			out[job] = map[string]int{}
		}
		out[job][rep]++
		total[job]++
		if id > r.execLast {
			r.scr.event(fmt.Sprintf("job %s: %s started execution %d", job, rep, total[job]))
			r.execLast = id
		}
	}
	return out
}

// waitFor polls cond until it holds, ctx is done or d has passed.
func (r *run) waitFor(ctx context.Context, d time.Duration, what string, cond func(context.Context) (bool, error)) error {
	deadline := time.Now().Add(d)
	var last error
	for {
		if p, logTail := r.kids.exitedEarly(); p != nil {
			return fmt.Errorf("replica %s exited on its own (%s) while waiting for %s:\n%s", p.id, p.cmd.ProcessState, what, logTail)
		}
		ok, err := cond(ctx)
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			if last != nil {
				return fmt.Errorf("timed out after %s waiting for %s: %w", d, what, last)
			}
			return fmt.Errorf("timed out after %s waiting for %s", d, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pollEvery):
		}
	}
}

func (r *run) dbNow(ctx context.Context) (time.Time, error) {
	var t time.Time
	err := r.pool.QueryRow(ctx, `SELECT now()`).Scan(&t)
	return t.UTC(), err
}

// commandLine is how an operator would type the command the demo runs:
// the password stays in the pgpass file.
func (r *run) commandLine(args ...string) string {
	var b strings.Builder
	if r.tgt.passfile != "" {
		b.WriteString("PGPASSFILE=" + shellQuote(r.tgt.passfile) + " ")
	}
	b.WriteString("studioctl --database-url " + shellQuote(r.tgt.public))
	for _, a := range args {
		b.WriteString(" " + shellQuote(a))
	}
	return b.String()
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(c rune) bool {
		return !(c == '/' || c == '.' || c == '-' || c == '_' || c == '=' || c == ':' || c == '@' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z')
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// incident records a step of the faults and narrates it.
func (r *run) incident(in Incident) {
	r.rep.Incidents = append(r.rep.Incidents, in)
}
