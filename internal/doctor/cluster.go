package doctor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/studioctl/studioctl/internal/leases"
	"github.com/studioctl/studioctl/internal/locks"
	"github.com/studioctl/studioctl/internal/replicas"
)

// checkShedlockTable: the lock table as a replica checks it before it
// starts (locks.CheckTable, which includes locks.TimeZoneWarnings).
func checkShedlockTable(ctx context.Context, e *env) Result {
	t := e.o.LockTable
	if err := t.Validate(); err != nil {
		return Result{Status: Fail, Detail: err.Error(), Hint: "fix locks.table and locks.columns.* in the configuration"}
	}
	name := t.Resolved().Name
	id := e.o.ReplicaID
	warnings, err := locks.CheckTable(ctx, e.pool, t, id)
	if err != nil {
		if errors.Is(err, locks.ErrSchema) {
			return Result{Status: Fail, Detail: err.Error(), Hint: "replicas refuse to start on this table: fix it as the detail says (docs/locks.md)"}
		}
		return failed(err)
	}
	if len(warnings) > 0 {
		return Result{Status: Warn, Detail: list(warnings), Hint: "replicas log the same warning at start; docs/locks.md explains it"}
	}
	return Result{Status: OK, Detail: fmt.Sprintf("table %s has the shape replicas need", name)}
}

// lockInfos reads the lock table, or says why it cannot (skip: the
// shedlock_table check reports the table itself).
func lockInfos(ctx context.Context, e *env) ([]locks.Info, *Result) {
	adm, err := locks.NewAdmin(e.pool, e.o.LockTable)
	if err == nil {
		err = adm.CheckSchema(ctx)
	}
	if err != nil {
		return nil, &Result{Status: Skip, Detail: "not checked: the lock table is not usable (see shedlock_table)"}
	}
	infos, err := adm.List(ctx)
	if err != nil {
		r := failed(err)
		return nil, &r
	}
	return infos, nil
}

// checkStaleLocks: a lock whose lock_until is ahead while its holder, a
// known replica, is gone. Held by a replica that crashed (gone without a
// recorded stop), it is what a dead run left: nothing runs the job until
// it expires (fail). Held by a replica that stopped cleanly, it is what
// lockAtLeastFor keeps after a finished run (or an unlock that failed at
// the stop): it expires by itself (warn).
func checkStaleLocks(ctx context.Context, e *env) Result {
	infos, r := lockInfos(ctx, e)
	if r != nil {
		return *r
	}
	stopped := map[string]bool{}
	if e.tables["studio_replica"] {
		reps, err := replicas.List(ctx, e.pool)
		if err != nil {
			return failed(err)
		}
		for _, in := range reps {
			stopped[in.ID] = in.State == replicas.StateStopped
		}
	}
	var crashed, clean, crashedNames, cleanNames []string
	for _, in := range infos {
		if in.State != locks.StateStale {
			continue
		}
		if stopped[in.LockedBy] {
			clean = append(clean, fmt.Sprintf("%s held by stopped replica %s until %s", in.Name, in.LockedBy, in.LockUntil.Format(time.RFC3339)))
			cleanNames = append(cleanNames, in.Name)
			continue
		}
		crashed = append(crashed, fmt.Sprintf("%s held by gone replica %s until %s", in.Name, in.LockedBy, in.LockUntil.Format(time.RFC3339)))
		crashedNames = append(crashedNames, in.Name)
	}
	switch {
	case len(crashed) > 0:
		detail := plural(len(crashed), "stale lock", "stale locks") + " of crashed replicas: " + list(crashed)
		if len(clean) > 0 {
			detail += "; held after a clean stop: " + list(clean)
		}
		return Result{Status: Fail, Detail: detail,
			Hint: fmt.Sprintf("studioctl locks release %s --reason \"...\" (safe: the holder is gone, no --force needed); then see crashed_replicas", crashedNames[0])}
	case len(clean) > 0:
		return Result{Status: Warn, Detail: plural(len(clean), "lock", "locks") + " held after a clean stop: " + list(clean) + "; a stop leaves a finished run's lock held for its lockAtLeastFor, and it expires by itself",
			Hint: fmt.Sprintf("wait until it expires, or studioctl locks release %s --reason \"...\" if the job must run sooner", cleanNames[0])}
	}
	return Result{Status: OK, Detail: "no lock is held by a gone replica"}
}

