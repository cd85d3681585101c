package e2ejobs

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/clock"
	"github.com/studioctl/studioctl/internal/host"
	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/replicaproc"
)

// TestSharedScheduleSkewedClocks runs three replicas in this process, one
// with its clock 40 s fast, one 20 s fast, one on time (injected offset
// clocks), sharing a cron job every minute. Each replica measures its
// offset from the database and fires at the cron time in database time:
// one run per minute from the first tick on, each within 1 s of the cron
// time. On main the fast replica ran 40 s early and the others ran the
// same tick again.
func TestSharedScheduleSkewedClocks(t *testing.T) {
	t.Parallel()
	const ticks = 3
	f := newFixture(t)
	list, err := jobs.Parse("skew.yaml", []byte(fmt.Sprintf(`
jobs:
  - id: skew
    scope: installation
    cron: "* * * * *"
    run:
      command: ["sh", "-c", %q]
    env:
      EXP_DB: %q
      EXP_DIR: %q
      PATH: %q
`, recordRun("0.1"), f.dbURL, f.dir, jobPath())))
	if err != nil {
		t.Fatal(err)
	}
	skews := map[string]time.Duration{"skew-40": 40 * time.Second, "skew-20": 20 * time.Second, "skew-0": 0}
	for id, by := range skews {
		h, err := host.New(host.Options{
			ConnString: f.dbURL, ID: id, Version: "test", DrainDelay: 50 * time.Millisecond,
			Jobs: list, Clock: clock.Offset{By: by}, NoHousekeeping: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Start(context.Background()); err != nil {
			t.Fatalf("start %s: %v", id, err)
		}
		t.Cleanup(h.Stop)
	}
	started := f.dbNow()
	firstTick := started.Truncate(time.Minute).Add(time.Minute)
	lastTick := firstTick.Add((ticks - 1) * time.Minute)
	var got []execution
	replicaproc.Eventually(t, time.Until(lastTick)+time.Minute+30*time.Second, fmt.Sprintf("%d cron ticks", ticks), func() error {
		if f.dbNow().Before(lastTick.Add(5 * time.Second)) {
			return fmt.Errorf("waiting for the tick of %s", lastTick.Format(time.TimeOnly))
		}
		l, err := f.executions("skew", time.Time{})
		if err != nil {
			return err
		}
		got = l
		return nil
	})
	perTick := map[time.Time]int{}
	for _, e := range got {
		tick := e.Start.Truncate(time.Minute)
		off := e.Start.Sub(tick)
		t.Logf("execution %d on %s at %s: %s after the cron time", e.Seq, e.Replica, e.Start.Format(time.RFC3339Nano), off.Round(time.Millisecond))
		if e.Start.Before(firstTick.Add(-time.Second)) {
			t.Errorf("execution %d on %s at %s, before the first cron time %s", e.Seq, e.Replica, e.Start.Format(time.RFC3339Nano), firstTick.Format(time.TimeOnly))
		}
		if off > time.Second {
			t.Errorf("execution %d on %s started %s after its cron time, want within 1s", e.Seq, e.Replica, off)
		}
		perTick[tick]++
	}
	for tick := firstTick; !tick.After(lastTick); tick = tick.Add(time.Minute) {
		if n := perTick[tick]; n != 1 {
			t.Errorf("%d executions for the cron time %s, want 1", n, tick.Format(time.TimeOnly))
		}
	}
	if t.Failed() {
		runs, _ := f.runs("skew")
		for _, r := range runs {
			t.Logf("run %d on %s at %s: %s %s", r.Seq, r.ReplicaID, r.StartedAt.Format(time.RFC3339Nano), r.Outcome, r.Error)
		}
	}
}

// jobPath is the PATH of a job run in this process: the folder of the
// harness's psql first, as for the replicas the binary runs.
func jobPath() string {
	if studioctlBin.PathDir == "" {
		return os.Getenv("PATH")
	}
	return studioctlBin.PathDir + string(os.PathListSeparator) + os.Getenv("PATH")
}
