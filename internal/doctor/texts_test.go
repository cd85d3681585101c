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

// A last error or a schedule error in a detail is put on one line and cut
// by output.Truncate: the same text as before for narrow characters, and a
// wide character counts two columns (it counted one, so a CJK error took
// twice the width the detail allows).
func TestShortenCutsToColumnsNeverSplittingACharacter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		n    int
		want string
	}{
		{"a short error on several lines is one line", "exit status 3:\n  disk full", 60, "exit status 3: disk full"},
		{"an ASCII error at the width is kept", strings.Repeat("a", 60), 60, strings.Repeat("a", 60)},
		{"a long ASCII error keeps n-3 bytes and an ellipsis", strings.Repeat("a", 61), 60, strings.Repeat("a", 57) + "..."},
		{"accented letters are one column each", strings.Repeat("é", 100), 60, strings.Repeat("é", 57) + "..."},
		{"wide characters count two columns", strings.Repeat("日", 100), 60, strings.Repeat("日", 28) + "..."},
		{"an emoji is not cut in half", strings.Repeat("x", 56) + "🔥🔥🔥", 60, strings.Repeat("x", 56) + "..."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := shorten(tt.in, tt.n); got != tt.want {
				t.Errorf("shorten(%q, %d) =\n%q\nwant\n%q", tt.in, tt.n, got, tt.want)
			}
		})
	}
}
