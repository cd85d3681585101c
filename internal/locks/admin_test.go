package locks_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/studioctl/studioctl/internal/locks"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

// insertReplica adds a studio_replica row whose heartbeat is age old in database time.
func insertReplica(t testing.TB, q locks.Querier, id, state string, age time.Duration) {
	t.Helper()
	_, err := q.Exec(t.Context(), `
INSERT INTO studio_replica (id, incarnation, host, pid, version, state, heartbeat_at)
VALUES ($1, gen_random_uuid(), 'host-1', 4242, 'v0.0.0-test', $2, now() - make_interval(secs => $3))`,
		id, state, age.Seconds())
	if err != nil {
		t.Fatalf("insert replica %s: %v", id, err)
	}
}

func TestAdminJudgesALockByItsHolderReplica(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		state      string // "" for no studio_replica row
		age        time.Duration
		wantHolder locks.HolderState
		wantState  locks.State
		needsForce bool
	}{
		{"a ready replica with a fresh heartbeat is live and its lock held", "ready", 0, locks.HolderLive, locks.StateHeld, true},
		{"a draining replica with a fresh heartbeat is live and its lock held", "draining", 0, locks.HolderLive, locks.StateHeld, true},
		{"a replica whose heartbeat is 20s old is gone and its lock stale", "ready", 20 * time.Second, locks.HolderGone, locks.StateStale, false},
		{"a stopped replica is gone even with a fresh heartbeat", "stopped", 0, locks.HolderGone, locks.StateStale, false},
		{"a holder that is no replica is unknown and its lock held", "", 0, locks.HolderUnknown, locks.StateHeld, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pool := newPool(t)
			if tt.state != "" {
				insertReplica(t, pool, "replica-7", tt.state, tt.age)
			}
			mustLock(t, newProvider(t, pool, defaultTable, "replica-7"), "job", 10*time.Minute, 0)
			admin := newAdmin(t, pool, defaultTable)

			in, err := admin.Get(t.Context(), "job")
			if err != nil {
				t.Fatal(err)
			}
			if in.HolderState != tt.wantHolder || in.State != tt.wantState {
				t.Fatalf("Get = holder %s, state %s; want %s, %s", in.HolderState, in.State, tt.wantHolder, tt.wantState)
			}
			err = locks.CheckRelease(in, false)
			if tt.needsForce != errors.Is(err, locks.ErrRefused) {
				t.Fatalf("CheckRelease without force = %v, want refused: %v", err, tt.needsForce)
			}
			if err := locks.CheckRelease(in, true); err != nil {
				t.Fatalf("CheckRelease with force = %v", err)
			}
			res, err := admin.Release(t.Context(), pool, locks.ReleaseRequest{Info: in, Force: tt.needsForce, Actor: "ops", Reason: tt.name})
			if err != nil || !res.Changed || !res.Audited {
				t.Fatalf("Release = %+v, %v", res, err)
			}
			waitFree(t, pool, defaultTable, "job")
			mustLock(t, newProvider(t, pool, defaultTable, "replica-8"), "job", time.Minute, 0)
		})
	}
}

func TestAdminListsEveryLockByNameAndGetReportsAMissingOne(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	insertReplica(t, pool, "replica-a", "ready", 0)
	a := newProvider(t, pool, defaultTable, "replica-a")
	mustLock(t, a, "b-job", time.Minute, 0)
	mustUnlock(t, mustLock(t, a, "a-job", time.Minute, 0))
	admin := newAdmin(t, pool, defaultTable)

	list, err := admin.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != "a-job" || list[1].Name != "b-job" {
		t.Fatalf("List = %+v, want a-job and b-job in that order", list)
	}
	if list[0].State != locks.StateFree || list[0].Remaining > 0 || list[1].State != locks.StateHeld || list[1].HolderState != locks.HolderLive {
		t.Errorf("List = %+v, want a-job free, b-job held by a live replica", list)
	}
	if _, err := admin.Get(t.Context(), "no-such-job"); !errors.Is(err, locks.ErrNotFound) {
		t.Errorf("Get of a missing lock: got %v, want locks.ErrNotFound", err)
	}
	if _, err := admin.Get(t.Context(), ""); !errors.Is(err, locks.ErrInvalid) {
		t.Errorf("Get of an empty name: got %v, want locks.ErrInvalid", err)
	}
}

