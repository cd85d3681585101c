package e2ejobs

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

// zicPath is the zone compiler (Debian's tzdata ships it).
const zicPath = "/usr/sbin/zic"

// testZone is the zone compiled for TestZoneChangeRunsEachLocalTimeOnce.
const testZone = "Studio/Shift"

// compileZone compiles testZone, whose clocks go forward one minute at
// change (local times [change, change+1m) do not exist) and back one
// minute at change+1m (local times [change+1m, change+2m) occur twice:
// first at the instants [change, change+1m), then [change+1m, change+2m)).
// It returns the folder to give as ZONEINFO.
func compileZone(t *testing.T, change time.Time) string {
	t.Helper()
	dir := t.TempDir()
	until := func(at time.Time) string { return at.UTC().Format("2006 Jan 2 15:04:05") + "u" }
	src := fmt.Sprintf("Zone %s 0:00 - AAA %s\n\t0:01 - BBB %s\n\t0:00 - CCC\n",
		testZone, until(change), until(change.Add(time.Minute)))
	file := filepath.Join(dir, "shift.zi")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "zoneinfo")
	if b, err := exec.Command(zicPath, "-d", out, file).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", zicPath, err, b)
	}
	// The compiled zone is the one meant: read it as the replicas will.
	data, err := os.ReadFile(filepath.Join(out, testZone))
	if err != nil {
		t.Fatal(err)
	}
	loc, err := time.LoadLocationFromTZData(testZone, data)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		at   time.Time
		want int
	}{{change.Add(-time.Second), 0}, {change, 60}, {change.Add(time.Minute - time.Second), 60}, {change.Add(time.Minute), 0}} {
		if _, off := c.at.In(loc).Zone(); off != c.want {
			t.Fatalf("compiled zone: offset %d s at %s, want %d", off, c.at, c.want)
		}
	}
	return out
}

// nominals returns how many runs of job had each nominal time.
func (f *fixture) nominals(job string) (map[time.Time]int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	rows, err := f.pool.Query(ctx, `SELECT nominal_at, count(*) FROM studio_job_run
WHERE job_id = $1 AND nominal_at IS NOT NULL AND finished_at IS NOT NULL GROUP BY nominal_at`, job)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[time.Time]int{}
	for rows.Next() {
		var at time.Time
		var n int
		if err := rows.Scan(&at, &n); err != nil {
			return nil, err
		}
		out[at.UTC()] = n
	}
	return out, rows.Err()
}

// TestZoneChangeRunsEachLocalTimeOnce runs two replicas across the two
// changes of a zone compiled for the test (ZONEINFO points them at it),
// a minute or two ahead: the clocks go forward a minute at T and back a
// minute at T+1m. Each local time runs once, on one replica:
//   - a cron at the local minute that does not exist runs once, at T (the
//     first instant after the gap);
//   - a cron at the local minute that occurs twice runs once, at its
//     first occurrence (T), not again at T+1m;
//   - a cron every minute runs at T and T+2m, not at T+1m (the second pass
//     of the repeated minute).
func TestZoneChangeRunsEachLocalTimeOnce(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(zicPath); err != nil {
		t.Fatalf("the zone compiler is needed: %v", err)
	}
	// The change at the first whole minute at least 35 s ahead: time for
	// two replicas to start, even under load. (The test's clock is the
	// database's: one machine.)
	change := time.Now().Add(35 * time.Second).Truncate(time.Minute).Add(time.Minute).UTC()
	zoneinfo := compileZone(t, change)
	gap, twice := change, change.Add(time.Minute) // local minutes (offset 0 before the change)
	cronAt := func(local time.Time) string { return fmt.Sprintf("%d %d * * *", local.Minute(), local.Hour()) }
	list := []jobConf{
		{ID: "gap", Scope: "installation", Cron: cronAt(gap), TZ: testZone, Run: runConf{Command: []string{"sh", "-c", recordRun("0")}}},
		{ID: "twice", Scope: "installation", Cron: cronAt(twice), TZ: testZone, Run: runConf{Command: []string{"sh", "-c", recordRun("0")}}},
		{ID: "minutely", Scope: "installation", Cron: "* * * * *", TZ: testZone, Run: runConf{Command: []string{"sh", "-c", recordRun("0")}}},
	}
	f := newFixture(t, list...)
	var ps []*replicaproc.Proc
	for _, id := range []string{"tz-1", "tz-2"} {
		ps = append(ps, studioctlBin.Start(t, replicaproc.Options{
			ID:          id,
			DatabaseURL: f.dbURL,
			Args:        []string{"--config", f.config},
			Env:         []string{"EXP_DB=" + f.dbURL, "EXP_DIR=" + f.dir, "ZONEINFO=" + zoneinfo},
			FailOnRace:  true,
		}))
	}
	for _, p := range ps {
		p.WaitReady(t)
	}
	if now := f.dbNow(); !now.Before(change) {
		t.Fatalf("the replicas were ready at %s, after the change at %s: the machine is too slow for this test", now, change)
	}
	// Wait for the run of T+2m (the every-minute job) to end; by then a
	// run at T+1m would have happened too.
	end := change.Add(2 * time.Minute)
	replicaproc.Eventually(t, time.Until(end)+90*time.Second, "the every-minute run of T+2m", func() error {
		n, err := f.nominals("minutely")
		if err != nil {
			return err
		}
		if n[end] == 0 {
			return fmt.Errorf("no finished run with nominal time %s yet (runs: %v)", end, n)
		}
		return nil
	})
	for _, c := range []struct {
		job  string
		want []time.Time // the nominal times at or after the change, each once
	}{
		{"gap", []time.Time{change}},
		{"twice", []time.Time{change}},
		{"minutely", []time.Time{change, end}},
	} {
		n, err := f.nominals(c.job)
		if err != nil {
			t.Fatal(err)
		}
		var got []time.Time
		for at, count := range n {
			if count != 1 {
				t.Errorf("%s: %d runs with nominal time %s, want 1", c.job, count, at)
			}
			if !at.Before(change) {
				got = append(got, at)
			}
		}
		slices.SortFunc(got, time.Time.Compare)
		if !slices.EqualFunc(got, c.want, time.Time.Equal) {
			t.Errorf("%s: nominal times from the change on %v, want %v (T = %s)", c.job, got, c.want, change)
		}
		// The job itself ran once per nominal time, never before it.
		execs, err := f.executions(c.job, change.Add(-time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		var after []execution
		for _, e := range execs {
			if !e.Start.Before(change) {
				after = append(after, e)
			}
		}
		if len(after) != len(c.want) {
			t.Errorf("%s: %d executions from the change on, want %d: %+v", c.job, len(after), len(c.want), after)
		}
	}
	stopAll(t, ps)
}
