package e2ejobs

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

// TestTimeoutKillsTheCommandsProcessGroup runs a command that starts two
// children in its process group, one of which ignores SIGTERM, and never
// ends. At the timeout (1s) the run is recorded timed_out, and by then no
// process of the group is left: SIGTERM, then SIGKILL after the grace
// period, went to the whole group.
func TestTimeoutKillsTheCommandsProcessGroup(t *testing.T) {
	t.Parallel()
	const timeout = time.Second
	script := notePIDs +
		`sleep 300 & echo $! > "$EXP_DIR/child-$STUDIO_RUN_SEQ.pid"; ` +
		`(trap '' TERM; exec sleep 300) & echo $! > "$EXP_DIR/stubborn-$STUDIO_RUN_SEQ.pid"; ` +
		`sleep 300`
	f := newFixture(t, shJob("stuck", "instance", "2s", timeout.String(), script))
	p := f.startReplica("timeout-1")
	p.WaitReady(t)

	var run runRow
	var seenAt time.Time
	replicaproc.Eventually(t, 60*time.Second, "a run of stuck recorded timed_out", func() error {
		list, err := f.runs("stuck")
		if err != nil {
			return err
		}
		for _, r := range list {
			if r.Outcome == "timed_out" {
				run, seenAt = r, time.Now()
				return nil
			}
		}
		return fmt.Errorf("runs so far: %v", list)
	})
	dur := run.FinishedAt.Sub(run.StartedAt)
	t.Logf("run %d: timed_out after %s (timeout %s): %s", run.Seq, dur.Round(time.Millisecond), timeout, run.Error)
	if !strings.Contains(run.Error, "timed out after "+timeout.String()) {
		t.Errorf("error of the timed-out run = %q, want it to say %q", run.Error, "timed out after "+timeout.String())
	}
	if dur < timeout {
		t.Errorf("the run lasted %s, less than its timeout %s", dur, timeout)
	}

	leader, err := f.leaderPID(run.Seq)
	if err != nil {
		t.Fatalf("the command of run %d did not record its pid: %v", run.Seq, err)
	}
	child, err := readPID(filepath.Join(f.dir, fmt.Sprintf("child-%d.pid", run.Seq)))
	if err != nil {
		t.Fatalf("the command of run %d did not record its child: %v", run.Seq, err)
	}
	stubborn, err := readPID(filepath.Join(f.dir, fmt.Sprintf("stubborn-%d.pid", run.Seq)))
	if err != nil {
		t.Fatalf("the command of run %d did not record its SIGTERM-ignoring child: %v", run.Seq, err)
	}
	took := replicaproc.Eventually(t, 10*time.Second, "every process of the timed-out command to be gone", func() error {
		var left []string
		for name, pid := range map[string]int{"sh (leader)": leader, "sleep child": child, "sleep child ignoring SIGTERM": stubborn} {
			if alive(pid) {
				left = append(left, fmt.Sprintf("%s %d", name, pid))
			}
		}
		if m := groupMembers(leader); len(m) > 0 {
			left = append(left, fmt.Sprintf("group %d: %v", leader, m))
		}
		if len(left) > 0 {
			return fmt.Errorf("still alive: %s", strings.Join(left, ", "))
		}
		return nil
	})
	t.Logf("leader %d (%s), child %d (%s), SIGTERM-ignoring child %d (%s): checked %s after the run was seen timed_out, %s of polling",
		leader, deadHow(leader), child, deadHow(child), stubborn, deadHow(stubborn), time.Since(seenAt).Round(time.Millisecond), took.Round(time.Millisecond))
	if !strings.Contains(run.Error, "SIGKILL") {
		t.Errorf("error = %q: want SIGKILL named, since one child ignored SIGTERM", run.Error)
	}
	replicaproc.Eventually(t, 10*time.Second, "the timeout counted in studio_job_status", func() error {
		st, err := f.status("timeout-1", "stuck")
		if err != nil {
			return err
		}
		if st.Timeouts < 1 {
			return fmt.Errorf("timeouts = %d", st.Timeouts)
		}
		return nil
	})
}

// deadHow says whether a dead pid is gone from /proc or a zombie that its
// new parent has not reaped.
func deadHow(pid int) string {
	if state, _, ok := procStat(pid); ok {
		return "zombie, state " + string(state)
	}
	return "gone"
}
