package e2enemesis

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/leases"
)

// The checker. It reads only what the jobs recorded (nemesis_exec,
// nemesis_fence) and PostgreSQL's own tables (studio_job_run, through
// nemesis_run, its copy kept from housekeeping's pruning;
// studio_replica, cluster_lease, shedlock, studio_overdue_jobs), never a
// replica's memory or log; the nemesis's fault log only attributes what
// it finds. The documented rules it applies are in docs/reliability.md.

const (
	// liveSQL is "this studio_replica row r is live": a heartbeat within
	// 15 s (docs/replica-faults.md) and not stopped.
	liveSQL = `r.state <> 'stopped' AND r.heartbeat_at > now() - interval '15 seconds'`
	// trustWindow is the leases' local trust window (docs/leases.md).
	trustWindow = 10 * time.Second
	// duskWindow is how long after a pause (or a cut) past the trust
	// window ends the paused owner's last statement may still end
	// (docs/reliability.md, "Duty overlaps").
	duskWindow = 5 * time.Second
	// attributeSlack widens a fault's window when an exception is
	// attributed to it.
	attributeSlack = 5 * time.Second
	// earlyTol and lateTol: a fixed-delay run may start this much before
	// or after its due time (end + every) and count for it.
	earlyTol = 500 * time.Millisecond
	lateTol  = 2 * time.Second
	// minStretch is the shortest fault-free stretch that is checked.
	minStretch = 10 * time.Second
)

// execution is one row of nemesis_exec.
type execution struct {
	ID          int64
	Job, Scope  string
	Replica     string
	Token       *int64
	Nominal     *time.Time
	Start, End  time.Time
	WSeq        *int64
	Accepted    *bool
	FenceBefore *int64
}

func (e execution) String() string {
	tok := "-"
	if e.Token != nil {
		tok = fmt.Sprint(*e.Token)
	}
	return fmt.Sprintf("exec %d %s/%s on %s token %s [%s, %s]", e.ID, e.Job, e.Scope, e.Replica, tok,
		e.Start.Format("15:04:05.000"), e.End.Format("15:04:05.000"))
}

// key matches an execution to its run row: job, scope, nominal, replica.
func (e execution) key() string {
	nom := ""
	if e.Nominal != nil {
		nom = e.Nominal.UTC().Format(time.RFC3339Nano)
	}
	return e.Job + "|" + e.Scope + "|" + nom + "|" + e.Replica
}

// runRow is one studio_job_run row of a workload job.
type runRow struct {
	Seq      int64
	Job      string
	Scope    string
	Replica  string
	Nominal  *time.Time
	Start    time.Time
	Outcome  string
	Finished *time.Time
	Error    string
}

func (r runRow) key() string {
	nom := ""
	if r.Nominal != nil {
		nom = r.Nominal.UTC().Format(time.RFC3339Nano)
	}
	return r.Job + "|" + r.Scope + "|" + nom + "|" + r.Replica
}

// finding is one exception, with the faults it is attributed to.
type finding struct {
	Check   string
	What    string
	Faults  []fault
	Allowed string // the documented rule that allows it, "" when none does
}

// report is what the checker found.
type report struct {
	Executions, Runs int
	Findings         []finding
	// per fault kind: counts of what happened under it.
	Refused          map[string]int // refused stale writes, by kind ("none" unattributed)
	RefusedTotal     int
	AcceptedStale    int
	Stretches        []string // runs vs due per stretch and job
	StretchFailures  int
	Final            string
	FinalOK          bool
	FinalTook        time.Duration
	AmbiguousCommits int
	FailedRunsNoExec int
}

// failed reports whether a check failed.
func (r *report) failed() bool {
	if !r.FinalOK || r.AcceptedStale > 0 || r.StretchFailures > 0 {
		return true
	}
	for _, f := range r.Findings {
		if f.Allowed == "" {
			return true
		}
	}
	return false
}

