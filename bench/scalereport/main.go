// Command scalereport prints the tables of bench/run-scale.sh from its
// result files: CPU per fire and RSS by the number of jobs (TestBench10k
// and bench/peers, one JSON per program, job count and round under
// DIR/jobs), and by the number of replicas sharing installation jobs
// (TestMeasureScaleReplicas under DIR/replicas, with the peers at the same
// job count beside them). Every figure is the median over the rounds; CPU
// per fire is each round's CPU seconds over its fires, then the median.
//
// usage: go run ./bench/scalereport DIR
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: scalereport DIR")
		os.Exit(2)
	}
	if err := report(os.Stdout, os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "scalereport:", err)
		os.Exit(1)
	}
}

// run is the fields of either JSON that the tables use.
type run struct {
	Program   string  `json:"program"`
	Jobs      int     `json:"jobs"`
	Replicas  int     `json:"replicas"`
	WindowS   float64 `json:"window_s"`
	FiresPerS float64 `json:"fires_per_s"`
	// TestBench10k and the peers.
	CPUCores         float64 `json:"cpu_cores"`
	RSSMiBMax        float64 `json:"rss_mib_max"`
	LatenessP99ms    float64 `json:"lateness_p99_ms"`
	DBServerCPUCores float64 `json:"db_server_cpu_cores"`
	DBStatementsPerS float64 `json:"db_statements_per_s"`
	// TestMeasureScaleReplicas.
	CPUUsPerFireAll        float64 `json:"cpu_us_per_fire_all_replicas"`
	CPUUsPerFirePerReplica float64 `json:"cpu_us_per_fire_per_replica"`
	RSSMiBMedian           float64 `json:"rss_mib_median_replica"`
	DBServerCPUUsPerFire   float64 `json:"db_server_cpu_us_per_fire"`
	DBStatementsPerFire    float64 `json:"db_statements_per_fire"`
	GapOverDelayP99ms      float64 `json:"gap_over_delay_p99_ms"`
	Early                  int     `json:"early_fires"`
}

func (r run) cpuUsPerFire() float64 {
	if r.FiresPerS == 0 {
		return 0
	}
	return r.CPUCores / r.FiresPerS * 1e6
}

func (r run) dbUsPerFire() float64 {
	if r.FiresPerS == 0 {
		return 0
	}
	return r.DBServerCPUCores / r.FiresPerS * 1e6
}

