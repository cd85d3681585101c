package e2etop

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/studioctl/studioctl/internal/testkit/pgtest"
	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

// Deadlines of the test (generous: CI runs it on a loaded 2-core machine).
const (
	// screenTimeout bounds the wait for what a key or a change should show.
	screenTimeout = 20 * time.Second
	queryTimeout  = 10 * time.Second
	// actor is who top's actions are audited as (--actor).
	actor = "e2e-operator"
)

// terminal is a tmux server of the test's own (its own socket) with one
// 80x24 window running studioctl top.
type terminal struct {
	t    *testing.T
	sock string
}

func (term *terminal) tmux(args ...string) string {
	term.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-S", term.sock, "-f", "/dev/null"}, args...)...).CombinedOutput()
	if err != nil {
		term.t.Fatalf("tmux %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// keys sends tmux key names (3, Enter, Escape); text sends literal text.
func (term *terminal) keys(keys ...string) {
	term.t.Helper()
	term.tmux(append([]string{"send-keys", "-t", "top"}, keys...)...)
}

func (term *terminal) text(s string) {
	term.t.Helper()
	term.tmux("send-keys", "-t", "top", "-l", s)
}

func (term *terminal) screen() string {
	term.t.Helper()
	return term.tmux("capture-pane", "-p", "-t", "top")
}

// waitFor polls the screen until every one of want is on it.
func (term *terminal) waitFor(what string, want ...string) string {
	term.t.Helper()
	var last string
	replicaproc.Eventually(term.t, screenTimeout, what, func() error {
		last = term.screen()
		for _, w := range want {
			if !strings.Contains(last, w) {
				return fmt.Errorf("%q is not on the screen:\n%s", w, last)
			}
		}
		return nil
	})
	return last
}

// TestTopTakesAStaleLockAndADrainFromFirstSightToResolution is issue 27's
// "done when": on an 80x24 terminal, with two real replicas, a crashed
// replica's stale lock is seen in the header and released through the UI
// (a live holder's lock is refused, as locks release refuses it), a
// replica is drained through the UI and stops, and both actions are
// audited with the actor and the reason typed.
func TestTopTakesAStaleLockAndADrainFromFirstSightToResolution(t *testing.T) {
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Fatalf("tmux is needed (.ci/run installs it): %v", err)
	}
	dbURL := pgtest.NewDB(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	exec1 := func(sql string, args ...any) {
		t.Helper()
		qctx, cancel := context.WithTimeout(ctx, queryTimeout)
		defer cancel()
		if _, err := conn.Exec(qctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	web1 := studioctlBin.Start(t, replicaproc.Options{ID: "web-1", DatabaseURL: dbURL, FailOnRace: true})
	web2 := studioctlBin.Start(t, replicaproc.Options{ID: "web-2", DatabaseURL: dbURL, FailOnRace: true})
	web1.WaitReady(t)
	web2.WaitReady(t)
	// A replica that crashed holding a lock (its heartbeat 5 minutes old,
	// no stop), and a lock a live replica holds.
	exec1(`INSERT INTO studio_replica (id, incarnation, host, pid, version, state, heartbeat_at)
VALUES ('ghost-1', gen_random_uuid(), 'h9', 9, 'dev', 'ready', now() - interval '5 minutes')`)
	exec1(`INSERT INTO shedlock VALUES ('nightly-report', timezone('utc', now()) + interval '10 minutes', timezone('utc', now()), 'ghost-1')`)
	exec1(`INSERT INTO shedlock VALUES ('busy-job', timezone('utc', now()) + interval '10 minutes', timezone('utc', now()), 'web-1')`)

	dir := t.TempDir()
	term := &terminal{t: t, sock: filepath.Join(dir, "tmux.sock")}
	// The server inherits this environment, so the window's shell does.
	start := exec.Command("tmux", "-S", term.sock, "-f", "/dev/null", "new-session", "-d", "-s", "top", "-x", "80", "-y", "24",
		fmt.Sprintf("%s top --actor %s; echo TOP-EXIT=$?; sleep 60", studioctlBin.Path, actor))
	start.Env = studioctlBin.Env(dir, "STUDIO_DATABASE_URL="+dbURL, "TERM=xterm-256color", "NO_COLOR=1")
	if out, err := start.CombinedOutput(); err != nil {
		t.Fatalf("tmux new-session: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last screen:\n%s", term.screen())
		}
		_ = exec.Command("tmux", "-S", term.sock, "kill-server").Run()
	})

	// First sight: the header names the crash and the stale lock.
	term.waitFor("the replicas and the header", "web-1", "web-2", "crashed:FAIL", "stale:FAIL")

	// The live holder's lock is refused, as locks release refuses it.
	term.keys("3")
	term.waitFor("the locks view", "[3 locks]", "busy-job", "nightly-report")
	term.keys("/")
	term.text("busy-job")
	term.keys("Enter")
	term.waitFor("the filter", "filter:busy-job")
	term.keys("r")
	term.waitFor("the reason prompt", "reason: _")
	term.keys("Enter")
	term.waitFor("the question", "$ studioctl locks release busy-job --yes", "y to confirm")
	term.keys("y")
	term.waitFor("the refusal", "refused:")

	// The stale lock: released through the UI.
	term.keys("Escape") // clears the filter
	term.waitFor("the filter cleared", "nightly-report")
	term.keys("/")
	term.text("nightly-report")
	term.keys("Enter")
	term.waitFor("the filter", "filter:nightly-report")
	term.keys("r")
	term.waitFor("the reason prompt", "reason: _")
	term.text("ghost-1 crashed")
	term.keys("Enter")
	term.waitFor("the question", "$ studioctl locks release nightly-report --reason 'ghost-1 crashed' --yes")
	term.keys("y")
	term.waitFor("the release", `released lock "nightly-report"`)
	term.waitFor("the header without the stale lock", "stale:ok")

	// The drain: web-2 drained through the UI, and seen stopped. (Each
	// escape is let through before the next key, which would otherwise
	// arrive with it as alt+key.)
	term.keys("Escape")
	term.waitFor("the filter cleared", "busy-job", "nightly-report")
	term.keys("1")
	term.waitFor("the replicas view", "[1 replicas]")
	term.keys("/")
	term.text("web-2")
	term.keys("Enter")
	term.waitFor("the filter", "filter:web-2")
	term.keys("d")
	term.waitFor("the reason prompt", "reason: _")
	term.text("kernel upgrade")
	term.keys("Enter")
	term.waitFor("the question", "$ studioctl replicas drain web-2 --reason 'kernel upgrade' --yes")
	term.keys("y")
	term.waitFor("the drain request", `asked replica "web-2" to drain`)
	if code := web2.WaitExit(t, replicaproc.ExitTimeout); code != 0 {
		t.Errorf("web-2 exited %d after the drain, want 0", code)
	}
	term.waitFor("web-2 stopped", "stopped")

	// Both actions are audited with the actor and the reason; the refusal
	// wrote nothing.
	qctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	rows, err := conn.Query(qctx, `SELECT actor, action, target, reason FROM studio_audit ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	type auditRow struct{ Actor, Action, Target, Reason string }
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[auditRow])
	if err != nil {
		t.Fatal(err)
	}
	want := []auditRow{
		{actor, "locks.release", "nightly-report", "ghost-1 crashed"},
		{actor, "replicas.drain", "web-2", "kernel upgrade"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("audit rows:\n got %v\nwant %v", got, want)
	}

	// q leaves, with exit 0.
	term.keys("q")
	term.waitFor("top's exit", "TOP-EXIT=0")
}
