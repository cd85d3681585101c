package jobtask_test

import (
	"maps"
	"net/http"
	"testing"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobtask"
	"github.com/studioctl/studioctl/internal/tasks"
)

const configFile = "studio.yaml"

func parse(t *testing.T, yaml string) jobs.Job {
	t.Helper()
	got, err := jobs.Parse(configFile, []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("parsed %d jobs, want 1", len(got))
	}
	return got[0]
}

func TestBindGivesACommandItsEnv(t *testing.T) {
	t.Parallel()
	j := parse(t, "jobs:\n  - id: report\n    scope: instance\n    every: 30s\n    run: {command: [/bin/true, -x]}\n"+
		"    env:\n      REPORT_DIR: /srv/reports\n      EMPTY: ''\n")
	b := jobtask.Bind(j, nil, nil)
	want := map[string]string{"REPORT_DIR": "/srv/reports", "EMPTY": ""}
	c, ok := b.Task.(tasks.Command)
	if !ok || !maps.Equal(c.Env, want) || len(c.Argv) != 2 || c.Argv[0] != "/bin/true" {
		t.Errorf("bound task = %#v, want the command with the env", b.Task)
	}
	if b.ID != "report" || b.Scope != jobs.ScopeInstance {
		t.Errorf("bound job = %q (%s), want report (instance)", b.ID, b.Scope)
	}
}

func TestBindGivesAnSQLJobItsStatement(t *testing.T) {
	t.Parallel()
	j := parse(t, "jobs:\n  - id: sweep\n    scope: installation\n    every: 30s\n    run: {sql: DELETE FROM t}\n")
	if s, ok := jobtask.Bind(j, nil, nil).Task.(tasks.SQL); !ok || s.Statement != "DELETE FROM t" {
		t.Errorf("bound task = %#v, want the sql statement", jobtask.Bind(j, nil, nil).Task)
	}
}

func TestBindGivesAnHTTPJobItsRequestAndTheSharedClient(t *testing.T) {
	t.Parallel()
	j := parse(t, "jobs:\n  - id: ping\n    scope: instance\n    every: 30s\n    run:\n      http:\n        method: put\n"+
		"        url: https://example.com/ping\n        headers: {X-Token: abc}\n        body: hello\n")
	client := &http.Client{}
	h, ok := jobtask.Bind(j, nil, client).Task.(tasks.HTTP)
	if !ok || h.Method != "PUT" || h.URL != "https://example.com/ping" || h.Headers["X-Token"] != "abc" || h.Body != "hello" || h.Client != client {
		t.Errorf("bound task = %#v, want the PUT request with its header, body and the client given", h)
	}
}

func TestBindLeavesASpecWithoutATaskUnbound(t *testing.T) {
	t.Parallel()
	if task := jobtask.Task(jobs.Job{ID: "empty"}, nil, nil); task != nil {
		t.Errorf("task = %#v, want none", task)
	}
}