// checkUnknownHolders: a lock held by a holder that is not a replica (a
// Java ShedLock node, a hand-made row) since longer than
// UnknownHolderMaxHeld, or until further ahead than that: past any run
// that could be going on, so it most likely blocks the job for nothing.
func checkUnknownHolders(ctx context.Context, e *env) Result {
	infos, r := lockInfos(ctx, e)
	if r != nil {
		return *r
	}
	now, err := dbNow(ctx, e.pool)
	if err != nil {
		return failed(err)
	}
	var bad, names []string
	unknown := 0
	for _, in := range infos {
		if in.State != locks.StateHeld || in.HolderState != locks.HolderUnknown {
			continue
		}
		unknown++
		age := now.Sub(in.LockedAt)
		switch {
		case age > UnknownHolderMaxHeld:
			bad = append(bad, fmt.Sprintf("%s held by %s (not a replica) since %s, %s ago", in.Name, in.LockedBy, in.LockedAt.Format(time.RFC3339), ago(age)))
		case in.Remaining > UnknownHolderMaxHeld:
			bad = append(bad, fmt.Sprintf("%s held by %s (not a replica) until %s, %s ahead", in.Name, in.LockedBy, in.LockUntil.Format(time.RFC3339), ago(in.Remaining)))
		default:
			continue
		}
		names = append(names, in.Name)
	}
	if len(bad) > 0 {
		return Result{Status: Fail, Detail: list(bad) + "; no run lasts more than 24h",
			Hint: fmt.Sprintf("check the process on that host; if it is gone or hung: studioctl locks release %s --force --reason \"...\"", names[0])}
	}
	detail := "no lock held by an unknown holder past 24h"
	if unknown > 0 {
		detail += fmt.Sprintf(" (%s held by unknown holders, within it)", plural(unknown, "lock", "locks"))
	}
	return Result{Status: OK, Detail: detail}
}

// checkCrashedReplicas: a replica whose heartbeat stopped without a
// recorded stop, within CrashWindow; or one restarted under the same id
// after such an end (the registration records it, migration 00008). And a
// row whose heartbeat is ahead of database time (liveness.FutureTolerance):
// not live, and written by no replica's heartbeat (issue 21, finding 4).
func checkCrashedReplicas(ctx context.Context, e *env) Result {
	infos, err := replicas.List(ctx, e.pool)
	if err != nil {
		return failed(err)
	}
	var crashed, ids, restarted, ahead, aheadIDs []string
	older, live := 0, 0
	for _, in := range infos {
		// A crash that a restart under the same id took over: the row is
		// live again, but the incarnation changed without a recorded stop
		// (migration 00008).
		if in.Live && in.LastCrashAt != nil && in.LastCrashAge <= CrashWindow {
			crashed = append(crashed, fmt.Sprintf("%s on %s: restarted %s ago after a crash (incarnation %s: last heartbeat %s ago, no stop recorded)",
				in.ID, in.Host, ago(in.Uptime), shortIncarnation(in.LastCrashIncarnation), ago(in.LastCrashAge)))
			restarted = append(restarted, in.ID)
		}
		switch {
		case in.Live:
			live++
		case in.Ahead:
			ahead = append(ahead, fmt.Sprintf("%s on %s (pid %d, %s): heartbeat at %s", in.ID, in.Host, in.PID, in.State, in.HeartbeatAt.Format(time.RFC3339)))
			aheadIDs = append(aheadIDs, in.ID)
		case in.Crashed && in.HeartbeatAge <= CrashWindow:
			crashed = append(crashed, fmt.Sprintf("%s on %s (pid %d, %s): last heartbeat %s ago, no stop recorded",
				in.ID, in.Host, in.PID, in.State, ago(in.HeartbeatAge)))
			ids = append(ids, in.ID)
		case in.Crashed:
			older++
		}
	}
	var details, hints []string
	if len(ahead) > 0 {
		details = append(details, fmt.Sprintf("%s ahead of database time, which no replica's heartbeat writes (not live, owns nothing): %s",
			plural(len(ahead), "row with a heartbeat", "rows with a heartbeat"), list(ahead)))
		hints = append(hints, "unless the database just failed over to a server whose clock is behind (then the next heartbeat heals it), "+
			"the row was written by hand or by a role with the replica's grants, such as a sql: job's; find out who, then studioctl replicas forget "+aheadIDs[0]+" --force")
	}
	if len(crashed) > 0 {
		details = append(details, fmt.Sprintf("%s in the last 24h: %s", plural(len(crashed), "crashed replica", "crashed replicas"), list(crashed)))
		if len(ids) > 0 {
			hints = append(hints, "read that host's log for why it died; release its stale locks (stale_locks); then studioctl replicas forget "+ids[0])
		} else {
			hints = append(hints, fmt.Sprintf("read that host's log for why %s died before its restart; the crash counts here for 24h after it", restarted[0]))
		}
	}
	if len(details) > 0 {
		return Result{Status: Fail, Detail: strings.Join(details, "; "), Hint: strings.Join(hints, "; ")}
	}
	detail := fmt.Sprintf("no crash in the last 24h (%s)", plural(live, "live replica", "live replicas"))
	if older > 0 {
		detail += fmt.Sprintf("; %s older than 24h", plural(older, "crashed row", "crashed rows"))
	}
	return Result{Status: OK, Detail: detail}
}

