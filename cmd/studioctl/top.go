package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/studioctl/studioctl/internal/config"
	"github.com/studioctl/studioctl/internal/doctor"
	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
	"github.com/studioctl/studioctl/internal/leases"
	"github.com/studioctl/studioctl/internal/liveness"
	"github.com/studioctl/studioctl/internal/output"
	"github.com/studioctl/studioctl/internal/replicas"
	"github.com/studioctl/studioctl/internal/stream"
	"github.com/studioctl/studioctl/internal/top"
	"github.com/studioctl/studioctl/internal/watch"
)

// Limits of top's reads.
const (
	// topEvents is how many of the newest events the events view shows.
	topEvents = 200
	// topOccurrences is how many occurrences a job's drill-down shows.
	topOccurrences = 10
	// topFPS bounds how often the screen is flushed: a frame at most 50 ms
	// after the model changed, and 20 idle wake-ups a second instead of
	// Bubble Tea's 60 (docs/benchmarks.md, "studioctl top").
	topFPS = 20
)

// topOptions are the flags and dependencies of top.
type topOptions struct {
	deps
	ReadOnly bool
	// Poll is the fallback read interval (hidden --watch-poll, for tests).
	Poll time.Duration
	// Color: colour is on (not --no-color, not NO_COLOR).
	Color func() bool
	// Config is the loaded configuration (doctor's jobs and replica id).
	Config func() *config.Config
	// OutTTY: stdout is a terminal.
	OutTTY bool
}

func newTopCmd(a *app, runF func(context.Context, *topOptions) error) *cobra.Command {
	o := &topOptions{deps: a.deps(), OutTTY: a.stdoutTTY,
		Color:  func() bool { return !a.cfg.NoColor && a.getenv("NO_COLOR") == "" },
		Config: func() *config.Config { return a.cfg }}
	cmd := &cobra.Command{
		Use:   "top [--read-only]",
		Short: "The whole installation on one keyboard-driven screen, with the safe actions one key away",
		Long: `A full-screen view of replicas, jobs, locks, leases and the event stream
(keys 1-5 or tab), each with the columns of its list command, filtered with
/ and sorted with s. enter drills down into a row; in a job's, j/k select
an occurrence and enter tells jobs why of it (jobs why ID --at --scope). The
header shows doctor's checks: crashed replicas, stale locks, unowned
clusters, failing, overdue and drifting jobs. Redrawn within a second of a
change (the bus, as --watch); without it, a cheap check every 10 s reads
again what changed; a lost bus shows in the status line.

Actions, each the same code path as its verb and audited with the actor:
r releases a lock (locks release), R by force whatever its holder (locks
release --force), d drains a replica (replicas drain), t triggers a job
(jobs trigger), p pauses or resumes it (jobs pause, jobs resume), h releases
a lease (leases release). Each asks for a reason, shows the equivalent
studioctl command, and runs on y (esc cancels); what the verb refuses (a
live holder without --force) is refused. --read-only disables every action.
? shows the keys; q or Ctrl-C leaves. See docs/top.md.`,
		Example: `  studioctl top
  studioctl top --read-only
  NO_COLOR=1 studioctl top`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Poll <= 0 {
				return usageErrorf("--watch-poll: must be positive, got %s", o.Poll)
			}
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return topRun(cmd.Context(), o)
		},
	}
	cmd.Flags().BoolVar(&o.ReadOnly, "read-only", false, "disable every action: look, never change")
	cmd.Flags().DurationVar(&o.Poll, "watch-poll", watch.DefaultPoll, "the fallback database read interval")
	_ = cmd.Flags().MarkHidden("watch-poll")
	return cmd
}

