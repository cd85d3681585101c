package e2eleases

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/replicas"
	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

// Many clusters over three real replicas (issue 21: 20,000 clusters
// started 1,168 processes within a minute, load 490 on 2 cores, 925
// leases lost on one replica). Each replica owns a third of the clusters
// and hosts a duty per cluster, a command (sleep 0.2) every 2m. With the
// cap on concurrent runs and the spread first fires, every replica stays
// live and ready through the window, keeps every lease it holds (no
// generation moves, no "lease lost" line), and never has more runs in
// progress than runner.max_concurrent_runs (8).
//
// The CI version has 600 clusters and a 20 s window. The 5,000-cluster
// run is a measurement (docs/benchmarks.md, "Many clusters"):
//
//	STUDIO_BENCH_STAMPEDE=1 go test -count=1 ./internal/e2e/leases -run TestManyClusters -v -timeout 30m
//
// (STUDIO_BENCH_NORACE=1 builds the replicas without -race.)
func TestManyClustersKeepEveryReplicaReadyAndItsLeases(t *testing.T) {
	n, window := 600, 20*time.Second
	if os.Getenv("STUDIO_BENCH_STAMPEDE") == "1" {
		n, window = 5000, 60*time.Second
	}
	if s := os.Getenv("STUDIO_BENCH_STAMPEDE_CLUSTERS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil {
			t.Fatal(err)
		}
		n = v
	}
	const maxRuns = 8 // runner.max_concurrent_runs's default
	f := newFixture(t, 0, "")
	conf := `jobs:
  - id: duty
    scope: instance
    clusters: owned
    every: 2m
    run:
      command: ["sleep", "0.2"]
`
	f.config = filepath.Join(t.TempDir(), "studio.yaml")
	if err := os.WriteFile(f.config, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	// leases add, in one statement: more than leases.max_config_clusters.
	f.exec(`INSERT INTO cluster_lease (cluster) SELECT 'c' || i FROM generate_series(1, $1::int) i`, n)

	ids := []string{"r1", "r2", "r3"}
	procs := map[string]*replicaproc.Proc{}
	began := time.Now()
	for _, id := range ids {
		procs[id] = f.start(id)
	}
	f.waitSettled(120*time.Second, ids...)
	settled := time.Since(began)
	owned := f.ownedBy()
	t.Logf("%d clusters settled over %v in %s: r1 %d, r2 %d, r3 %d", n, ids, settled.Round(time.Millisecond),
		len(owned["r1"]), len(owned["r2"]), len(owned["r3"]))
	gen := map[string]int64{}
	for _, in := range f.leases() {
		gen[in.Cluster] = in.Generation
	}
	from := f.dbNow()

	// The window: every replica live and ready, every lease ok on its
	// owner, at each look (once a second).
	var problems []string
	looks := 0
	end := time.Now().Add(window)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for time.Now().Before(end) {
		<-tick.C // the measurement window's pace, not a synchronisation
		looks++
		ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
		infos, err := replicas.List(ctx, f.pool)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range infos {
			if !in.Live || in.State != replicas.StateReady {
				problems = append(problems, fmt.Sprintf("+%s: replica %s live %v state %s", time.Since(end.Add(-window)).Round(time.Second), in.ID, in.Live, in.State))
			}
		}
		if err := f.settled(ids...); err != nil {
			problems = append(problems, fmt.Sprintf("+%s: %v", time.Since(end.Add(-window)).Round(time.Second), err))
		}
	}
	moved := 0
	for _, in := range f.leases() {
		if gen[in.Cluster] != in.Generation {
			moved++
		}
	}
	for _, id := range ids {
		if procs[id].Logged("lease lost") {
			problems = append(problems, id+` logged "lease lost"`)
		}
		if procs[id].Exited() {
			problems = append(problems, id+" exited")
		}
	}
	if moved > 0 {
		problems = append(problems, fmt.Sprintf("%d leases changed generation during the window", moved))
	}

	// Runs in progress at once on each replica, from the run rows: at each
	// start, the runs of that replica started no later and not finished
	// 250 ms after it. The rows' times are the runner's clock plus its
	// offset to the database, measured again at each heartbeat; on a loaded
	// machine that measure moves by tens to hundreds of milliseconds, and
	// one run's end stamped after the next run's start by that much is not
	// a run over the cap (the slot is held from before the start's stamp to
	// after the end's). CI at load average 26 counted 10 for a cap of 8.
	// A run's row is written at its start and its end goes with the
	// store's next flush (docs/history.md): wait until every run that
	// started by the window's end has its end, and count only those, or a
	// run that ended but whose end is not flushed yet counts as running.
	replicaproc.Eventually(t, 60*time.Second, "the ends of the window's duty runs flushed", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var open int
		if err := f.pool.QueryRow(ctx, `SELECT count(*) FROM studio_job_run WHERE job_id = 'duty' AND started_at < $1 AND finished_at IS NULL`, end).Scan(&open); err != nil {
			return err
		}
		if open > 0 {
			return fmt.Errorf("%d without an end yet", open)
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rows, err := f.pool.Query(ctx, `SELECT a.replica_id, max(c), sum(1) FROM (
  SELECT a.replica_id, a.seq, (SELECT count(*) FROM studio_job_run b WHERE b.job_id = 'duty' AND b.replica_id = a.replica_id
     AND b.started_at <= a.started_at AND b.finished_at > a.started_at + interval '250 milliseconds') c
  FROM studio_job_run a WHERE a.job_id = 'duty' AND a.started_at < $1) a GROUP BY 1 ORDER BY 1`, end)
	if err != nil {
		t.Fatal(err)
	}
	var summary []string
	for rows.Next() {
		var id string
		var most, runs int64
		if err := rows.Scan(&id, &most, &runs); err != nil {
			t.Fatal(err)
		}
		summary = append(summary, fmt.Sprintf("%s %d runs, at most %d at once", id, runs, most))
		if most > maxRuns {
			problems = append(problems, fmt.Sprintf("%s had %d runs in progress at once; the cap is %d", id, most, maxRuns))
		}
	}
	rows.Close()
	var inWindow int
	var meanRun float64
	if err := f.pool.QueryRow(ctx, `SELECT count(*), coalesce(extract(epoch FROM avg(finished_at - started_at)), 0)::float8
FROM studio_job_run WHERE job_id = 'duty' AND started_at >= $1`, from).Scan(&inWindow, &meanRun); err != nil {
		t.Fatal(err)
	}
	load, _ := os.ReadFile("/proc/loadavg")
	t.Logf("window %s (%d looks): %d duty runs started in it, %.2f s each on average (sleep 0.2 through the shim); %s; load average %s",
		window, looks, inWindow, meanRun, strings.Join(summary, "; "), strings.TrimSpace(string(load)))
	if len(problems) > 0 {
		if len(problems) > 20 {
			problems = append(problems[:20], fmt.Sprintf("... %d more", len(problems)-20))
		}
		t.Fatalf("with %d clusters over 3 replicas:\n%s", n, strings.Join(problems, "\n"))
	}
}
