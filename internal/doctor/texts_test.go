package doctor

import (
	"strings"
	"testing"
)

// The texts doctor prints count in words that agree with the number, and
// the hint of failing jobs names the command that shows their output.
func TestFailingJobsCountInTheRightPluralAndNameJobsOutput(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	f.exec(liveReplica, "web-1")
	f.exec(statusRow, "broken", "failed", "exit status 3", 1, nil)
	r := f.expect(CheckFailingJobs, Warn, "1 job failing: broken (1 failure, last error: exit status 3)")
	if want := "studioctl jobs output broken prints the output of its last run; studioctl jobs history broken lists its runs"; r.Hint != want {
		t.Errorf("hint of one failing job = %q, want %q", r.Hint, want)
	}
	f.exec(statusRow, "cluster-sync@c1", "failed", "exit status 1", 2, nil)
	r = f.expect(CheckFailingJobs, Warn, "2 jobs failing: broken (1 failure, last error: exit status 3); cluster-sync@c1 (2 failures, last error: exit status 1)")
	if !strings.Contains(r.Hint, "studioctl jobs output ID prints the output of a job's last run (studioctl jobs output broken)") {
		t.Errorf("hint of two failing jobs = %q", r.Hint)
	}
	f.exec(`DELETE FROM studio_job_status WHERE job_id = 'broken'`)
	r = f.expect(CheckFailingJobs, Warn, "1 job failing: cluster-sync@c1 (2 failures")
	if !strings.HasPrefix(r.Hint, "studioctl jobs output cluster-sync@c1 prints") || !strings.Contains(r.Hint, "jobs history cluster-sync lists") {
		t.Errorf("hint of a failing per-cluster duty = %q", r.Hint)
	}
}

func TestPlural(t *testing.T) {
	t.Parallel()
	for n, want := range map[int]string{0: "0 failures", 1: "1 failure", 2: "2 failures", 11: "11 failures"} {
		if got := plural(n, "failure", "failures"); got != want {
			t.Errorf("plural(%d) = %q, want %q", n, got, want)
		}
	}
}
