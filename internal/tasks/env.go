package tasks

import (
	"os"
	"slices"

	"github.com/studioctl/studioctl/internal/taskenv"
)

// InheritedEnv names the only variables a command takes from the replica's
// environment, when they are set there.
var InheritedEnv = []string{"PATH", "HOME", "LANG"}

// RunEnv names the variables the runner sets for every command. A job's
// env: may not set them (taskenv.RunEnv).
var RunEnv = taskenv.RunEnv

// Environ is the whole environment of a command: PATH, HOME and LANG from
// the replica's environment if set there, the job's own entries (extra,
// which may replace PATH, HOME or LANG), and the STUDIO_* variables of the
// run. Nothing else of the replica's environment reaches the command: not
// its database connection (STUDIO_DATABASE_URL, PGPASSWORD, DATABASE_URL),
// no other STUDIO_* or PG* variable.
func Environ(env Env, extra map[string]string) []string {
	out := make([]string, 0, len(InheritedEnv)+len(extra)+len(RunEnv))
	for _, k := range InheritedEnv {
		if _, listed := extra[k]; listed {
			continue
		}
		if v, ok := os.LookupEnv(k); ok {
			out = append(out, k+"="+v)
		}
	}
	keys := make([]string, 0, len(extra))
	for k := range extra {
		if !slices.Contains(RunEnv, k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		out = append(out, k+"="+extra[k])
	}
	return append(out,
		"STUDIO_JOB_ID="+env.JobID,
		"STUDIO_REPLICA_ID="+env.ReplicaID,
		"STUDIO_RUN_SEQ="+env.runSeq(),
		"STUDIO_CLUSTER="+env.Cluster,
		"STUDIO_SCHEDULED_AT="+env.scheduledAt(),
		"STUDIO_OCCURRENCE_KEY="+env.OccurrenceKey,
		"STUDIO_TRIGGERED="+env.triggered(),
		"STUDIO_FENCING_TOKEN="+env.fencingToken(),
	)
}
