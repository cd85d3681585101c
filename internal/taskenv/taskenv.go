// Package taskenv holds the rules for a job's env: entries. It imports
// nothing of the project, so the job model (internal/jobs) checks a
// configured env: by the same rule the tasks (internal/tasks) apply.
package taskenv

import "regexp"

// RunEnv names the variables the runner sets for every command. A job's
// env: may not set them.
var RunEnv = []string{"STUDIO_JOB_ID", "STUDIO_REPLICA_ID", "STUDIO_RUN_SEQ", "STUDIO_CLUSTER", "STUDIO_SCHEDULED_AT", "STUDIO_OCCURRENCE_KEY", "STUDIO_TRIGGERED", "STUDIO_FENCING_TOKEN"}

// name is the rule for the names under a job's env:.
var name = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ValidName reports whether n may be listed under a job's env:.
func ValidName(n string) bool { return name.MatchString(n) }
