package jobs_test

import (
	"strings"
	"testing"

	"github.com/studioctl/studioctl/internal/jobs"
)

func TestAJobMayNameItsLockAndTheDefaultIsItsID(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("ä", 62) // 62 characters, 124 bytes: VARCHAR(64) counts characters
	got, err := jobs.Parse(configFile, []byte(`jobs:
  - id: report
    scope: installation
    every: 30s
    lock: scheduledTaskName
    run: {command: ["true"]}
  - id: sweep
    scope: installation
    every: 30s
    run: {command: ["true"]}
  - id: german
    scope: installation
    every: 30s
    lock: "`+long+`"
    run: {command: ["true"]}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ lock, name string }{{"scheduledTaskName", "scheduledTaskName"}, {"", "sweep"}, {long, long}}
	for i, w := range want {
		if got[i].Lock != w.lock || got[i].LockName() != w.name {
			t.Errorf("job %s: Lock %q, LockName %q; want %q, %q", got[i].ID, got[i].Lock, got[i].LockName(), w.lock, w.name)
		}
	}
}

func TestABadLockKeyIsAConfigErrorNamingTheField(t *testing.T) {
	t.Parallel()
	job := func(id, scope, lock string) string {
		s := "  - id: " + id + "\n    scope: " + scope + "\n    every: 30s\n"
		if lock != "" {
			s += "    lock: " + lock + "\n"
		}
		return s + "    run: {command: [\"true\"]}\n"
	}
	tests := []struct {
		name  string
		yaml  string
		line  int
		job   string
		field string
		msg   string
	}{
		{"a lock name of 65 characters is refused", "jobs:\n" + job("report", "installation", strings.Repeat("ß", 65)),
			5, "report", "lock", `lock name "` + strings.Repeat("ß", 65) + `" is 65 characters, at most 64 allowed`},
		{"an empty lock name is refused", "jobs:\n" + job("report", "installation", `""`),
			5, "report", "lock", "lock name must not be empty"},
		{"a lock on an instance job is refused", "jobs:\n" + job("report", "instance", "scheduledTaskName"),
			5, "report", "lock", "only an installation job takes a lock (this one has scope instance)"},
		{"two jobs naming one lock is an error", "jobs:\n" + job("a", "installation", "shared") + job("b", "installation", "shared"),
			7, "b", "lock", `lock "shared" (named in lock:) is already taken by job "a" (line 2); two jobs on one lock would skip each other's ticks`},
		{"a lock named after another job's id is an error", "jobs:\n" + job("a", "installation", "") + job("b", "installation", "a"),
			6, "b", "lock", `lock "a" (named in lock:) is already taken by job "a" (line 2); two jobs on one lock would skip each other's ticks`},
		{"a job whose id is another job's lock is an error", "jobs:\n" + job("a", "installation", "b") + job("b", "installation", ""),
			7, "b", "id", `lock "b" (its id is the lock name) is already taken by job "a" (line 2); two jobs on one lock would skip each other's ticks`},
		{"the built-in job's lock is taken", "jobs:\n" + job("a", "installation", jobs.HousekeepingID),
			2, "a", "lock", `lock "studio-housekeeping" (named in lock:) is already taken by the built-in job studio-housekeeping; two jobs on one lock would skip each other's ticks`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			checkConfigError(t, tt.yaml, tt.line, tt.job, tt.field, tt.msg)
		})
	}

	t.Run("an instance job may share an id with nothing to lock", func(t *testing.T) {
		t.Parallel()
		if _, err := jobs.Parse(configFile, []byte("jobs:\n"+job("a", "installation", "x")+job("x", "instance", ""))); err != nil {
			t.Fatal(err)
		}
	})
}
