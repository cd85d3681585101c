package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTheReportQuotesTheMedianOfTheRoundsPerFire(t *testing.T) {
	dir := t.TempDir()
	write := func(sub, name, body string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, sub, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Three rounds of the runner at 100 jobs: 100 fires/s at 0.01, 0.03
	// and 0.02 cores (100, 300 and 200 µs a fire): the median is 200.
	for i, cores := range []string{"0.01", "0.03", "0.02"} {
		write("jobs", "studioctl-100-"+string(rune('1'+i))+".json",
			`{"program":"studioctl-runner","jobs":100,"fires_per_s":100,"cpu_cores":`+cores+`,"db_server_cpu_cores":0.005,"rss_mib_max":20}`)
	}
	write("jobs", "robfig-100-1.json", `{"program":"robfig-cron-v3","jobs":100,"fires_per_s":100,"cpu_cores":0.001,"rss_mib_max":5}`)
	write("replicas", "replicas-3-1.json", `{"program":"studioctl-replicas","replicas":3,"jobs":1000,"fires_per_s":290,
		"cpu_us_per_fire_all_replicas":3000,"cpu_us_per_fire_per_replica":1000,"rss_mib_median_replica":40,"db_server_cpu_us_per_fire":2000,
		"db_statements_per_fire":13,"gap_over_delay_p99_ms":50,"early_fires":0}`)
	var b strings.Builder
	if err := report(&b, dir); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"| 100 | studioctl-runner | 3 | 100 | 200.0 | 50 | 20.0 |",
		"| 100 | robfig-cron-v3 | 1 | 100 | 10.0 | - | 5.0 |",
		"| 3 | 1000 | studioctl-replicas | 1 | 290 | 3000.0 | 1000.0 | 40.0 | 2000 | 13.0 | 50 | 0 |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if lines := strings.Index(out, "studioctl-runner"); lines > strings.Index(out, "robfig-cron-v3") {
		t.Errorf("studioctl is not listed before the peers:\n%s", out)
	}
}

func TestTheReportOfAnEmptyFolderIsAnError(t *testing.T) {
	if err := report(&strings.Builder{}, t.TempDir()); err == nil || !strings.Contains(err.Error(), "no result files") {
		t.Fatalf("report: %v; want no result files", err)
	}
}
