package runner

import (
	"context"
	"slices"
	"strings"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/jobs"
)

// DefinitionPublisher is what a Recorder may also do (jobstore.Store
// does): publish the effective definition of every job this replica
// declares, replacing what its replica id published before (issue 24
// part 7, configuration drift between replicas).
type DefinitionPublisher interface {
	PublishDefinitions(ctx context.Context, defs []jobs.PublishedDefinition) error
}

// definitions are the effective definitions of the jobs this runner
// declares (a per-cluster job under its own id, whatever clusters it
// owns), by id, with secrets scrubbed as in a run's output
// (Options.Secrets, db.ScrubText). The configuration does not change
// while the runner runs, so they are computed and published once.
func (r *Runner) definitions() []jobs.PublishedDefinition {
	scrub := func(s string) string { return db.ScrubText(s, r.o.Secrets...) }
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]jobs.PublishedDefinition, 0, len(r.jobs)+len(r.clusters.templates))
	for _, js := range r.jobs {
		out = append(out, jobs.PublishedDefinition{JobID: js.job.ID, Definition: jobs.DefinitionOf(js.job.Job, scrub), Builtin: js.job.Builtin})
	}
	for _, j := range r.clusters.templates {
		out = append(out, jobs.PublishedDefinition{JobID: j.ID, Definition: jobs.DefinitionOf(j.Job, scrub), Builtin: j.Builtin})
	}
	slices.SortFunc(out, func(a, b jobs.PublishedDefinition) int { return strings.Compare(a.JobID, b.JobID) })
	return out
}

// publishDefinitions publishes the definitions at Start. A failure is
// logged, not fatal: drift is something to see, and the jobs run as
// configured either way (a replica that published nothing is "unknown"
// to jobs diff, never drift).
func (r *Runner) publishDefinitions(ctx context.Context) {
	p, ok := r.o.Store.(DefinitionPublisher)
	if !ok {
		return
	}
	if err := p.PublishDefinitions(ctx, r.definitions()); err != nil {
		r.log.Warn("runner: could not publish the job definitions; jobs diff shows this replica as unknown", "error", err)
	}
}
