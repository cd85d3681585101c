package demo

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/muesli/termenv"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
	"github.com/studioctl/studioctl/internal/leases"
	"github.com/studioctl/studioctl/internal/locks"
	"github.com/studioctl/studioctl/internal/natsort"
	"github.com/studioctl/studioctl/internal/output"
	"github.com/studioctl/studioctl/internal/replicas"
)

// viewEvery is how often the demo reads the tables for its view.
const viewEvery = 500 * time.Millisecond

// snapshot is what the view shows, read from the tables through the
// operator packages (the same reads as replicas list, jobs list, locks
// list and leases list).
type snapshot struct {
	now      time.Time
	replicas []replicas.Info
	jobs     []jobstore.View
	locks    []locks.Info
	leases   []leases.Info
	// counts are each job's finished runs, from its run records: the
	// status rows of a replica that left no longer count, and the live
	// view's RUNS must not go down.
	counts map[string]runCounts
}

// runCounts are a job's finished runs, failures and timeouts, counted as
// the status rows count them.
type runCounts struct{ runs, failures, timeouts int64 }

// countsSQL counts the finished runs of every job (a per-cluster duty
// under its job's id) from studio_job_run.
const countsSQL = `SELECT split_part(job_id, '@', 1), count(*), count(*) FILTER (WHERE outcome <> 'succeeded'),
  count(*) FILTER (WHERE outcome = 'timed_out')
FROM studio_job_run WHERE outcome <> 'running' GROUP BY 1`

func readCounts(ctx context.Context, pool *pgxpool.Pool) (map[string]runCounts, error) {
	rows, err := pool.Query(ctx, countsSQL)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]runCounts{}
	for rows.Next() {
		var id string
		var c runCounts
		if err := rows.Scan(&id, &c.runs, &c.failures, &c.timeouts); err != nil {
			return nil, err
		}
		out[id] = c
	}
	return out, rows.Err()
}

func readSnapshot(ctx context.Context, pool *pgxpool.Pool, admin *locks.Admin) (snapshot, error) {
	var s snapshot
	var err error
	if s.replicas, err = replicas.List(ctx, pool); err != nil {
		return s, err
	}
	rows, now, err := jobstore.ReadStatus(ctx, pool, "")
	if err != nil {
		return s, err
	}
	s.now, s.jobs = now, jobstore.Merge(rows, now)
	if s.locks, err = admin.List(ctx); err != nil {
		return s, err
	}
	if s.leases, err = leases.List(ctx, pool); err != nil {
		return s, err
	}
	if s.counts, err = readCounts(ctx, pool); err != nil {
		return s, err
	}
	return s, nil
}

// screen writes the demo's narration and progress to stderr. On a
// terminal it keeps a live view at the bottom and redraws it; narration
// scrolls above it. Piped, every narration and every event is one line.
type screen struct {
	mu       sync.Mutex
	w        io.Writer
	terminal bool
	start    time.Time
	header   func() string

	drawn int    // lines of the view on the terminal now
	view  string // the last view drawn

	title, good, warn, bad, dim lipgloss.Style
}

func newScreen(w io.Writer, terminal, noColor bool) *screen {
	r := lipgloss.NewRenderer(w)
	if terminal && !noColor {
		r.SetColorProfile(termenv.ANSI)
	} else {
		r.SetColorProfile(termenv.Ascii)
	}
	return &screen{
		w: w, terminal: terminal, start: time.Now(),
		title: r.NewStyle().Bold(true),
		good:  r.NewStyle().Foreground(lipgloss.Color("2")),
		warn:  r.NewStyle().Foreground(lipgloss.Color("3")),
		bad:   r.NewStyle().Foreground(lipgloss.Color("1")).Bold(true),
		dim:   r.NewStyle().Foreground(lipgloss.Color("8")),
	}
}

// clear removes the view from the terminal. s.mu held.
func (s *screen) clear() {
	if s.terminal && s.drawn > 0 {
		fmt.Fprintf(s.w, "\x1b[%dA\x1b[J", s.drawn)
		s.drawn = 0
	}
}

// draw writes the view again. s.mu held.
func (s *screen) draw() {
	if !s.terminal || s.view == "" {
		return
	}
	fmt.Fprint(s.w, s.view)
	s.drawn = strings.Count(s.view, "\n")
}

func (s *screen) stamp() string {
	return fmt.Sprintf("%5.1fs", time.Since(s.start).Seconds())
}

