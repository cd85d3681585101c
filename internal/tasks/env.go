package tasks

import (
	"os"
	"regexp"
	"slices"
)

// InheritedEnv names the only variables a command takes from the replica's
// environment, when they are set there.
var InheritedEnv = []string{"PATH", "HOME", "LANG"}

// RunEnv names the variables the runner sets for every command. A job's
// env: may not set them.
var RunEnv = []string{"STUDIO_JOB_ID", "STUDIO_REPLICA_ID", "STUDIO_RUN_SEQ", "STUDIO_CLUSTER", "STUDIO_SCHEDULED_AT", "STUDIO_OCCURRENCE_KEY"}

// envName is the rule for the names under a job's env:.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ValidEnvName reports whether name may be listed under a job's env:.
func ValidEnvName(name string) bool { return envName.MatchString(name) }

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
	)
}