// topRun runs the screen until q, Ctrl-C or a signal.
func topRun(ctx context.Context, o *topOptions) error {
	if !o.IO.InTTY || !o.OutTTY {
		return usageErrorf("top: needs a terminal on stdin and stdout (for a pipe use the list commands, for example jobs list --watch)")
	}
	pool, err := o.DB(ctx)
	if err != nil {
		return err
	}
	src := &topSource{d: o.deps, cfg: o.Config(), pool: pool}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The bus needs a session of its own: database.listen_url's when set.
	spool, err := o.SessionDB(ctx)
	if err != nil {
		return err
	}
	var prog *tea.Program
	send := func(m tea.Msg) {
		if prog != nil {
			prog.Send(m)
		}
	}
	wakes := watch.NewWakes()
	feed := top.NewFeed(top.FeedOptions{Source: src, Wakes: wakes, Poll: o.Poll, Send: send})
	model := top.New(top.Options{Source: src, Actor: &topActor{d: o.deps}, Want: feed.Want,
		ReadOnly: o.ReadOnly, Color: o.Color(), Now: o.Now, Ctx: ctx})
	prog = tea.NewProgram(model, tea.WithAltScreen(), tea.WithFPS(topFPS), tea.WithContext(ctx), tea.WithInput(o.IO.In), tea.WithOutput(o.IO.Out))
	pc := spool.Config()
	n := watch.Listen(watch.ListenOptions{
		Config: pc.ConnConfig, ConnString: pc.ConnString(), Wakes: wakes,
		Notice: func(s string) { send(top.BusMsg{Live: strings.HasPrefix(s, "back")}) },
		Lost:   "lost", Back: "back",
	})
	defer n.Stop()
	feedDone := make(chan error, 1)
	go func() { feedDone <- feed.Run(ctx) }()
	_, err = prog.Run()
	cancel()
	<-feedDone
	if errors.Is(err, tea.ErrProgramKilled) && ctx.Err() != nil {
		return nil // a signal: the terminal is restored, as on q
	}
	return err
}

// topSource reads what top shows through the list commands' own run
// functions, with a printer that keeps their rows (output.NewCapture).
type topSource struct {
	d    deps
	cfg  *config.Config
	pool *pgxpool.Pool
	// markSQL is Mark's statement, made at its first use (the Feed's
	// goroutine is its only caller).
	markSQL string
}

// captured runs fn with deps whose printer keeps the table, and returns
// it with its narrow columns (what the command prints without -o wide).
func (s *topSource) captured(fn func(deps) error) (top.Table, error) {
	var buf bytes.Buffer
	p := output.NewCapture(&buf, s.d.Now)
	d := s.d
	d.IO = &streams{In: strings.NewReader(""), Out: &buf, Err: &buf}
	d.Printer = func() *output.Printer { return p }
	if err := fn(d); err != nil {
		return top.Table{}, err
	}
	c := p.Captured()
	var t top.Table
	var keep []int
	for i, col := range c.Columns {
		if !col.Wide {
			keep = append(keep, i)
			t.Columns = append(t.Columns, col.Header)
		}
	}
	t.Rows = make([][]output.Cell, 0, len(c.Rows))
	for _, r := range c.Rows {
		row := make([]output.Cell, 0, len(keep))
		for _, i := range keep {
			row = append(row, r[i])
		}
		t.Rows = append(t.Rows, row)
	}
	return t, nil
}

// Load reads one view.
func (s *topSource) Load(ctx context.Context, v top.View) (top.Snapshot, error) {
	var t top.Table
	var err error
	switch v {
	case top.Replicas:
		t, err = s.captured(func(d deps) error { return replicasListRun(ctx, &replicasListOptions{deps: d}) })
	case top.Jobs:
		t, err = s.captured(func(d deps) error { return jobsStatusRun(ctx, &jobsStatusOptions{deps: d}) })
	case top.Locks:
		t, err = s.captured(func(d deps) error { return locksListRun(ctx, &locksListOptions{deps: d}) })
	case top.Leases:
		t, err = s.captured(func(d deps) error { return leasesListRun(ctx, &leasesListOptions{deps: d}) })
	case top.Events:
		t, err = s.events(ctx)
	}
	if err != nil {
		return top.Snapshot{}, err
	}
	return top.Snapshot{View: v, Table: t, At: s.d.Now()}, nil
}

