package jobstore_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
)

func TestRunOfReturnsOneRunWithItsOutput(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	s := jobstore.NewStore(pool, "replica-1", nil)
	s.PutStatus(jobs.Status{JobID: "import", Scope: jobs.ScopeInstallation, Schedule: "every 1m", UpdatedAt: time.Now()})
	s.PutStatus(jobs.Status{JobID: "quiet", Scope: jobs.ScopeInstallation, Schedule: "every 1m", UpdatedAt: time.Now()})
	start := time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC)
	put := func(job, cluster string, at time.Duration, outcome jobs.Outcome, tail string) int64 {
		seq := mustSeq(t, s)
		r := jobs.Run{Seq: seq, JobID: job, ReplicaID: "replica-1", Cluster: cluster, StartedAt: start.Add(at), Outcome: outcome, OutputTail: tail}
		if outcome != jobs.OutcomeRunning {
			f := r.StartedAt.Add(time.Second)
			r.FinishedAt = &f
		}
		s.PutRun(r)
		return seq
	}
	first := put("import", "", 0, jobs.OutcomeFailed, "reading rows\nline 7: bad date\n")
	second := put("import", "", time.Minute, jobs.OutcomeSucceeded, "imported 3 rows\n")
	quiet := put("quiet", "", 0, jobs.OutcomeSucceeded, "")
	c1 := put("sync", "c1", 0, jobs.OutcomeFailed, "c1 is down\n")
	c2 := put("sync", "c2", time.Minute, jobs.OutcomeRunning, "")
	mustFlush(t, s)
	ctx := t.Context()

	for _, tc := range []struct {
		name, job, cluster string
		seq                int64
		want               int64
		tail               string
	}{
		{"the newest run of a job by default", "import", "", 0, second, "imported 3 rows\n"},
		{"an older run by its seq", "import", "", first, first, "reading rows\nline 7: bad date\n"},
		{"a per-cluster job's newest run on any cluster, a running one included", "sync", "", 0, c2, ""},
		{"a per-cluster job's newest run on one cluster", "sync", "c1", 0, c1, "c1 is down\n"},
		{"a seq with its own cluster", "sync", "c1", c1, c1, "c1 is down\n"},
	} {
		r, err := jobstore.RunOf(ctx, pool, jobstore.RunQuery{Job: tc.job, Cluster: tc.cluster, Seq: tc.seq})
		if err != nil || r.Seq != tc.want || r.OutputTail != tc.tail {
			t.Errorf("%s: RunOf(%q, %q, %d) = seq %d, tail %q, %v; want seq %d, tail %q", tc.name, tc.job, tc.cluster, tc.seq, r.Seq, r.OutputTail, err, tc.want, tc.tail)
		}
	}

	for _, tc := range []struct {
		name, job, cluster string
		seq                int64
		is                 error
		says               string
	}{
		{"an unknown job", "nope", "", 0, jobstore.ErrUnknownJob, `job "nope"`},
		{"an unknown seq", "import", "", 999999, jobstore.ErrUnknownRun, "run 999999"},
		{"a seq of another job", "import", "", quiet, jobstore.ErrUnknownRun, `is a run of job "quiet", not of "import"`},
		{"a seq of another cluster", "sync", "c2", c1, jobstore.ErrUnknownRun, `is a run of job "sync@c1", not of "sync@c2"`},
		{"a cluster without runs", "sync", "c9", 0, jobstore.ErrUnknownRun, `job "sync@c9"`},
	} {
		_, err := jobstore.RunOf(ctx, pool, jobstore.RunQuery{Job: tc.job, Cluster: tc.cluster, Seq: tc.seq})
		if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: RunOf(%q, %q, %d) error = %v; want %v saying %q", tc.name, tc.job, tc.cluster, tc.seq, err, tc.is, tc.says)
		}
	}

	r, _ := jobstore.RunOf(ctx, pool, jobstore.RunQuery{Job: "quiet"})
	if err := jobstore.NoOutputError(r); !errors.Is(err, jobstore.ErrNoOutput) || !strings.Contains(err.Error(), "printed nothing") {
		t.Errorf("NoOutputError(finished run) = %v", err)
	}
	r, _ = jobstore.RunOf(ctx, pool, jobstore.RunQuery{Job: "sync"})
	if err := jobstore.NoOutputError(r); !errors.Is(err, jobstore.ErrNoOutput) || !strings.Contains(err.Error(), "still running") {
		t.Errorf("NoOutputError(running run) = %v", err)
	}
	// Ended: the newest run that has ended, past one still going.
	if r, err := jobstore.RunOf(ctx, pool, jobstore.RunQuery{Job: "sync", Ended: true}); err != nil || r.Seq != c1 {
		t.Errorf("RunOf(sync, ended) = seq %d, %v; want %d", r.Seq, err, c1)
	}
	if _, err := jobstore.RunOf(ctx, pool, jobstore.RunQuery{Job: "sync", Cluster: "c2", Ended: true}); !errors.Is(err, jobstore.ErrUnknownRun) ||
		!strings.Contains(err.Error(), "none has ended") {
		t.Errorf("RunOf(sync@c2, ended) error = %v, want none has ended", err)
	}
}
