package runner

// Per-cluster duties: a job with clusters: owned (jobs.Job.PerCluster)
// is a template. It gets one timer, one status row and one run at a time
// per cluster this replica owns a lease of: the lease loop calls
// AddCluster when it acquires a lease and RemoveCluster when it loses or
// releases it (docs/leases.md). The runner's bookkeeping hooks in
// runner.go are marked "per-cluster duties (clusters.go)"; a run's main
// path (run.go) asks only the job's duty value (*duty, nil for a job that
// is not per cluster), whose methods answer for both.

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobtask"
	"github.com/studioctl/studioctl/internal/natsort"
)

// errLeaseLost is the cause of a run cancelled because its cluster's
// lease was lost or released; the lease's own cause is wrapped in it.
var errLeaseLost = errors.New("cluster lease lost")

// duty ties a jobState to one cluster's lease. It is the one value the
// main path asks about per-cluster duties: a nil *duty is a job that is
// not per cluster, and every method answers for it (no cluster, never
// over, nothing to watch, no deadline).
type duty struct {
	key     jobs.DutyKey    // job@cluster
	id      string          // key.String(): the status row's job id, made once
	ctx     context.Context // cancelled by the lease loop when the lease ends
	removed bool            // RemoveCluster ran; r.mu
}

func newDuty(job, cluster string, ctx context.Context) *duty {
	k := jobs.DutyKey{Job: job, Cluster: cluster}
	return &duty{key: k, id: k.String(), ctx: ctx}
}

// cluster is the duty's cluster, "" for a job that is not per cluster.
func (d *duty) cluster() string {
	if d == nil {
		return ""
	}
	return d.key.Cluster
}

// over reports whether the duty's lease has ended. r.mu held.
func (d *duty) over() bool {
	return d != nil && (d.removed || d.ctx.Err() != nil)
}

// ended is closed when the duty's lease ends; nil (never) for a job that
// is not per cluster.
func (d *duty) ended() <-chan struct{} {
	if d == nil {
		return nil
	}
	return d.ctx.Done()
}

// watch cancels a run of the duty when its lease ends, with errLeaseLost
// wrapping the lease's cause. The returned func stops watching.
func (d *duty) watch(cancelRun context.CancelCauseFunc) func() {
	if d == nil {
		return func() {}
	}
	stop := context.AfterFunc(d.ctx, func() {
		cancelRun(fmt.Errorf("%w (%w)", errLeaseLost, context.Cause(d.ctx)))
	})
	return func() { stop() }
}

// clusterDuties is the runner's per-cluster state; r.mu guards it.
type clusterDuties struct {
	templates []jobtask.Job               // the per-cluster jobs, in configuration order
	owned     map[string]context.Context  // cluster -> the lease's duty context
	prior     map[string]jobs.Status      // status rows a previous process left, by key
	last      map[string]jobs.Status      // the last status of each duty key, so counters carry on
	ending    map[*jobState]chan struct{} // removed duties still running; closed when they finish
}

// addTemplate records a per-cluster job in New.
func (r *Runner) addTemplate(j jobtask.Job) error {
	if j.Scope != jobs.ScopeInstance {
		return fmt.Errorf("job %q: clusters: owned needs scope instance, not %s", j.ID, j.Scope)
	}
	if _, dup := r.jobs[j.ID]; dup || r.isTemplate(j.ID) {
		return fmt.Errorf("job %q: duplicate id", j.ID)
	}
	r.clusters.templates = append(r.clusters.templates, j)
	return nil
}

func (r *Runner) isTemplate(id string) bool {
	return slices.ContainsFunc(r.clusters.templates, func(j jobtask.Job) bool { return j.ID == id })
}

// key is js's key in r.jobs and its status row's job id: the job's id, or
// the duty's (jobs.DutyKey).
func (js *jobState) key() string {
	if js.duty == nil {
		return js.job.ID
	}
	return js.duty.id
}

// leaseLostText is the error recorded for a run its lease ended.
func leaseLostText(cause error) string {
	return cause.Error() + ": the run was cancelled"
}

// HasClusterJobs reports whether any job is per cluster.
func (r *Runner) HasClusterJobs() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.clusters.templates) > 0
}

