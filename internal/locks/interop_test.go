package locks_test

// A Go replica and a Java ShedLock node sharing one shedlock table. The Java
// node is simulated by sending ShedLock's PostgreSQL statements
// (PostgresSqlServerTimeStatementsSource, usingDbTime()) literally, on its
// own connection, with the interval passed as '<millis> milliseconds' cast to
// interval, as ShedLock does.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/locks"
	"github.com/studioctl/studioctl/internal/migrate"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

// ShedLock's statements; $1 is the name, $2 the interval, $3 locked_by.
const (
	javaInsertSQL = `INSERT INTO shedlock(name, lock_until, locked_at, locked_by) VALUES($1, timezone('utc', CURRENT_TIMESTAMP) + cast($2 as interval), timezone('utc', CURRENT_TIMESTAMP), $3) ON CONFLICT (name) DO UPDATE SET lock_until = timezone('utc', CURRENT_TIMESTAMP) + cast($2 as interval), locked_at = timezone('utc', CURRENT_TIMESTAMP), locked_by = $3 WHERE shedlock.name = $1 AND shedlock.lock_until <= timezone('utc', CURRENT_TIMESTAMP)`
	javaUpdateSQL = `UPDATE shedlock SET lock_until = timezone('utc', CURRENT_TIMESTAMP) + cast($2 as interval), locked_at = timezone('utc', CURRENT_TIMESTAMP), locked_by = $3 WHERE shedlock.name = $1 AND shedlock.lock_until <= timezone('utc', CURRENT_TIMESTAMP)`
	javaUnlockSQL = `UPDATE shedlock SET lock_until = CASE WHEN locked_at + cast($2 as interval) > timezone('utc', CURRENT_TIMESTAMP) THEN locked_at + cast($2 as interval) ELSE timezone('utc', CURRENT_TIMESTAMP) END WHERE name = $1 AND locked_by = $3`
	javaExtendSQL = `UPDATE shedlock SET lock_until = timezone('utc', CURRENT_TIMESTAMP) + cast($2 as interval) WHERE name = $1 AND locked_by = $3 AND lock_until > timezone('utc', CURRENT_TIMESTAMP)`
)

// javaNode plays one Java process running ShedLock.
type javaNode struct {
	conn     *pgx.Conn
	lockedBy string
	// known holds the names whose row this node has seen, like ShedLock's
	// LockRecordRegistry: the first attempt inserts, later ones update.
	known map[string]bool
}

func newJavaNode(t testing.TB, url, lockedBy, timeZone string) *javaNode {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	if timeZone != "" {
		cfg.RuntimeParams["timezone"] = timeZone
	}
	conn, err := pgx.ConnectConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return &javaNode{conn: conn, lockedBy: lockedBy, known: map[string]bool{}}
}

func javaInterval(d time.Duration) string { return fmt.Sprintf("%d milliseconds", d.Milliseconds()) }

// lock is StorageBasedLockProvider.doLock: true when this node got the lock.
func (j *javaNode) lock(ctx context.Context, name string, atMostFor time.Duration) (bool, error) {
	if !j.known[name] {
		tag, err := j.conn.Exec(ctx, javaInsertSQL, name, javaInterval(atMostFor), j.lockedBy)
		if err != nil {
			return false, err
		}
		j.known[name] = true
		if tag.RowsAffected() == 1 {
			return true, nil
		}
	}
	tag, err := j.conn.Exec(ctx, javaUpdateSQL, name, javaInterval(atMostFor), j.lockedBy)
	return tag.RowsAffected() == 1, err
}

func (j *javaNode) extend(ctx context.Context, name string, atMostFor time.Duration) (bool, error) {
	tag, err := j.conn.Exec(ctx, javaExtendSQL, name, javaInterval(atMostFor), j.lockedBy)
	return tag.RowsAffected() == 1, err
}

func (j *javaNode) unlock(ctx context.Context, name string, atLeastFor time.Duration) (int64, error) {
	tag, err := j.conn.Exec(ctx, javaUnlockSQL, name, javaInterval(atLeastFor), j.lockedBy)
	return tag.RowsAffected(), err
}

func (j *javaNode) mustLock(t testing.TB, name string, atMostFor time.Duration) {
	t.Helper()
	ok, err := j.lock(t.Context(), name, atMostFor)
	if err != nil || !ok {
		t.Fatalf("%s: lock %q: got %v, %v; want the lock", j.lockedBy, name, ok, err)
	}
}