// Header runs doctor's checks the header shows.
func (s *topSource) Header(ctx context.Context) ([]top.Check, error) {
	return s.header(ctx), nil
}

// Marks of what top reads (top.Marks): one statement of parts, each a
// cheap fingerprint of one table, read by index or over rows of a few
// columns (3 to 25 ms at 10,000 jobs, where the jobs view's read takes
// seconds of the server's time). A row written changes its xmin, so a
// count and a sum of xmins change with every insert, update and delete;
// the event stream's last id changes with every run, occurrence, replica
// state, lease owner and audited action. A replica's heartbeat and a
// lock's or lease's renewal change only what the screen shows as a
// relative time: those parts take the replica's liveness, the lock's
// holder and whether it is held, the lease's owner and generation and
// whether it expired.
//
// What the header and the jobs view judge by time alone, with no write,
// is in the marks too, judged by the database's clock as the checks judge
// it: how many status rows are past their due time by more than the
// overdue grace (a job becoming overdue), how many pauses have an end
// that passed (a pause ending while no replica resumes it). Each count
// grows only when time crosses a row's threshold, and a write that
// moves a row back changes its xmin: so such a crossing changes the mark
// at the next poll, and is read then (docs/top.md, "Live").
const (
	// topMarkRows is the fingerprint of a table's rows (the second %s),
	// with how many of them the condition (the first %s, false: none)
	// holds for by now.
	topMarkRows = `(SELECT count(*) || '.' || coalesce(sum(xmin::text::bigint), 0) || '.' || count(*) FILTER (WHERE %s) FROM %s)`
	// topMarkSQL: the event stream, the jobs' status rows, settings and
	// definitions, the replicas' liveness, the locks (table, name, holder,
	// lock_until: %[1]s to %[4]s) and the leases.
	topMarkSQL = `SELECT (SELECT coalesce(max(id), 0) FROM studio_event)::text,
  ` + `%[5]s, %[6]s, %[7]s,
  (SELECT coalesce(string_agg(r.id || ':' || r.incarnation || ':' || r.state || ':' || %[8]s, ',' ORDER BY r.id), '') FROM studio_replica r),
  (SELECT count(*) || '.' || coalesce(sum(hashtext(%[2]s::text || '|' || coalesce(%[3]s::text, '') || '|' || (%[4]s > now())::text)), 0) FROM %[1]s),
  (SELECT count(*) || '.' || coalesce(sum(hashtext(cluster || '|' || coalesce(owner, '') || '|' || generation || '|' ||
     coalesce(renewed_at < now() - %[9]s, false)::text)), 0) FROM cluster_lease)`
	// topMarkOverdue: a status row past its due time by more than the
	// overdue grace (%s: doctor.OverdueGrace as an interval), as
	// studio_overdue_jobs judges it before its other conditions.
	topMarkOverdue = `next_fire_at + %s < now()`
	// topMarkPauseEnded: a pause whose end passed, which
	// studio_overdue_jobs counts as over, resumed or not.
	topMarkPauseEnded = `paused AND paused_until <= now()`
)

// sqlInterval is d as an SQL interval of whole milliseconds.
func sqlInterval(d time.Duration) string {
	return fmt.Sprintf("make_interval(secs => %d / 1000.0)", d.Milliseconds())
}