// AddCluster starts the duties of cluster: one timer per per-cluster job,
// firing after Options.DutySpread for a fixed-delay job (nearly at once
// when few clusters are hosted: the duty moved here and should not wait;
// spread over its interval when many are) and at the next cron time for a
// cron job. ctx is the lease's
// duty context; a run in progress is cancelled when it ends. It does not
// block, so the lease loop may call it with its lock held. A runner that
// has not started or is stopping ignores it.
func (r *Runner) AddCluster(cluster string, ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopping || r.runsCtx == nil || ctx.Err() != nil || len(r.clusters.templates) == 0 {
		return
	}
	if r.clusters.owned == nil {
		r.clusters.owned, r.clusters.last = map[string]context.Context{}, map[string]jobs.Status{}
	}
	if _, ok := r.clusters.owned[cluster]; ok {
		r.removeClusterLocked(cluster)
	}
	r.clusters.owned[cluster] = ctx
	now := r.o.Clock.Now()
	for _, j := range r.clusters.templates {
		j := scopedJob(j, cluster) // jitter.go
		d := newDuty(j.ID, cluster, ctx)
		key := d.id
		js := &jobState{job: j, sched: j.Schedule, duty: d}
		if p, ok := r.clusters.last[key]; ok {
			js.status = p
		} else if p, ok := r.clusters.prior[key]; ok {
			js.status = p
		}
		js.status.Running, js.status.NextFireAt = false, nil
		js.failing = js.status.LastOutcome.Failing()
		js.status.ReplicaID, js.status.JobID, js.status.Scope = r.o.ReplicaID, key, j.Scope
		js.status.Schedule = js.sched.String()
		js.status.Since = now
		// A fixed-delay duty's first fire is spread (slots.go): nearly at
		// once for a few clusters, over up to its interval for many.
		due := now.Add(r.o.DutySpread(key, js.sched.Every, len(r.clusters.owned)*len(r.clusters.templates)) + js.sched.Offset())
		if js.sched.IsCron() {
			due = js.sched.Next(now)
		}
		r.jobs[key] = js
		r.push(js, due)
		r.putStatusLocked(js)
	}
	r.kick()
	r.missedDutiesLocked(cluster, r.now()) // occurrence.go
}

// RemoveCluster ends the duties of cluster: their timers are removed and a
// run in progress is cancelled (it was already, when the lease loop
// cancelled the lease's context first) and recorded lock_lost. It does
// not block.
func (r *Runner) RemoveCluster(cluster string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.removeClusterLocked(cluster)
}

func (r *Runner) removeClusterLocked(cluster string) {
	if _, ok := r.clusters.owned[cluster]; !ok {
		return
	}
	delete(r.clusters.owned, cluster)
	for _, j := range r.clusters.templates {
		key := jobs.DutyKey{Job: j.ID, Cluster: cluster}.String()
		js, ok := r.jobs[key]
		if !ok {
			continue
		}
		js.duty.removed = true
		if js.running {
			if r.clusters.ending == nil {
				r.clusters.ending = map[*jobState]chan struct{}{}
			}
			r.clusters.ending[js] = make(chan struct{})
		}
		if js.queued {
			r.queue.remove(js)
		}
		js.status.NextFireAt = nil
		delete(r.jobs, key)
		r.metrics.failing.forget(key) // its failure, if any, is no longer this replica's
		r.putStatusLocked(js)
	}
}

// dutyLeftLocked notes that a run (or skip) of js ended, and reports
// whether js is a duty whose lease ended: it then stays off the timer, and
// its failure, if any, is no longer this replica's (a duty added again
// under the key has its own). r.mu held.
func (r *Runner) dutyLeftLocked(js *jobState) bool {
	if js.duty == nil {
		return false
	}
	if ch, ok := r.clusters.ending[js]; ok {
		close(ch)
		delete(r.clusters.ending, js)
	}
	if !js.duty.over() {
		return false
	}
	js.status.NextFireAt = nil
	if cur, ok := r.jobs[js.key()]; !ok || cur == js {
		r.metrics.failing.forget(js.key())
	}
	return true
}

// AwaitClusters waits until no removed duty of clusters is still running,
// or ctx is done: the lease loop calls it before it releases leases, so
// the next owner does not start a duty while this one is ending.
func (r *Runner) AwaitClusters(ctx context.Context, clusters []string) {
	r.mu.Lock()
	var wait []chan struct{}
	for js, ch := range r.clusters.ending {
		if slices.Contains(clusters, js.duty.cluster()) {
			wait = append(wait, ch)
		}
	}
	r.mu.Unlock()
	for _, ch := range wait {
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
	}
}

// OwnedClusters returns the clusters whose duties this runner hosts.
func (r *Runner) OwnedClusters() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.clusters.owned))
	for c := range r.clusters.owned {
		out = append(out, c)
	}
	natsort.Strings(out)
	return out
}

// triggerDuties makes every duty of per-cluster job id fire now; handled
// is false when id is not a per-cluster job. r.mu held.
func (r *Runner) triggerDuties(id string) (fired, handled bool) {
	if !r.isTemplate(id) {
		return false, false
	}
	for c := range r.clusters.owned {
		js, ok := r.jobs[jobs.DutyKey{Job: id, Cluster: c}.String()]
		if !ok || js.running || r.stopping || !js.queued {
			continue
		}
		r.push(js, r.o.Clock.Now())
		fired = true
	}
	if fired {
		r.kick()
		r.log.Info("runner: job triggered for every owned cluster", "job_id", id)
	}
	return fired, true
}

// dutyStatusStale reports whether js is a removed duty whose key a newer
// duty of the same cluster took again: its late writes (a cancelled run
// that ends) must not overwrite the newer status. r.mu held.
func (r *Runner) dutyStatusStale(js *jobState) bool {
	if js.duty == nil {
		return false
	}
	cur, ok := r.jobs[js.status.JobID]
	return ok && cur != js
}

// keepDutyStatus remembers the status of a duty, so a cluster acquired
// again carries its counters on. r.mu held.
func (r *Runner) keepDutyStatus(js *jobState) {
	if js.duty == nil || r.clusters.last == nil {
		return
	}
	r.clusters.last[js.status.JobID] = js.status
}
