package leases

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
)

func auditRows(t *testing.T, q Querier) []string {
	t.Helper()
	rows, err := q.Query(t.Context(), `SELECT actor || ' ' || action || ' ' || target || ' ' || reason FROM studio_audit ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		var s string
		rows.Scan(&s)
		out = append(out, s)
	}
	return out
}

func TestListJudgesEveryState(t *testing.T) {
	t.Parallel()
	_, pool := newDB(t)
	addReplica(t, pool, "live-1", "ready")
	addReplica(t, pool, "old-1", "ready")
	exec(t, pool, `UPDATE studio_replica SET heartbeat_at = now() - interval '1 minute' WHERE id = 'old-1'`)
	addClusters(t, pool, 5)
	// c1 unowned; c2 owned by live-1, fresh (ok); c3 owned by live-1 but
	// not renewed for 20 s (expired); c4 owned by a gone replica, fresh
	// (moving); c5 owned by an unknown id, expired.
	exec(t, pool, `UPDATE cluster_lease SET owner = 'live-1', acquired_at = now(), renewed_at = now(), generation = 1 WHERE cluster IN ('c2')`)
	exec(t, pool, `UPDATE cluster_lease SET owner = 'live-1', acquired_at = now() - interval '1 hour', renewed_at = now() - interval '20 seconds', generation = 3 WHERE cluster = 'c3'`)
	exec(t, pool, `UPDATE cluster_lease SET owner = 'old-1', acquired_at = now(), renewed_at = now(), generation = 1 WHERE cluster = 'c4'`)
	exec(t, pool, `UPDATE cluster_lease SET owner = 'java-1', acquired_at = now(), renewed_at = now() - interval '1 minute', generation = 9 WHERE cluster = 'c5'`)
	infos, err := List(t.Context(), pool)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]string{
		"c1": {"none", "unowned"}, "c2": {"live", "ok"}, "c3": {"live", "expired"},
		"c4": {"gone", "moving"}, "c5": {"gone", "expired"},
	}
	for _, in := range infos {
		w := want[in.Cluster]
		if string(in.OwnerState) != w[0] || string(in.State) != w[1] {
			t.Errorf("%s: owner_state %s, state %s; want %s, %s", in.Cluster, in.OwnerState, in.State, w[0], w[1])
		}
		if in.Placement != "live-1" {
			t.Errorf("%s: placement %q, want the only live ready replica", in.Cluster, in.Placement)
		}
		if (in.Owner == "") != (in.RenewedAge == nil) || (in.Owner == "") != (in.AcquiredAt == nil) {
			t.Errorf("%s: owner %q with renewed age %v, acquired_at %v", in.Cluster, in.Owner, in.RenewedAge, in.AcquiredAt)
		}
	}
	if in := infos[2]; in.RenewedAge.Seconds() < 19 || in.RenewedAge.Seconds() > 30 {
		t.Errorf("c3 renewed age %s, want about 20 s", in.RenewedAge)
	}
	// With no live ready replica there is no placement, and a fresh lease
	// of a live owner is moving.
	exec(t, pool, `UPDATE studio_replica SET state = 'draining' WHERE id = 'live-1'`)
	in, err := Get(t.Context(), pool, "c2")
	if err != nil {
		t.Fatal(err)
	}
	if in.Placement != "" || in.State != StateMoving {
		t.Fatalf("c2 with nobody ready: %+v", in)
	}
}

func TestReleaseIsACompareAndSetThatRefusesALiveOwner(t *testing.T) {
	t.Parallel()
	_, pool := newDB(t)
	addReplica(t, pool, "live-1", "ready")
	addClusters(t, pool, 3)
	exec(t, pool, `UPDATE cluster_lease SET owner = 'live-1', acquired_at = now(), renewed_at = now(), generation = 4`)
	ctx := t.Context()

	if _, err := Get(ctx, pool, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown cluster: %v, want ErrNotFound", err)
	}
	if _, err := Get(ctx, pool, ""); !errors.Is(err, ErrInvalid) {
		t.Fatalf("empty name: %v, want ErrInvalid", err)
	}
	in, _ := Get(ctx, pool, "c1")
	_, err := Release(ctx, pool, ReleaseRequest{Info: in, Change: Change{Actor: "op"}})
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("live owner without force: %v, want ErrRefused", err)
	}
	if a := auditRows(t, pool); len(a) != 0 {
		t.Fatalf("a refusal wrote %v", a)
	}
	res, err := Release(ctx, pool, ReleaseRequest{Info: in, Force: true, Change: Change{Actor: "op", Reason: "stuck"}})
	if err != nil || !res.Changed || res.Generation != 5 {
		t.Fatalf("forced: %+v, %v", res, err)
	}
	after, _ := Get(ctx, pool, "c1")
	if after.Owner != "" || after.State != StateUnowned || after.Generation != 5 || after.RenewedAt != nil {
		t.Fatalf("after release: %+v", after)
	}
	// The same read again: freed since, nothing changed.
	res, err = Release(ctx, pool, ReleaseRequest{Info: in, Force: true, Change: Change{Actor: "op"}})
	if err != nil || res.Changed || !res.FreedSince {
		t.Fatalf("second release of the same read: %+v, %v", res, err)
	}
	// Changed hands since read: refused, untouched.
	in2, _ := Get(ctx, pool, "c2")
	exec(t, pool, `UPDATE cluster_lease SET owner = 'live-1', generation = generation + 2 WHERE cluster = 'c2'`)
	if _, err := Release(ctx, pool, ReleaseRequest{Info: in2, Force: true, Change: Change{Actor: "op"}}); !errors.Is(err, ErrChanged) || !errors.Is(err, ErrRefused) {
		t.Fatalf("changed since read: %v, want ErrChanged", err)
	}
	// Removed since read: not found.
	in3, _ := Get(ctx, pool, "c3")
	exec(t, pool, `DELETE FROM cluster_lease WHERE cluster = 'c3'`)
	if _, err := Release(ctx, pool, ReleaseRequest{Info: in3, Force: true, Change: Change{Actor: "op"}}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("removed since read: %v, want ErrNotFound", err)
	}
	// A gone owner needs no force.
	exec(t, pool, `UPDATE studio_replica SET heartbeat_at = now() - interval '1 minute'`)
	in2, _ = Get(ctx, pool, "c2")
	if res, err := Release(ctx, pool, ReleaseRequest{Info: in2, Change: Change{Actor: "op"}}); err != nil || !res.Changed {
		t.Fatalf("gone owner: %+v, %v", res, err)
	}
	if a := auditRows(t, pool); !slices.Equal(a, []string{"op leases.release c1 stuck", "op leases.release c2 "}) {
		t.Fatalf("audit rows %q", a)
	}
}

// Twenty pairs of concurrent releases of one lease each: every lease is
// changed exactly once, with one audit row.
func TestTwentyConcurrentReleasePairsChangeEachLeaseOnce(t *testing.T) {
	t.Parallel()
	_, pool := newDB(t)
	addReplica(t, pool, "live-1", "ready")
	clusters := addClusters(t, pool, 20)
	exec(t, pool, `UPDATE cluster_lease SET owner = 'live-1', acquired_at = now(), renewed_at = now(), generation = 1`)
	var wg sync.WaitGroup
	var mu sync.Mutex
	changed := map[string]int{}
	var errs []error
	for _, c := range clusters {
		in, err := Get(t.Context(), pool, c)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := Release(context.Background(), pool, ReleaseRequest{Info: in, Force: true, Change: Change{Actor: "op"}})
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
				}
				if res.Changed {
					changed[c]++
				}
			}()
		}
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("errors: %v", errs)
	}
	for _, c := range clusters {
		if changed[c] != 1 {
			t.Errorf("%s changed %d times", c, changed[c])
		}
	}
	if a := auditRows(t, pool); len(a) != 20 {
		t.Fatalf("%d audit rows, want 20", len(a))
	}
	var gens []int64
	rows, _ := pool.Query(t.Context(), `SELECT generation FROM cluster_lease`)
	for rows.Next() {
		var g int64
		rows.Scan(&g)
		gens = append(gens, g)
	}
	for _, g := range gens {
		if g != 2 {
			t.Fatalf("generations %v, want all 2", gens)
		}
	}
}

func TestAddAndRemoveAreAuditedAndAllOrNothing(t *testing.T) {
	t.Parallel()
	_, pool := newDB(t)
	ctx := t.Context()
	added, existing, err := Add(ctx, pool, Change{Actor: "op", Reason: "new"}, "c1", "c2", "c1")
	if err != nil || !slices.Equal(added, []string{"c1", "c2"}) || existing != nil {
		t.Fatalf("add: %v %v %v", added, existing, err)
	}
	added, existing, err = Add(ctx, pool, Change{Actor: "op"}, "c2", "c3")
	if err != nil || !slices.Equal(added, []string{"c3"}) || !slices.Equal(existing, []string{"c2"}) {
		t.Fatalf("add again: %v %v %v", added, existing, err)
	}
	if _, _, err := Add(ctx, pool, Change{Actor: "op"}, "c4", ""); !errors.Is(err, ErrInvalid) {
		t.Fatalf("empty name: %v", err)
	}
	if _, _, err := Add(ctx, pool, Change{Actor: "op"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("no name: %v", err)
	}
	if _, err := Remove(ctx, pool, Change{Actor: "op"}, "c1", "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("remove with an unknown one: %v", err)
	}
	removed, err := Remove(ctx, pool, Change{Actor: "op", Reason: "gone"}, "c1", "c3")
	if err != nil || len(removed) != 2 {
		t.Fatalf("remove: %v %v", removed, err)
	}
	infos, _ := List(ctx, pool)
	if len(infos) != 1 || infos[0].Cluster != "c2" {
		t.Fatalf("left: %+v", infos)
	}
	want := []string{"op leases.add c1 new", "op leases.add c2 new", "op leases.add c3 ", "op leases.remove c1 gone", "op leases.remove c3 gone"}
	if a := auditRows(t, pool); !slices.Equal(a, want) {
		t.Fatalf("audit rows %q, want %q", a, want)
	}
}

func TestEnsureClustersInsertsOnlyTheAbsentOnes(t *testing.T) {
	t.Parallel()
	_, pool := newDB(t)
	exec(t, pool, `INSERT INTO cluster_lease (cluster, owner, acquired_at, renewed_at, generation) VALUES ('c1', 'x', now(), now(), 7)`)
	added, err := EnsureClusters(t.Context(), pool, []string{"c1", "c2", "c3"})
	if err != nil || !slices.Equal(added, []string{"c2", "c3"}) {
		t.Fatalf("added %v, %v", added, err)
	}
	in, _ := Get(t.Context(), pool, "c1")
	if in.Owner != "x" || in.Generation != 7 {
		t.Fatalf("an existing row was touched: %+v", in)
	}
	if _, err := EnsureClusters(t.Context(), pool, []string{"ok", "not ok"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad name: %v", err)
	}
	if a := auditRows(t, pool); len(a) != 0 {
		t.Fatalf("configuration inserts are not operator changes: %v", a)
	}
}

func TestCountByOwner(t *testing.T) {
	t.Parallel()
	_, pool := newDB(t)
	addClusters(t, pool, 4)
	exec(t, pool, `UPDATE cluster_lease SET owner = 'a', acquired_at = now(), renewed_at = now() WHERE cluster IN ('c1', 'c2')`)
	exec(t, pool, `UPDATE cluster_lease SET owner = 'b', acquired_at = now(), renewed_at = now() WHERE cluster = 'c3'`)
	got, err := CountByOwner(t.Context(), pool)
	if err != nil || len(got) != 2 || got["a"] != 2 || got["b"] != 1 {
		t.Fatalf("got %v, %v", got, err)
	}
}
