package demo

import (
	"context"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/locks"
	"github.com/studioctl/studioctl/internal/natsort"
)

// Report is what the demo found, built from the jobs' own records
// (demo_execution) and the tables. Its JSON form is the stable interface
// of `studioctl demo -o json` (docs/demo.md).
type Report struct {
	Database        string          `json:"database"`
	Kept            bool            `json:"kept"`
	Dropped         bool            `json:"dropped"`
	DurationSeconds float64         `json:"duration_seconds"`
	Replicas        []ReplicaReport `json:"replicas"`
	// Job is the installation job the counts below are about.
	Job                  string         `json:"job"`
	EverySeconds         float64        `json:"every_seconds"`
	ExecutionsPerReplica map[string]int `json:"executions_per_replica"`
	// OverlappingPairs counts the pairs of executions of one installation
	// job (any of them) whose [start, end] intersect. It must be 0.
	OverlappingPairs int      `json:"overlapping_pairs"`
	Overlaps         []string `json:"overlaps"`
	// Runs is the executions of Job in the window; Due the ideal for its
	// schedule over that window (docs/demo.md).
	Runs          int           `json:"runs"`
	Due           float64       `json:"due"`
	WindowSeconds float64       `json:"window_seconds"`
	MeanRunSecs   float64       `json:"mean_execution_seconds"`
	Lock          *LockRow      `json:"lock"`
	Jobs          []JobReport   `json:"jobs"`
	Faults        bool          `json:"faults"`
	Incidents     []Incident    `json:"incidents"`
	Takeover      *float64      `json:"takeover_seconds,omitempty"`
	Handover      *float64      `json:"handover_seconds,omitempty"`
	Moved         []string      `json:"moved_clusters,omitempty"`
	Connect       string        `json:"connect,omitempty"`
	Interrupted   bool          `json:"interrupted,omitempty"`
	Children      []int         `json:"child_pids"`
	start, stopAt time.Time     // the window, database time
	outage        time.Duration // kill to takeover
}

// ReplicaReport is one replica the demo ran, and how it ended.
type ReplicaReport struct {
	ID   string `json:"id"`
	PID  int    `json:"pid"`
	Fate string `json:"fate"` // stopped, killed, drained
}

// LockRow is the lock table's row of Job at the end (as locks show -o json).
type LockRow struct {
	Name             string    `json:"name"`
	LockedBy         string    `json:"locked_by"`
	LockedAt         time.Time `json:"locked_at"`
	LockUntil        time.Time `json:"lock_until"`
	State            string    `json:"state"`
	HolderState      string    `json:"holder_state"`
	RemainingSeconds float64   `json:"remaining_seconds"`
}

// JobReport is one job's runs as the replicas recorded them
// (studio_job_run), and for an installation job its own executions.
type JobReport struct {
	ID                   string         `json:"id"`
	Runs                 int            `json:"runs"`
	Succeeded            int            `json:"succeeded"`
	Failed               int            `json:"failed"`
	TimedOut             int            `json:"timed_out"`
	Other                int            `json:"other"`
	Executions           int            `json:"executions,omitempty"`
	ExecutionsPerReplica map[string]int `json:"executions_per_replica,omitempty"`
	OverlappingPairs     int            `json:"overlapping_pairs"`
}

// Incident is one step of --faults.
type Incident struct {
	Step    string    `json:"step"` // kill, stale, release, takeover, drain, handover
	At      time.Time `json:"at"`
	Replica string    `json:"replica,omitempty"`
	Command string    `json:"command,omitempty"`
	Detail  string    `json:"detail"`
}

// OK reports whether no installation job overlapped itself.
func (r *Report) OK() bool { return r.OverlappingPairs == 0 }

// overlapSQL finds the pairs of executions of one job whose intervals
// intersect; one without an end counts as running for ever.
const overlapSQL = `
SELECT a.job_id, a.replica, a.started_at, a.ended_at, b.replica, b.started_at, b.ended_at
FROM demo_execution a JOIN demo_execution b ON a.job_id = b.job_id AND a.id < b.id
WHERE a.job_id = ANY($1)
  AND a.started_at <= coalesce(b.ended_at, 'infinity') AND b.started_at <= coalesce(a.ended_at, 'infinity')
ORDER BY a.started_at`

