package doctor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/studioctl/studioctl/internal/overdue"
)

// checkOverdueJobs: a job whose due time plus OverdueGrace passed with no
// run started, as the database computes it with or without a live replica
// (studio_overdue_jobs, docs/occurrences-overdue.md): fail, the same
// answer as `studioctl jobs overdue`.
func checkOverdueJobs(ctx context.Context, e *env) Result {
	js, err := overdue.List(ctx, e.pool, OverdueGrace)
	if errors.Is(err, overdue.ErrNoFunction) {
		return Result{Status: Skip, Detail: "not checked: the schema has no studio_overdue_jobs (migration 00011)",
			Hint: "run `studioctl migrate up` (see the schema check)"}
	}
	if err != nil {
		return failed(err)
	}
	if len(js) == 0 {
		return Result{Status: OK, Detail: fmt.Sprintf("no job is past its due time by more than %s without a run started", OverdueGrace)}
	}
	items := make([]string, 0, len(js))
	for _, j := range js {
		name := j.JobID
		if j.ScopeKey != "" {
			name += " (scope " + j.ScopeKey + ")"
		}
		items = append(items, fmt.Sprintf("%s: due %s ago", name, ago(time.Duration(j.OverdueSeconds*float64(time.Second)))))
	}
	return Result{Status: Fail,
		Detail: fmt.Sprintf("%s past the due time by more than %s with no run started: %s",
			plural(len(js), "job", "jobs"), OverdueGrace, list(items)),
		Hint: "studioctl jobs overdue lists them; start a replica that declares them (studioctl run); studioctl jobs pause ID if one should not run; replicas forget or jobs forget for what is retired"}
}
