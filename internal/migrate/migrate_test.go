package migrate_test

import (
	"context"
	"io/fs"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pressly/goose/v3/lock"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/migrate"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
	"github.com/studioctl/studioctl/migrations"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// embedded lists the embedded migration files, sorted.
func embedded(t *testing.T) []string {
	t.Helper()
	names, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	if len(names) == 0 {
		t.Fatal("no embedded migrations")
	}
	sort.Strings(names)
	return names
}

func openPool(t *testing.T, ctx context.Context, url string) *pgxpool.Pool {
	t.Helper()
	p, err := db.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func newMigrator(t *testing.T, pool *pgxpool.Pool) *migrate.Migrator {
	t.Helper()
	m, err := migrate.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func TestUpAppliesEveryMigrationOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool := openPool(t, ctx, pgtest.NewEmptyDB(t))
	want := embedded(t)

	tests := []struct {
		name      string
		wantNames []string
	}{
		{"the first Up applies every embedded migration in order", want},
		{"a second Up applies nothing", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := migrate.Up(ctx, pool)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.wantNames) {
				t.Fatalf("Up applied %d migrations (%+v), want %d", len(got), got, len(tt.wantNames))
			}
			for i, s := range got {
				if s.Name != tt.wantNames[i] || !s.Applied {
					t.Errorf("applied[%d] = %+v, want %s applied", i, s, tt.wantNames[i])
				}
				if i > 0 && s.Version <= got[i-1].Version {
					t.Errorf("versions out of order: %d after %d", s.Version, got[i-1].Version)
				}
			}
		})
	}
}

func TestStatusListsAppliedAndPendingMigrations(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool := openPool(t, ctx, pgtest.NewEmptyDB(t))
	m := newMigrator(t, pool)
	want := embedded(t)

	check := func(t *testing.T, wantApplied bool) {
		t.Helper()
		st, err := m.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(st) != len(want) {
			t.Fatalf("Status lists %d migrations, want %d: %+v", len(st), len(want), st)
		}
		for i, s := range st {
			if s.Name != want[i] {
				t.Errorf("status[%d].Name = %q, want %q", i, s.Name, want[i])
			}
			if s.Applied != wantApplied {
				t.Errorf("status[%d].Applied = %v, want %v", i, s.Applied, wantApplied)
			}
			if wantApplied {
				if s.AppliedAt == nil {
					t.Errorf("status[%d].AppliedAt is nil for an applied migration", i)
				} else if s.AppliedAt.Location() != time.UTC {
					t.Errorf("status[%d].AppliedAt is in %v, want UTC", i, s.AppliedAt.Location())
				} else if d := time.Since(*s.AppliedAt); d < -time.Minute || d > 10*time.Minute {
					t.Errorf("status[%d].AppliedAt = %v, not recent (off by %v)", i, s.AppliedAt, d)
				}
			} else if s.AppliedAt != nil {
				t.Errorf("status[%d].AppliedAt = %v for a pending migration", i, s.AppliedAt)
			}
		}
		pending, err := anyPending(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		if pending == wantApplied {
			t.Errorf("Pending = %v with applied=%v", pending, wantApplied)
		}
	}

	tests := []struct {
		name        string
		before      func(t *testing.T)
		wantApplied bool
	}{
		{"on an empty database every migration is pending", func(*testing.T) {}, false},
		{"after Up every migration is applied with a UTC time", func(t *testing.T) {
			if _, err := m.Up(ctx); err != nil {
				t.Fatal(err)
			}
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.before(t)
			check(t, tt.wantApplied)
		})
	}
}

func TestConcurrentUpAppliesEachMigrationExactlyOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	url := pgtest.NewEmptyDB(t)
	want := embedded(t)

	const workers = 3
	pools := make([]*pgxpool.Pool, workers)
	for i := range pools {
		pools[i] = openPool(t, ctx, url)
	}
	results := make([][]migrate.Status, workers)
	errs := make([]error, workers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i], errs[i] = migrate.Up(ctx, pools[i])
		}()
	}
	close(start)
	wg.Wait()

	applied := map[int64]int{}
	for i := range workers {
		if errs[i] != nil {
			t.Errorf("worker %d: Up: %v", i, errs[i])
		}
		for _, s := range results[i] {
			applied[s.Version]++
		}
	}
	if len(applied) != len(want) {
		t.Errorf("workers applied versions %v, want %d distinct migrations", applied, len(want))
	}
	for v, n := range applied {
		if n != 1 {
			t.Errorf("version %d was applied %d times, want once", v, n)
		}
	}

	rows, err := pools[0].Query(ctx, "SELECT version_id, count(*) FROM goose_db_version WHERE version_id > 0 GROUP BY version_id ORDER BY version_id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var recorded int
	for rows.Next() {
		var v, n int64
		if err := rows.Scan(&v, &n); err != nil {
			t.Fatal(err)
		}
		recorded++
		if n != 1 {
			t.Errorf("goose_db_version records version %d %d times, want once", v, n)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if recorded != len(want) {
		t.Errorf("goose_db_version records %d versions, want %d", recorded, len(want))
	}

	pending, err := anyPending(ctx, newMigrator(t, pools[1]))
	if err != nil {
		t.Fatal(err)
	}
	if pending {
		t.Error("migrations still pending after concurrent Up")
	}
}

// anyPending reports whether Status lists a migration not applied.
func anyPending(ctx context.Context, m *migrate.Migrator) (bool, error) {
	st, err := m.Status(ctx)
	if err != nil {
		return false, err
	}
	for _, s := range st {
		if !s.Applied {
			return true, nil
		}
	}
	return false, nil
}

// Found by the adversarial pass over issue 7: goose's Status takes the
// migration lock, so any role that could connect and held the advisory
// lock made `migrate status` hang for up to five minutes. Status only
// reads; it must not wait for the lock.
func TestStatusDoesNotWaitForTheMigrationLock(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDB(t)
	pool := openPool(t, ctx, url)
	holder, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_lock($1)`, int64(lock.DefaultLockID)); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	st, err := newMigrator(t, pool).Status(sctx)
	if err != nil {
		t.Fatalf("status while another session holds the migration lock: %v", err)
	}
	if len(st) != len(embedded(t)) {
		t.Errorf("status lists %d migrations, want %d", len(st), len(embedded(t)))
	}
}
