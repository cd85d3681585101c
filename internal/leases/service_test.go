package leases

import (
	"context"
	"errors"
	"slices"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/startstop"
)

func TestThreeReplicasShareTheClustersAsPlacementSays(t *testing.T) {
	t.Parallel()
	_, pool := newDB(t)
	live := []string{"r1", "r2", "r3"}
	for _, id := range live {
		addReplica(t, pool, id, "ready")
	}
	addClusters(t, pool, 12)
	var j journal
	var b inproc
	svcs := map[string]*Service{}
	for _, id := range live {
		svcs[id] = startService(t, pool, id, &j, &b, svcOpts{timing: fast})
	}
	poll(t, 10*time.Second, "every cluster owned by its placement", func() bool { return placedOK(t, pool, live) })

	// The CLI's view (List) gives the same placement and calls it ok.
	infos, err := List(t.Context(), pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range infos {
		if in.Owner != in.Placement || in.State != StateOK || in.OwnerState != OwnerLive || in.Generation != 1 {
			t.Errorf("%+v: want owned by its placement, ok, live, generation 1", in)
		}
	}
	// Each service's duties are exactly its rows, once each claim that
	// committed is applied (a loaded CI read the table between the two).
	poll(t, 10*time.Second, "every service running the duties of its rows", func() bool {
		own := owners(t, pool)
		for id, s := range svcs {
			n := 0
			for _, o := range own {
				if o == id {
					n++
				}
			}
			if len(s.Owned()) != n {
				return false
			}
		}
		return true
	})
	own := owners(t, pool)
	for id, s := range svcs {
		var want, got []string
		for c, o := range own {
			if o == id {
				want = append(want, c)
			}
		}
		for c, ctx := range s.Owned() {
			got = append(got, c)
			if ctx.Err() != nil {
				t.Errorf("%s: duty context of %s already done", id, c)
			}
		}
		sort.Strings(want)
		sort.Strings(got)
		if !slices.Equal(want, got) {
			t.Errorf("%s owns %v in the table but runs duties for %v", id, want, got)
		}
	}
	if o := j.overlaps(); len(o) > 0 {
		t.Fatalf("duties overlapped: %v", o)
	}
}

func TestAStartingOrDrainingReplicaGetsNothing(t *testing.T) {
	t.Parallel()
	_, pool := newDB(t)
	addReplica(t, pool, "ready-1", "ready")
	addReplica(t, pool, "starting-1", "starting")
	addReplica(t, pool, "draining-1", "draining")
	addClusters(t, pool, 20)
	var j journal
	var b inproc
	for _, id := range []string{"ready-1", "starting-1", "draining-1"} {
		startService(t, pool, id, &j, &b, svcOpts{timing: fast})
	}
	poll(t, 10*time.Second, "every cluster owned by the ready replica", func() bool { return placedOK(t, pool, []string{"ready-1"}) })
	for _, e := range j.snapshot() {
		if e.replica != "ready-1" {
			t.Fatalf("%s got %s", e.replica, e.cluster)
		}
	}
}

// The renewal is one statement per round whatever the number of leases:
// counted by a wrapping Querier and by pg_stat_statements.
func TestOneRenewalStatementPerRoundForAThousandLeases(t *testing.T) {
	t.Parallel()
	_, pool := newDB(t)
	addReplica(t, pool, "solo", "ready")
	addClusters(t, pool, 1000)
	cq := newCounting(pool)
	var j journal
	var b inproc
	s := startService(t, pool, "solo", &j, &b, svcOpts{timing: fast, db: cq})
	poll(t, 20*time.Second, "own all 1000", func() bool { return len(s.Owned()) == 1000 })

	// Idle now: measure whole rounds.
	waitRound := func(n int64) { poll(t, 10*time.Second, "a round", func() bool { return s.Rounds() >= n }) }
	r0 := s.Rounds() + 1
	waitRound(r0)
	before, total0 := cq.snapshot()
	var stat0 int64
	pool.QueryRow(t.Context(), statCallsSQL, renewSQL).Scan(&stat0)
	waitRound(r0 + 10)
	after, total1 := cq.snapshot()
	var stat1 int64
	if err := pool.QueryRow(t.Context(), statCallsSQL, renewSQL).Scan(&stat1); err != nil {
		t.Fatal(err)
	}
	rounds := s.Rounds() - r0
	renewals := after[renewSQL] - before[renewSQL]
	perRound := float64(total1-total0) / float64(rounds)
	t.Logf("1000 leases: %d rounds, %d renewal statements, %.2f statements per round (%.0f per minute at the default %s), pg_stat_statements renewal calls +%d",
		rounds, renewals, perRound, perRound*float64(time.Minute/RenewEvery), RenewEvery, stat1-stat0)
	// The counts are read while the loop runs, so a round that begins
	// just before or after a read may fall on either side: ±1.
	if d := int64(renewals) - rounds; d < -1 || d > 1 {
		t.Fatalf("%d renewal statements in %d rounds", renewals, rounds)
	}
	// Two a round (renew, read), with the same ±1 round at the edges.
	if int64(total1-total0) > 2*(rounds+1) {
		t.Fatalf("%.2f statements per idle round, want 2 (renew, read)", perRound)
	}
	// pg_stat_statements is read apart from the counter, each read a
	// round boundary away at most on a loaded machine: ±2.
	if d := stat1 - stat0 - rounds; d < -2 || d > 2 {
		t.Fatalf("pg_stat_statements counted %d renewals in %d rounds", stat1-stat0, rounds)
	}
}

// statCallsSQL reads how often this database ran a statement.
const statCallsSQL = `SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
WHERE d.datname = current_database() AND s.query = $1`

// Two replicas whose views of the live set differ (each thinks it is alone,
// then both think the same other one is) never run one cluster's duties at
// the same time, and never both own a row.
func TestTwoReplicasWithDifferentViewsNeverOwnAClusterTogether(t *testing.T) {
	t.Parallel()
	_, pool := newDB(t)
	addReplica(t, pool, "a", "ready")
	addReplica(t, pool, "b", "ready")
	addClusters(t, pool, 24)
	var viewA, viewB atomic.Value
	viewA.Store([]string{"a"})
	viewB.Store([]string{"b"})
	var j journal
	var b inproc
	sa := startService(t, pool, "a", &j, &b, svcOpts{timing: fast, liveSet: func() []string { return viewA.Load().([]string) }})
	sb := startService(t, pool, "b", &j, &b, svcOpts{timing: fast, liveSet: func() []string { return viewB.Load().([]string) }})
	check := func(phase string) {
		t.Helper()
		// Sample the services' duties during several rounds.
		end := sa.Rounds() + 8
		for sa.Rounds() < end {
			oa, ob := sa.Owned(), sb.Owned()
			for c := range oa {
				if _, both := ob[c]; both {
					t.Fatalf("%s: both run %s", phase, c)
				}
			}
			time.Sleep(pollEvery)
		}
		if o := j.overlaps(); len(o) > 0 {
			t.Fatalf("%s: duties overlapped: %v", phase, o)
		}
	}
	poll(t, 10*time.Second, "every cluster owned", func() bool {
		for _, o := range owners(t, pool) {
			if o == "" {
				return false
			}
		}
		return true
	})
	check("each alone")
	// Both now think only b is live: a releases, b claims.
	viewA.Store([]string{"b"})
	poll(t, 10*time.Second, "b owns everything", func() bool { return len(sb.Owned()) == 24 && len(sa.Owned()) == 0 })
	check("both see b")
	// And back to a, with b still thinking it is alone for a while.
	viewA.Store([]string{"a"})
	check("each alone again")
	viewB.Store([]string{"a"})
	poll(t, 10*time.Second, "a owns everything", func() bool { return len(sa.Owned()) == 24 && len(sb.Owned()) == 0 })
	check("both see a")
}

// An operator's release or removal reaches the owner at its next round
// (at once on the signal): the duty is cancelled with ErrGone.
func TestARemovedOrReleasedLeaseCancelsItsDutyOnTheNextRound(t *testing.T) {
	t.Parallel()
	_, pool := newDB(t)
	addReplica(t, pool, "a", "ready")
	addClusters(t, pool, 2)
	var j journal
	var b inproc
	s := startService(t, pool, "a", &j, &b, svcOpts{timing: timing{renewEvery: time.Hour, ttl: LeaseTTL, trust: TrustWindow, deadline: StatementDeadline}})
	poll(t, 10*time.Second, "own both", func() bool { return len(s.Owned()) == 2 })
	ctx1 := s.Owned()["c1"]

	in, err := Get(t.Context(), pool, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Release(t.Context(), pool, ReleaseRequest{Info: in, Force: true, Change: Change{Actor: "t"}}); err != nil {
		t.Fatal(err)
	}
	s.Rebalance() // what the host does on the leases.rebalance signal
	poll(t, 5*time.Second, "c1's duty cancelled", func() bool { return ctx1.Err() != nil })
	if c := context.Cause(ctx1); !errors.Is(c, ErrGone) {
		t.Fatalf("cause %v, want ErrGone", c)
	}
	// Placement still picks a: it claims c1 again, a new duty, generation 3.
	poll(t, 5*time.Second, "c1 claimed again", func() bool { _, ok := s.Owned()["c1"]; return ok })
	in, _ = Get(t.Context(), pool, "c1")
	if in.Generation != 3 || in.Owner != "a" {
		t.Fatalf("after release and claim: %+v, want owner a, generation 3", in)
	}

	ctx2 := s.Owned()["c2"]
	if _, err := Remove(t.Context(), pool, Change{Actor: "t"}, "c2"); err != nil {
		t.Fatal(err)
	}
	s.Rebalance()
	poll(t, 5*time.Second, "c2's duty cancelled", func() bool { return ctx2.Err() != nil })
	if c := context.Cause(ctx2); !errors.Is(c, ErrGone) {
		t.Fatalf("cause %v, want ErrGone", c)
	}
	r := s.Rounds() + 2
	poll(t, 5*time.Second, "two more rounds", func() bool { s.Rebalance(); return s.Rounds() >= r })
	if _, ok := s.Owned()["c2"]; ok {
		t.Fatal("a removed cluster was claimed again")
	}
}

func TestStopCancelsEveryDutyAndIsSafeTwice(t *testing.T) {
	t.Parallel()
	_, pool := newDB(t)
	addReplica(t, pool, "a", "ready")
	addClusters(t, pool, 3)
	var j journal
	var b inproc
	s := startService(t, pool, "a", &j, &b, svcOpts{timing: fast})
	poll(t, 10*time.Second, "own all", func() bool { return len(s.Owned()) == 3 })
	ctxs := s.Owned()
	s.Stop()
	s.Stop()
	for c, ctx := range ctxs {
		if !errors.Is(context.Cause(ctx), startstop.ErrStopping) {
			t.Errorf("%s: cause %v, want ErrStopping", c, context.Cause(ctx))
		}
	}
	if len(s.Owned()) != 0 {
		t.Fatal("still owns after Stop")
	}
}

// drainOnce starts a replica, waits until it owns its share, drains it and
// returns, for each cluster it gave up, the time from the drain request to
// the new owner's first duty start.
func drainOnce(t *testing.T, pool Querier, id string, j *journal, b *inproc, others []string) []time.Duration {
	t.Helper()
	addReplica(t, pool, id, "ready")
	s := startService(t, pool, id, j, b, svcOpts{})
	live := append(slices.Clone(others), id)
	poll(t, 10*time.Second, id+" owns its share", func() bool { return placedOK(t, pool, live) && len(s.Owned()) > 0 })
	mine := slices.Sorted(func(yield func(string) bool) {
		for c := range s.Owned() {
			if !yield(c) {
				return
			}
		}
	})
	// The host's drain: state draining, then ReleaseAll. A round that
	// runs in between sees the state and releases first; either way
	// nothing stays owned.
	start := time.Now()
	exec(t, pool, `UPDATE studio_replica SET state = 'draining' WHERE id = $1`, id)
	if _, err := s.ReleaseAll(t.Context()); err != nil {
		t.Fatal(err)
	}
	for c, o := range owners(t, pool) {
		if o == id {
			t.Fatalf("%s still owned by %s after ReleaseAll", c, id)
		}
	}
	if len(s.Owned()) != 0 {
		t.Fatalf("duties still running after ReleaseAll: %v", s.Owned())
	}
	poll(t, 10*time.Second, "the others own "+id+"'s share", func() bool { return placedOK(t, pool, others) })
	// The new owner's OnAcquire comes just after its claim committed: the
	// rows can show the new owners a moment before the journal does.
	var out []time.Duration
	poll(t, 10*time.Second, "a takeover in the journal for each of "+id+"'s clusters", func() bool {
		out = out[:0]
		for _, c := range mine {
			for _, e := range j.snapshot() {
				if e.cluster == c && e.acquire && e.replica != id && e.at.After(start) {
					out = append(out, e.at.Sub(start))
					break
				}
			}
		}
		return len(out) == len(mine)
	})
	s.Stop()
	exec(t, pool, `UPDATE studio_replica SET state = 'stopped', stopped_at = now() WHERE id = $1`, id)
	return out
}

// Drain at the default numbers: the handover comes from the signal, not
// from the next tick.
func TestDrainHandsOverEveryLeaseAtOnce(t *testing.T) {
	t.Parallel()
	_, pool := newDB(t)
	others := []string{"stay-1", "stay-2"}
	for _, id := range others {
		addReplica(t, pool, id, "ready")
	}
	addClusters(t, pool, 30)
	var j journal
	var b inproc
	for _, id := range others {
		startService(t, pool, id, &j, &b, svcOpts{})
	}
	poll(t, 10*time.Second, "placed", func() bool { return placedOK(t, pool, others) })
	var all []time.Duration
	const drains = 20
	for i := range drains {
		all = append(all, drainOnce(t, pool, "drainer-"+string(rune('a'+i)), &j, &b, others)...)
	}
	slices.Sort(all)
	p50, p99 := all[len(all)/2], all[min(len(all)-1, len(all)*99/100)]
	t.Logf("graceful handover over %d drains, %d moved clusters: p50 %s, p99 %s, max %s",
		drains, len(all), p50.Round(time.Microsecond), p99.Round(time.Microsecond), all[len(all)-1].Round(time.Microsecond))
	if all[len(all)-1] >= RenewEvery {
		t.Fatalf("a handover took %s: it waited for a tick instead of the signal", all[len(all)-1])
	}
	if o := j.overlaps(); len(o) > 0 {
		t.Fatalf("duties overlapped: %v", o)
	}
}

// A round over many clusters arms the trust-window watchdog once per loop,
// not once per cluster: arming scans every held lease, so a claim of
// 5,000 clusters scanned 12.5 million entries, and a release of 3,300 of
// them as many again; on a loaded host the round outlasted the trust
// window and the replica lost the leases it kept (issue 21: 1,930 leases
// lost by one of three replicas sharing 5,000 clusters).
func TestARoundOverManyClustersScansTheHeldLeasesAFewTimes(t *testing.T) {
	t.Parallel()
	_, pool := newDB(t)
	addReplica(t, pool, "a", "ready")
	const n = 2000
	addClusters(t, pool, n)
	var j journal
	var b inproc
	s := startService(t, pool, "a", &j, &b, svcOpts{timing: timing{renewEvery: time.Hour, ttl: LeaseTTL, trust: TrustWindow, deadline: StatementDeadline}})
	poll(t, 30*time.Second, "own every cluster", func() bool { return len(s.Owned()) == n })
	s.Rebalance() // a second round: renew and trust every lease again
	poll(t, 30*time.Second, "a second round", func() bool { return s.rounds.Load() >= 2 })
	s.mu.Lock()
	scanned := s.scanned
	s.mu.Unlock()
	if scanned > 10*n {
		t.Fatalf("two rounds over %d clusters scanned %d held leases; want a few passes (at most %d), not one per cluster", n, scanned, 10*n)
	}
}

// A duty context says until when its lease is trusted, and each renewal
// moves that on: the runner gives it to a duty's command as the deadline
// its job shim enforces while the replica is paused (issue 21, item 7).
func TestADutyContextSaysUntilWhenItsLeaseIsTrusted(t *testing.T) {
	t.Parallel()
	_, pool := newDB(t)
	addReplica(t, pool, "a", "ready")
	addClusters(t, pool, 1)
	var j journal
	var b inproc
	s := startService(t, pool, "a", &j, &b, svcOpts{timing: fast})
	poll(t, 10*time.Second, "own c1", func() bool { return len(s.Owned()) == 1 })
	ctx := s.Owned()["c1"]
	first, ok := TrustedUntil(ctx)
	if !ok {
		t.Fatal("TrustedUntil of a duty context: not ok")
	}
	if left := time.Until(first); left <= 0 || left > fast.trust {
		t.Errorf("trusted for %v more, want within the trust window %v", left, fast.trust)
	}
	poll(t, 10*time.Second, "a renewal to move the end of the trust window on", func() bool {
		until, _ := TrustedUntil(ctx)
		return until.After(first)
	})
	if _, ok := TrustedUntil(context.Background()); ok {
		t.Error("TrustedUntil of another context: ok, want not")
	}
}
