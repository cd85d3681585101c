package tasks_test

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/tasks"
)

// occurrenceEnv is a run of an installation job due at 02:00:00.120 UTC.
var occurrenceEnv = tasks.Env{JobID: "nightly-report", ReplicaID: "replica-7", RunSeq: 42,
	ScheduledAt:   time.Date(2026, 12, 5, 2, 0, 0, 120_456_789, time.FixedZone("CET", 3600)),
	OccurrenceKey: "nightly-report//2026-12-05T01:00:00.120Z"}

const wantScheduledAt = "2026-12-05T01:00:00.120Z"

func TestCommandGetsTheNominalTimeAndTheOccurrenceKey(t *testing.T) {
	t.Parallel()
	res := tasks.Command{Argv: []string{"env"}}.Run(context.Background(), occurrenceEnv)
	if res.Err != nil {
		t.Fatalf("Run: %v", res.Err)
	}
	got := strings.Split(strings.TrimSpace(res.Output), "\n")
	for _, want := range []string{"STUDIO_SCHEDULED_AT=" + wantScheduledAt, "STUDIO_OCCURRENCE_KEY=nightly-report//" + wantScheduledAt} {
		if !slices.Contains(got, want) {
			t.Errorf("environment %q lacks %s", got, want)
		}
	}
}

func TestCommandEnvCannotOverrideTheOccurrenceVariables(t *testing.T) {
	t.Parallel()
	res := tasks.Command{Argv: []string{"env"}, Env: map[string]string{"STUDIO_SCHEDULED_AT": "spoofed", "STUDIO_OCCURRENCE_KEY": "spoofed"}}.
		Run(context.Background(), occurrenceEnv)
	if res.Err != nil {
		t.Fatalf("Run: %v", res.Err)
	}
	if strings.Contains(res.Output, "spoofed") {
		t.Errorf("a job's env: replaced a run variable:\n%s", res.Output)
	}
}

func TestHTTPSendsTheNominalTimeAndTheOccurrenceKey(t *testing.T) {
	t.Parallel()
	srv, seen := newServer(t, func(w http.ResponseWriter, r *http.Request) {})
	res := tasks.HTTP{URL: srv.URL, Headers: map[string]string{"Studio-Occurrence-Key": "spoofed"}}.Run(context.Background(), occurrenceEnv)
	if res.Err != nil {
		t.Fatalf("Run: %v", res.Err)
	}
	r := <-seen
	for name, want := range map[string]string{
		"Studio-Scheduled-At":   wantScheduledAt,
		"Studio-Occurrence-Key": "nightly-report//" + wantScheduledAt,
	} {
		if got := r.header.Values(name); len(got) != 1 || got[0] != want {
			t.Errorf("header %s = %q, want %q", name, got, want)
		}
	}
}

func TestHTTPWithoutANominalTimeSendsNoOccurrenceHeaders(t *testing.T) {
	t.Parallel()
	srv, seen := newServer(t, func(w http.ResponseWriter, r *http.Request) {})
	if res := (tasks.HTTP{URL: srv.URL}).Run(context.Background(), testEnv); res.Err != nil {
		t.Fatalf("Run: %v", res.Err)
	}
	r := <-seen
	for _, name := range []string{"Studio-Scheduled-At", "Studio-Occurrence-Key"} {
		if _, ok := r.header[name]; ok {
			t.Errorf("header %s sent for a run without a nominal time", name)
		}
	}
}

