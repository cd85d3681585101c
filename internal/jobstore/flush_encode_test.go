package jobstore_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
)

// The flush's own encoder writes the very bytes pgx writes for the same
// arrays: NULLs, empty and long texts, times before 2000 and in a zone.
func TestFlushEncoderWritesThePgxBytes(t *testing.T) {
	t.Parallel()
	m := pgtype.NewMap()
	long := strings.Repeat("é\"\\\n\x01", 1000)
	at := usec(t, "2026-11-30T01:02:03.456789")
	old := time.Date(1969, 7, 20, 20, 17, 40, 999_999_000, time.UTC)
	for _, c := range []struct {
		name string
		oid  uint32 // the array's type
		pgx  any
		enc  func(b *jobstore.BinArrayForTest)
	}{
		{"texts with an empty one and a long one", 1009, []string{"job-1", "", long},
			func(b *jobstore.BinArrayForTest) { b.Reset(25); b.Text("job-1"); b.Text(""); b.Text(long) }},
		{"no element at all", 1009, []string{},
			func(b *jobstore.BinArrayForTest) { b.Reset(25) }},
		{"bigints, negative and large", 1016, []int64{1, -7, 1 << 62},
			func(b *jobstore.BinArrayForTest) { b.Reset(20); b.Int8(1); b.Int8(-7); b.Int8(1 << 62) }},
		{"booleans", 1000, []bool{true, false},
			func(b *jobstore.BinArrayForTest) { b.Reset(16); b.Bool(true); b.Bool(false) }},
		{"times with NULLs, before 2000 and the zero time", 1185,
			[]pgtype.Timestamptz{{Time: at, Valid: true}, {}, {Time: old, Valid: true}, {Time: time.Time{}, Valid: true}},
			func(b *jobstore.BinArrayForTest) {
				b.Reset(1184)
				b.Time(at)
				b.Null()
				b.Time(old)
				b.Time(time.Time{})
			}},
	} {
		want, err := m.Encode(c.oid, pgtype.BinaryFormatCode, c.pgx, nil)
		if err != nil {
			t.Fatalf("%s: pgx: %v", c.name, err)
		}
		var b jobstore.BinArrayForTest
		b.Reset(25)
		b.Text(long) // a longer array before: nothing of it may stay
		b.Null()
		c.enc(&b)
		if got := b.Bytes(); !bytes.Equal(got, want) {
			t.Errorf("%s: encoded %x\nwant (pgx)  %x", c.name, got[:min(len(got), 64)], want[:min(len(want), 64)])
		}
	}
}

