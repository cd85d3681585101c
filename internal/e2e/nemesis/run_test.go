package e2enemesis

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

// TestNemesis is the nemesis run of issue 26 (docs/reliability.md): the
// workload, the nemesis from a printed seed for the plan's length, a quiet
// period, then the checker. Short by default (the CI run, a fixed seed);
// STUDIO_NEMESIS=1h makes a long one and STUDIO_NEMESIS_SEED=N replays.
func TestNemesis(t *testing.T) {
	p := planFromEnv(t)
	replay := fmt.Sprintf("STUDIO_NEMESIS_SEED=%d", p.Seed)
	if p.Long {
		replay = fmt.Sprintf("STUDIO_NEMESIS=%s %s", p.Length, replay)
	}
	t.Logf("nemesis seed %d, length %s, quiet %s (replay: %s go test ./internal/e2e/nemesis -run TestNemesis -timeout 2h)", p.Seed, p.Length, p.Quiet, replay)
	began := time.Now()
	pair := newPGPair(t, schema)
	w := newWorkload(t, pair)
	admin := testPool(t, pair.URL())
	t.Logf("setup took %s", time.Since(began).Round(100*time.Millisecond))

	begin := time.Now()
	n := newNemesis(t, p, w, pair, admin)
	faults := n.run(p.Length, p)
	healed := time.Now()
	t.Logf("nemesis: %d faults, all healed %s after the start", len(faults), healed.Sub(begin).Round(100*time.Millisecond))
	var harness []string
	for _, f := range faults {
		if f.Err != "" {
			harness = append(harness, f.String())
		}
	}

	// The final state, polled from the last heal: within finalWithin.
	var ids []string
	for _, r := range w.replicas {
		ids = append(ids, r.id)
	}
	final, finalOK := "", false
	var took time.Duration
	deadline := healed.Add(finalWithin)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
		final = finalState(ctx, admin, ids)
		cancel()
		took = time.Since(healed)
		if final == "" {
			finalOK = true
			final = "every replica ready, every cluster owned by its placement, no stale lock, no overdue job"
			break
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(replicaproc.PollEvery)
	}
	// The rest of the quiet period: a fault-free stretch for the checker.
	if rest := time.Until(healed.Add(p.Quiet)); rest > 0 {
		pause(rest)
	}
	end := time.Now()
	// Every replica stops cleanly (SIGTERM: a drain, which flushes its run
	// store), so the run rows of the last executions are written before
	// the checker reads them.
	for _, r := range w.replicas {
		r.current().SignalErr(syscall.SIGTERM)
	}
	for _, r := range w.replicas {
		if err := waitExit(r.current(), replicaproc.ExitTimeout); err != nil {
			t.Error(err)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := check(ctx, admin, faults, begin, end)
	if err != nil {
		t.Fatalf("checker: %v", err)
	}
	rep.Final, rep.FinalOK, rep.FinalTook = final, finalOK, took
	var b strings.Builder
	fmt.Fprintf(&b, "nemesis seed %d, length %s: %d faults, wall %s\n", p.Seed, p.Length, len(faults), time.Since(began).Round(time.Second))
	for _, f := range faults {
		b.WriteString("  " + f.String() + "\n")
	}
	b.WriteString(rep.String(faults))
	t.Log("\n" + b.String())
	if len(harness) > 0 {
		t.Errorf("seed %d: faults the nemesis could not apply or heal:\n%s", p.Seed, strings.Join(harness, "\n"))
	}
	if rep.failed() {
		t.Errorf("seed %d: the checker found what no documented rule allows (replay: %s); the report above lists each case with its faults", p.Seed, replay)
	}
}