// checkStartingReplicas: a live replica still starting after
// StartingTooLong runs no job and claims no lease.
func checkStartingReplicas(ctx context.Context, e *env) Result {
	infos, err := replicas.List(ctx, e.pool)
	if err != nil {
		return failed(err)
	}
	var stuck, ids []string
	for _, in := range infos {
		if in.Live && in.State == replicas.StateStarting && in.Uptime > StartingTooLong {
			stuck = append(stuck, fmt.Sprintf("%s on %s (pid %d) starting for %s", in.ID, in.Host, in.PID, ago(in.Uptime)))
			ids = append(ids, in.ID)
		}
	}
	if len(stuck) > 0 {
		return Result{Status: Warn, Detail: list(stuck) + "; a start takes seconds",
			Hint: fmt.Sprintf("its log says what it waits for (the migration lock, the database, the bus); restart %s if it stays starting", ids[0])}
	}
	return Result{Status: OK, Detail: "no replica starting for more than 1m"}
}

// checkLeases: every cluster has a live owner that renews it.
func checkLeases(ctx context.Context, e *env) Result {
	infos, err := leases.List(ctx, e.pool)
	if err != nil {
		return failed(err)
	}
	if len(infos) == 0 {
		return Result{Status: OK, Detail: "no clusters (cluster_lease is empty)"}
	}
	var bad []string
	moving := 0
	for _, in := range infos {
		switch in.State {
		case leases.StateUnowned:
			bad = append(bad, in.Cluster+" unowned")
		case leases.StateExpired:
			renewed := ""
			if in.RenewedAge != nil {
				renewed = fmt.Sprintf(", renewed %s ago", ago(*in.RenewedAge))
			}
			bad = append(bad, fmt.Sprintf("%s expired (owner %s %s%s)", in.Cluster, in.Owner, in.OwnerState, renewed))
		case leases.StateMoving:
			moving++
		}
	}
	live, err := leases.LiveReady(ctx, e.pool)
	if err != nil {
		return failed(err)
	}
	over, err := dutyCapacity(ctx, e, len(infos), len(live))
	if err != nil {
		return failed(err)
	}
	unhosted, unhostedHint, err := unhostedDuties(ctx, e)
	if err != nil {
		return failed(err)
	}
	if len(bad) > 0 {
		hint := "no live, ready replica renews them: start a replica (with the clusters in its configuration)"
		if len(live) > 0 {
			hint = fmt.Sprintf("%s live and ready but not claiming: read their logs; studioctl leases list shows the placement", strings.Join(live, ", "))
		}
		detail := fmt.Sprintf("%d of %s without a live owner: %s", len(bad), plural(len(infos), "cluster", "clusters"), list(bad))
		if over != "" {
			detail += "; " + over
		}
		if unhosted != "" {
			detail += "; " + unhosted
		}
		return Result{Status: Fail, Detail: detail, Hint: hint}
	}
	if unhosted != "" {
		return Result{Status: Fail, Detail: unhosted, Hint: unhostedHint}
	}
	detail := fmt.Sprintf("every one of %s owned and renewed", plural(len(infos), "cluster", "clusters"))
	if moving > 0 {
		detail += fmt.Sprintf(" (%d moving to the replica placement picks)", moving)
	}
	if over != "" {
		return Result{Status: Warn, Detail: detail + "; but " + over, Hint: overHint}
	}
	return Result{Status: OK, Detail: detail}
}