// say narrates a step of the demo.
func (s *screen) say(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clear()
	fmt.Fprintf(s.w, "%s %s\n", s.dim.Render(s.stamp()), s.title.Render(fmt.Sprintf(format, args...)))
	s.draw()
}

// block prints text (a command's output) indented, under the narration.
func (s *screen) block(text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clear()
	for _, l := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		fmt.Fprintf(s.w, "        %s\n", l)
	}
	s.draw()
}

// event reports one change the view saw: a line when piped; on a terminal
// the view shows it.
func (s *screen) event(line string) {
	if s.terminal {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.w, "%s %s\n", s.stamp(), line)
}

// show redraws the live view from a snapshot (terminal only).
func (s *screen) show(snap snapshot, execs map[string]map[string]int) {
	if !s.terminal {
		return
	}
	v := s.render(snap, execs)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clear()
	s.view = v
	s.draw()
}

// done removes the live view for good.
func (s *screen) done() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clear()
	s.view = ""
}

func age(d time.Duration) string {
	if d < 0 {
		return "in " + (-d).Round(time.Second).String()
	}
	return d.Round(time.Second).String() + " ago"
}

// render is the compact live view: replicas, jobs, locks, leases.
func (s *screen) render(snap snapshot, execs map[string]map[string]int) string {
	var b strings.Builder
	line := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	rule := s.dim.Render(strings.Repeat("─", 78))
	line("%s", rule)
	if s.header != nil {
		line("%s", s.title.Render(s.header()))
	}
	leaseCount := map[string]int{}
	for _, l := range snap.leases {
		if l.Owner != "" {
			leaseCount[l.Owner]++
		}
	}
	line("%s", s.title.Render(fmt.Sprintf("%-10s %-9s %-11s %6s %8s   %s", "REPLICA", "STATE", "HEARTBEAT", "LEASES", "RUNNING", "EXECUTIONS")))
	for _, r := range snap.replicas {
		state := string(r.State)
		st := s.good
		switch {
		case r.Crashed:
			state, st = "gone", s.bad
		case r.Gone:
			st = s.dim
		case r.State != replicas.StateReady:
			st = s.warn
		}
		var ex []string
		for _, j := range installationJobs {
			ex = append(ex, fmt.Sprintf("%s %d", j, execs[j][r.ID]))
		}
		line("%-10s %s %-11s %6d %8d   %s", r.ID, st.Render(fmt.Sprintf("%-9s", state)), age(r.HeartbeatAge), leaseCount[r.ID], r.RunsInFlight, strings.Join(ex, ", "))
	}
	line("%s", s.title.Render(fmt.Sprintf("%-14s %-12s %-9s %5s %5s %5s   %s", "JOB", "SCOPE", "HEALTH", "RUNS", "FAIL", "TMOUT", "LAST")))
	for _, v := range mergeDuties(snap.jobs) {
		if v.ID == jobs.HousekeepingID {
			continue
		}
		st := s.good
		if v.Health != jobs.HealthOK {
			st = s.bad
		}
		last := ""
		if v.LastOutcome != "" {
			last = fmt.Sprintf("%s on %s", v.LastOutcome, v.LastReplica)
		}
		c := snap.counts[v.ID] // from the records, not the live replicas' rows
		line("%-14s %-12s %s %5d %5d %5d   %s", v.ID, v.Scope, st.Render(fmt.Sprintf("%-9s", v.Health)), c.runs, c.failures, c.timeouts, last)
	}
	line("%s", s.title.Render(fmt.Sprintf("%-14s %-10s %-7s %-7s %s", "LOCK", "LOCKED BY", "STATE", "HOLDER", "UNTIL")))
	for _, l := range snap.locks {
		if l.Name == jobs.HousekeepingID {
			continue
		}
		st := s.dim
		switch l.State {
		case locks.StateHeld:
			st = s.good
		case locks.StateStale:
			st = s.bad
		}
		line("%-14s %-10s %s %-7s %s", l.Name, l.LockedBy, st.Render(fmt.Sprintf("%-7s", l.State)), l.HolderState, age(-l.Remaining))
	}
	var ls []string
	for _, l := range snap.leases {
		owner := l.Owner
		if owner == "" {
			owner = "-"
		}
		text := l.Cluster + " " + owner
		if l.State != leases.StateOK {
			text = s.warn.Render(text + " (" + string(l.State) + ")")
		}
		ls = append(ls, text)
	}
	line("%s %s", s.title.Render("LEASES"), strings.Join(ls, "  "))
	line("%s", rule)
	return b.String()
}

