package jobstore_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

// concurrently runs f(i) for i in [0, n) at once and waits for them all.
func concurrently(n int, f func(i int)) {
	var start, done sync.WaitGroup
	start.Add(1)
	for i := range n {
		done.Add(1)
		go func() {
			defer done.Done()
			start.Wait()
			f(i)
		}()
	}
	start.Done()
	done.Wait()
}

// bigPool is a pool large enough for every concurrent command of a test to
// hold its own connection, so they really overlap in the database.
func bigPool(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 45
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// 20 jobs, each paused by two concurrent `jobs pause`: every job changes
// once and gets one audit row; the repeat is ErrUnchanged. On the old code
// both read "no setting" (FOR UPDATE locks no row that does not exist) and
// both wrote a paused_before=false audit row.
func TestConcurrentPausePairsChangeEachJobOnceWithOneAuditRow(t *testing.T) {
	t.Parallel()
	_, url := newPool(t)
	pool := bigPool(t, url)
	const pairs = 20
	for i := range pairs {
		reportJob(t, pool, fmt.Sprintf("job-%d", i))
	}
	errs := make([]error, 2*pairs)
	concurrently(2*pairs, func(i int) {
		_, errs[i] = jobstore.ApplyChange(t.Context(), pool, fmt.Sprintf("job-%d", i/2), jobstore.Change{Pause: ptr(true), Actor: fmt.Sprintf("op-%d", i)})
	})
	for p := range pairs {
		a, b := errs[2*p], errs[2*p+1]
		ok := (a == nil && errors.Is(b, jobstore.ErrUnchanged)) || (b == nil && errors.Is(a, jobstore.ErrUnchanged))
		if !ok {
			t.Errorf("job-%d: the pair returned %v and %v, want one nil and one ErrUnchanged", p, a, b)
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM studio_audit WHERE action = 'jobs.pause'`); n != pairs {
		t.Errorf("%d jobs.pause audit rows, want %d (one per job)", n, pairs)
	}
	if n := count(t, pool, `SELECT count(DISTINCT target) FROM studio_audit WHERE action = 'jobs.pause'
  AND detail->>'paused_before' = 'false' AND detail->>'paused_after' = 'true'`); n != pairs {
		t.Errorf("%d jobs audited false->true, want %d", n, pairs)
	}
	if n := count(t, pool, `SELECT count(*) FROM studio_job_setting WHERE paused AND updated_by <> ''`); n != pairs {
		t.Errorf("%d paused setting rows, want %d", n, pairs)
	}
}

// 20 concurrent pauses of one job, then 20 concurrent resumes: two audit
// rows in all, and a repeat on its own is not audited either.
func TestConcurrentIdenticalChangesOfOneJobAreAuditedOnce(t *testing.T) {
	t.Parallel()
	_, url := newPool(t)
	pool := bigPool(t, url)
	reportJob(t, pool, "report")
	for _, pause := range []bool{true, false} {
		var okN, unchangedN int
		var mu sync.Mutex
		concurrently(20, func(i int) {
			_, err := jobstore.ApplyChange(t.Context(), pool, "report", jobstore.Change{Pause: ptr(pause), Actor: "op"})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				okN++
			case errors.Is(err, jobstore.ErrUnchanged):
				unchangedN++
			default:
				t.Errorf("pause=%v: %v", pause, err)
			}
		})
		if okN != 1 || unchangedN != 19 {
			t.Errorf("pause=%v: %d changed and %d unchanged, want 1 and 19", pause, okN, unchangedN)
		}
	}
	got, err := jobstore.ApplyChange(t.Context(), pool, "report", jobstore.Change{Pause: ptr(false), Actor: "op"})
	if !errors.Is(err, jobstore.ErrUnchanged) || got.Paused {
		t.Errorf("a second resume = %+v, %v; want ErrUnchanged", got, err)
	}
	if a := auditRows(t, pool); len(a) != 2 || a[0].Action != "jobs.pause" || a[1].Action != "jobs.resume" {
		t.Errorf("audit rows = %+v, want one pause and one resume", a)
	}
}

// 20 concurrent `jobs set` with 20 different schedules: 20 changes, applied
// one after the other. Each audit row's before is the after of the row
// before it, and the last after is what is stored: no change is lost and no
// audit row describes a change that did not happen.
func TestConcurrentSetsWithDifferentValuesAuditEveryRealChange(t *testing.T) {
	t.Parallel()
	_, url := newPool(t)
	pool := bigPool(t, url)
	reportJob(t, pool, "report")
	concurrently(20, func(i int) {
		sched := jobs.Schedule{Every: time.Duration(i+1) * time.Minute}
		if _, err := jobstore.ApplyChange(t.Context(), pool, "report", jobstore.Change{Schedule: &sched, Actor: "op"}); err != nil {
			t.Errorf("set every %dm: %v", i+1, err)
		}
	})
	audits := auditRows(t, pool)
	if len(audits) != 20 {
		t.Fatalf("%d audit rows, want 20", len(audits))
	}
	prev := ""
	seen := map[string]bool{}
	for i, a := range audits {
		before, after := a.Detail["schedule_before"], a.Detail["schedule_after"]
		if before != prev {
			t.Errorf("audit row %d: schedule_before %q, but the change before it left %q", i, before, prev)
		}
		prev, _ = after.(string)
		seen[prev] = true
	}
	if len(seen) != 20 {
		t.Errorf("%d distinct schedules audited, want 20", len(seen))
	}
	sched, _, _, _ := settingRow(t, pool, "report")
	if sched == nil || *sched != prev {
		t.Errorf("stored schedule %v, want the last audited %q", sched, prev)
	}
}

// addStatus reports job on replica with scope.
func addStatus(t testing.TB, pool *pgxpool.Pool, replica, job string, scope jobs.Scope) {
	t.Helper()
	if _, err := pool.Exec(t.Context(), `INSERT INTO studio_job_status (replica_id, job_id, scope) VALUES ($1, $2, $3)`, replica, job, string(scope)); err != nil {
		t.Fatal(err)
	}
}

func incarnationOf(t testing.TB, pool *pgxpool.Pool, replica string) uuid.UUID {
	t.Helper()
	var u uuid.UUID
	if err := pool.QueryRow(t.Context(), `SELECT incarnation FROM studio_replica WHERE id = $1`, replica).Scan(&u); err != nil {
		t.Fatal(err)
	}
	return u
}

func TestTriggerWritesOneRequestForAnInstallationJobAndOnePerLiveHostForAnInstanceJob(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	for _, r := range []struct {
		id  string
		age time.Duration
	}{{"a", 0}, {"b", 0}, {"gone", time.Minute}} {
		insertReplica(t, pool, r.id, "ready", r.age)
		addStatus(t, pool, r.id, "install", jobs.ScopeInstallation)
		addStatus(t, pool, r.id, "inst", jobs.ScopeInstance)
	}
	insertReplica(t, pool, "off", "ready", time.Minute)
	addStatus(t, pool, "off", "orphan", jobs.ScopeInstance)

	if n, err := jobstore.Trigger(t.Context(), pool, "install", "ana@ops", "rerun"); err != nil || n != 1 {
		t.Errorf("Trigger(install) = %d, %v; want 1 request", n, err)
	}
	if n, err := jobstore.Trigger(t.Context(), pool, "inst", "ana@ops", "rerun"); err != nil || n != 2 {
		t.Errorf("Trigger(inst) = %d, %v; want 2 requests (the live hosts)", n, err)
	}
	if _, err := jobstore.Trigger(t.Context(), pool, "orphan", "ana@ops", ""); !errors.Is(err, jobstore.ErrNoLiveHost) {
		t.Errorf("Trigger(orphan) = %v, want ErrNoLiveHost", err)
	}
	if n := count(t, pool, `SELECT count(*) FROM studio_request WHERE target = 'install' AND replica_id IS NULL AND requested_by = 'ana@ops' AND reason = 'rerun'`); n != 1 {
		t.Errorf("%d shared requests of install, want 1", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM studio_request q JOIN studio_replica r ON r.id = q.replica_id AND r.incarnation = q.incarnation WHERE q.target = 'inst'`); n != 2 {
		t.Errorf("%d requests of inst addressed to a replica's incarnation, want 2", n)
	}
	// Each request names its audit row; the failed trigger left none.
	if n := count(t, pool, `SELECT count(*) FROM studio_request q JOIN studio_audit a ON a.seq = q.audit_seq AND a.action = 'jobs.trigger' AND a.target = q.target`); n != 3 {
		t.Errorf("%d requests joined to their audit row, want 3", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM studio_audit`); n != 2 {
		t.Errorf("%d audit rows, want 2", n)
	}

	// 20 pairs of replicas race for the install request: one claim in all.
	var mu sync.Mutex
	claimed := 0
	incA, incB := incarnationOf(t, pool, "a"), incarnationOf(t, pool, "b")
	concurrently(40, func(i int) {
		id, inc := "a", incA
		if i%2 == 1 {
			id, inc = "b", incB
		}
		got, err := jobstore.ClaimTriggers(t.Context(), pool, []string{"install"}, id, inc)
		if err != nil {
			t.Error(err)
		}
		mu.Lock()
		claimed += len(got)
		mu.Unlock()
	})
	if claimed != 1 {
		t.Errorf("the install request was claimed %d times, want once", claimed)
	}
	// Instance requests: each replica claims its own, once; a stale
	// incarnation claims nothing.
	if got, err := jobstore.ClaimTriggers(t.Context(), pool, []string{"inst"}, "a", uuid.New()); err != nil || len(got) != 0 {
		t.Errorf("claim with another incarnation = %+v, %v; want nothing", got, err)
	}
	for _, r := range []struct {
		id  string
		inc uuid.UUID
	}{{"a", incA}, {"b", incB}} {
		got, err := jobstore.ClaimTriggers(t.Context(), pool, []string{"inst"}, r.id, r.inc)
		if err != nil || len(got) != 1 || got[0].JobID != "inst" || got[0].RequestedBy != "ana@ops" {
			t.Errorf("%s claims inst = %+v, %v; want its one request", r.id, got, err)
		}
		if got, _ := jobstore.ClaimTriggers(t.Context(), pool, []string{"inst"}, r.id, r.inc); len(got) != 0 {
			t.Errorf("%s claims inst again = %+v, want nothing", r.id, got)
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM studio_request WHERE done_at IS NULL`); n != 0 {
		t.Errorf("%d requests still pending, want 0", n)
	}
}

func TestExpiredTriggerRequestsAreNotClaimedAndHousekeepingPrunesOldOnes(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	insertReplica(t, pool, "a", "ready", 0)
	addStatus(t, pool, "a", "install", jobs.ScopeInstallation)
	if _, err := jobstore.Trigger(t.Context(), pool, "install", "ana@ops", ""); err != nil {
		t.Fatal(err)
	}
	pgtest.ExecWithoutTriggers(t, pool, `UPDATE studio_request SET requested_at = now() - interval '8 days', expires_at = now() - interval '8 days'`)
	if got, err := jobstore.ClaimTriggers(t.Context(), pool, []string{"install"}, "a", incarnationOf(t, pool, "a")); err != nil || len(got) != 0 {
		t.Errorf("claim of an expired request = %+v, %v; want nothing", got, err)
	}
	if _, err := jobstore.Trigger(t.Context(), pool, "install", "ana@ops", ""); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := jobstore.Housekeep(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, `SELECT count(*) FROM studio_request`); n != 1 {
		t.Errorf("%d requests after housekeeping, want 1 (the fresh one)", n)
	}
}

// A per-cluster job's status rows are its duties' (job@cluster): a trigger
// of the job reaches each live replica that hosts one of them, once, and
// a job whose name only begins the same does not count.
func TestTriggerOfAPerClusterJobReachesEachReplicaHostingItsDuties(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	insertReplica(t, pool, "a", "ready", 0)
	insertReplica(t, pool, "b", "ready", 0)
	addStatus(t, pool, "a", "compact@eu-1", jobs.ScopeInstance)
	addStatus(t, pool, "a", "compact@eu-2", jobs.ScopeInstance)
	addStatus(t, pool, "b", "compact@us-1", jobs.ScopeInstance)
	addStatus(t, pool, "b", "compacted", jobs.ScopeInstance)
	n, err := jobstore.Trigger(t.Context(), pool, "compact", "ana@ops", "rerun")
	if err != nil || n != 2 {
		t.Fatalf("Trigger(compact) = %d, %v; want 2 requests (a and b, once each)", n, err)
	}
	if got := count(t, pool, `SELECT count(DISTINCT replica_id) FROM studio_request WHERE target = 'compact'`); got != 2 {
		t.Errorf("requests to %d replicas, want 2", got)
	}
	if _, err := jobstore.Trigger(t.Context(), pool, "compacte", "ana@ops", ""); err == nil {
		t.Error("Trigger(compacte): want an error, no such job")
	}
}