// Mark reads the marks of view v and of the header. Only the jobs view
// has one: its read grows with the jobs, the others' with the replicas,
// locks and clusters, and are read every time as before. The header's
// covers all its checks read.
func (s *topSource) Mark(ctx context.Context, v top.View) (top.Marks, error) {
	if s.markSQL == "" {
		lt := s.d.LockTable().Resolved()
		ident := func(name string) string { return pgx.Identifier(strings.SplitN(name, ".", 2)).Sanitize() }
		s.markSQL = fmt.Sprintf(topMarkSQL, ident(lt.Name), ident(lt.NameCol), ident(lt.LockedBy), ident(lt.LockUntil),
			fmt.Sprintf(topMarkRows, fmt.Sprintf(topMarkOverdue, sqlInterval(doctor.OverdueGrace)), "studio_job_status"),
			fmt.Sprintf(topMarkRows, topMarkPauseEnded, "studio_job_setting"),
			fmt.Sprintf(topMarkRows, "false", "studio_job_definition"), liveness.LiveSQL("r"), sqlInterval(leases.LeaseTTL))
	}
	var events, status, settings, definitions, replicas, locks, leaseRows string
	if err := s.pool.QueryRow(ctx, s.markSQL).Scan(&events, &status, &settings, &definitions, &replicas, &locks, &leaseRows); err != nil {
		return top.Marks{}, fmt.Errorf("read marks: %w", err)
	}
	jobs := strings.Join([]string{events, status, settings, definitions, replicas}, "/")
	m := top.Marks{Header: strings.Join([]string{jobs, locks, leaseRows}, "/")}
	if v == top.Jobs {
		m.View = jobs
	}
	return m, nil
}

// header runs doctor's checks the header shows.
func (s *topSource) header(ctx context.Context) []top.Check {
	o := doctor.Options{Pool: s.pool, Now: s.d.Now, NowFixed: s.d.NowFixed, LockTable: s.d.LockTable(),
		ReplicaID: s.cfg.Replica.ID, MaxConcurrentRuns: s.cfg.Runner.MaxConcurrentRuns}
	if o.ReplicaID == "" {
		o.ReplicaID = replicas.DefaultID()
	}
	if s.cfg.File != "" {
		o.Jobs, o.JobsErr = jobs.ParseSection(s.cfg.File, s.cfg.Doc.Section("jobs"))
		o.JobsSource = filepath.Base(s.cfg.File)
	}
	for _, c := range top.HeaderChecks {
		o.Only = append(o.Only, c.Name)
	}
	results := doctor.Run(ctx, o)
	out := make([]top.Check, 0, len(results))
	for _, c := range top.HeaderChecks {
		for _, r := range results {
			if r.Check == c.Name {
				c.Status, c.Detail = string(r.Status), r.Detail
				out = append(out, c)
			}
		}
	}
	return out
}

// events reads the newest events of the stream (docs/events.md), newest
// first, as events --since prints them.
func (s *topSource) events(ctx context.Context) (top.Table, error) {
	latest, err := stream.Latest(ctx, s.pool)
	if err != nil {
		return top.Table{}, err
	}
	es, err := stream.Read(ctx, s.pool, max(latest-topEvents, 0), topEvents)
	if err != nil {
		return top.Table{}, err
	}
	t := top.Table{Columns: []string{"ID", "AT", "EVENT", "DATA"}}
	for i := len(es) - 1; i >= 0; i-- {
		e := es[i]
		t.Rows = append(t.Rows, []output.Cell{{Text: strconv.FormatInt(e.ID, 10)}, {Text: e.At.UTC().Format("15:04:05.000Z")},
			{Text: e.Name}, {Text: string(e.Data)}})
	}
	return t, nil
}

