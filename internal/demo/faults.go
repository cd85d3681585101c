package demo

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/studioctl/studioctl/internal/leases"
	"github.com/studioctl/studioctl/internal/locks"
)

const (
	// warmUp is how long the replicas share the work before the first
	// incident, at least.
	warmUp = 8 * time.Second
	// midRun: the victim's execution must have started less than this
	// long ago, so it is still running when the kill lands.
	midRun = 400 * time.Millisecond
)

// faults walks through the incidents: a kill -9 of the replica running
// the main installation job, the stale lock it leaves and its release, the
// takeover; then a drain and the handover of its cluster leases.
func (r *run) faults(ctx context.Context) error {
	warm := max(warmUp, r.o.Duration/4).Round(time.Second)
	r.scr.say("letting them share the work for %s", warm)
	if err := sleep(ctx, warm); err != nil {
		return err
	}
	if err := r.crash(ctx); err != nil {
		return err
	}
	return r.drain(ctx)
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// crash kills the replica that is running MainJob, waits until its lock
// shows as stale, releases it with `studioctl locks release` and measures
// the takeover.
func (r *run) crash(ctx context.Context) error {
	r.scr.say("incident 1: a crash. Waiting for a replica to be in the middle of %s...", MainJob)
	var victim string
	var began time.Time
	var ranFor float64
	err := r.waitFor(ctx, stepTimeout, "a replica running "+MainJob, func(ctx context.Context) (bool, error) {
		err := r.pool.QueryRow(ctx, `
SELECT e.replica, e.started_at, extract(epoch FROM clock_timestamp() - e.started_at)::float8
FROM demo_execution e JOIN shedlock l ON l.name = e.job_id AND l.locked_by = e.replica AND l.lock_until > now()
WHERE e.job_id = $1 AND e.ended_at IS NULL AND e.started_at > clock_timestamp() - $2::interval
ORDER BY e.id DESC LIMIT 1`, MainJob, fmt.Sprintf("%d milliseconds", midRun.Milliseconds())).Scan(&victim, &began, &ranFor)
		if err == pgx.ErrNoRows {
			return false, nil
		}
		if _, ok := r.procs[victim]; !ok || r.procs[victim].exited() {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		return err
	}
	p := r.procs[victim]
	killAt, err := r.dbNow(ctx)
	if err != nil {
		return err
	}
	r.kids.kill(p)
	r.fates[victim] = "killed"
	// What the victim started before the kill is told before the kill.
	r.narrateExecutions(ctx)
	r.scr.say("kill -9 %s (pid %d): it was %s into an execution of %s and holds its lock; it gets no chance to release it",
		victim, p.cmd.Process.Pid, time.Duration(ranFor*float64(time.Second)).Round(time.Millisecond), MainJob)
	r.incident(Incident{Step: "kill", At: killAt, Replica: victim, Command: fmt.Sprintf("kill -9 %d", p.cmd.Process.Pid),
		Detail: fmt.Sprintf("kill -9 %s while it ran %s (execution started %s)", victim, MainJob, began.UTC().Format("15:04:05.000"))})
	if in, err := r.locks.Get(ctx, MainJob); err == nil {
		r.scr.say("the lock %s still names %s until %s (lockAtMostFor): no replica runs %s meanwhile, and no operator should free it while %s might be alive. Waiting until %s counts as gone (no heartbeat for 15s)...",
			MainJob, in.LockedBy, in.LockUntil.Format("15:04:05"), MainJob, victim, victim)
	}

	var stale locks.Info
	if err := r.waitFor(ctx, stepTimeout, "the lock "+MainJob+" to show as stale", func(ctx context.Context) (bool, error) {
		in, err := r.locks.Get(ctx, MainJob)
		if err != nil {
			return false, err
		}
		stale = in
		return in.State == locks.StateStale, nil
	}); err != nil {
		return err
	}
	staleAt, err := r.dbNow(ctx)
	if err != nil {
		return err
	}
	r.scr.say("the lock %s is stale: its holder %s is gone, and the lock would still block %s for %s", MainJob, victim, MainJob, stale.Remaining.Round(time.Second))
	r.show(ctx, "locks", "list")
	r.incident(Incident{Step: "stale", At: staleAt, Replica: victim,
		Detail: fmt.Sprintf("lock %s stale: holder %s gone, %s left on it", MainJob, victim, stale.Remaining.Round(time.Second))})

	args := []string{"locks", "release", MainJob, "--reason", "demo: its holder " + victim + " was killed", "--yes"}
	line := r.commandLine(args...)
	r.scr.say("releasing it safely: a compare-and-set on the row as read, refused (exit 3) while the holder is live")
	r.scr.block("$ " + line)
	out, err := r.kids.command(ctx, nil, args...)
	if strings.TrimSpace(out) != "" {
		r.scr.block(out)
	}
	if err != nil {
		return fmt.Errorf("%w:\n%s", err, out)
	}
	releaseAt, err := r.dbNow(ctx)
	if err != nil {
		return err
	}
	r.incident(Incident{Step: "release", At: releaseAt, Replica: victim, Command: line, Detail: "released the stale lock " + MainJob + " with studioctl locks release"})

	var by string
	var next time.Time
	if err := r.waitFor(ctx, stepTimeout, "another replica to run "+MainJob, func(ctx context.Context) (bool, error) {
		err := r.pool.QueryRow(ctx, `SELECT replica, started_at FROM demo_execution WHERE job_id = $1 AND replica <> $2 AND started_at > $3 ORDER BY started_at LIMIT 1`,
			MainJob, victim, killAt).Scan(&by, &next)
		if err == pgx.ErrNoRows {
			return false, nil
		}
		return err == nil, err
	}); err != nil {
		return err
	}
	takeover := next.Sub(killAt)
	secs := round3(takeover.Seconds())
	r.rep.Takeover, r.rep.outage = &secs, takeover
	r.scr.say("%s took %s over: %.1fs from the kill to its next execution (%.1fs after the release)", by, MainJob, takeover.Seconds(), next.Sub(releaseAt).Seconds())
	r.incident(Incident{Step: "takeover", At: next.UTC(), Replica: by,
		Detail: fmt.Sprintf("%s ran %s %.1fs after the kill", by, MainJob, takeover.Seconds())})
	return nil
}

// drain drains the live replica that owns the most leases while showing
// `replicas list`, and measures the handover of its clusters.
func (r *run) drain(ctx context.Context) error {
	r.scr.say("incident 2: a drain. Waiting until every cluster has a live owner again (the killed replica's leases expire after 15s)...")
	var owned map[string][]string
	if err := r.waitFor(ctx, stepTimeout, "every lease to have a live owner", func(ctx context.Context) (bool, error) {
		ls, err := leases.List(ctx, r.pool)
		if err != nil {
			return false, err
		}
		owned = map[string][]string{}
		for _, l := range ls {
			if l.State != leases.StateOK || l.OwnerState != leases.OwnerLive {
				return false, nil
			}
			owned[l.Owner] = append(owned[l.Owner], l.Cluster)
		}
		return len(ls) > 0, nil
	}); err != nil {
		return err
	}
	owners := sortedKeys(owned)
	sort.SliceStable(owners, func(i, j int) bool { return len(owned[owners[i]]) > len(owned[owners[j]]) })
	victim := owners[0]
	moved := owned[victim]
	p := r.procs[victim]
	p.expected.Store(true)
	r.fates[victim] = "drained"
	args := []string{"replicas", "drain", victim, "--reason", "demo: planned maintenance", "--yes"}
	line := r.commandLine(args...)
	r.narrateExecutions(ctx)
	r.scr.say("%s owns the leases of %s; asking it to drain (it stops taking work, releases its leases, waits drain.delay and exits)", victim, strings.Join(moved, ", "))
	drainAt, err := r.dbNow(ctx)
	if err != nil {
		return err
	}
	r.scr.block("$ " + line)
	out, err := r.kids.command(ctx, nil, args...)
	if strings.TrimSpace(out) != "" {
		r.scr.block(out)
	}
	if err != nil {
		return fmt.Errorf("%w:\n%s", err, out)
	}
	r.incident(Incident{Step: "drain", At: drainAt, Replica: victim, Command: line,
		Detail: fmt.Sprintf("asked %s to drain; it owned %s", victim, strings.Join(moved, ", "))})
	r.scr.say("replicas list while %s drains:", victim)
	r.show(ctx, "replicas", "list")

	var last time.Time
	var to []string
	if err := r.waitFor(ctx, stepTimeout, "the moved clusters' duties to start elsewhere", func(ctx context.Context) (bool, error) {
		rows, err := r.pool.Query(ctx, `
SELECT cluster, min(started_at), (array_agg(replica_id ORDER BY started_at))[1]
FROM studio_job_run WHERE job_id = $1 AND cluster = ANY($2) AND replica_id <> $3 AND started_at >= $4
GROUP BY cluster ORDER BY cluster`, clusterJob, moved, victim, drainAt)
		if err != nil {
			return false, err
		}
		defer rows.Close()
		n := 0
		last, to = time.Time{}, nil
		for rows.Next() {
			var c, rep string
			var at time.Time
			if err := rows.Scan(&c, &at, &rep); err != nil {
				return false, err
			}
			n++
			if at.After(last) {
				last = at
			}
			to = append(to, c+" -> "+rep)
		}
		return n == len(moved), rows.Err()
	}); err != nil {
		return err
	}
	handover := last.Sub(drainAt)
	secs := round3(handover.Seconds())
	r.rep.Handover, r.rep.Moved = &secs, moved
	r.scr.say("handover: %s; %.2fs from the drain request to the first duty start of every moved cluster on its new owner", strings.Join(to, ", "), handover.Seconds())
	r.incident(Incident{Step: "handover", At: last.UTC(), Replica: victim,
		Detail: fmt.Sprintf("%s, %.2fs after the drain request", strings.Join(to, ", "), handover.Seconds())})

	select {
	case <-p.done:
	case <-time.After(stepTimeout):
		return fmt.Errorf("replica %s did not exit within %s of its drain", victim, stepTimeout)
	case <-ctx.Done():
		return ctx.Err()
	}
	r.scr.say("%s has drained and exited; replicas list now:", victim)
	r.show(ctx, "replicas", "list")
	return nil
}

// show runs a read-only operator command and prints it with its output.
func (r *run) show(ctx context.Context, args ...string) {
	var env []string
	if r.o.Terminal {
		// The aligned table, as the operator would see it.
		env = append(env, "STUDIO_FORCE_TTY=stdout")
		if r.o.NoColor {
			env = append(env, "NO_COLOR=1")
		}
	}
	out, err := r.kids.command(ctx, env, args...)
	r.scr.block("$ " + r.commandLine(args...))
	if err != nil {
		out += err.Error()
	}
	r.scr.block(out)
}
