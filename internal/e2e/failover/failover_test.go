package e2efailover

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/leases"
	"github.com/studioctl/studioctl/internal/replicas"
	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

const (
	// unreadyWithin: once no primary answers, /readyz must fail by then
	// (its database check has a 2 s deadline; the bus's own check 10 s).
	unreadyWithin = 15 * time.Second
	// healWithin bounds the recovery after the promotion: a heartbeat, the
	// bus and readiness, with no restart.
	healWithin = 30 * time.Second
	// lostUnlockWithin is how long a lost unlock can hold a job back: its
	// lock's lockAtMostFor (max(60 s, the gap) for these jobs).
	lostUnlockWithin = 60 * time.Second
	// secret is the URL's password: the servers trust every local
	// connection, so it is never checked, but it must never be shown.
	secret = "Failover-Secret-77"
)

// withPassword puts secret into a postgres://user@ URL.
func withPassword(url string) string {
	return strings.Replace(url, "postgres://postgres@", "postgres://postgres:"+secret+"@", 1)
}

// TestFailoverToThePromotedStandbyHealsEveryReplica: two replicas on the
// multi-host URL run two installation jobs that record their own
// executions (in a file) and hold two cluster leases. The primary is
// stopped with -m immediate; while no primary answers, every replica's
// /readyz must fail; then the standby is promoted. Every replica must heal
// without a restart: /readyz 200, a heartbeat on the new primary, the bus
// reconnected and resynced, new runs recorded by the runner and its store,
// the leases renewed. No two executions of one job that both started
// after the promotion may overlap; an overlap involving a run that started
// before the primary stopped is the documented bound (docs/failover.md)
// and is logged. The operator commands work through the same URL, and the
// password never shows.
func TestFailoverToThePromotedStandbyHealsEveryReplica(t *testing.T) {
	p := newPair(t, pairOptions{}, "")
	p.waitStandbyCaughtUp(30 * time.Second)
	url := withPassword(p.URL)
	expDir := t.TempDir()
	config := writeConfig(t, expDir, []string{"c1", "c2"},
		jobConf{ID: "every-1s", Scope: "installation", Every: "1s", Run: map[string]any{"command": recordCommand("0.3")}},
		jobConf{ID: "every-2s", Scope: "installation", Every: "2s", Run: map[string]any{"command": recordCommand("0.5")}},
	)
	ids := []string{"fo-a", "fo-b"}
	procs := map[string]*replicaproc.Proc{}
	addrs := map[string]string{}
	for _, id := range ids {
		procs[id] = studioctlBin.Start(t, replicaproc.Options{ID: id, DatabaseURL: url, Args: []string{"--config", config}, FailOnRace: true})
	}
	for _, id := range ids {
		addrs[id] = procs[id].WaitReady(t)
		waitReadyz(t, addrs[id], healWithin)
	}
	pool := testPool(t, p.URL)
	replicaproc.Eventually(t, 30*time.Second, "both jobs to run and both leases to be ok", func() error {
		n := map[string]int{}
		for _, e := range readExecutions(t, expDir) {
			if !e.End.IsZero() {
				n[e.Job]++
			}
		}
		if n["every-1s"] < 2 || n["every-2s"] < 2 {
			return fmt.Errorf("executions %v", n)
		}
		return leasesOK(pool, nil)
	})
	resyncs := map[string]int{}
	for _, id := range ids {
		resyncs[id] = countLogged(procs[id], "bus reconnected; resyncing")
	}
	pool.Close()

	stopped, promoted := p.failover(func() {
		for _, id := range ids {
			why := waitUnready(t, addrs[id], unreadyWithin)
			t.Logf("%s during the gap: /readyz %s", id, why)
		}
	})
	t.Logf("primary stopped at %s, standby promoted %s later", stopped.Format("15:04:05.000"), promoted.Sub(stopped).Round(time.Millisecond))

	pool = testPool(t, p.URL) // the same URL: now the promoted standby
	promotedDB := dbNow(t, pool)
	for _, id := range ids {
		waitReadyz(t, addrs[id], healWithin)
		t.Logf("%s ready again %s after the promotion returned", id, time.Since(promoted).Round(time.Millisecond))
	}
	for _, id := range ids {
		id := id
		replicaproc.Eventually(t, healWithin, id+" to heal", func() error {
			if procs[id].Exited() {
				t.Fatalf("replica %s exited: %v", id, procs[id].State())
			}
			var hb time.Time
			ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
			defer cancel()
			if err := pool.QueryRow(ctx, `SELECT heartbeat_at FROM studio_replica WHERE id = $1`, id).Scan(&hb); err != nil {
				return fmt.Errorf("read heartbeat: %w", err)
			}
			if !hb.After(promotedDB) {
				return fmt.Errorf("no heartbeat on the new primary yet (last %s)", hb.Format(time.RFC3339Nano))
			}
			if n := countLogged(procs[id], "bus reconnected; resyncing"); n <= resyncs[id] {
				return fmt.Errorf("the bus has not resynced since the failover")
			}
			if d, err := replicaproc.Metric(addrs[id], "studio_bus_down_seconds"); err != nil || d != 0 {
				return fmt.Errorf("studio_bus_down_seconds %v %v", d, err)
			}
			return nil
		})
	}
	// The runner, its lock calls and its store: new succeeded runs of both
	// jobs recorded on the new primary; the lease loop: both leases renewed.
	// An unlock committed on the old primary but not yet replicated is
	// lost with it (asynchronous replication, docs/failover.md): the job's
	// lock row on the new primary is then held until its lock_until, at
	// most lockAtMostFor (60 s) after the run began. Seen in CI under load.
	replicaproc.Eventually(t, lostUnlockWithin+healWithin, "new runs of both jobs on the new primary, and the leases renewed", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
		defer cancel()
		var jobsRun []string
		if err := pool.QueryRow(ctx, `SELECT coalesce(array_agg(DISTINCT job_id ORDER BY job_id), '{}') FROM studio_job_run
WHERE started_at > $1 AND outcome = 'succeeded' AND job_id LIKE 'every-%'`, promotedDB).Scan(&jobsRun); err != nil {
			return err
		}
		if len(jobsRun) != 2 {
			return fmt.Errorf("succeeded runs since the promotion: %v", jobsRun)
		}
		return leasesOK(pool, &promotedDB)
	})

	// The bound of docs/failover.md: an overlap needs a run that was in
	// flight when the primary stopped (its lock row lost with the
	// unreplicated WAL), so at most one pair per job, and it involves an
	// execution whose lock was taken before the stop. Runs whose locks
	// were taken on the new primary never overlap each other.
	// A command starts a moment after its lock was taken: one that starts
	// up to startUpMargin after the stop may hold a lock taken on the old
	// primary.
	const startUpMargin = time.Second
	cutoff := stopped.Add(startUpMargin)
	execs := readExecutions(t, expDir)
	perJob := map[string]int{}
	for _, o := range overlaps(execs, 5*time.Second) {
		perJob[o.A.Job]++
		switch {
		case o.A.Start.After(cutoff) && o.B.Start.After(cutoff):
			t.Errorf("overlap of two runs that started after the primary stopped: %s", o)
		case perJob[o.A.Job] > 1:
			t.Errorf("a second overlapping pair of %s across one failover: %s", o.A.Job, o)
		default:
			t.Logf("overlap across the failover (the documented bound): %s", o)
		}
	}
	t.Logf("%d executions in all", len(execs))

	// The operator commands, through the same multi-host URL.
	out, errOut, code := studioctlBin.Run(t, url, "replicas", "list", "-o", "json")
	if code != 0 {
		t.Fatalf("replicas list: exit %d\n%s", code, errOut)
	}
	var list []struct {
		ID    string `json:"id"`
		State string `json:"state"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("replicas list -o json: %v\n%s", err, out)
	}
	ready := 0
	for _, r := range list {
		if r.State == string(replicas.StateReady) {
			ready++
		}
	}
	if ready != len(ids) {
		t.Errorf("replicas list after the failover: %d ready, want %d:\n%s", ready, len(ids), out)
	}
	lout, lerr, code := studioctlBin.Run(t, url, "locks", "list", "-o", "json")
	if code != 0 {
		t.Fatalf("locks list: exit %d\n%s", code, lerr)
	}
	if !strings.Contains(lout, `"every-1s"`) {
		t.Errorf("locks list after the failover does not show every-1s:\n%s", lout)
	}
	for what, text := range map[string]string{"replicas list": out + errOut, "locks list": lout + lerr} {
		if strings.Contains(text, secret) {
			t.Errorf("%s shows the password", what)
		}
	}
	for _, id := range ids {
		if strings.Contains(procs[id].Stderr(), secret) {
			t.Errorf("replica %s logged the password", id)
		}
		if n, _ := replicaproc.Metric(addrs[id], "studio_bus_reconnects_total"); n < 1 {
			t.Errorf("replica %s: studio_bus_reconnects_total %v, want >= 1", id, n)
		}
	}
	if code, body := readyz(addrs[ids[0]]); code != http.StatusOK {
		t.Errorf("/readyz at the end: %d %s", code, body)
	}
}

// leasesOK checks that every lease is owned and ok, renewed after since
// when given.
func leasesOK(pool leases.Querier, since *time.Time) error {
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	list, err := leases.List(ctx, pool)
	if err != nil {
		return err
	}
	if len(list) == 0 {
		return fmt.Errorf("no leases")
	}
	for _, in := range list {
		if in.State != leases.StateOK || in.Owner == "" {
			return fmt.Errorf("cluster %s: owner %q state %s", in.Cluster, in.Owner, in.State)
		}
		if since != nil && (in.RenewedAt == nil || !in.RenewedAt.After(*since)) {
			return fmt.Errorf("cluster %s not renewed since the promotion", in.Cluster)
		}
	}
	return nil
}