// Detail is a row's drill-down, as the verbs that show it print it; for a
// job, jobs why of why (nil: of the last occurrence that fell due).
func (s *topSource) Detail(ctx context.Context, v top.View, key string, why *top.Occurrence) (top.Detail, error) {
	var occ []top.Occurrence
	var buf bytes.Buffer
	d := s.d
	d.IO = &streams{In: strings.NewReader(""), Out: &buf, Err: &buf}
	d.Printer = func() *output.Printer {
		return output.New(&buf, output.Table, output.Options{Terminal: true, NoColor: true, Now: s.d.Now})
	}
	section := func(title string, fn func() error) {
		fmt.Fprintf(&buf, "\n%s\n", title)
		if err := fn(); err != nil {
			fmt.Fprintf(&buf, "  (%v)\n", err)
		}
	}
	// rowsOf prints the rows of a list whose column col is key.
	rowsOf := func(title string, load func(deps) error, col string, match func(string) bool) {
		section(title, func() error {
			t, err := s.captured(load)
			if err != nil {
				return err
			}
			at := -1
			for i, c := range t.Columns {
				if c == col {
					at = i
				}
			}
			var rows [][]output.Cell
			for _, r := range t.Rows {
				if at >= 0 && match(r[at].Text) {
					rows = append(rows, r)
				}
			}
			cols := make([]output.Column, len(t.Columns))
			for i, c := range t.Columns {
				cols[i] = output.Column{Header: c}
			}
			if len(rows) == 0 {
				fmt.Fprintln(&buf, "  none")
				return nil
			}
			return d.Printer().Print(nil, cols, rows)
		})
	}
	switch v {
	case top.Jobs:
		section("job "+key, func() error { return jobsStatusRun(ctx, &jobsStatusOptions{deps: d, ID: key}) })
		job, _ := jobs.ParseDutyKey(key)
		section("occurrences, newest first", func() error {
			// What jobs occurrences JOB --limit topOccurrences does, keeping
			// the occurrences to select for jobs why.
			list, err := jobstore.ListOccurrences(ctx, s.pool, jobstore.OccurrenceQuery{Job: job.Job, Limit: topOccurrences})
			if err != nil {
				return err
			}
			if len(list) == 0 {
				return jobstore.KnownOccurrences(ctx, s.pool, job.Job)
			}
			before := strings.Count(buf.String(), "\n")
			if err := printOccurrences(d.Printer(), list); err != nil {
				return err
			}
			// A header line, then one line a row (else none is selectable).
			if after := strings.Count(buf.String(), "\n"); after-before == len(list)+1 {
				for i, o := range list {
					occ = append(occ, top.Occurrence{Job: job.Job, At: o.NominalAt, Scope: o.ScopeKey, Line: after - len(list) + i})
				}
			}
			return nil
		})
		title, wo := "why (the last occurrence that fell due)", &jobsWhyOptions{deps: d, ID: job.Job}
		if why != nil {
			scope := why.Scope
			title, wo.At, wo.Scope = "why: "+why.CommandLine(), why.At, &scope
		}
		section(title, func() error { return jobsWhyRun(ctx, wo) })
	case top.Replicas:
		rowsOf("replica", func(d deps) error { return replicasListRun(ctx, &replicasListOptions{deps: d}) }, "ID", func(s string) bool { return s == key })
		rowsOf("its jobs (last run there)", func(d deps) error { return jobsStatusRun(ctx, &jobsStatusOptions{deps: d}) }, "WHERE", func(s string) bool { return s == key })
		rowsOf("its leases", func(d deps) error { return leasesListRun(ctx, &leasesListOptions{deps: d}) }, "OWNER", func(s string) bool { return s == key })
		section("its runs in flight", func() error { return s.runsInFlight(ctx, &buf, key) })
	case top.Locks:
		section("lock "+key, func() error { return locksShowRun(ctx, &locksShowOptions{deps: d, Name: key}) })
		var holder string
		if t, err := s.captured(func(d deps) error { return locksShowRun(ctx, &locksShowOptions{deps: d, Name: key}) }); err == nil && len(t.Rows) == 1 {
			holder = t.Rows[0][2].Text
			fmt.Fprintf(&buf, "\nits holder %s is %s\n", holder, t.Rows[0][3].Text)
		}
		rowsOf("the holder as a replica", func(d deps) error { return replicasListRun(ctx, &replicasListOptions{deps: d}) }, "ID", func(s string) bool { return s == holder })
	case top.Leases:
		rowsOf("cluster "+key+": owner, placement", func(d deps) error { return leasesListRun(ctx, &leasesListOptions{deps: d}) }, "CLUSTER", func(s string) bool { return s == key })
		rowsOf("its duties", func(d deps) error { return jobsStatusRun(ctx, &jobsStatusOptions{deps: d}) }, "ID", func(s string) bool { return strings.HasSuffix(s, "@"+key) })
	case top.Events:
		id, err := strconv.ParseInt(key, 10, 64)
		if err != nil {
			return top.Detail{}, err
		}
		es, err := stream.Read(ctx, s.pool, id-1, 1)
		if err != nil {
			return top.Detail{}, err
		}
		for _, e := range es {
			fmt.Fprintf(&buf, "event %d  %s  %s\n%s\n", e.ID, e.At.UTC().Format(time.RFC3339Nano), e.Name, output.Safe(string(e.Data)))
		}
	}
	text := strings.TrimLeft(buf.String(), "\n")
	trimmed := buf.Len() - len(text) // the leading newlines: lines before a row's
	for i := range occ {
		occ[i].Line -= trimmed
	}
	return top.Detail{Text: text, Occurrences: occ}, nil
}