// The capacity finding of the leases check (docs/doctor.md): the runs
// the per-cluster duties need at once, against what the live replicas
// may run at once.
const (
	// defaultMaxConcurrentRuns is runner.DefaultMaxConcurrentRuns (doctor
	// does not import the runner; a test keeps them equal).
	defaultMaxConcurrentRuns = 8
	// assumedRunDuration is a duty's run time before any run of it has
	// finished.
	assumedRunDuration = time.Second
	// durationSample is how many of a job's last finished runs give its
	// mean run time.
	durationSample = 100
	overHint       = "runs wait for a slot and fall further behind every interval: add replicas, raise runner.max_concurrent_runs, " +
		"lengthen the duties' every:, or remove clusters (studioctl leases remove); docs/jobs-processes.md"
)

const meanRunSQL = `SELECT coalesce(extract(epoch FROM avg(finished_at - started_at)), -1)::float8 FROM (
	SELECT finished_at, started_at FROM studio_job_run WHERE job_id = $1 AND finished_at IS NOT NULL ORDER BY seq DESC LIMIT $2) r`

// dutyCapacity says, when it is so, that the per-cluster duties of the
// configuration need more runs at once than the live replicas may run:
// need = the sum over per-cluster jobs of clusters x mean run time /
// interval (mean of the job's last 100 finished runs, 1 s before any),
// capacity = live ready replicas x runner.max_concurrent_runs. Nothing
// to say ("") without per-cluster jobs or clusters.
func dutyCapacity(ctx context.Context, e *env, clusters, live int) (string, error) {
	maxRuns := e.o.MaxConcurrentRuns
	if maxRuns <= 0 {
		maxRuns = defaultMaxConcurrentRuns
	}
	need := 0.0
	now := time.Now()
	for _, j := range e.o.Jobs {
		if !j.PerCluster || clusters == 0 {
			continue
		}
		every := j.Schedule.Interval(now)
		if every <= 0 {
			continue
		}
		d := assumedRunDuration.Seconds()
		if e.tables["studio_job_run"] {
			var mean float64
			if err := e.pool.QueryRow(ctx, meanRunSQL, j.ID, durationSample).Scan(&mean); err != nil {
				return "", fmt.Errorf("read the run time of %s: %w", j.ID, err)
			}
			if mean >= 0 {
				d = mean
			}
		}
		need += float64(clusters) * d / every.Seconds()
	}
	capacity := live * maxRuns
	if need <= float64(capacity) {
		return "", nil
	}
	return fmt.Sprintf("the per-cluster duties need about %.0f runs at once and %s run at most %d (runner.max_concurrent_runs %d each)",
		need, plural(live, "live replica", "live replicas"), capacity, maxRuns), nil
}

// shortIncarnation is the first block of an incarnation uuid, enough to
// tell two apart in a detail.
func shortIncarnation(u string) string {
	if b, _, ok := strings.Cut(u, "-"); ok {
		return b
	}
	return u
}
