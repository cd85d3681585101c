package db_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/testkit/pgbouncer"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

// TestSharesSessionsFindsTransactionAndStatementPoolers: a direct
// connection and PgBouncer in session mode give each client a session of
// its own; PgBouncer in transaction and statement mode does not, even with
// a pool of several server connections, and SharesSessions says so every
// time.
func TestSharesSessionsFindsTransactionAndStatementPoolers(t *testing.T) {
	direct := pgtest.NewDB(t)
	cases := []struct {
		name string
		url  string
		want bool
	}{{"direct", direct, false}}
	for _, mode := range []string{pgbouncer.Session, pgbouncer.Transaction, pgbouncer.Statement} {
		b := pgbouncer.ForTest(t, mode, 3)
		cases = append(cases, struct {
			name string
			url  string
			want bool
		}{mode + " mode", b.Through(t, direct), mode != pgbouncer.Session})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := db.ParseConnConfig(c.url)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 5 {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				got, err := db.SharesSessions(ctx, cfg, c.url)
				cancel()
				if err != nil {
					t.Fatalf("try %d: %v", i, err)
				}
				if got != c.want {
					t.Fatalf("try %d: SharesSessions = %v, want %v", i, got, c.want)
				}
			}
		})
	}
}

// TestForPoolerPoolRunsEveryStatementThroughATransactionPooler: with the
// statement cache pgx prepares a named statement on one server session
// and executes it on another behind a transaction pooler ("prepared
// statement ... does not exist"); ForPooler's exec mode sends each
// statement whole, so many clients running the same statements through
// two server connections all succeed, and nothing set at connect leaks
// into the shared sessions.
func TestForPoolerPoolRunsEveryStatementThroughATransactionPooler(t *testing.T) {
	direct := pgtest.NewDB(t)
	b := pgbouncer.ForTest(t, pgbouncer.Transaction, 2)
	url := b.Through(t, direct)
	cfg, err := db.ParsePoolConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	db.ForPoolerPool(cfg)
	cfg.MaxConns = 8
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := db.OpenConfig(ctx, cfg, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	errs := make(chan error, 8)
	for w := range 8 {
		go func() {
			for i := range 200 {
				var n int64
				if err := pool.QueryRow(ctx, `SELECT $1::bigint + $2::bigint`, int64(w), int64(i)).Scan(&n); err != nil {
					errs <- err
					return
				}
				if n != int64(w+i) {
					errs <- errors.New("wrong sum")
					return
				}
				tx, err := pool.Begin(ctx)
				if err != nil {
					errs <- err
					return
				}
				if _, err := tx.Exec(ctx, `SELECT set_config('application_name', $1, true)`, "w"); err != nil {
					errs <- err
					return
				}
				if err := tx.Commit(ctx); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// The same statements with pgx's statement cache fail behind the
	// pooler: the case ForPooler exists for.
	plain, err := db.ParseConnConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	plain.DefaultQueryExecMode = pgx.QueryExecModeCacheStatement
	failed := false
	conns := make([]*pgx.Conn, 3)
	for i := range conns {
		if conns[i], err = db.Connect(ctx, plain.Copy(), url); err != nil {
			t.Fatal(err)
		}
		defer conns[i].Close(ctx)
	}
	for i := 0; i < 50 && !failed; i++ {
		for _, c := range conns {
			var n int64
			if err := c.QueryRow(ctx, `SELECT $1::bigint`, int64(i)).Scan(&n); err != nil {
				failed = true
				t.Logf("with the statement cache, as expected: %v", err)
				break
			}
		}
	}
	if !failed {
		t.Log("the statement cache happened to survive the pooler this time")
	}
}

// TestPinOnlyOwnSessionsPinsADirectSessionAndNoPooledOne: with a database
// default statement_timeout, a connection configured by
// PinOnlyOwnSessions resets it to 0 on a session of its own, and leaves it
// alone through PgBouncer (session and transaction mode), where the
// server session outlives the client.
func TestPinOnlyOwnSessionsPinsADirectSessionAndNoPooledOne(t *testing.T) {
	direct := pgtest.NewDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := db.Open(ctx, direct)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	var name string
	if err := admin.QueryRow(ctx, `SELECT current_database()`).Scan(&name); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, `ALTER DATABASE `+pgx.Identifier{name}.Sanitize()+` SET statement_timeout = '30s'`); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, url, want string }{
		{"direct", direct, "0"},
		{"session mode", pgbouncer.ForTest(t, pgbouncer.Session, 2).Through(t, direct), "30s"},
		{"transaction mode", pgbouncer.ForTest(t, pgbouncer.Transaction, 2).Through(t, direct), "30s"},
	} {
		cfg, err := db.ParseConnConfig(c.url)
		if err != nil {
			t.Fatal(err)
		}
		cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
		db.PinOnlyOwnSessions(cfg)
		conn, err := db.Connect(ctx, cfg, c.url)
		if err != nil {
			t.Fatal(err)
		}
		var st string
		if err := conn.QueryRow(ctx, `SELECT current_setting('statement_timeout')`).Scan(&st); err != nil {
			t.Fatal(err)
		}
		conn.Close(ctx)
		if st != c.want {
			t.Errorf("%s: statement_timeout %q, want %q", c.name, st, c.want)
		}
	}
}