// runsInFlight prints a replica's runs still going.
func (s *topSource) runsInFlight(ctx context.Context, buf *bytes.Buffer, id string) error {
	rows, err := s.pool.Query(ctx, `SELECT job_id, seq, started_at FROM studio_job_run WHERE replica_id = $1 AND finished_at IS NULL ORDER BY started_at`, id)
	if err != nil {
		return err
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var job string
		var seq int64
		var at time.Time
		if err := rows.Scan(&job, &seq, &at); err != nil {
			return err
		}
		fmt.Fprintf(buf, "  %s  run %d  started %s\n", job, seq, output.Duration(s.d.Now().Sub(at))+" ago")
		n++
	}
	if n == 0 {
		fmt.Fprintln(buf, "  none")
	}
	return rows.Err()
}

// topActor does top's actions through the verbs' own run functions, with
// --yes (top asked) and the output kept for the status line.
type topActor struct{ d deps }

// Do runs one action.
func (a *topActor) Do(ctx context.Context, act top.Action) (string, error) {
	var buf bytes.Buffer
	d := a.d
	d.IO = &streams{In: strings.NewReader(""), Out: &buf, Err: &buf}
	d.Printer = func() *output.Printer {
		return output.New(&buf, output.Table, output.Options{NoColor: true, Now: a.d.Now})
	}
	var err error
	switch act.Verb {
	case top.ReleaseLock:
		err = locksReleaseRun(ctx, &locksReleaseOptions{deps: d, Name: act.Target, Force: act.Force, Reason: act.Reason, Yes: true})
	case top.DrainReplica:
		err = replicasDrainRun(ctx, &replicasDrainOptions{deps: d, ID: act.Target, Reason: act.Reason, Yes: true, Timeout: 2 * time.Minute})
	case top.TriggerJob:
		err = jobsTriggerRun(ctx, &jobChangeOptions{deps: d, ID: act.Target, Reason: act.Reason, Yes: true})
	case top.PauseJob, top.ResumeJob:
		pause := act.Verb == top.PauseJob
		what := map[bool]string{true: "pause", false: "resume"}[pause]
		err = jobChangeRun(ctx, &jobChangeOptions{deps: d, ID: act.Target, Reason: act.Reason, Yes: true, What: what, Change: jobstore.Change{Pause: &pause}})
	case top.ReleaseLease:
		err = leasesReleaseRun(ctx, &leasesReleaseOptions{deps: d, Cluster: act.Target, Reason: act.Reason, Yes: true})
	default:
		err = fmt.Errorf("unknown action %d", act.Verb)
	}
	out := strings.TrimSpace(buf.String())
	if err != nil && exitCode(err) == exitRefused {
		return out, fmt.Errorf("refused: %w", err)
	}
	return out, err
}
