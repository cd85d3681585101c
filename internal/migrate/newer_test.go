package migrate_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/migrate"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

func TestLatestVersionIsTheHighestEmbeddedFile(t *testing.T) {
	names := embedded(t)
	last := names[len(names)-1]
	want, err := strconv.ParseInt(last[:strings.IndexByte(last, '_')], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	got, err := migrate.LatestVersion()
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("LatestVersion() = %d, want %d (from %s)", got, want, last)
	}
}

func TestASchemaNewerThanTheBinaryIsReported(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool := openPool(t, ctx, pgtest.NewDB(t))
	m := newMigrator(t, pool)

	t.Run("a migrated database has no unknown version", func(t *testing.T) {
		if err := migrate.CheckNotNewer(ctx, pool); err != nil {
			t.Fatalf("CheckNotNewer = %v, want nil", err)
		}
		u, err := migrate.Unknown(ctx, pool)
		if err != nil || len(u) != 0 {
			t.Fatalf("Unknown = %+v, %v; want none", u, err)
		}
	})
	t.Run("an empty database has no unknown version", func(t *testing.T) {
		empty := openPool(t, ctx, pgtest.NewEmptyDB(t))
		if err := migrate.CheckNotNewer(ctx, empty); err != nil {
			t.Fatalf("CheckNotNewer = %v, want nil", err)
		}
	})

	// A newer studioctl applied 00099 (and rolled back 00098, as older goose
	// versions record it).
	if _, err := pool.Exec(ctx, `INSERT INTO goose_db_version (version_id, is_applied) VALUES (99, true), (98, true), (98, false)`); err != nil {
		t.Fatal(err)
	}
	t.Run("CheckNotNewer names the unknown version", func(t *testing.T) {
		err := migrate.CheckNotNewer(ctx, pool)
		var ne *migrate.NewerSchemaError
		if !errors.As(err, &ne) || !errors.Is(err, migrate.ErrNewerSchema) {
			t.Fatalf("CheckNotNewer = %v, want a *NewerSchemaError", err)
		}
		if len(ne.Unknown) != 1 || ne.Unknown[0].Version != 99 {
			t.Fatalf("unknown versions %+v, want only 99", ne.Unknown)
		}
		if !strings.Contains(err.Error(), "00099") || strings.Contains(err.Error(), "00098") {
			t.Errorf("message %q, want 00099 named and 00098 (rolled back) not", err)
		}
	})
	t.Run("Up refuses to work on it", func(t *testing.T) {
		if _, err := m.Up(ctx); !errors.Is(err, migrate.ErrNewerSchema) {
			t.Fatalf("Up = %v, want ErrNewerSchema", err)
		}
	})
	t.Run("Status lists the unknown version after the known ones", func(t *testing.T) {
		st, err := m.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(embedded(t)); len(st) != n+1 {
			t.Fatalf("Status lists %d rows, want %d known + 1 unknown: %+v", len(st), n, st)
		}
		last := st[len(st)-1]
		if last.Version != 99 || !last.Unknown || !last.Applied || last.AppliedAt == nil {
			t.Fatalf("last status row %+v, want 99 applied and unknown", last)
		}
		for _, s := range st[:len(st)-1] {
			if s.Unknown {
				t.Errorf("known migration %+v marked unknown", s)
			}
		}
	})
}
