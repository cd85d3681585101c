package jobstore_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
	"github.com/studioctl/studioctl/internal/startstop"
)

var _ startstop.Service = (*jobstore.Store)(nil)

// Start fails for real on a database it cannot write (it takes the first
// block of run seqs), and a failed start leaves the store stopped.
func TestStoreStartFailsOnAReadOnlyDatabase(t *testing.T) {
	t.Parallel()
	_, url := newPool(t)
	admin := openPool(t, url)
	if _, err := admin.Exec(t.Context(), `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET default_transaction_read_only = on', current_database()); END $$`); err != nil {
		t.Fatal(err)
	}
	pool := openPool(t, url) // new sessions: read-only
	s := jobstore.NewStore(pool, "replica-1", nil)
	err := s.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "allocate run seqs") {
		t.Fatalf("Start on a read-only database = %v, want the seq allocation to fail", err)
	}
	select {
	case <-s.Stopped():
	default:
		t.Error("a failed Start must leave the store stopped")
	}
	if err := s.Start(context.Background()); !errors.Is(err, startstop.ErrStopped) {
		t.Errorf("Start after a failed Start = %v, want ErrStopped", err)
	}
	s.Stop()
}

// Stop is safe from several goroutines at once; each returns after the
// last flush, and what was queued is written once.
func TestStoreStopIsSafeConcurrentlyAndFlushesOnce(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	s := jobstore.NewStore(pool, "replica-1", nil)
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := startstop.WaitStarted(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	s.PutStatus(jobs.Status{ReplicaID: "replica-1", JobID: "queued", Scope: jobs.ScopeInstance, Schedule: "every 10s"})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.Stop()
			var n int
			if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM studio_job_status WHERE job_id = 'queued'`).Scan(&n); err != nil || n != 1 {
				t.Errorf("after Stop returned: %d rows, %v; want the queued row written", n, err)
			}
		}()
	}
	wg.Wait()
	s.Stop()
}
