package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/pgcluster"
)

// On the embedded default, `studioctl demo` runs its replicas' sql: jobs as
// the embedded database's login of studio_sql_job, with no opt-out (issue
// 21, item 3): its replicas get STUDIO_DATABASE_URL, so without that login
// as database.sql_url they would refuse to start; they start, and the jobs
// record their executions through the grants the demo made.
func TestDemoOnTheEmbeddedDefaultRunsItsSQLJobsAsTheJobsLogin(t *testing.T) {
	if _, err := pgcluster.FindBinDir(); err != nil {
		t.Fatal(err) // never skip
	}
	bin := binary(t)
	base, err := os.MkdirTemp("", "studioctl-demo-embedded-")
	if err != nil {
		t.Fatal(err)
	}
	// The postgres user runs the server when the test runs as root.
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	emb := filepath.Join(base, "embedded")
	t.Cleanup(func() {
		data := filepath.Join(emb, "data")
		if _, err := os.Stat(filepath.Join(data, "postmaster.pid")); err == nil {
			if c, err := pgcluster.New(data, 0, ""); err == nil {
				c.Stop(context.Background())
			}
		}
		os.RemoveAll(base)
	})
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), demoTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin.Path, "demo", "--duration", "6s", "-o", "json")
	cmd.Dir = dir
	// No database configured at all: no PG* variable either.
	for _, kv := range bin.Env(dir, "STUDIO_EMBEDDED_DIR="+emb, "TMPDIR="+dir) {
		if !strings.HasPrefix(kv, "PG") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err = cmd.Run()
	t.Logf("demo took %s", time.Since(start).Round(100*time.Millisecond))
	if err != nil {
		t.Fatalf("demo: %v\nstderr:\n%s\nstdout:\n%s", err, stderr.String(), stdout.String())
	}
	var rep Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("stdout is not the report: %v\n%s", err, stdout.String())
	}
	if rep.Runs == 0 || len(rep.ExecutionsPerReplica) == 0 || rep.OverlappingPairs != 0 {
		t.Errorf("runs %d, executions per replica %v, overlaps %d: want recorded executions and no overlap",
			rep.Runs, rep.ExecutionsPerReplica, rep.OverlappingPairs)
	}
	pw, err := os.ReadFile(filepath.Join(emb, "pgpass-sql-jobs"))
	if err != nil {
		t.Fatal(err)
	}
	secret := strings.TrimSpace(string(pw)[strings.LastIndex(strings.TrimSpace(string(pw)), ":")+1:])
	if secret == "" || strings.Contains(stdout.String()+stderr.String(), secret) {
		t.Errorf("the sql jobs' password is empty or shows in the demo's output")
	}
}

// The replicas' config opts out only when there is no jobs' login.
func TestTheDemoConfigOptsOutOnlyWithoutAJobsLogin(t *testing.T) {
	if !strings.Contains(configYAML(true), "\n  sql_as_replica: true\n") {
		t.Error("without a jobs' login, the config does not set database.sql_as_replica")
	}
	if strings.Contains(configYAML(false), "sql_as_replica") {
		t.Error("with a jobs' login, the config sets database.sql_as_replica")
	}
}