func load(dir string) ([]run, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	var out []run
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var r run
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("read %s: %w", f, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// group is the runs of one table row.
type group struct {
	key  string
	runs []run
}

func groups(rs []run, key func(run) string, less func(a, b run) int) []group {
	slices.SortStableFunc(rs, less)
	var out []group
	for _, r := range rs {
		k := key(r)
		if len(out) == 0 || out[len(out)-1].key != k {
			out = append(out, group{key: k})
		}
		out[len(out)-1].runs = append(out[len(out)-1].runs, r)
	}
	return out
}

func rank(program string) int {
	return map[string]int{"studioctl-runner": 0, "studioctl-replicas": 0, "gocron-v2": 1, "gocron-v2-nosingleton": 2, "robfig-cron-v3": 3}[program]
}

func report(w io.Writer, dir string) error {
	jobs, err := load(filepath.Join(dir, "jobs"))
	if err != nil {
		return err
	}
	reps, err := load(filepath.Join(dir, "replicas"))
	if err != nil {
		return err
	}
	if len(jobs)+len(reps) == 0 {
		return fmt.Errorf("no result files under %s/jobs or %s/replicas", dir, dir)
	}
	if len(jobs) > 0 {
		fmt.Fprintln(w, "CPU per fire and RSS by the number of jobs (one process; studioctl-runner is TestBench10k: instance jobs, history on, its own PostgreSQL):")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| jobs | program | rounds | fires/s | client CPU µs/fire | PostgreSQL server CPU µs/fire | RSS MiB | lateness p99 ms | DB statements/s |")
		fmt.Fprintln(w, "|---:|---|---:|---:|---:|---:|---:|---:|---:|")
		for _, g := range groups(jobs, func(r run) string { return fmt.Sprint(r.Jobs, r.Program) }, func(a, b run) int {
			if a.Jobs != b.Jobs {
				return a.Jobs - b.Jobs
			}
			return rank(a.Program) - rank(b.Program)
		}) {
			r0 := g.runs[0]
			db, stmts := "-", "-"
			if strings.HasPrefix(r0.Program, "studioctl") {
				db = fmt.Sprintf("%.0f", med(g.runs, run.dbUsPerFire))
				stmts = fmt.Sprintf("%.0f", med(g.runs, func(r run) float64 { return r.DBStatementsPerS }))
			}
			fmt.Fprintf(w, "| %d | %s | %d | %.0f | %.1f | %s | %.1f | %.1f | %s |\n", r0.Jobs, r0.Program, len(g.runs),
				med(g.runs, func(r run) float64 { return r.FiresPerS }), med(g.runs, run.cpuUsPerFire), db,
				med(g.runs, func(r run) float64 { return r.RSSMiBMax }), med(g.runs, func(r run) float64 { return r.LatenessP99ms }), stmts)
		}
		fmt.Fprintln(w)
	}
	if len(reps) > 0 {
		fmt.Fprintln(w, "Replicas sharing installation jobs (real `studioctl run` processes, one PostgreSQL; each replica hosts every job; a fire is one run anywhere), and the peers with as many jobs in one process:")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| replicas | jobs | program | rounds | fires/s | CPU µs/fire, all replicas | CPU µs/fire, each replica | RSS MiB per replica (median) | PostgreSQL server CPU µs/fire | DB statements/fire | gap over delay p99 ms | early fires |")
		fmt.Fprintln(w, "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
		for _, g := range groups(reps, func(r run) string { return fmt.Sprint(r.Program, r.Replicas, r.Jobs) }, func(a, b run) int {
			if d := rank(a.Program) - rank(b.Program); d != 0 {
				return d
			}
			if a.Replicas != b.Replicas {
				return a.Replicas - b.Replicas
			}
			return a.Jobs - b.Jobs
		}) {
			r0 := g.runs[0]
			fires := med(g.runs, func(r run) float64 { return r.FiresPerS })
			if r0.Program != "studioctl-replicas" {
				fmt.Fprintf(w, "| (1 process) | %d | %s | %d | %.0f | %.1f | %.1f | %.1f | - | - | - | - |\n", r0.Jobs, r0.Program, len(g.runs), fires,
					med(g.runs, run.cpuUsPerFire), med(g.runs, run.cpuUsPerFire), med(g.runs, func(r run) float64 { return r.RSSMiBMax }))
				continue
			}
			early := 0
			for _, r := range g.runs {
				early += r.Early
			}
			fmt.Fprintf(w, "| %d | %d | %s | %d | %.0f | %.1f | %.1f | %.1f | %.0f | %.1f | %.0f | %d |\n", r0.Replicas, r0.Jobs, r0.Program, len(g.runs), fires,
				med(g.runs, func(r run) float64 { return r.CPUUsPerFireAll }), med(g.runs, func(r run) float64 { return r.CPUUsPerFirePerReplica }),
				med(g.runs, func(r run) float64 { return r.RSSMiBMedian }), med(g.runs, func(r run) float64 { return r.DBServerCPUUsPerFire }),
				med(g.runs, func(r run) float64 { return r.DBStatementsPerFire }), med(g.runs, func(r run) float64 { return r.GapOverDelayP99ms }), early)
		}
		fmt.Fprintln(w)
	}
	return nil
}

// med is the median of f over rs (the mean of the middle two for an even
// count).
func med(rs []run, f func(run) float64) float64 {
	v := make([]float64, 0, len(rs))
	for _, r := range rs {
		v = append(v, f(r))
	}
	slices.Sort(v)
	n := len(v)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}
