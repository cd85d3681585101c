package db_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/testkit/pgbouncer"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

// TestSharesSessionsFindsABusyTransactionPooler: other clients keep the
// transaction pooler's server connections busy (as the other replicas and
// applications of a real deployment do); SharesSessions must still find
// the pooler every time. (The pid test alone missed it about one time in
// three with two server connections.) A busy session pooler is still one
// of sessions of their own.
func TestSharesSessionsFindsABusyTransactionPooler(t *testing.T) {
	direct := pgtest.NewDB(t)
	for _, c := range []struct {
		mode       string
		size, busy int
		want       bool
	}{{pgbouncer.Transaction, 2, 4, true}, {pgbouncer.Transaction, 4, 8, true}, {pgbouncer.Session, 8, 4, false}} {
		size := c.size
		b := pgbouncer.ForTest(t, c.mode, size)
		url := b.Through(t, direct)
		cfg, err := db.ParseConnConfig(url)
		if err != nil {
			t.Fatal(err)
		}
		// The busy clients stop between statements: a cancel request
		// racing PgBouncer's shutdown can keep it from stopping.
		var stop atomic.Bool
		ctx := context.Background()
		var wg sync.WaitGroup
		for range c.busy {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := cfg.Copy()
				db.ForPooler(c)
				conn, err := db.Connect(ctx, c, url)
				if err != nil {
					return
				}
				defer conn.Close(context.Background())
				for !stop.Load() {
					conn.Exec(ctx, `SELECT pg_sleep(0.003)`)
				}
			}()
		}
		missed := 0
		const tries = 30
		for range tries {
			sctx, scancel := context.WithTimeout(context.Background(), 20*time.Second)
			got, err := db.SharesSessions(sctx, cfg, url)
			scancel()
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				missed++
			}
		}
		stop.Store(true)
		wg.Wait()
		if missed > 0 {
			t.Errorf("%s mode, pool_size %d with %d busy clients: SharesSessions was not %v %d times in %d", c.mode, size, c.busy, c.want, missed, tries)
		}
	}
}

// TestAStarvedSessionPoolerIsNamed: PgBouncer in session mode with every
// server connection held by other clients accepts a new client and then
// never answers it. The replica failed after the connect timeout with
// "AfterConnect error: set session defaults: timeout: context deadline
// exceeded", which does not say why. The error must point at the pooler's
// pool size.
func TestAStarvedSessionPoolerIsNamed(t *testing.T) {
	direct := pgtest.NewDB(t)
	b := pgbouncer.ForTest(t, pgbouncer.Session, 1)
	url := b.Through(t, direct)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, err := db.ParseConnConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	holder, err := db.Connect(ctx, cfg.Copy(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(context.Background())
	// The replica's start bounds it with a context (db.ConnectTimeout).
	sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
	defer scancel()
	c, err := db.Connect(sctx, cfg.Copy(), url)
	if err == nil {
		c.Close(ctx)
		t.Fatal("a second session through a session pooler of one server connection connected")
	}
	if !strings.Contains(err.Error(), "no free server connection") {
		t.Errorf("the error does not name the starved pooler: %v", err)
	}
}
