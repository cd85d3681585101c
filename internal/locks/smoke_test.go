package locks_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/locks"
	"github.com/studioctl/studioctl/internal/pgtest"
)

func TestSmokeLockAndSecondRefused(t *testing.T) {
	ctx := context.Background()
	pool, err := db.Open(ctx, pgtest.NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	a, _ := locks.NewProvider(pool, locks.DefaultTable(), "a")
	b, _ := locks.NewProvider(pool, locks.DefaultTable(), "b")
	if err := a.CheckSchema(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := a.TryLock(ctx, "job", time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryLock(ctx, "job", time.Minute, 0); !errors.Is(err, locks.ErrHeldElsewhere) {
		t.Fatalf("second lock: got %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