// mergeDuties folds the per-cluster duties (job@cluster) of a job into one
// row named after the job.
func mergeDuties(views []jobstore.View) []jobstore.View {
	byID := map[string]*jobstore.View{}
	var order []string
	for _, v := range views {
		k, duty := jobs.ParseDutyKey(v.ID)
		id := k.Job
		m, ok := byID[id]
		if !ok {
			c := v
			c.ID = id
			if duty {
				c.Scope = "per cluster"
			}
			byID[id] = &c
			order = append(order, id)
			continue
		}
		m.Runs += v.Runs
		m.Failures += v.Failures
		m.Timeouts += v.Timeouts
		if v.LastStartedAt != nil && (m.LastStartedAt == nil || v.LastStartedAt.After(*m.LastStartedAt)) {
			m.LastStartedAt, m.LastOutcome, m.LastReplica = v.LastStartedAt, v.LastOutcome, v.LastReplica
		}
		if v.Health != jobs.HealthOK {
			m.Health = v.Health
		}
	}
	natsort.Strings(order)
	out := make([]jobstore.View, 0, len(order))
	for _, id := range order {
		out = append(out, *byID[id])
	}
	return out
}

// events lists what changed from prev to cur, one line each.
func events(prev, cur snapshot) []string {
	var out []string
	old := map[string]replicas.Info{}
	for _, r := range prev.replicas {
		old[r.ID] = r
	}
	for _, r := range cur.replicas {
		o, seen := old[r.ID]
		switch {
		case !seen:
			out = append(out, fmt.Sprintf("replica %s: registered, %s", r.ID, r.State))
		case r.Crashed && !o.Crashed:
			out = append(out, fmt.Sprintf("replica %s: gone (no heartbeat for %s)", r.ID, r.HeartbeatAge.Round(time.Second)))
		case r.State != o.State:
			out = append(out, fmt.Sprintf("replica %s: %s", r.ID, r.State))
		}
	}
	oldJobs := map[string]jobstore.View{}
	for _, v := range mergeDuties(prev.jobs) {
		oldJobs[v.ID] = v
	}
	for _, v := range mergeDuties(cur.jobs) {
		o := oldJobs[v.ID]
		if v.Failures > o.Failures && v.LastOutcome == jobs.OutcomeFailed {
			out = append(out, fmt.Sprintf("job %s: failed on %s: %s", v.ID, v.LastReplica, firstLine(v.LastError)))
		}
		if v.Timeouts > o.Timeouts {
			out = append(out, fmt.Sprintf("job %s: timed out on %s", v.ID, v.LastReplica))
		}
	}
	oldLocks := map[string]locks.Info{}
	for _, l := range prev.locks {
		oldLocks[l.Name] = l
	}
	for _, l := range cur.locks {
		o, seen := oldLocks[l.Name]
		// (A stopped holder's lockAtLeastFor, the last second, is no news.)
		if l.State == locks.StateStale && (!seen || o.State != locks.StateStale) && l.Remaining >= time.Second {
			out = append(out, fmt.Sprintf("lock %s: stale: its holder %s is gone, and it is held for another %s", l.Name, l.LockedBy, l.Remaining.Round(time.Second)))
		}
		if seen && o.State == locks.StateStale && l.State != locks.StateStale && o.Remaining >= time.Second {
			out = append(out, fmt.Sprintf("lock %s: %s", l.Name, l.State))
		}
	}
	oldLeases := map[string]leases.Info{}
	for _, l := range prev.leases {
		oldLeases[l.Cluster] = l
	}
	for _, l := range cur.leases {
		o, seen := oldLeases[l.Cluster]
		if (!seen && l.Owner != "") || (seen && o.Owner != l.Owner) {
			from := o.Owner
			if from == "" {
				from = "none"
			}
			to := l.Owner
			if to == "" {
				to = "none"
			}
			out = append(out, fmt.Sprintf("lease %s: %s -> %s", l.Cluster, from, to))
		}
	}
	return out
}

// firstLineWidth bounds an error's first line in the demo's view, in
// display columns.
const firstLineWidth = 103

// firstLine is the first line of s, cut by output.Truncate (which never
// splits a character).
func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return output.Truncate(s, firstLineWidth)
}