func TestSQLReadsTheNominalTimeAndTheOccurrenceKeyWithCurrentSetting(t *testing.T) {
	t.Parallel()
	pool := newPool(t, 4)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE TABLE seen (at text, key text)`); err != nil {
		t.Fatal(err)
	}
	// With a deadline (statement_timeout set in the same statement) and
	// without one; a COMMIT inside the text does not undo them.
	tctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for _, c := range []context.Context{tctx, ctx} {
		res := tasks.SQL{DB: pool, Statement: `INSERT INTO seen VALUES (current_setting('studio.scheduled_at'), current_setting('studio.occurrence_key'));
COMMIT; INSERT INTO seen VALUES (current_setting('studio.scheduled_at'), current_setting('studio.occurrence_key'))`}.Run(c, occurrenceEnv)
		if res.Err != nil {
			t.Fatalf("Run: %v", res.Err)
		}
	}
	rows, err := pool.Query(ctx, `SELECT at, key FROM seen`)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		var at, key string
		if err := rows.Scan(&at, &key); err != nil {
			t.Fatal(err)
		}
		if at != wantScheduledAt || key != "nightly-report//"+wantScheduledAt {
			t.Errorf("the statement read %q and %q; want %q and the key", at, key, wantScheduledAt)
		}
		n++
	}
	if n != 4 {
		t.Errorf("%d rows, want 4", n)
	}
	// The pool's own sessions never see them.
	var v string
	if err := pool.QueryRow(ctx, `SELECT coalesce(current_setting('studio.scheduled_at', true), '')`).Scan(&v); err != nil || v != "" {
		t.Errorf("a pooled session has studio.scheduled_at = %q (%v)", v, err)
	}
}

// A run knows whether it is a `jobs trigger` run: STUDIO_TRIGGERED, the
// Studio-Triggered header and the studio.triggered setting say "true" for
// one and "false" for a scheduled run (issue 22: "says it was triggered").
func TestEveryTaskKnowsWhetherItsRunWasTriggered(t *testing.T) {
	t.Parallel()
	pool := newPool(t, 4)
	ctx := context.Background()
	for _, triggered := range []bool{true, false} {
		env := occurrenceEnv
		env.Triggered = triggered
		want := strconv.FormatBool(triggered)

		res := tasks.Command{Argv: []string{"env"}, Env: map[string]string{"STUDIO_TRIGGERED": "spoofed"}}.Run(ctx, env)
		if res.Err != nil {
			t.Fatalf("command: %v", res.Err)
		}
		if got := strings.Split(strings.TrimSpace(res.Output), "\n"); !slices.Contains(got, "STUDIO_TRIGGERED="+want) || strings.Contains(res.Output, "spoofed") {
			t.Errorf("triggered=%v: command environment %q, want STUDIO_TRIGGERED=%s", triggered, got, want)
		}

		srv, seen := newServer(t, func(w http.ResponseWriter, r *http.Request) {})
		if res := (tasks.HTTP{URL: srv.URL, Headers: map[string]string{"Studio-Triggered": "spoofed"}}).Run(ctx, env); res.Err != nil {
			t.Fatalf("http: %v", res.Err)
		}
		if got := (<-seen).header.Values("Studio-Triggered"); len(got) != 1 || got[0] != want {
			t.Errorf("triggered=%v: header Studio-Triggered = %q, want %q", triggered, got, want)
		}

		var got string
		if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS seen_triggered (v text)`); err != nil {
			t.Fatal(err)
		}
		res = tasks.SQL{DB: pool, Statement: `INSERT INTO seen_triggered VALUES (current_setting('studio.triggered'))`}.Run(ctx, env)
		if res.Err != nil {
			t.Fatalf("sql: %v", res.Err)
		}
		if err := pool.QueryRow(ctx, `DELETE FROM seen_triggered RETURNING v`).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("triggered=%v: studio.triggered = %q, want %q", triggered, got, want)
		}
	}
}

// A run carries its fencing token (issue 26, docs/fencing.md):
// STUDIO_FENCING_TOKEN, the Studio-Fencing-Token header and the
// studio.fencing_token setting say it, and "" (no header) when the run
// has none. A job's own env: or headers cannot set it.
func TestEveryTaskCarriesItsFencingToken(t *testing.T) {
	t.Parallel()
	pool := newPool(t, 4)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE TABLE seen_token (v text)`); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		token int64
		want  string
	}{{42, "42"}, {0, ""}} {
		env := occurrenceEnv
		env.FencingToken = tc.token

		res := tasks.Command{Argv: []string{"env"}, Env: map[string]string{"STUDIO_FENCING_TOKEN": "999"}}.Run(ctx, env)
		if res.Err != nil {
			t.Fatalf("command: %v", res.Err)
		}
		if got := strings.Split(strings.TrimSpace(res.Output), "\n"); !slices.Contains(got, "STUDIO_FENCING_TOKEN="+tc.want) || strings.Contains(res.Output, "999") {
			t.Errorf("token %d: command environment %q, want STUDIO_FENCING_TOKEN=%s", tc.token, got, tc.want)
		}

		srv, seen := newServer(t, func(w http.ResponseWriter, r *http.Request) {})
		if res := (tasks.HTTP{URL: srv.URL, Headers: map[string]string{"Studio-Fencing-Token": "999"}}).Run(ctx, env); res.Err != nil {
			t.Fatalf("http: %v", res.Err)
		}
		got := (<-seen).header.Values("Studio-Fencing-Token")
		if tc.want == "" && len(got) != 0 || tc.want != "" && (len(got) != 1 || got[0] != tc.want) {
			t.Errorf("token %d: header Studio-Fencing-Token = %q, want %q", tc.token, got, tc.want)
		}

		res = tasks.SQL{DB: pool, Statement: `INSERT INTO seen_token VALUES (current_setting('studio.fencing_token'))`}.Run(ctx, env)
		if res.Err != nil {
			t.Fatalf("sql: %v", res.Err)
		}
		var v string
		if err := pool.QueryRow(ctx, `DELETE FROM seen_token RETURNING v`).Scan(&v); err != nil {
			t.Fatal(err)
		}
		if v != tc.want {
			t.Errorf("token %d: studio.fencing_token = %q, want %q", tc.token, v, tc.want)
		}
	}
}
