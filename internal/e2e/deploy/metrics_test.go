package e2edeploy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/studioctl/studioctl/internal/testkit/pgtest"
	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

// promtool is the path of promtool, or the test fails saying how to get it.
func promtool(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool is needed (apt-get install prometheus; .ci/run installs it): %v", err)
	}
	return p
}

// runIn runs a command in dir and fails the test with its output on error.
func runIn(t testing.TB, dir string, stdin []byte, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestAlertRules runs promtool on the rules, their unit tests (one or
// more per alert) and the example Prometheus configuration.
func TestAlertRules(t *testing.T) {
	pt := promtool(t)
	dir := deployPath("prometheus")
	runIn(t, dir, nil, pt, "check", "rules", "alerts.yaml")
	runIn(t, dir, nil, pt, "test", "rules", "alerts_test.yaml")
	runIn(t, dir, nil, pt, "check", "config", "prometheus.example.yaml")

	// Every alert has a unit test that expects it to fire.
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(readDeploy(t, "prometheus", "alerts.yaml"), &rules); err != nil {
		t.Fatal(err)
	}
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string           `yaml:"alertname"`
				ExpAlerts []map[string]any `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(readDeploy(t, "prometheus", "alerts_test.yaml"), &tests); err != nil {
		t.Fatal(err)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	var n int
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			if !fires[r.Alert] || !quiet[r.Alert] {
				t.Errorf("alert %s: alerts_test.yaml needs a case where it fires and one where it does not (fires %v, quiet %v)", r.Alert, fires[r.Alert], quiet[r.Alert])
			}
		}
	}
	// The alerts the issue asks for (issue 25, item 6).
	if n < 8 {
		t.Errorf("%d alerts, want at least the 8 of issue 25", n)
	}
}

// metricName matches the metric names in PromQL that a replica exports:
// studioctl's own, and the Go and process collectors'.
var metricName = regexp.MustCompile(`\b(?:studio|process|go)_[a-z0-9_]+\b`)

// prometheusOwn are the names Prometheus makes itself, not the replica.
var prometheusOwn = []string{"up"}

// namesInRules are the metric names alerts.yaml uses.
func namesInRules(t testing.TB) map[string][]string {
	t.Helper()
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(readDeploy(t, "prometheus", "alerts.yaml"), &rules); err != nil {
		t.Fatal(err)
	}
	names := map[string][]string{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			for _, m := range metricName.FindAllString(r.Expr, -1) {
				names[m] = append(names[m], "alerts.yaml "+r.Alert)
			}
			if strings.Contains(r.Expr, "up{") {
				names["up"] = append(names["up"], "alerts.yaml "+r.Alert)
			}
		}
	}
	return names
}

// namesInDashboard are the metric names the dashboard's queries use.
func namesInDashboard(t testing.TB) map[string][]string {
	t.Helper()
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(readDeploy(t, "grafana", "studioctl.json"), &dash); err != nil {
		t.Fatalf("grafana/studioctl.json: %v", err)
	}
	names := map[string][]string{}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("dashboard panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			for _, m := range metricName.FindAllString(tg.Expr, -1) {
				names[m] = append(names[m], "studioctl.json panel "+p.Title)
			}
		}
	}
	for _, v := range dash.Templating.List {
		for _, m := range metricName.FindAllString(v.Definition, -1) {
			names[m] = append(names[m], "studioctl.json variable")
		}
	}
	return names
}

// exported are the sample names on a /metrics page (a histogram's
// _bucket, _sum and _count included).
func exported(body string) map[string]bool {
	have := map[string]bool{}
	for _, line := range strings.Split(body, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name := line
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name = line[:i]
		}
		have[name] = true
	}
	return have
}

// TestAlertsAndDashboardUseExportedMetrics starts a replica whose jobs
// fill every series the rules and the dashboard read (a failing job, a
// job whose lock another holder has, runs that finish), and fails for
// each metric name they use that its /metrics lacks, listing them all.
// promtool check metrics must pass on the same page.
func TestAlertsAndDashboardUseExportedMetrics(t *testing.T) {
	pt := promtool(t)
	want := namesInRules(t)
	for k, v := range namesInDashboard(t) {
		want[k] = append(want[k], v...)
	}

	dbURL := pgtest.NewDB(t)
	pool := openPool(t, dbURL)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Another holder has the lock of "held" for an hour: the replica skips
	// it on every tick.
	if _, err := pool.Exec(ctx, `INSERT INTO shedlock (name, lock_until, locked_at, locked_by)
VALUES ('held', now() + interval '1 hour', now(), 'another-host')`); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(srv.Close)
	// The failing job is an sql: job run as the replica's role, knowingly
	// (database.sql_as_replica): it only has to fail.
	conf := fmt.Sprintf(`clusters: [c1, c2]
database:
  sql_as_replica: true
jobs:
  - id: fails
    scope: installation
    every: 1s
    run:
      sql: "SELECT 1/0"
  - id: held
    scope: installation
    every: 1s
    run:
      http: {url: %q}
  - id: works
    scope: instance
    every: 1s
    run:
      http: {url: %q}
`, srv.URL, srv.URL)
	path := filepath.Join(t.TempDir(), "studio.yaml")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	// Installation-level series (metrics.per_job off): every counter is
	// there from the start, with job_id="" (docs/metrics.md: the names are
	// the same in both modes), so a metric that only an event fills (a
	// timeout, a lost lock) is checked too.
	p := studioctlBin.Start(t, replicaproc.Options{ID: "metrics-1", DatabaseURL: dbURL, Args: []string{"--config", path},
		Env: []string{"STUDIO_METRICS_PER_JOB=off"}})
	addr := p.WaitReady(t)

	// Wait until the series the jobs fill are there (a failure, a skip, a
	// success), then compare.
	var body string
	replicaproc.Eventually(t, 30*time.Second, "the job series on /metrics", func() error {
		code, b, err := replicaproc.Get(addr, "/metrics")
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("/metrics %d %v", code, err)
		}
		body = b
		// The overdue series come with the sampler's first read, which a
		// loaded machine (load 53 in a local CI run) may make late.
		for _, s := range []string{`studio_job_failing{job_id="fails"}`, `studio_job_runs_total{job_id="",outcome="succeeded"}`, `studio_job_run_duration_seconds_bucket{job_id=""`,
			`studio_job_overdue_seconds{`} {
			if !strings.Contains(body, s) {
				return fmt.Errorf("no %s yet", s)
			}
		}
		return nil
	})
	have := exported(body)
	var missing []string
	for name, where := range want {
		if have[name] || slices.Contains(prometheusOwn, name) {
			continue
		}
		slices.Sort(where)
		missing = append(missing, fmt.Sprintf("%s (used by %s)", name, strings.Join(slices.Compact(where), ", ")))
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("%d metric names used by deploy/prometheus and deploy/grafana are not on a live replica's /metrics:\n  %s", len(missing), strings.Join(missing, "\n  "))
	}
	t.Logf("%d metric names checked against /metrics", len(want))

	// promtool check metrics: the exposition passes Prometheus's lint.
	runIn(t, "", []byte(body+"\n"), pt, "check", "metrics")
}