// attribute lists the faults whose window (widened by attributeSlack)
// meets [from, to] and that concern one of replicas ("" matches a
// database-wide fault).
func attribute(faults []fault, from, to time.Time, replicas ...string) []fault {
	var out []fault
	for _, f := range faults {
		if f.Start.After(to.Add(attributeSlack)) || f.End.Add(attributeSlack).Before(from) {
			continue
		}
		if f.Target == "" {
			if f.Kind == kindPGRestart || f.Kind == kindPromote || f.Kind == kindLeaseAdd || f.Kind == kindLeaseRm {
				out = append(out, f)
			}
			continue
		}
		for _, r := range replicas {
			if f.Target == r {
				out = append(out, f)
				break
			}
		}
	}
	return out
}

func faultList(fs []fault) string {
	if len(fs) == 0 {
		return "no fault"
	}
	var s []string
	for _, f := range fs {
		s = append(s, f.String())
	}
	return strings.Join(s, "; ")
}

func readExecutions(ctx context.Context, pool *pgxpool.Pool) ([]execution, error) {
	rows, err := pool.Query(ctx, `SELECT id, job, scope, replica, token, nominal, started_at, ended_at, wseq, accepted, fence_before
FROM nemesis_exec ORDER BY started_at, id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []execution
	for rows.Next() {
		var e execution
		var end *time.Time
		if err := rows.Scan(&e.ID, &e.Job, &e.Scope, &e.Replica, &e.Token, &e.Nominal, &e.Start, &end, &e.WSeq, &e.Accepted, &e.FenceBefore); err != nil {
			return nil, err
		}
		if end != nil {
			e.End = *end
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

func readRuns(ctx context.Context, pool *pgxpool.Pool) ([]runRow, error) {
	var ids []string
	for _, j := range workloadJobs {
		ids = append(ids, j.ID)
	}
	rows, err := pool.Query(ctx, `SELECT seq, job_id, coalesce(scope_key, ''), replica_id, nominal_at, started_at, outcome, finished_at, coalesce(error, '')
FROM nemesis_run WHERE job_id = ANY($1) ORDER BY seq`, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []runRow
	for rows.Next() {
		var r runRow
		if err := rows.Scan(&r.Seq, &r.Job, &r.Scope, &r.Replica, &r.Nominal, &r.Start, &r.Outcome, &r.Finished, &r.Error); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// check runs every check but the final state's on what the database
// holds, for the run [begin, end].
func check(ctx context.Context, pool *pgxpool.Pool, faults []fault, begin, end time.Time) (*report, error) {
	execs, err := readExecutions(ctx, pool)
	if err != nil {
		return nil, fmt.Errorf("read executions: %w", err)
	}
	runs, err := readRuns(ctx, pool)
	if err != nil {
		return nil, fmt.Errorf("read runs: %w", err)
	}
	rep := &report{Executions: len(execs), Runs: len(runs), Refused: map[string]int{}}
	checkOverlaps(rep, execs, faults)
	checkFences(rep, execs, faults)
	checkRunRows(rep, execs, runs, faults)
	clusters := map[string]bool{}
	rows, err := pool.Query(ctx, `SELECT cluster FROM cluster_lease`)
	if err != nil {
		return nil, fmt.Errorf("read clusters: %w", err)
	}
	for rows.Next() {
		var c string
		rows.Scan(&c)
		clusters[c] = true
	}
	rows.Close()
	checkDue(rep, execs, faults, clusters, begin, end)
	return rep, nil
}

// checkOverlaps: no two executions of an installation job overlap, unless
// the earlier one's replica was paused past lockAtMostFor during it; no
// two executions of a duty on one cluster overlap, unless the earlier
// one's replica was paused or cut off past the trust window during it and
// the execution ended within duskWindow of that fault's end.
func checkOverlaps(rep *report, execs []execution, faults []fault) {
	by := map[string][]execution{}
	for _, e := range execs {
		j, _ := jobByID(e.Job)
		switch j.Scope {
		case "installation", "duty":
			by[e.Job+"/"+e.Scope] = append(by[e.Job+"/"+e.Scope], e)
		}
	}
	for key, list := range by {
		j, _ := jobByID(strings.SplitN(key, "/", 2)[0])
		for i := range list {
			for k := i + 1; k < len(list); k++ {
				a, b := list[i], list[k]
				if !b.Start.Before(a.End) {
					break // sorted by start: no later one overlaps a
				}
				if !a.Start.Before(b.End) {
					continue
				}
				fs := attribute(faults, a.Start, a.End, a.Replica, b.Replica)
				fd := finding{Faults: fs, What: a.String() + " overlaps " + b.String()}
				if j.Scope == "installation" {
					fd.Check = "installation overlap"
					var sched jobs.Schedule
					if j.Cron != "" {
						sched, _ = jobs.ParseCron(j.Cron)
					} else {
						sched, _ = jobs.Every(j.Every)
					}
					fd.Allowed = pausedPast(faults, a, jobs.LockAtMostFor(sched), kindStop)
				} else {
					fd.Check = "duty overlap"
					fd.Allowed = pausedPast(faults, a, trustWindow, kindStop, kindCut)
				}
				rep.Findings = append(rep.Findings, fd)
			}
		}
	}
}

// pausedPast names the fault of one of kinds on e's replica that lasted
// longer than limit, met e, and ended no more than duskWindow before e's
// end; "" when there is none.
func pausedPast(faults []fault, e execution, limit time.Duration, kinds ...string) string {
	for _, f := range faults {
		if f.Target != e.Replica || f.Length <= limit {
			continue
		}
		ok := false
		for _, k := range kinds {
			ok = ok || f.Kind == k
		}
		if ok && f.Start.Before(e.End) && e.Start.Before(f.End) && !e.End.After(f.End.Add(duskWindow)) {
			return fmt.Sprintf("%s for %s > %s, execution ended %s after the heal", f.Kind, f.Length.Round(time.Millisecond), limit, e.End.Sub(f.End).Round(time.Millisecond))
		}
	}
	return ""
}

// checkFences: per fenced target, the accepted writes in commit order
// carry growing tokens (strictly for an installation job, whose runs each
// have a token of their own; never lower for a duty). An accepted write
// below an earlier accepted one is an accepted stale write: there must be
// none. Refused writes are counted per fault kind. An installation job's
// token given to two executions is a defect too.
func checkFences(rep *report, execs []execution, faults []fault) {
	by := map[string][]execution{}
	tokens := map[string]execution{}
	for _, e := range execs {
		if e.Token == nil || e.WSeq == nil {
			continue
		}
		by[e.Job+"/"+e.Scope] = append(by[e.Job+"/"+e.Scope], e)
		j, _ := jobByID(e.Job)
		if j.Scope == "installation" {
			k := fmt.Sprintf("%s/%d", e.Job, *e.Token)
			if o, dup := tokens[k]; dup {
				rep.Findings = append(rep.Findings, finding{Check: "token reuse", What: o.String() + " and " + e.String() + " share a token",
					Faults: attribute(faults, o.Start, e.End, o.Replica, e.Replica)})
			}
			tokens[k] = e
		}
		if !*e.Accepted {
			rep.RefusedTotal++
			fs := attribute(faults, e.Start, e.End, e.Replica)
			if len(fs) == 0 {
				rep.Refused["none"]++
			}
			seen := map[string]bool{}
			for _, f := range fs {
				if !seen[f.Kind] {
					rep.Refused[f.Kind]++
					seen[f.Kind] = true
				}
			}
		}
	}
	for key, list := range by {
		sort.Slice(list, func(i, k int) bool { return *list[i].WSeq < *list[k].WSeq })
		strict := !strings.HasPrefix(key, "duty/")
		var last *execution
		for i := range list {
			e := list[i]
			if !*e.Accepted {
				continue
			}
			if last != nil && (*e.Token < *last.Token || strict && *e.Token == *last.Token) {
				rep.AcceptedStale++
				rep.Findings = append(rep.Findings, finding{Check: "accepted stale write",
					What:   fmt.Sprintf("%s accepted after %s", e, *last),
					Faults: attribute(faults, last.Start, e.End, e.Replica, last.Replica)})
			}
			last = &list[i]
		}
	}
}

// checkRunRows: every execution has exactly one studio_job_run row, and
// every succeeded run row an execution. A run row of another outcome with
// an execution is a commit whose answer was lost (counted); one without
// is a run that wrote nothing (counted).
//
// Rows are matched by job, scope, nominal time and replica: a run has no
// id the execution could record. One due time can have several runs on
// one replica id, legitimately: a run whose end never reached the shared
// schedule (its process was killed, or its lock was lost: run.go's
// recordEnd writes no end then) leaves the due time due, and the next
// process of the same replica id, which has accounted for no due time
// yet, can run it again (occurrence.go, nominalFor). So when several rows
// share an execution's key, the execution is the run of the latest row
// that started before it (runStartSlack); each other row must be a run
// that could leave its due time due and wrote nothing (rerunAllowed),
// else the case fails as "execution with several run rows".
func checkRunRows(rep *report, execs []execution, runs []runRow, faults []fault) {
	byKey := map[string][]runRow{}
	for _, r := range runs {
		byKey[r.key()] = append(byKey[r.key()], r)
	}
	seen := map[string]int{}
	for _, e := range execs {
		k := e.key()
		seen[k]++
		rs := byKey[k]
		if len(rs) == 0 {
			rep.Findings = append(rep.Findings, finding{Check: "execution without a run row", What: e.String() + nearRuns(runs, e),
				Faults: attribute(faults, e.Start, e.End, e.Replica)}) // a run's row is written before it starts (docs/history.md)
			continue
		}
		own, others := ownRun(e, rs)
		if len(others) > 0 {
			from := e.Start // the faults from the first of the rows on
			for _, r := range others {
				if r.Start.Before(from) {
					from = r.Start
				}
			}
			fd := finding{Check: "execution with several run rows", What: fmt.Sprintf("%s: %d rows (%s)", e, len(rs), describeRuns(rs)),
				Faults: attribute(faults, from, e.End, e.Replica)}
			fd.Allowed = rerunAllowed(own, others)
			if fd.Allowed != "" {
				rep.FailedRunsNoExec += len(others)
			}
			rep.Findings = append(rep.Findings, fd)
		}
		if own.Outcome != "succeeded" {
			rep.AmbiguousCommits++
		}
		if seen[k] == 2 {
			rep.Findings = append(rep.Findings, finding{Check: "two executions for one run", What: e.String(),
				Faults: attribute(faults, e.Start, e.End, e.Replica)})
		}
	}
	for _, r := range runs {
		if seen[r.key()] > 0 {
			continue
		}
		if r.Outcome == "succeeded" {
			end := r.Start
			if r.Finished != nil {
				end = *r.Finished
			}
			rep.Findings = append(rep.Findings, finding{Check: "succeeded run without an execution",
				What:   fmt.Sprintf("run %d %s/%s on %s at %s", r.Seq, r.Job, r.Scope, r.Replica, r.Start.Format("15:04:05.000")),
				Faults: attribute(faults, r.Start, end, r.Replica)})
			continue
		}
		rep.FailedRunsNoExec++
	}
}

// runStartSlack is how much later than its execution's start a run row's
// start may be: the row's start is the replica's database time (its clock
// plus its measured offset, off by up to half a round trip), the
// execution's the database's own now().
const runStartSlack = time.Second

// ownRun splits rs, the run rows of e's key, into the one that ran e (the
// latest that started by e's start, give or take runStartSlack; the
// earliest when none did) and the others.
func ownRun(e execution, rs []runRow) (own runRow, others []runRow) {
	at := -1
	for i, r := range rs {
		if !r.Start.After(e.Start.Add(runStartSlack)) && (at < 0 || r.Start.After(rs[at].Start)) {
			at = i
		}
	}
	if at < 0 {
		for i, r := range rs {
			if at < 0 || r.Start.Before(rs[at].Start) {
				at = i
			}
		}
	}
	for i, r := range rs {
		if i != at {
			others = append(others, r)
		}
	}
	return rs[at], others
}

// shutDownText starts the error of a run its own process interrupted at a
// clean stop (runner.classify): such a run recorded its end in the shared
// schedule, so its due time was over.
const shutDownText = "interrupted: the replica shut down"

// rerunAllowed is the rule that allows the rows others beside own, the
// run of an execution, with the same key ("" when none does): each started
// before own, wrote nothing (not succeeded), and left its due time due,
// which only a run whose end never reached the shared schedule does: one
// whose lock was lost (lock_lost), or one whose process died while it ran
// (marked interrupted by the replica's next start or by housekeeping, or
// still running). A failed run, or one interrupted by its own clean stop,
// recorded its end: its due time must not run again.
func rerunAllowed(own runRow, others []runRow) string {
	for _, r := range others {
		if !r.Start.Before(own.Start) || r.Outcome == "succeeded" {
			return ""
		}
		switch {
		case r.Outcome == "lock_lost", r.Outcome == "running":
		case r.Outcome == "interrupted" && !strings.HasPrefix(r.Error, shutDownText):
		default:
			return ""
		}
	}
	return "the due time ran again on the same replica id after a run that wrote nothing and recorded no end"
}

// stretches are the fault-free stretches of [begin, end]: no fault active,
// and settleAfter past each fault's end; at least minStretch long.
func stretches(faults []fault, begin, end time.Time) [][2]time.Time {
	type iv struct{ a, b time.Time }
	var busy []iv
	for _, f := range faults {
		busy = append(busy, iv{f.Start, f.End.Add(settleAfter)})
	}
	sort.Slice(busy, func(i, k int) bool { return busy[i].a.Before(busy[k].a) })
	var out [][2]time.Time
	cur := begin.Add(settleAfter) // the start settles too
	for _, b := range busy {
		if b.a.After(cur) && b.a.Sub(cur) >= minStretch {
			out = append(out, [2]time.Time{cur, b.a})
		}
		if b.b.After(cur) {
			cur = b.b
		}
	}
	if end.Sub(cur) >= minStretch {
		out = append(out, [2]time.Time{cur, end})
	}
	return out
}

// checkDue: over each fault-free stretch, the runs of every job (per scope
// for instance jobs and duties) against its due times, within ±1. A
// fixed-delay job is due `every` after its last end: a run that starts
// earlier than earlyTol before that counts for no due time (a run too
// many); one that starts later than lateTol after it leaves one due time
// unserved per period it waited. A cron job is due at each cron time.
func checkDue(rep *report, execs []execution, faults []fault, clusters map[string]bool, begin, end time.Time) {
	chains := map[string][]execution{}
	for _, e := range execs {
		chains[e.Job+"/"+e.Scope] = append(chains[e.Job+"/"+e.Scope], e)
	}
	keys := make([]string, 0, len(chains))
	for k := range chains {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, st := range stretches(faults, begin, end) {
		a, b := st[0], st[1]
		worst, worstKey, sumDue, sumRuns := 0, "", 0, 0
		for _, key := range keys {
			list := chains[key]
			j, _ := jobByID(strings.SplitN(key, "/", 2)[0])
			due, runs := 0, 0
			if j.Cron != "" {
				sched, _ := jobs.ParseCron(j.Cron)
				for t := sched.Next(a); !t.After(b.Add(-lateTol)); t = sched.Next(t) {
					due++
				}
				for _, e := range list {
					if e.Nominal != nil && !e.Nominal.Before(a) && !e.Nominal.After(b.Add(-lateTol)) {
						runs++
					}
				}
			} else {
				var prev *execution
				for i := range list {
					e := list[i]
					if e.Start.After(b) {
						break
					}
					if e.Start.Before(a) {
						prev = &list[i]
						continue
					}
					runs++
					if prev == nil {
						due++ // the first due time of the chain inside the stretch
						prev = &list[i]
						continue
					}
					// Its due time: the nominal time it was given, which
					// must not be earlier than its predecessor's end plus
					// every (else it is a run too many); its lateness is
					// counted from that nominal time.
					earliest := prev.End.Add(j.Every)
					dueAt := earliest
					if e.Nominal != nil && e.Nominal.After(dueAt) {
						dueAt = *e.Nominal
					}
					if dueAt.Before(a) {
						dueAt = a // due times before the stretch are not its own
					}
					switch {
					case e.Start.Before(earliest.Add(-earlyTol)) || e.Nominal != nil && e.Nominal.Before(earliest.Add(-earlyTol)):
						// a run too many
					default:
						due += 1 + missedPeriods(e.Start.Sub(dueAt), j.Every)
					}
					prev = &list[i]
				}
				if prev == nil {
					continue // nothing of this scope yet
				}
				if j.Scope == "duty" && !clusters[strings.SplitN(key, "/", 2)[1]] {
					// a cluster removed meanwhile (leases remove): its
					// chain ends with its last run
				} else {
					dueAt := prev.End.Add(j.Every)
					if dueAt.Before(a) {
						dueAt = a
					}
					if late := b.Sub(dueAt); late > lateTol {
						due += 1 + missedPeriods(late, j.Every) // the due time not served in the stretch
					}
				}
			}
			d := runs - due
			if abs(d) > abs(worst) || worstKey == "" {
				worst, worstKey = d, key
			}
			sumDue += due
			sumRuns += runs
			if abs(d) > 1 {
				rep.StretchFailures++
				rep.Findings = append(rep.Findings, finding{Check: "runs vs due",
					What: fmt.Sprintf("%s over [%s, %s]: %d runs for %d due times", key, a.Format("15:04:05"), b.Format("15:04:05"), runs, due)})
			}
		}
		rep.Stretches = append(rep.Stretches, fmt.Sprintf("[%s, %s] %s: %d runs for %d due times over %d scopes; worst %s %+d",
			a.Format("15:04:05"), b.Format("15:04:05"), b.Sub(a).Round(time.Second), sumRuns, sumDue, len(keys), worstKey, worst))
	}
}

// missedPeriods is how many more due times a start late by late left
// unserved: none within lateTol, then one per period.
func missedPeriods(late, every time.Duration) int {
	if late <= lateTol {
		return 0
	}
	return int((late - lateTol) / every)
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// finalState checks, once: every replica of ids ready and live, every
// cluster owned by its placement among the live replicas, no stale lock,
// no overdue job. It returns what is wrong ("" when nothing is).
func finalState(ctx context.Context, pool *pgxpool.Pool, ids []string) string {
	var problems []string
	rows, err := pool.Query(ctx, `SELECT r.id, r.state, (`+liveSQL+`) FROM studio_replica r ORDER BY r.id`)
	if err != nil {
		return err.Error()
	}
	state := map[string]string{}
	var live []string
	for rows.Next() {
		var id, st string
		var isLive bool
		if err := rows.Scan(&id, &st, &isLive); err != nil {
			rows.Close()
			return err.Error()
		}
		state[id] = st
		if isLive {
			live = append(live, id)
		} else {
			state[id] += " (not live)"
		}
	}
	rows.Close()
	for _, id := range ids {
		if state[id] != "ready" {
			problems = append(problems, fmt.Sprintf("replica %s is %q", id, state[id]))
		}
	}
	rows, err = pool.Query(ctx, `SELECT cluster, coalesce(owner, ''), renewed_at > now() - interval '15 seconds' FROM cluster_lease ORDER BY cluster`)
	if err != nil {
		return err.Error()
	}
	for rows.Next() {
		var cluster, owner string
		var fresh *bool
		if err := rows.Scan(&cluster, &owner, &fresh); err != nil {
			rows.Close()
			return err.Error()
		}
		want := leases.Place(cluster, live)
		if owner != want || fresh == nil || !*fresh {
			problems = append(problems, fmt.Sprintf("cluster %s owned by %q (placement %q)", cluster, owner, want))
		}
	}
	rows.Close()
	var stale []string
	rows, err = pool.Query(ctx, `SELECT l.name || ' held by ' || l.locked_by FROM shedlock l
JOIN studio_replica r ON r.id = l.locked_by
WHERE l.lock_until > now() AND NOT (`+liveSQL+`) ORDER BY l.name`)
	if err != nil {
		return err.Error()
	}
	for rows.Next() {
		var s string
		rows.Scan(&s)
		stale = append(stale, s)
	}
	rows.Close()
	if len(stale) > 0 {
		problems = append(problems, "stale locks: "+strings.Join(stale, ", "))
	}
	var overdue []string
	rows, err = pool.Query(ctx, `SELECT job_id FROM studio_overdue_jobs() ORDER BY 1`)
	if err != nil {
		return err.Error()
	}
	for rows.Next() {
		var s string
		rows.Scan(&s)
		overdue = append(overdue, s)
	}
	rows.Close()
	if len(overdue) > 0 {
		problems = append(problems, "overdue: "+strings.Join(overdue, ", "))
	}
	return strings.Join(problems, "; ")
}

// String is the readable report: the totals, the table per fault kind,
// the stretches, and every finding with its faults.
func (r *report) String(faults []fault) string {
	var b strings.Builder
	fmt.Fprintf(&b, "executions %d, run rows %d; accepted stale writes %d, refused stale writes %d; commits whose answer was lost %d; runs that wrote nothing %d\n",
		r.Executions, r.Runs, r.AcceptedStale, r.RefusedTotal, r.AmbiguousCommits, r.FailedRunsNoExec)
	type row struct {
		n                                           int
		total                                       time.Duration
		instOv, instOK, dutyOv, dutyOK, lost, other int
	}
	rows := map[string]*row{}
	for _, k := range append(append([]string(nil), allKinds...), "none") {
		rows[k] = &row{}
	}
	for _, f := range faults {
		rows[f.Kind].n++
		rows[f.Kind].total += f.End.Sub(f.Start)
	}
	for _, f := range r.Findings {
		kinds := map[string]bool{}
		for _, ff := range f.Faults {
			kinds[ff.Kind] = true
		}
		if len(kinds) == 0 {
			kinds["none"] = true
		}
		for k := range kinds {
			x := rows[k]
			switch f.Check {
			case "installation overlap":
				x.instOv++
				if f.Allowed != "" {
					x.instOK++
				}
			case "duty overlap":
				x.dutyOv++
				if f.Allowed != "" {
					x.dutyOK++
				}
			case "execution without a run row", "succeeded run without an execution":
				x.lost++
			default:
				x.other++
			}
		}
	}
	fmt.Fprintf(&b, "%-19s %6s %9s %14s %14s %8s %11s %6s\n", "fault kind", "faults", "total", "inst overlaps", "duty overlaps", "refused", "lost rows", "other")
	for _, k := range append(append([]string(nil), allKinds...), "none") {
		x := rows[k]
		fmt.Fprintf(&b, "%-19s %6d %9s %8d (%d ok) %8d (%d ok) %8d %11d %6d\n", k, x.n, x.total.Round(time.Second), x.instOv, x.instOK, x.dutyOv, x.dutyOK, r.Refused[k], x.lost, x.other)
	}
	b.WriteString("fault-free stretches (runs vs due):\n")
	for _, s := range r.Stretches {
		b.WriteString("  " + s + "\n")
	}
	fmt.Fprintf(&b, "final state after %s: %s\n", r.FinalTook.Round(100*time.Millisecond), r.Final)
	for _, f := range r.Findings {
		status := "FAIL"
		if f.Allowed != "" {
			status = "allowed (" + f.Allowed + ")"
		}
		fmt.Fprintf(&b, "- %s: %s: %s; faults: %s\n", status, f.Check, f.What, faultList(f.Faults))
	}
	return b.String()
}

// describeRuns names each of rs (seq, nominal, start, end, outcome), so a
// report of an execution with several run rows says which runs they were:
// the seqs tell which process of the replica wrote each (a process takes
// its seqs in blocks), the starts and outcomes which tick.
func describeRuns(rs []runRow) string {
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.String())
	}
	return strings.Join(out, "; ")
}

// String is a run row as a report shows it.
func (r runRow) String() string {
	nom, end := "-", "-"
	if r.Nominal != nil {
		nom = r.Nominal.UTC().Format("15:04:05.000")
	}
	if r.Finished != nil {
		end = r.Finished.Format("15:04:05.000")
	}
	return fmt.Sprintf("run %d on %s nominal %s [%s, %s] %s", r.Seq, r.Replica, nom, r.Start.Format("15:04:05.000"), end, r.Outcome)
}

// nearRuns describes the run rows of e's job and scope within 3 s of it,
// for a report.
func nearRuns(runs []runRow, e execution) string {
	var out []string
	for _, r := range runs {
		if r.Job == e.Job && r.Scope == e.Scope && r.Start.After(e.Start.Add(-3*time.Second)) && r.Start.Before(e.End.Add(3*time.Second)) {
			nom := "-"
			if r.Nominal != nil {
				nom = r.Nominal.UTC().Format("15:04:05.000")
			}
			out = append(out, fmt.Sprintf("run %d on %s nominal %s start %s %s", r.Seq, r.Replica, nom, r.Start.Format("15:04:05.000"), r.Outcome))
		}
	}
	nom := "-"
	if e.Nominal != nil {
		nom = e.Nominal.UTC().Format("15:04:05.000")
	}
	if len(out) == 0 {
		return " (nominal " + nom + "; no run row of its scope within 3 s)"
	}
	return " (nominal " + nom + "; near: " + strings.Join(out, ", ") + ")"
}