// build fills the counts of r from the demo database, once every replica
// has stopped.
func (r *Report) build(ctx context.Context, pool *pgxpool.Pool, admin *locks.Admin) error {
	r.ExecutionsPerReplica = map[string]int{}
	r.Overlaps = []string{}
	perJob := map[string]*JobReport{}
	rows, err := pool.Query(ctx, `SELECT split_part(job_id, '@', 1), outcome, count(*) FROM studio_job_run GROUP BY 1, 2`)
	if err != nil {
		return fmt.Errorf("read runs: %w", err)
	}
	for rows.Next() {
		var id, outcome string
		var n int
		if err := rows.Scan(&id, &outcome, &n); err != nil {
			rows.Close()
			return fmt.Errorf("read runs: %w", err)
		}
		j := perJob[id]
		if j == nil {
			j = &JobReport{ID: id}
			perJob[id] = j
		}
		j.Runs += n
		switch outcome {
		case "succeeded":
			j.Succeeded += n
		case "failed":
			j.Failed += n
		case "timed_out":
			j.TimedOut += n
		default:
			j.Other += n
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read runs: %w", err)
	}

	// Executions per job and replica, from the jobs' own records.
	rows, err = pool.Query(ctx, `SELECT job_id, replica, count(*) FROM demo_execution WHERE job_id = ANY($1) GROUP BY 1, 2`, installationJobs)
	if err != nil {
		return fmt.Errorf("read executions: %w", err)
	}
	for rows.Next() {
		var id, rep string
		var n int
		if err := rows.Scan(&id, &rep, &n); err != nil {
			rows.Close()
			return fmt.Errorf("read executions: %w", err)
		}
		j := perJob[id]
		if j == nil {
			j = &JobReport{ID: id}
			perJob[id] = j
		}
		if j.ExecutionsPerReplica == nil {
			j.ExecutionsPerReplica = map[string]int{}
		}
		j.ExecutionsPerReplica[rep] += n
		j.Executions += n
		if id == r.Job {
			r.ExecutionsPerReplica[rep] += n
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read executions: %w", err)
	}

	rows, err = pool.Query(ctx, overlapSQL, installationJobs)
	if err != nil {
		return fmt.Errorf("find overlaps: %w", err)
	}
	for rows.Next() {
		var job, ar, br string
		var as, bs time.Time
		var ae, be *time.Time
		if err := rows.Scan(&job, &ar, &as, &ae, &br, &bs, &be); err != nil {
			rows.Close()
			return fmt.Errorf("find overlaps: %w", err)
		}
		r.OverlappingPairs++
		if j := perJob[job]; j != nil {
			j.OverlappingPairs++
		}
		r.Overlaps = append(r.Overlaps, fmt.Sprintf("%s: %s [%s, %s] and %s [%s, %s]", job, ar, stampOf(&as), stampOf(ae), br, stampOf(&bs), stampOf(be)))
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("find overlaps: %w", err)
	}

	// Runs against the ideal: the window runs from the first execution of
	// the job to the stop; the ideal is one execution at its start and one
	// more per every plus the mean execution (the delay counts from each
	// end) over the rest of the window, less the time the crash kept the
	// job from running (kill to takeover).
	var first *time.Time
	var mean *float64
	if err := pool.QueryRow(ctx, `SELECT min(started_at), avg(extract(epoch FROM ended_at - started_at))::float8 FROM demo_execution WHERE job_id = $1`, r.Job).Scan(&first, &mean); err != nil {
		return fmt.Errorf("read executions: %w", err)
	}
	if first != nil {
		m := mainRun.Seconds()
		if mean != nil {
			m = *mean
		}
		r.MeanRunSecs = round3(m)
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM demo_execution WHERE job_id = $1 AND started_at < $2`, r.Job, r.stopAt).Scan(&r.Runs); err != nil {
			return fmt.Errorf("read executions: %w", err)
		}
		window := r.stopAt.Sub(*first)
		r.WindowSeconds = round3(window.Seconds())
		r.Due = math.Round(10*(1+max(0, (window-r.outage).Seconds())/(mainEvery.Seconds()+m))) / 10
	}

	for _, id := range sortedKeys(perJob) {
		r.Jobs = append(r.Jobs, *perJob[id])
	}
	in, err := admin.Get(ctx, r.Job)
	if err == nil {
		r.Lock = &LockRow{Name: in.Name, LockedBy: in.LockedBy, LockedAt: in.LockedAt, LockUntil: in.LockUntil,
			State: string(in.State), HolderState: string(in.HolderState), RemainingSeconds: round3(in.Remaining.Seconds())}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	natsort.Strings(keys)
	return keys
}

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }

func stampOf(t *time.Time) string {
	if t == nil {
		return "still running"
	}
	return t.UTC().Format("15:04:05.000")
}

// WriteText prints the report for people.
func (r *Report) WriteText(w io.Writer) {
	noun := "replicas"
	if len(r.Replicas) == 1 {
		noun = "replica"
	}
	fmt.Fprintf(w, "studioctl demo: %d %s for %.0fs", len(r.Replicas), noun, r.DurationSeconds)
	if r.Faults {
		fmt.Fprint(w, ", with faults")
	}
	fmt.Fprintln(w)
	var fates []string
	for _, rep := range r.Replicas {
		fates = append(fates, rep.ID+" "+rep.Fate)
	}
	fmt.Fprintf(w, "  replicas:            %s\n", strings.Join(fates, ", "))
	fmt.Fprintf(w, "\ninstallation job %s (every %s, each execution %s), from its own records:\n", r.Job, mainEvery, mainRun)
	var per []string
	for _, id := range sortedKeys(r.ExecutionsPerReplica) {
		per = append(per, fmt.Sprintf("%s %d", id, r.ExecutionsPerReplica[id]))
	}
	fmt.Fprintf(w, "  executions:          %s\n", strings.Join(per, ", "))
	verdict := "none: no installation job ran twice at once"
	if r.OverlappingPairs > 0 {
		verdict = fmt.Sprintf("%d: AN INSTALLATION JOB OVERLAPPED ITSELF", r.OverlappingPairs)
	}
	fmt.Fprintf(w, "  overlapping pairs:   %s\n", verdict)
	for _, o := range r.Overlaps {
		fmt.Fprintf(w, "    %s\n", o)
	}
	fmt.Fprintf(w, "  runs against ideal:  %d runs, %.1f due (%.1fs window", r.Runs, r.Due, r.WindowSeconds)
	if r.outage > 0 {
		fmt.Fprintf(w, ", less %.1fs blocked by the crash", r.outage.Seconds())
	}
	fmt.Fprintln(w, ")")
	if l := r.Lock; l != nil {
		fmt.Fprintf(w, "  lock row:            name=%s locked_by=%s locked_at=%s lock_until=%s (%s)\n", l.Name, l.LockedBy,
			l.LockedAt.Format("15:04:05.000"), l.LockUntil.Format("15:04:05.000"), l.State)
	}
	fmt.Fprintln(w, "\nevery job, as the replicas recorded its runs:")
	for _, j := range r.Jobs {
		if j.ID == "studio-housekeeping" {
			continue
		}
		line := fmt.Sprintf("  %-20s %3d runs: %d succeeded, %d failed, %d timed out", j.ID, j.Runs, j.Succeeded, j.Failed, j.TimedOut)
		if j.Other > 0 {
			line += fmt.Sprintf(", %d other", j.Other)
		}
		if j.Executions > 0 {
			line += fmt.Sprintf("; %d executions, %d overlapping pairs", j.Executions, j.OverlappingPairs)
		}
		fmt.Fprintln(w, line)
	}
	if r.Faults {
		fmt.Fprintln(w, "\nincidents:")
		for _, in := range r.Incidents {
			fmt.Fprintf(w, "  %s %-9s %s\n", in.At.UTC().Format("15:04:05.000"), in.Step, in.Detail)
		}
		if r.Takeover != nil {
			fmt.Fprintf(w, "  takeover:  %.1fs from the kill to the next execution of %s on another replica\n", *r.Takeover, r.Job)
		}
		if r.Handover != nil {
			fmt.Fprintf(w, "  handover:  %.2fs from the drain request to the first duty start of every moved cluster elsewhere (%s)\n", *r.Handover, strings.Join(r.Moved, ", "))
		}
	}
	fmt.Fprintln(w)
	switch {
	case r.Kept:
		fmt.Fprintf(w, "kept the database %s: %s\n", r.Database, r.Connect)
	case r.Dropped:
		fmt.Fprintf(w, "dropped the database %s\n", r.Database)
	}
}
