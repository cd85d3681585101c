package liveness_test

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/studioctl/studioctl/internal/liveness"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// The rule, evaluated by PostgreSQL on rows whose heartbeat is placed
// relative to the database's now(): a heartbeat more than FutureTolerance
// ahead is not live (issue 21, finding 4: such a row was live until then,
// and for good with 'infinity').
func TestLiveSQLHasAnUpperBound(t *testing.T) {
	t.Parallel()
	conn, err := pgx.Connect(context.Background(), pgtest.NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(t.Context()))
	cases := []struct {
		name      string
		heartbeat string // SQL, in terms of now()
		state     string
		live      bool
		ahead     bool
	}{
		{"a heartbeat written now is live", "now()", "ready", true, false},
		{"a heartbeat 10s old is live", "now() - interval '10 seconds'", "ready", true, false},
		{"a heartbeat 16s old is gone", "now() - interval '16 seconds'", "ready", false, false},
		{"a stopped replica is not live", "now()", "stopped", false, false},
		{"a heartbeat 4s ahead (a server clock stepped back) is live", "now() + interval '4 seconds'", "ready", true, false},
		{"a heartbeat 6s ahead is not live", "now() + interval '6 seconds'", "ready", false, true},
		{"a heartbeat an hour ahead is not live", "now() + interval '1 hour'", "ready", false, true},
		{"a heartbeat at infinity is not live", "'infinity'::timestamptz", "ready", false, true},
		{"a heartbeat at -infinity is not live", "'-infinity'::timestamptz", "ready", false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var live, ahead bool
			q := `SELECT ` + liveness.LiveSQL("r") + `, ` + liveness.AheadSQL("r") + `
FROM (SELECT 'x'::text AS id, $1::text AS state, ` + c.heartbeat + ` AS heartbeat_at) r`
			if err := conn.QueryRow(t.Context(), q, c.state).Scan(&live, &ahead); err != nil {
				t.Fatal(err)
			}
			if live != c.live {
				t.Errorf("live = %v, want %v", live, c.live)
			}
			if ahead != c.ahead {
				t.Errorf("ahead = %v, want %v", ahead, c.ahead)
			}
		})
	}
	// A NULL row (no such replica) is neither.
	var live, ahead bool
	if err := conn.QueryRow(t.Context(), `SELECT `+liveness.LiveSQL("r")+`, `+liveness.AheadSQL("r")+`
FROM (SELECT 1) x LEFT JOIN (SELECT 'x'::text AS id, 'ready'::text AS state, now() AS heartbeat_at) r ON false`).Scan(&live, &ahead); err != nil {
		t.Fatal(err)
	}
	if live || ahead {
		t.Errorf("a NULL row: live %v, ahead %v; want neither", live, ahead)
	}
}
