package runner_test

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
)

func TestStartRemovesTheRowsOfJobsTheConfigurationNoLongerDeclares(t *testing.T) {
	t.Parallel()
	e := newMemEnv(t)
	// What a previous process with this id left: config X had gone, tick
	// and the per-cluster jobs sync and old.
	for _, id := range []string{"gone", "tick", "sync@c1", "old@c1"} {
		e.mem.PutStatus(jobs.Status{ReplicaID: replicaID, JobID: id, Runs: 7})
	}
	sync := e.job("sync", jobs.ScopeInstance, time.Minute, e.task())
	sync.PerCluster = true
	e.start(e.options(e.job("tick", jobs.ScopeInstance, time.Minute, e.task()), sync))
	e.mem.mu.Lock()
	var got []string
	for id := range e.mem.status {
		got = append(got, id)
	}
	e.mem.mu.Unlock()
	slices.Sort(got)
	if want := []string{"sync@c1", "tick"}; !reflect.DeepEqual(got, want) {
		t.Errorf("status rows after start: %v, want %v", got, want)
	}
	if st := status(t, e.r, "tick"); st.Runs != 7 {
		t.Errorf("tick's counters did not carry on: runs %d", st.Runs)
	}
}

func TestASettingChangedWithoutASignalIsAppliedAtThePoll(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o := e.options(e.job("tick", jobs.ScopeInstance, time.Minute, e.task()))
	o.SettingsPollEvery = 20 * time.Millisecond
	r := e.start(o)
	if status(t, r, "tick").Paused {
		t.Fatal("tick paused before any setting")
	}
	// Paused in SQL, with no NOTIFY: the poll finds it.
	if _, err := e.pool.Exec(t.Context(), `INSERT INTO studio_job_setting (job_id, schedule, paused, updated_by) VALUES ('tick', 'every 5m', true, 'sql')`); err != nil {
		t.Fatal(err)
	}
	eventually(t, "tick paused and rescheduled by the poll", func() bool {
		st := status(t, r, "tick")
		return st.Paused && st.Schedule == "every 5m"
	})
	if _, err := e.pool.Exec(t.Context(), `UPDATE studio_job_setting SET paused = false, schedule = NULL`); err != nil {
		t.Fatal(err)
	}
	eventually(t, "tick resumed by the poll", func() bool {
		st := status(t, r, "tick")
		return !st.Paused && st.Schedule == "every 1m"
	})
}
