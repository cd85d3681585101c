package e2enemesis

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestCheckRunRowsMatchesAnExecutionToItsOwnRunWhenItsDueTimeRanTwice: one
// due time of an installation job run twice on one replica id, first by a
// process killed before its task committed (its row marked interrupted at
// the next start, no end in the shared schedule), then by the next process
// of that id. The execution is the second run's; the first row is a run
// that wrote nothing. The rows share the checker's key (job, scope,
// nominal, replica), which the checker reported as an execution with
// several run rows. A rerun after a run that recorded its end (failed,
// or interrupted by its own clean stop), a second row that succeeded, or
// one that started after the execution stays a failure.
func TestCheckRunRowsMatchesAnExecutionToItsOwnRunWhenItsDueTimeRanTwice(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 9, 40, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	ptr := func(v time.Time) *time.Time { return &v }
	nominal := at(-60)
	token := int64(732)
	exec := execution{ID: 13673, Job: "inst1", Scope: "", Replica: "r1", Token: &token, Nominal: ptr(nominal), Start: at(7.571), End: at(7.902)}
	own := runRow{Seq: 92301, Job: "inst1", Replica: "r1", Nominal: ptr(nominal), Start: at(7.52), Outcome: "succeeded", Finished: ptr(at(7.95))}
	earlier := func(outcome, errText string) runRow {
		return runRow{Seq: 89528, Job: "inst1", Replica: "r1", Nominal: ptr(nominal), Start: at(-59), Outcome: outcome, Finished: ptr(at(-40)), Error: errText}
	}
	cases := []struct {
		name  string
		other runRow
		allow bool
	}{
		{"killed run marked interrupted at the next start", earlier("interrupted", "replica r1 restarted (incarnation x) while the run was going: the run was interrupted"), true},
		{"lost lock", earlier("lock_lost", "lock lost while running: the run was cancelled"), true},
		{"failed run (its end was recorded)", earlier("failed", "execute statement: unexpected EOF"), false},
		{"interrupted by its own clean stop (its end was recorded)", earlier("interrupted", shutDownText), false},
		{"succeeded run", earlier("succeeded", ""), false},
		{"a row that started after the execution", runRow{Seq: 93390, Job: "inst1", Replica: "r1", Nominal: ptr(nominal), Start: at(30), Outcome: "interrupted", Finished: ptr(at(31))}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rep := &report{Refused: map[string]int{}, FinalOK: true}
			checkRunRows(rep, []execution{exec}, []runRow{c.other, own}, nil)
			if len(rep.Findings) != 1 {
				t.Fatalf("findings %+v; want one", rep.Findings)
			}
			f := rep.Findings[0]
			if f.Check != "execution with several run rows" || !strings.Contains(f.What, "run 92301") || !strings.Contains(f.What, "run "+itoa(c.other.Seq)) {
				t.Errorf("finding %q: %q; want the execution with several run rows, naming both rows", f.Check, f.What)
			}
			if got := f.Allowed != ""; got != c.allow {
				t.Errorf("allowed %q; want allowed %v", f.Allowed, c.allow)
			}
			if got := rep.failed(); got == c.allow {
				t.Errorf("report failed %v; want %v", got, !c.allow)
			}
			if c.allow && rep.FailedRunsNoExec != 1 {
				t.Errorf("runs that wrote nothing %d; want 1", rep.FailedRunsNoExec)
			}
			if rep.AmbiguousCommits != 0 {
				t.Errorf("ambiguous commits %d; want 0 (the execution's own run succeeded)", rep.AmbiguousCommits)
			}
		})
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
