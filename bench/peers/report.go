package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
)

// report prints every run, then the median of each program's runs and the
// studioctl/peer ratios of CPU and RSS.
func report(w io.Writer, files []string) error {
	if len(files) == 0 {
		return fmt.Errorf("report: no result files")
	}
	byProgram := map[string][]result{}
	var order []string
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	header := "program\tfile\tfires/s\tlate p50 ms\tlate mean ms\tlate p99 ms\tlate max ms\tCPU cores\tCPU us/fire\tserver us/fire\trunq wait ms/s\tRSS max MiB\theap MiB\tDB stmt/s\tDB server CPU\t"
	fmt.Fprintln(w, "Runs:")
	fmt.Fprintln(tw, header)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var r result
		if err := json.Unmarshal(b, &r); err != nil {
			return fmt.Errorf("read %s: %w", f, err)
		}
		if _, seen := byProgram[r.Program]; !seen {
			order = append(order, r.Program)
		}
		byProgram[r.Program] = append(byProgram[r.Program], r)
		row(tw, r.Program, filepath.Base(f), r)
	}
	tw.Flush()

	med := map[string]result{}
	fmt.Fprintln(w, "\nMedians:")
	fmt.Fprintln(tw, "program\truns\tfires/s\tlate p50 ms\tlate mean ms\tlate p99 ms\tlate max ms\tCPU cores\tCPU us/fire\tserver us/fire\trunq wait ms/s\tRSS max MiB\theap MiB\tDB stmt/s\tDB server CPU\t")
	slices.SortFunc(order, func(a, b string) int { return rank(a) - rank(b) })
	for _, p := range order {
		rs := byProgram[p]
		m := result{
			Program:          p,
			FiresPerS:        median(rs, func(r result) float64 { return r.FiresPerS }),
			LatenessP50ms:    median(rs, func(r result) float64 { return r.LatenessP50ms }),
			LatenessMean:     median(rs, func(r result) float64 { return r.LatenessMean }),
			LatenessP99ms:    median(rs, func(r result) float64 { return r.LatenessP99ms }),
			LatenessMaxMs:    median(rs, func(r result) float64 { return r.LatenessMaxMs }),
			CPUCores:         median(rs, func(r result) float64 { return r.CPUCores }),
			RunqWaitMsPerS:   median(rs, func(r result) float64 { return r.RunqWaitMsPerS }),
			RSSMiBMax:        median(rs, func(r result) float64 { return r.RSSMiBMax }),
			HeapInuseMiB:     median(rs, func(r result) float64 { return r.HeapInuseMiB }),
			DBStatementsPerS: median(rs, func(r result) float64 { return r.DBStatementsPerS }),
			DBServerCPUCores: median(rs, func(r result) float64 { return r.DBServerCPUCores }),
		}
		med[p] = m
		row(tw, p, fmt.Sprint(len(rs)), m)
	}
	tw.Flush()

	for _, name := range []string{"studioctl-runner", "studioctl-base"} {
		s, ok := med[name]
		if !ok {
			continue
		}
		fmt.Fprintf(w, "\nRatios of medians (%s / peer):\n", name)
		fmt.Fprintln(tw, "peer\tCPU\tRSS\tCPU incl. PostgreSQL server\t")
		for _, p := range []string{"gocron-v2", "gocron-v2-nosingleton", "robfig-cron-v3", "bare-timer-heap"} {
			m, ok := med[p]
			if !ok || m.CPUCores == 0 || m.RSSMiBMax == 0 {
				continue
			}
			fmt.Fprintf(tw, "%s\t%.1fx\t%.1fx\t%.1fx\t\n", p, s.CPUCores/m.CPUCores, s.RSSMiBMax/m.RSSMiBMax,
				(s.CPUCores+s.DBServerCPUCores)/m.CPUCores)
		}
		tw.Flush()
	}
	return tw.Flush()
}

func row(w io.Writer, name, second string, r result) {
	db, server, serverPerFire := "-", "-", "-"
	if strings.HasPrefix(r.Program, "studioctl") {
		db, server = fmt.Sprintf("%.1f", r.DBStatementsPerS), fmt.Sprintf("%.3f", r.DBServerCPUCores)
		if r.FiresPerS > 0 {
			serverPerFire = fmt.Sprintf("%.1f", r.DBServerCPUCores/r.FiresPerS*1e6)
		}
	}
	perFire := "-"
	if r.FiresPerS > 0 {
		perFire = fmt.Sprintf("%.1f", r.CPUCores/r.FiresPerS*1e6)
	}
	fmt.Fprintf(w, "%s\t%s\t%.0f\t%.2f\t%.2f\t%.2f\t%.1f\t%.3f\t%s\t%s\t%.0f\t%.1f\t%.1f\t%s\t%s\t\n", name, second, r.FiresPerS,
		r.LatenessP50ms, r.LatenessMean, r.LatenessP99ms, r.LatenessMaxMs, r.CPUCores, perFire, serverPerFire, r.RunqWaitMsPerS, r.RSSMiBMax, r.HeapInuseMiB, db, server)
}

func rank(program string) int {
	return map[string]int{"studioctl-runner": 0, "studioctl-base": 1, "gocron-v2": 2, "gocron-v2-nosingleton": 3, "robfig-cron-v3": 4, "bare-timer-heap": 5}[program]
}

// median of f over rs (the mean of the middle two for an even count).
func median(rs []result, f func(result) float64) float64 {
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