// The harness's server runs in America/Los_Angeles; this test also sets that
// zone as the database default, so it holds against any server. Only the
// UTC sessions of db.Open stand between the lock table and a 7-8 hour error.
func TestInfoTimesAreUTCAndRemainingIsRightWhileTheServerZoneIsLosAngeles(t *testing.T) {
	t.Parallel()
	tables := append([]javaTable{{name: "timestamp", ddl: `CREATE TABLE shedlock(name VARCHAR(64) PRIMARY KEY,
		lock_until TIMESTAMP NOT NULL, locked_at TIMESTAMP NOT NULL, locked_by VARCHAR(255) NOT NULL)`}}, javaTables...)
	for _, jt := range tables {
		t.Run(jt.name, func(t *testing.T) {
			t.Parallel()
			url := pgtest.NewEmptyDB(t)
			pool := openPool(t, url, 0)
			var dbName string
			if err := pool.QueryRow(t.Context(), `SELECT current_database()`).Scan(&dbName); err != nil {
				t.Fatal(err)
			}
			exec(t, pool, jt.ddl, "ALTER DATABASE "+ident(dbName)+" SET timezone = 'America/Los_Angeles'")

			// A session that does not ask for UTC gets Los Angeles.
			raw, err := pgx.Connect(t.Context(), url)
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close(t.Context())
			var zone string
			if err := raw.QueryRow(t.Context(), `SHOW TimeZone`).Scan(&zone); err != nil || zone != pgtest.TimeZone {
				t.Fatalf("a plain session runs in %q (%v), want %s", zone, err, pgtest.TimeZone)
			}
			// A fresh pool, so its sessions start after the ALTER DATABASE.
			pool = openPool(t, url, 0)

			mustLock(t, newProvider(t, pool, defaultTable, "replica-a"), "job", time.Hour, 0)
			var serverNow time.Time // an instant: independent of any zone
			if err := pool.QueryRow(t.Context(), `SELECT now()`).Scan(&serverNow); err != nil {
				t.Fatal(err)
			}
			in, err := newAdmin(t, pool, defaultTable).Get(t.Context(), "job")
			if err != nil {
				t.Fatal(err)
			}
			if in.LockedAt.Location() != time.UTC || in.LockUntil.Location() != time.UTC {
				t.Errorf("Info times are in %v and %v, want UTC", in.LockedAt.Location(), in.LockUntil.Location())
			}
			if d := serverNow.Sub(in.LockedAt); d < 0 || d > time.Minute {
				t.Errorf("locked_at %v is %v before the server's now %v, want a few milliseconds", in.LockedAt, d, serverNow.UTC())
			}
			if got := in.LockUntil.Sub(in.LockedAt); got != time.Hour {
				t.Errorf("lock_until - locked_at = %v, want 1h", got)
			}
			if in.Remaining <= 59*time.Minute || in.Remaining > time.Hour || in.State != locks.StateHeld {
				t.Errorf("Remaining = %v, state %s; want just under 1h, held", in.Remaining, in.State)
			}
		})
	}
}

// Defect 6 of issue 7: two concurrent releases of one lock both changed it
// (the compare-and-set left out lock_until, and "lock_until > now" used each
// transaction's own start time). 20 pairs run at once, each pair on its own
// lock, both sides reading first like `locks release` does; each lock must
// change once and get exactly one audit row, and the loser must be told the
// lock is already free.
func TestTwentyConcurrentPairsOfReleasesChangeEachLockOnce(t *testing.T) {
	t.Parallel()
	const locksN = 20
	pool := openPool(t, pgtest.NewDB(t), 2*locksN+2)
	insertReplica(t, pool, "gone-replica", "stopped", time.Minute)
	holder := newProvider(t, pool, defaultTable, "gone-replica")
	java := newProvider(t, pool, defaultTable, "java-node-1") // an unknown holder: needs --force
	admin := newAdmin(t, pool, defaultTable)
	names := make([]string, locksN)
	for i := range names {
		names[i] = fmt.Sprintf("job-%02d", i)
		p := holder
		if i%2 == 1 {
			p = java
		}
		mustLock(t, p, names[i], 10*time.Minute, 0)
	}

	type outcome struct {
		res locks.ReleaseResult
		err error
	}
	results := make([][2]outcome, locksN)
	read := make(chan struct{})
	var readers, done sync.WaitGroup
	for i, name := range names {
		for side := range 2 {
			readers.Add(1)
			done.Add(1)
			go func() {
				defer done.Done()
				in, err := admin.Get(t.Context(), name)
				readers.Done()
				if err != nil {
					results[i][side].err = err
					return
				}
				<-read // every side has read its lock: now all release at once
				res, err := admin.Release(t.Context(), pool, locks.ReleaseRequest{Info: in, Force: true, Actor: fmt.Sprintf("ops-%d", side), Reason: "pair"})
				results[i][side] = outcome{res, err}
			}()
		}
	}
	readers.Wait()
	close(read)
	done.Wait()

	changed := 0
	for i, pair := range results {
		n := 0
		for side, o := range pair {
			switch {
			case o.err != nil:
				t.Errorf("%s side %d: Release: %v", names[i], side, o.err)
			case o.res.Changed && o.res.Audited:
				n++
			case !o.res.Changed && o.res.FreedSince:
			default:
				t.Errorf("%s side %d: Release = %+v; want changed and audited, or already freed since it was read", names[i], side, o.res)
			}
		}
		if n != 1 {
			t.Errorf("%s: %d releases changed it, want exactly 1", names[i], n)
		}
		changed += n
	}
	perTarget := map[string]int{}
	for _, a := range auditRows(t, pool) {
		perTarget[a.Target]++
	}
	for _, name := range names {
		if perTarget[name] != 1 {
			t.Errorf("%s: %d audit rows, want exactly 1", name, perTarget[name])
		}
		waitFree(t, pool, defaultTable, name)
	}
	if changed != locksN || len(perTarget) != locksN {
		t.Errorf("%d releases and audit rows for %d locks, want %d and %d", changed, len(perTarget), locksN, locksN)
	}
}

