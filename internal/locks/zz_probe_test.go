package locks_test

import (
	"context"
	"testing"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/pgtest"
)

func TestZZProbe(t *testing.T) {
	ctx := context.Background()
	pool, err := db.Open(ctx, pgtest.NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for _, q := range []string{
		`SELECT make_interval(secs => 1.001::float8)::text`,
		`SELECT make_interval(secs => 0.009::float8)::text`,
		`SELECT ('2024-01-01 00:00:00.0006'::timestamp(3))::text`,
		`SELECT current_setting('TimeZone')`,
		`SELECT gen_random_uuid()::text`,
	} {
		var s string
		if err := pool.QueryRow(ctx, q).Scan(&s); err != nil {
			t.Fatal(q, err)
		}
		t.Log(q, "=>", s)
	}
	var f float64 = 1.001
	var s string
	pool.QueryRow(ctx, `SELECT make_interval(secs => $1)::text`, f).Scan(&s)
	t.Log(s)
}