// flushRows is everything a flush wrote, as text: the run rows, the status
// rows, the run events and the duty ends, in a fixed order.
func flushRows(t testing.TB, pool *pgxpool.Pool) string {
	t.Helper()
	var out strings.Builder
	for _, q := range []string{
		`SELECT to_jsonb(r)::text FROM studio_job_run r ORDER BY seq`,
		`SELECT (to_jsonb(s) - 'since')::text FROM studio_job_status s ORDER BY job_id`,
		`SELECT event || ' ' || data::text FROM studio_event WHERE event = 'run' ORDER BY data->>'seq', data->>'outcome'`,
		`SELECT to_jsonb(d)::text FROM studio_duty_end d ORDER BY job_id, cluster`,
	} {
		rows, err := pool.Query(t.Context(), q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			out.WriteString(s + "\n")
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return out.String()
}

// flushCase puts runs and status rows of every kind into s: running and
// ended, NULL and set times, empty and long errors and outputs, a duty's
// end, triggered and backfill runs; then flushes, twice (a start, an end).
func flushCase(t testing.TB, s *jobstore.Store) {
	t.Helper()
	at := usec(t, "2026-11-30T01:02:03.456789")
	long := strings.Repeat("line \"quoted\" \\ é\t\n", 120) // over 2,000 bytes
	for round := range 2 {
		for i := range 40 {
			r := jobs.Run{Seq: int64(i + 1), JobID: fmt.Sprintf("job-%02d", i%7), ReplicaID: "replica-1", StartedAt: at.Add(time.Duration(i) * time.Second),
				Outcome: jobs.OutcomeRunning, ScopeKey: "replica-1"}
			if i%3 == 0 {
				r.NominalAt = r.StartedAt.Add(-time.Millisecond)
			}
			if i%5 == 0 {
				r.Cluster, r.ScopeKey = fmt.Sprintf("c%d", i%2), fmt.Sprintf("c%d", i%2)
			}
			r.Triggered, r.Backfill = i%4 == 1, i%6 == 2
			if round == 1 && i%2 == 0 {
				end := r.StartedAt.Add(1500 * time.Microsecond)
				r.FinishedAt, r.Outcome = &end, jobs.OutcomeFailed
				if i%4 == 0 {
					r.Error, r.OutputTail = long, "out\x00put"
				} else {
					r.Outcome = jobs.OutcomeSucceeded
				}
			}
			s.PutRun(r)
		}
		for i := range 7 {
			st := fullStatus(t, fmt.Sprintf("job-%02d", i), int64(round*10+i))
			if i%2 == 0 {
				st.NextFireAt, st.LastSuccessAt, st.LastError, st.InvalidSchedule, st.LastOutcome = nil, nil, "", "", ""
			}
			if i == 3 {
				st.LastError = long
			}
			s.PutStatus(st)
		}
		mustFlush(t, s)
	}
}

// The encoded flush writes exactly the rows the flush through pgx wrote.
func TestTheEncodedFlushWritesTheSameRowsAsPgx(t *testing.T) {
	t.Parallel()
	legacyPool, _ := newPool(t)
	encPool, _ := newPool(t)
	legacy := jobstore.NewStore(legacyPool, "replica-1", nil)
	jobstore.SetLegacyFlush(legacy)
	flushCase(t, legacy)
	flushCase(t, jobstore.NewStore(encPool, "replica-1", nil))
	want, got := flushRows(t, legacyPool), flushRows(t, encPool)
	if n := strings.Count(want, "\n"); n < 40+7+40 {
		t.Fatalf("the flush through pgx wrote %d rows, want more:\n%s", n, want)
	}
	if got != want {
		t.Errorf("the encoded flush wrote other rows than pgx:\n%s", lineDiff(want, got))
	}
}

// A flush that fails half-way (the runs sent, the status refused) leaves
// its buffers full of long values; the next flush, of shorter ones, writes
// exactly its own rows and nothing of the failed one.
func TestAFlushFailingHalfWayReusesNothingStale(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	s := jobstore.NewStore(pool, "replica-1", nil)
	at := usec(t, "2026-11-30T01:00:00")
	long := strings.Repeat("x", 5000)
	for i := range 20 {
		end := at.Add(time.Second)
		s.PutRun(jobs.Run{Seq: int64(i + 1), JobID: fmt.Sprintf("long-job-name-%02d", i), ReplicaID: "replica-1", StartedAt: at,
			FinishedAt: &end, Outcome: jobs.OutcomeFailed, Error: long, OutputTail: long, NominalAt: at, Triggered: true})
	}
	s.PutStatus(jobs.Status{JobID: "report", Scope: "cluster", Schedule: "every 1m", LastError: long}) // the CHECK refuses it
	if err := s.Flush(t.Context()); err == nil || !strings.Contains(err.Error(), "write job status") {
		t.Fatalf("Flush = %v, want the status upsert to fail", err)
	}
	// Newer versions of everything the failed flush put back.
	end := at.Add(2 * time.Second)
	for i := range 20 {
		s.PutRun(jobs.Run{Seq: int64(i + 1), JobID: fmt.Sprintf("long-job-name-%02d", i), ReplicaID: "replica-1", StartedAt: at,
			FinishedAt: &end, Outcome: jobs.OutcomeSucceeded})
	}
	s.PutStatus(jobs.Status{JobID: "report", Scope: jobs.ScopeInstance, Schedule: "every 1m", Runs: 1})
	mustFlush(t, s)
	if n := count(t, pool, `SELECT count(*) FROM studio_job_run WHERE outcome = 'succeeded' AND error IS NULL AND output_tail IS NULL
  AND nominal_at IS NULL AND NOT triggered AND finished_at = $1`, end); n != 20 {
		t.Errorf("%d runs as the second flush gave them, want 20", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM studio_job_status WHERE job_id = 'report' AND scope = 'instance' AND last_error IS NULL AND runs = 1`); n != 1 {
		t.Errorf("%d status rows as the second flush gave it, want 1", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM studio_event WHERE event = 'run' AND data ? 'error'`); n != 0 {
		t.Errorf("%d run events with the failed flush's error, want 0", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM studio_event WHERE event = 'run'`); n != 20 {
		t.Errorf("%d run events, want 20", n)
	}
	// The maps of those flushes are kept for the next ones, cleared: a
	// third flush writes its one status row and nothing of the failed one
	// (whose status row the CHECK refuses).
	s.PutStatus(jobs.Status{JobID: "cache", Scope: jobs.ScopeInstance, Schedule: "every 1m"})
	mustFlush(t, s)
	mustFlush(t, s) // an empty one
	s.PutStatus(jobs.Status{JobID: "cache", Scope: jobs.ScopeInstance, Schedule: "every 1m", Runs: 2})
	mustFlush(t, s)
	if n := count(t, pool, `SELECT count(*) FROM studio_job_status WHERE job_id = 'report' AND scope = 'instance' AND runs = 1`); n != 1 {
		t.Errorf("the report status row changed after later flushes")
	}
	if n := count(t, pool, `SELECT count(*) FROM studio_job_status WHERE job_id = 'cache' AND runs = 2`); n != 1 {
		t.Errorf("the last flush did not write its status row")
	}
}

// lineDiff shows the first lines that differ.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var out strings.Builder
	for i := 0; i < max(len(w), len(g)) && out.Len() < 4000; i++ {
		var a, b string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			b = g[i]
		}
		if a != b {
			fmt.Fprintf(&out, "line %d\n  want %s\n  got  %s\n", i+1, a, b)
		}
	}
	return out.String()
}
