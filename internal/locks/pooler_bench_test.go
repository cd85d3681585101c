package locks

import (
	"context"
	"testing"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/testkit/pgbouncer"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

// BenchmarkAcquireUnlockThroughPoolers sets the lock cycle of
// BenchmarkAcquireUnlock (one connection, pgx's statement cache) beside
// the same cycle in the exec mode a pool uses behind a pooler
// (db.ForPooler, docs/poolers.md), directly and through PgBouncer in
// session and transaction mode, all in one run on one server: what the
// pooler's hop and the unprepared statements cost per cycle.
//
//	go test -run '^$' -bench BenchmarkAcquireUnlockThroughPoolers -benchtime 5s -count 3 ./internal/locks
func BenchmarkAcquireUnlockThroughPoolers(b *testing.B) {
	direct := pgtest.NewDB(b)
	session := pgbouncer.ForTest(b, pgbouncer.Session, 2)
	transaction := pgbouncer.ForTest(b, pgbouncer.Transaction, 2)
	for _, c := range []struct {
		name   string
		url    string
		pooled bool
	}{
		{"direct/statement-cache", direct, false},
		{"direct/exec", direct, true},
		{"pgbouncer-session/statement-cache", session.Through(b, direct), false},
		{"pgbouncer-transaction/exec", transaction.Through(b, direct), true},
	} {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			var trips benchRoundTrips
			cfg, err := db.ParsePoolConfig(c.url)
			if err != nil {
				b.Fatal(err)
			}
			if c.pooled {
				db.ForPoolerPool(cfg)
			}
			cfg.MaxConns = 1
			cfg.ConnConfig.DialFunc = trips.dial
			pool, err := db.OpenConfig(ctx, cfg, c.url)
			if err != nil {
				b.Fatal(err)
			}
			defer pool.Close()
			benchCycles(ctx, b, benchProvider(b, pool, "bench-replica-1"), "bench-pooler-cycle", &trips)
		})
	}
}
