package doctor

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
)

// checkConfigDrift: a job whose live replicas published different
// definitions, or that one live replica declares and another does not
// (migration 00015, docs/schedules.md "Drift between replicas"): warn,
// naming the job, the fields and the replicas. A replica that publishes
// no definitions (an older version) is not compared.
func checkConfigDrift(ctx context.Context, e *env) Result {
	ds, err := jobstore.Drift(ctx, e.pool)
	if err != nil {
		return failed(err)
	}
	if len(ds) == 0 {
		return Result{Status: OK, Detail: "the live replicas agree on every job's definition"}
	}
	items := make([]string, 0, len(ds))
	for _, d := range ds {
		items = append(items, d.Job+": "+driftSummary(d.Differences))
	}
	return Result{Status: Warn,
		Detail: fmt.Sprintf("%s with live replicas that disagree: %s", plural(len(ds), "job", "jobs"), list(items)),
		Hint:   fmt.Sprintf("studioctl jobs diff %s shows the values; give every replica the same configuration and restart those that differ", ds[0].Job)}
}

// driftSummary says how the replicas of one job disagree: "defined on a,
// absent on b" and "schedule, timeout differ between a, b".
func driftSummary(diff []jobstore.Difference) string {
	var present, absent, fields, replicas []string
	for _, d := range diff {
		switch {
		case d.Field == jobs.FieldDefined && d.Value == jobs.DefinedAbsent:
			absent = append(absent, d.ReplicaID)
		case d.Field == jobs.FieldDefined:
			present = append(present, d.ReplicaID)
		default:
			if !slices.Contains(fields, d.Field) {
				fields = append(fields, d.Field)
			}
			if !slices.Contains(replicas, d.ReplicaID) {
				replicas = append(replicas, d.ReplicaID)
			}
		}
	}
	var parts []string
	if len(absent) > 0 {
		parts = append(parts, fmt.Sprintf("defined on %s, absent on %s", strings.Join(present, ", "), strings.Join(absent, ", ")))
	}
	if len(fields) > 0 {
		slices.Sort(replicas)
		parts = append(parts, fmt.Sprintf("%s differ between %s", strings.Join(fields, ", "), strings.Join(replicas, ", ")))
	}
	return strings.Join(parts, " and ")
}
