package runner_test

import (
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobtask"
	"github.com/studioctl/studioctl/internal/tasks"
)

// dbPassword stands for the password of the replica's own connection.
const dbPassword = "s3cr3t-db-pw"

func TestOutputAndErrorsAreScrubbedBeforeTheyAreStoredOrLogged(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	echo := tasks.Command{Argv: []string{"sh", "-c",
		`echo "the password is $1"; echo "url: postgres://u:hunter2@h/db"; exit 3`, "sh", dbPassword}}
	// Only the last 4 KiB are kept: this tail starts inside the password.
	cut := tasks.Command{Argv: []string{"sh", "-c",
		`printf '%s' "$1"; head -c 4090 /dev/zero | tr '\0' b`, "sh", dbPassword}}
	// The program's name is in the error.
	missing := tasks.Command{Argv: []string{"/nonexistent/postgres://u:hunter2@h/" + dbPassword}}
	ft := e.task()
	o := e.options(
		jobtask.Job{Job: jobs.Job{ID: "echo", Scope: jobs.ScopeInstance, Schedule: every(t, time.Hour)}, Task: echo},
		jobtask.Job{Job: jobs.Job{ID: "cut", Scope: jobs.ScopeInstance, Schedule: every(t, time.Hour)}, Task: cut},
		jobtask.Job{Job: jobs.Job{ID: "missing", Scope: jobs.ScopeInstance, Schedule: every(t, time.Hour)}, Task: missing},
		e.job("fails", jobs.ScopeInstance, time.Hour, ft),
	)
	o.Secrets = []string{dbPassword}
	e.start(o)
	ft.waitStarts(t, 1)
	ft.finish(t, tasks.Result{
		Output: "PGPASSWORD=" + dbPassword + "\n",
		Err:    errors.New("connect postgres://app:hunter2@db/app: password " + dbPassword + " refused"),
	})

	for _, id := range []string{"echo", "cut", "missing", "fails"} {
		var runs []jobs.Run
		eventually(t, id+" to be recorded", func() bool {
			runs = e.history(id)
			return len(runs) == 1 && runs[0].Outcome != jobs.OutcomeRunning
		})
		st := status(t, e.r, id)
		t.Logf("%s: error %q, output %q", id, runs[0].Error, trimMiddle(runs[0].OutputTail))
		for what, text := range map[string]string{"output_tail": runs[0].OutputTail, "error": runs[0].Error, "last_error": st.LastError} {
			for _, secret := range []string{dbPassword, "hunter2", "db-pw"} {
				if strings.Contains(text, secret) {
					t.Errorf("%s: the stored %s holds %q: %q", id, what, secret, text)
				}
			}
		}
	}
	if runs := e.history("echo"); !strings.Contains(runs[0].OutputTail, "url: postgres://u:xxxxx@h/db") {
		t.Errorf("the scrubbed output does not keep the URL without its password: %q", runs[0].OutputTail)
	}
	if logs := e.logs.String(); strings.Contains(logs, dbPassword) || strings.Contains(logs, "hunter2") {
		t.Errorf("a password was logged:\n%s", logs)
	}
}

func trimMiddle(s string) string {
	if len(s) <= 80 {
		return s
	}
	return s[:40] + "..." + s[len(s)-40:]
}

// Regression: an error longer than the 2 KiB kept was cut at a byte, so a
// tail that began inside a character was stored with U+FFFD in front.
func TestALongErrorKeepsItsTailFromAWholeCharacter(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := newBubbleEnv(t)
		ft := e.task()
		r := e.start(e.options(e.job("cjk", jobs.ScopeInstance, time.Hour, ft)))
		synctest.Wait()
		// 700 three-byte characters: 2100 bytes, whose last 2048 begin
		// inside a character.
		ft.finish(t, tasks.Result{Err: errors.New(strings.Repeat("日", 700))})
		e.idleAt("cjk", time.Now().Add(time.Hour))
		st := status(t, r, "cjk")
		if want := strings.Repeat("日", 682); st.LastError != want {
			t.Errorf("last error: %d bytes starting %q; want the last 682 characters (2046 bytes), no U+FFFD", len(st.LastError), st.LastError[:min(6, len(st.LastError))])
		}
		if runs := e.history("cjk"); len(runs) != 1 || runs[0].Error != st.LastError {
			t.Errorf("history %+v; want one run with the same error", runs)
		}
	})
}