// TestAdminHandlesInfiniteAndFarTimestamps: another writer of the lock
// table (a Java node, a hand-made row) may store 'infinity' or a year past
// 9999. One such row made locks list, show and release fail for every lock
// ("cannot subtract infinite timestamps"), so the operator could release
// nothing. Such a lock now reads as held until 9999-12-31, shows in JSON,
// and can be released.
func TestAdminHandlesInfiniteAndFarTimestamps(t *testing.T) {
	t.Parallel()
	for _, tz := range []string{"timestamp", "timestamptz"} {
		t.Run(tz, func(t *testing.T) {
			t.Parallel()
			pool := newPool(t)
			table := defaultTable
			if tz == "timestamptz" {
				table.Name = "shedlock_tz"
				exec(t, pool, `CREATE TABLE shedlock_tz (name varchar(64) PRIMARY KEY, lock_until timestamptz NOT NULL, locked_at timestamptz NOT NULL, locked_by varchar(255) NOT NULL)`)
			}
			tbl := locks.TableSQL(table)
			exec(t, pool,
				`INSERT INTO `+tbl+` VALUES ('forever', 'infinity', '-infinity', 'java-node')`,
				`INSERT INTO `+tbl+` VALUES ('y10k', '10000-01-01', '2026-01-01', 'java-node')`,
				`INSERT INTO `+tbl+` VALUES ('never', '-infinity', '-infinity', 'java-node')`,
				`INSERT INTO `+tbl+` VALUES ('plain', now() + interval '1 hour', now(), 'java-node')`)
			admin := newAdmin(t, pool, table)
			warnings, err := locks.TimeZoneWarnings(t.Context(), pool, table)
			if err != nil {
				t.Fatalf("TimeZoneWarnings with infinite timestamps: %v", err)
			}
			for _, w := range warnings {
				if strings.Contains(w, `"forever"`) || strings.Contains(w, `"never"`) {
					t.Errorf("a zone warning for an infinite locked_at: %s", w)
				}
			}
			all, err := admin.List(t.Context())
			if err != nil {
				t.Fatalf("List with infinite timestamps: %v", err)
			}
			states := map[string]locks.State{}
			for _, in := range all {
				states[in.Name] = in.State
				if _, err := json.Marshal(map[string]time.Time{"at": in.LockedAt, "until": in.LockUntil}); err != nil {
					t.Errorf("lock %q: its times do not show in JSON: %v", in.Name, err)
				}
			}
			want := map[string]locks.State{"forever": locks.StateHeld, "y10k": locks.StateHeld, "never": locks.StateFree, "plain": locks.StateHeld}
			if fmt.Sprint(states) != fmt.Sprint(want) {
				t.Errorf("states = %v, want %v", states, want)
			}
			for _, name := range []string{"forever", "y10k"} {
				in, err := admin.Get(t.Context(), name)
				if err != nil {
					t.Fatalf("Get %q: %v", name, err)
				}
				if in.Remaining <= 0 || in.LockUntil.Year() != 9999 {
					t.Errorf("lock %q: remaining %v, until %v; want held until 9999", name, in.Remaining, in.LockUntil)
				}
				res, err := admin.Release(t.Context(), pool, locks.ReleaseRequest{Info: in, Force: true, Actor: "ops", Reason: "a lock for ever"})
				if err != nil || !res.Changed {
					t.Fatalf("Release %q = %+v, %v", name, res, err)
				}
				waitFree(t, pool, table, name)
			}
		})
	}
}