func (j *javaNode) mustBeRefused(t testing.TB, name string) {
	t.Helper()
	ok, err := j.lock(t.Context(), name, time.Minute)
	if err != nil || ok {
		t.Fatalf("%s: lock %q: got %v, %v; want refused", j.lockedBy, name, ok, err)
	}
}

func (j *javaNode) mustUnlock(t testing.TB, name string, atLeastFor time.Duration) {
	t.Helper()
	if n, err := j.unlock(t.Context(), name, atLeastFor); err != nil || n != 1 {
		t.Fatalf("%s: unlock %q: %d rows, %v", j.lockedBy, name, n, err)
	}
}

// javaInstallation is a database where a Java installation created shedlock
// first and studioctl migrated afterwards (which leaves shedlock alone).
func javaInstallation(t testing.TB, jt javaTable) (*pgxpool.Pool, string) {
	t.Helper()
	url := pgtest.NewEmptyDB(t)
	pool := openPool(t, url, 0)
	exec(t, pool, jt.ddl)
	if _, err := migrate.Up(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	if err := locks.CheckSchema(t.Context(), pool, defaultTable); err != nil {
		t.Fatal(err)
	}
	return pool, url
}

func TestJavaAndGoNodesExcludeEachOther(t *testing.T) {
	t.Parallel()
	for _, jt := range javaTables {
		t.Run(jt.name, func(t *testing.T) {
			t.Parallel()
			pool, url := javaInstallation(t, jt)
			java := newJavaNode(t, url, "java-node-1", jt.javaTimeZone)
			goNode := newProvider(t, pool, defaultTable, "go-replica-1")
			admin := newAdmin(t, pool, defaultTable)

			// Java holds: Go is refused.
			java.mustLock(t, "report", 30*time.Second)
			mustBeRefused(t, goNode, "report")
			java.mustBeRefused(t, "report")
			in, err := admin.Get(t.Context(), "report")
			if err != nil {
				t.Fatal(err)
			}
			if in.LockedBy != "java-node-1" || in.State != locks.StateHeld || in.Remaining <= 20*time.Second || in.Remaining > 30*time.Second {
				t.Errorf("Go reads the Java lock as %+v", in)
			}
			if ok, err := java.extend(t.Context(), "report", time.Minute); err != nil || !ok {
				t.Fatalf("java extend: %v, %v", ok, err)
			}
			if r := readRow(t, pool, defaultTable, "report"); r.LockUntil.Sub(r.LockedAt) < time.Minute {
				t.Errorf("after the Java extend: %+v", r)
			}
			mustBeRefused(t, goNode, "report")

			// Java releases: Go takes it once lock_until has passed. (With
			// TIMESTAMP(3) the unlock's "now" is rounded to the millisecond and
			// may lie up to 0.5 ms ahead, in Java as in Go.)
			java.mustUnlock(t, "report", 0)
			waitFree(t, pool, defaultTable, "report")
			lg := mustLock(t, goNode, "report", time.Minute, 0)

			// Go holds: every Java statement affects 0 rows.
			held := readRow(t, pool, defaultTable, "report")
			for _, sql := range []string{javaInsertSQL, javaUpdateSQL, javaExtendSQL, javaUnlockSQL} {
				tag, err := java.conn.Exec(t.Context(), sql, "report", javaInterval(time.Minute), "java-node-1")
				if err != nil || tag.RowsAffected() != 0 {
					t.Errorf("while Go holds the lock, Java's %.40q... affected %d rows (%v), want 0", sql, tag.RowsAffected(), err)
				}
			}
			if r := readRow(t, pool, defaultTable, "report"); r != held {
				t.Errorf("Java's statements changed Go's lock: before %+v, after %+v", held, r)
			}

			// Go's atLeastFor keeps Java out until locked_at + atLeastFor.
			lg, err = lg.Extend(t.Context(), time.Minute, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			mustUnlock(t, lg)
			java.mustBeRefused(t, "report")
			eventually(t, "java to take the lock", func() bool {
				ok, err := java.lock(t.Context(), "report", time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				return ok
			})
			if r := readRow(t, pool, defaultTable, "report"); r.LockedBy != "java-node-1" || r.LockedAt.Before(held.LockedAt.Add(time.Second)) {
				t.Errorf("Java took the lock as %+v, before Go's locked_at + atLeastFor = %v", r, held.LockedAt.Add(time.Second))
			}

			// Java's atLeastFor keeps Go out likewise.
			javaHeld := readRow(t, pool, defaultTable, "report")
			java.mustUnlock(t, "report", time.Second)
			if r := readRow(t, pool, defaultTable, "report"); !r.LockUntil.Equal(javaHeld.LockedAt.Add(time.Second)) {
				t.Errorf("after Java's unlock with atLeastFor lock_until = %v, want %v", r.LockUntil, javaHeld.LockedAt.Add(time.Second))
			}
			mustBeRefused(t, goNode, "report")
			lockEventually(t, goNode, "report", time.Minute, 0)
			if r := readRow(t, pool, defaultTable, "report"); r.LockedAt.Before(javaHeld.LockedAt.Add(time.Second)) {
				t.Errorf("Go took the lock at %v, before Java's locked_at + atLeastFor = %v", r.LockedAt, javaHeld.LockedAt.Add(time.Second))
			}
		})
	}
}

// Two Go replicas and two Java nodes hammer one name, each doing a
// non-atomic read-modify-write of a counter while it holds the lock.
func TestJavaAndGoNodesKeepACounterExactConcurrently(t *testing.T) {
	t.Parallel()
	for _, jt := range javaTables {
		t.Run(jt.name, func(t *testing.T) {
			t.Parallel()
			pool, url := javaInstallation(t, jt)
			exec(t, pool, `CREATE TABLE interop_counter (n bigint NOT NULL)`, `INSERT INTO interop_counter VALUES (0)`)
			const (
				name          = "shared-job"
				minIterations = 100
				minEachSide   = 10
				timeLimit     = 15 * time.Second
			)
			var (
				goTaken, javaTaken, refused atomic.Int64
				inside                      atomic.Bool
			)
			ctx := t.Context()
			stop := time.Now().Add(timeLimit)
			enough := func(i int) bool {
				return i >= minIterations && goTaken.Load() >= minEachSide && javaTaken.Load() >= minEachSide
			}
			// critical increments the counter over q, failing on overlap.
			critical := func(who string, q interface {
				QueryRow(context.Context, string, ...any) pgx.Row
			}) bool {
				if !inside.CompareAndSwap(false, true) {
					t.Errorf("%s took the lock while another node held it", who)
				}
				defer inside.Store(false)
				var n int64
				if err := q.QueryRow(ctx, `SELECT n FROM interop_counter`).Scan(&n); err != nil {
					t.Errorf("%s: read counter: %v", who, err)
					return false
				}
				if err := q.QueryRow(ctx, `UPDATE interop_counter SET n = $1 RETURNING n`, n+1).Scan(&n); err != nil {
					t.Errorf("%s: write counter: %v", who, err)
					return false
				}
				return true
			}

			var wg sync.WaitGroup
			for w := range 2 {
				p := newProvider(t, pool, defaultTable, fmt.Sprintf("go-replica-%d", w+1))
				wg.Go(func() {
					for i := 0; !enough(i) && time.Now().Before(stop); i++ {
						l, err := p.TryLock(ctx, name, time.Minute, 0)
						if errors.Is(err, locks.ErrHeldElsewhere) {
							refused.Add(1)
							continue
						}
						if err != nil {
							t.Errorf("%s: lock: %v", p.LockedBy(), err)
							return
						}
						if !critical(p.LockedBy(), pool) {
							return
						}
						goTaken.Add(1)
						if err := l.Unlock(ctx); err != nil {
							t.Errorf("%s: unlock: %v", p.LockedBy(), err)
							return
						}
					}
				})
			}
			for w := range 2 {
				java := newJavaNode(t, url, fmt.Sprintf("java-node-%d", w+1), jt.javaTimeZone)
				wg.Go(func() {
					for i := 0; !enough(i) && time.Now().Before(stop); i++ {
						ok, err := java.lock(ctx, name, time.Minute)
						if err != nil {
							t.Errorf("%s: lock: %v", java.lockedBy, err)
							return
						}
						if !ok {
							refused.Add(1)
							continue
						}
						if !critical(java.lockedBy, java.conn) {
							return
						}
						javaTaken.Add(1)
						if n, err := java.unlock(ctx, name, 0); err != nil || n != 1 {
							t.Errorf("%s: unlock: %d rows, %v", java.lockedBy, n, err)
							return
						}
					}
				})
			}
			wg.Wait()

			var n int64
			if err := pool.QueryRow(ctx, `SELECT n FROM interop_counter`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			t.Logf("go took the lock %d times, java %d times, %d refusals; counter %d", goTaken.Load(), javaTaken.Load(), refused.Load(), n)
			if total := goTaken.Load() + javaTaken.Load(); n != total {
				t.Errorf("counter is %d after %d acquisitions: two holders overlapped", n, total)
			}
			if goTaken.Load() == 0 || javaTaken.Load() == 0 || refused.Load() == 0 {
				t.Errorf("the nodes did not contend: go %d, java %d, refused %d", goTaken.Load(), javaTaken.Load(), refused.Load())
			}
		})
	}
}

// auditRow is one studio_audit row.
type auditRow struct {
	Actor, Action, Target, Reason, LockedBy string
	Force                                   bool
}

func auditRows(t testing.TB, q locks.Querier) []auditRow {
	t.Helper()
	rows, err := q.Query(t.Context(), `SELECT actor, action, target, reason, detail->>'locked_by', (detail->>'force')::bool FROM studio_audit ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []auditRow
	for rows.Next() {
		var r auditRow
		if err := rows.Scan(&r.Actor, &r.Action, &r.Target, &r.Reason, &r.LockedBy, &r.Force); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestReleaseOfAJavaLockNeedsForceAndIsAudited(t *testing.T) {
	t.Parallel()
	for _, jt := range javaTables {
		t.Run(jt.name, func(t *testing.T) {
			t.Parallel()
			pool, url := javaInstallation(t, jt)
			java := newJavaNode(t, url, "java-node-1", jt.javaTimeZone)
			goNode := newProvider(t, pool, defaultTable, "go-replica-1")
			admin := newAdmin(t, pool, defaultTable)

			java.mustLock(t, "report", 10*time.Minute)
			in, err := admin.Get(t.Context(), "report")
			if err != nil {
				t.Fatal(err)
			}
			if in.Name != "report" || in.LockedBy != "java-node-1" || in.HolderState != locks.HolderUnknown || in.State != locks.StateHeld {
				t.Fatalf("Get = %+v, want java-node-1, holder unknown, held", in)
			}
			if err := locks.CheckRelease(in, false); !errors.Is(err, locks.ErrRefused) {
				t.Fatalf("CheckRelease without force: got %v, want locks.ErrRefused", err)
			}
			if err := locks.CheckRelease(in, true); err != nil {
				t.Fatalf("CheckRelease with force: %v", err)
			}

			held := readRow(t, pool, defaultTable, "report")
			req := locks.ReleaseRequest{Info: in, Actor: "alice@ops-laptop", Reason: "java node wedged"}
			if _, err := admin.Release(t.Context(), pool, req); !errors.Is(err, locks.ErrRefused) {
				t.Fatalf("Release without force: got %v, want locks.ErrRefused", err)
			}
			if r := readRow(t, pool, defaultTable, "report"); r != held {
				t.Errorf("a refused release changed the row: %+v", r)
			}
			if a := auditRows(t, pool); len(a) != 0 {
				t.Errorf("a refused release wrote audit rows: %+v", a)
			}

			req.Force = true
			before := dbNow(t, pool)
			res, err := admin.Release(t.Context(), pool, req)
			if err != nil {
				t.Fatalf("Release with force: %v", err)
			}
			after := dbNow(t, pool)
			if !res.Changed || !res.Audited || res.Before != in {
				t.Errorf("Release = %+v", res)
			}
			// lock_until is set to database now (TIMESTAMP(3) rounds it to the millisecond).
			if res.Until.Location() != time.UTC || res.Until.Before(before.Add(-time.Millisecond)) || res.Until.After(after.Add(time.Millisecond)) {
				t.Errorf("released lock_until = %v, want database now, between %v and %v", res.Until, before, after)
			}
			r := readRow(t, pool, defaultTable, "report")
			if !r.LockUntil.Equal(res.Until) || r.LockedBy != "java-node-1" || r.LockedAt != held.LockedAt {
				t.Errorf("row after release = %+v, want lock_until %v and the rest unchanged (%+v)", r, res.Until, held)
			}
			want := auditRow{Actor: "alice@ops-laptop", Action: "locks.release", Target: "report", Reason: "java node wedged", LockedBy: "java-node-1", Force: true}
			if a := auditRows(t, pool); len(a) != 1 || a[0] != want {
				t.Errorf("audit rows = %+v, want [%+v]", a, want)
			}
			waitFree(t, pool, defaultTable, "report")
			if in, err := admin.Get(t.Context(), "report"); err != nil || in.State != locks.StateFree || in.Remaining > 0 {
				t.Errorf("Get after release = %+v, %v; want free", in, err)
			}

			// The Java node can lock again; released once more, Go can lock.
			java.mustLock(t, "report", 10*time.Minute)
			mustBeRefused(t, goNode, "report")
			in, err = admin.Get(t.Context(), "report")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := admin.Release(t.Context(), pool, locks.ReleaseRequest{Info: in, Force: true, Actor: "bob", Reason: "again"}); err != nil {
				t.Fatal(err)
			}
			waitFree(t, pool, defaultTable, "report")
			mustLock(t, goNode, "report", time.Minute, 0)
			java.mustBeRefused(t, "report")
			if a := auditRows(t, pool); len(a) != 2 {
				t.Errorf("%d audit rows after two releases, want 2", len(a))
			}

			// A free lock is not refused and not changed.
			if _, err := pool.Exec(t.Context(), `UPDATE shedlock SET lock_until = locked_at`); err != nil {
				t.Fatal(err)
			}
			in, err = admin.Get(t.Context(), "report")
			if err != nil || in.State != locks.StateFree {
				t.Fatalf("Get = %+v, %v; want free", in, err)
			}
			if res, err := admin.Release(t.Context(), pool, locks.ReleaseRequest{Info: in, Actor: "bob"}); err != nil || res.Changed {
				t.Errorf("Release of a free lock = %+v, %v; want no change, no error", res, err)
			}
			if a := auditRows(t, pool); len(a) != 2 {
				t.Errorf("releasing a free lock wrote an audit row")
			}
		})
	}
}

func TestReleaseChangesNothingWhenTheLockChangedSinceItWasRead(t *testing.T) {
	t.Parallel()
	changes := []struct {
		name string
		// freed: the lock is free now with the holder and locked_at read,
		// so the release has nothing to do (FreedSince, no error); else
		// it is refused with ErrChanged.
		freed  bool
		change func(t *testing.T, pool *pgxpool.Pool, java *javaNode, goNode *locks.Provider, read locks.Info)
	}{
		{"the Java node released it", true, func(t *testing.T, pool *pgxpool.Pool, java *javaNode, _ *locks.Provider, _ locks.Info) {
			java.mustUnlock(t, "report", 0)
			waitFree(t, pool, defaultTable, "report")
		}},
		{"a Go replica took it over", false, func(t *testing.T, pool *pgxpool.Pool, java *javaNode, goNode *locks.Provider, _ locks.Info) {
			java.mustUnlock(t, "report", 0)
			waitFree(t, pool, defaultTable, "report")
			mustLock(t, goNode, "report", 10*time.Minute, 0)
		}},
		{"the Java node took it again", false, func(t *testing.T, pool *pgxpool.Pool, java *javaNode, _ *locks.Provider, read locks.Info) {
			java.mustUnlock(t, "report", 0)
			// A new locked_at, not within the same millisecond.
			eventually(t, "database time to move on", func() bool { return dbNow(t, pool).After(read.LockedAt.Add(5 * time.Millisecond)) })
			waitFree(t, pool, defaultTable, "report")
			java.mustLock(t, "report", 10*time.Minute)
		}},
		{"the Java node extended it", false, func(t *testing.T, pool *pgxpool.Pool, java *javaNode, _ *locks.Provider, read locks.Info) {
			eventually(t, "database time to move on", func() bool { return dbNow(t, pool).After(read.LockedAt.Add(5 * time.Millisecond)) })
			if ok, err := java.extend(t.Context(), "report", 20*time.Minute); err != nil || !ok {
				t.Fatalf("extend: %v, %v", ok, err)
			}
		}},
	}
	for _, jt := range javaTables {
		for _, c := range changes {
			t.Run(jt.name+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				pool, url := javaInstallation(t, jt)
				java := newJavaNode(t, url, "java-node-1", jt.javaTimeZone)
				goNode := newProvider(t, pool, defaultTable, "go-replica-1")
				admin := newAdmin(t, pool, defaultTable)

				java.mustLock(t, "report", 10*time.Minute)
				in, err := admin.Get(t.Context(), "report")
				if err != nil {
					t.Fatal(err)
				}
				c.change(t, pool, java, goNode, in)
				now := readRow(t, pool, defaultTable, "report")

				res, err := admin.Release(t.Context(), pool, locks.ReleaseRequest{Info: in, Force: true, Actor: "alice", Reason: "stuck"})
				switch {
				case c.freed && (err != nil || !res.FreedSince || res.Changed):
					t.Fatalf("Release = %+v, %v; want FreedSince, not changed, no error", res, err)
				case !c.freed && (!errors.Is(err, locks.ErrChanged) || !errors.Is(err, locks.ErrRefused) || res.Changed):
					t.Fatalf("Release = %+v, %v; want locks.ErrChanged, a refusal", res, err)
				}
				if r := readRow(t, pool, defaultTable, "report"); r != now {
					t.Errorf("Release changed the row: before %+v, after %+v", now, r)
				}
				if a := auditRows(t, pool); len(a) != 0 {
					t.Errorf("a release that changed nothing wrote audit rows: %+v", a)
				}
			})
		}
	}
}
