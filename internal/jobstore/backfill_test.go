package jobstore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
)

func hours(t testing.TB, from string, n int) []time.Time {
	t.Helper()
	base, err := time.Parse(time.RFC3339, from)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]time.Time, n)
	for i := range out {
		out[i] = base.Add(time.Duration(i) * time.Hour)
	}
	return out
}

func slots(ts []time.Time) []jobs.BackfillOccurrence {
	out := make([]jobs.BackfillOccurrence, len(ts))
	for i, t := range ts {
		out[i] = jobs.BackfillOccurrence{At: t, Until: t.Add(time.Hour)}
	}
	return out
}

// A backfill is one transaction: the audit row, the request and its
// occurrences, and a job.backfill signal on commit.
func TestRequestBackfillWritesTheAuditRowTheRequestAndItsOccurrencesAndSignals(t *testing.T) {
	t.Parallel()
	pool, url := newPool(t)
	reportJob(t, pool, "billing")
	conn := listen(t, url)
	at := hours(t, "2026-11-30T00:00:00Z", 3)
	seq, err := jobstore.RequestBackfill(t.Context(), pool, jobstore.BackfillRequest{Job: "billing", Actor: "ana@ops", Reason: "outage",
		From: at[0], To: at[2].Add(time.Hour), NominalAt: at})
	if err != nil {
		t.Fatal(err)
	}
	if m := nextMessage(t, conn); m.Kind != jobstore.KindJobBackfill || m.Key != "billing" {
		t.Errorf("bus message = %+v, want a job.backfill signal for billing", m)
	}
	if n := count(t, pool, `SELECT count(*) FROM studio_request q JOIN studio_audit a ON a.seq = q.audit_seq
WHERE q.seq = $1 AND q.kind = 'job.backfill' AND q.target = 'billing' AND a.action = 'jobs.backfill' AND a.reason = 'outage'
  AND (a.detail->>'occurrences')::int = 3 AND q.done_at IS NULL`, seq); n != 1 {
		t.Errorf("%d audited job.backfill requests, want 1", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM studio_backfill WHERE request_seq = $1 AND job_id = 'billing' AND done_at IS NULL`, seq); n != 3 {
		t.Errorf("%d pending occurrences, want 3", n)
	}
}

// The guards: an occurrence without its request in the same transaction,
// and a backfill request without its audit row, are refused.
func TestBackfillRowsNeedTheirRequestAndAuditRowInTheSameTransaction(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	reportJob(t, pool, "billing")
	seq, err := jobstore.RequestBackfill(t.Context(), pool, jobstore.BackfillRequest{Job: "billing", Actor: "ana", NominalAt: hours(t, "2026-11-30T00:00:00Z", 1)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = pool.Exec(t.Context(), `INSERT INTO studio_backfill (request_seq, job_id, nominal_at) VALUES ($1, 'billing', '2026-11-29T00:00:00Z')`, seq)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "23514" {
		t.Errorf("an occurrence added to an earlier request: %v, want a check_violation", err)
	}
	_, err = pool.Exec(t.Context(), `INSERT INTO studio_request (kind, target, requested_by, audit_seq, expires_at)
SELECT 'job.backfill', 'billing', 'mallory', max(seq), now() + interval '1 hour' FROM studio_audit`)
	if !errors.As(err, &pe) || pe.Code != "23514" {
		t.Errorf("a backfill request pointing at an old audit row: %v, want a check_violation", err)
	}
}

// An occurrence is left out when a run of the job has a nominal time in
// its slot (not a trigger's), or when a pending backfill asked for it.
func TestBackfillLeftOutNamesWhatRanAndWhatIsRequested(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	reportJob(t, pool, "billing")
	at := hours(t, "2026-11-30T00:00:00Z", 5)
	// 00:00 ran (a live run 7 s after its slot's start); 01:00 only a
	// trigger ran in its slot; 02:00 was requested; 03:00 was requested by
	// a request that expired; 04:00 nothing.
	if _, err := pool.Exec(t.Context(), `
INSERT INTO studio_job_run (seq, job_id, replica_id, started_at, finished_at, outcome, nominal_at, scope_key, triggered) VALUES
  (1, 'billing', 'web-1', '2026-11-30T00:00:08Z', '2026-11-30T00:00:09Z', 'succeeded', '2026-11-30T00:00:07Z', '', false),
  (2, 'billing', 'web-1', '2026-11-30T01:10:00Z', '2026-11-30T01:10:01Z', 'succeeded', '2026-11-30T01:10:00Z', '', true),
  (3, 'other',   'web-1', '2026-11-30T04:00:00Z', '2026-11-30T04:00:01Z', 'succeeded', '2026-11-30T04:00:00Z', '', false)`); err != nil {
		t.Fatal(err)
	}
	if _, err := jobstore.RequestBackfill(t.Context(), pool, jobstore.BackfillRequest{Job: "billing", Actor: "ana", NominalAt: at[2:3]}); err != nil {
		t.Fatal(err)
	}
	old, err := jobstore.RequestBackfill(t.Context(), pool, jobstore.BackfillRequest{Job: "billing", Actor: "ana", NominalAt: at[3:4]})
	if err != nil {
		t.Fatal(err)
	}
	// Expire it as the owner would see it a week later (the replica's
	// grants cannot; the test's role owns the table).
	if _, err := pool.Exec(t.Context(), `ALTER TABLE studio_request DISABLE TRIGGER studio_request_claimed_once`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), `UPDATE studio_request SET expires_at = now() - interval '1 second' WHERE seq = $1`, old); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), `ALTER TABLE studio_request ENABLE TRIGGER studio_request_claimed_once`); err != nil {
		t.Fatal(err)
	}
	got, err := jobstore.BackfillLeftOut(t.Context(), pool, "billing", slots(at))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{jobstore.LeftOutRan, "", jobstore.LeftOutRequested, "", ""}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%s: left out %q, want %q", at[i].Format(time.RFC3339), got[i], want[i])
		}
	}
}

// Claims go oldest first across requests, once each; an occurrence
// claimed and never ended is abandoned by the next claim (never run
// twice); the end of a request's last occurrence ends the request; End
// says whether more is pending.
func TestBackfillClaimsAreOldestFirstOnceEachAndEndTheRequest(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	reportJob(t, pool, "billing")
	at := hours(t, "2026-11-30T00:00:00Z", 4)
	first, err := jobstore.RequestBackfill(t.Context(), pool, jobstore.BackfillRequest{Job: "billing", Actor: "ana", NominalAt: []time.Time{at[1], at[3]}})
	if err != nil {
		t.Fatal(err)
	}
	second, err := jobstore.RequestBackfill(t.Context(), pool, jobstore.BackfillRequest{Job: "billing", Actor: "ana", NominalAt: []time.Time{at[0], at[2]}})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := jobstore.PendingBackfills(t.Context(), pool, []string{"billing", "other"}); err != nil || len(got) != 1 || got[0] != "billing" {
		t.Fatalf("PendingBackfills = %v, %v; want [billing]", got, err)
	}
	a, b := jobstore.NewBackfills(pool, "web-1"), jobstore.NewBackfills(pool, "web-2")
	c, ok, err := a.Claim(t.Context(), "billing")
	if err != nil || !ok || !c.NominalAt.Equal(at[0]) || c.RequestSeq != second {
		t.Fatalf("first claim = %+v, %t, %v; want 00:00 of request %d", c, ok, err, second)
	}
	more, err := a.End(t.Context(), c, 101, jobs.OutcomeSucceeded)
	if err != nil || !more {
		t.Fatalf("End = %t, %v; want more pending", more, err)
	}
	// 01:00 is claimed by web-2, which dies; web-1's next claim abandons it
	// and takes 02:00.
	c1, ok, err := b.Claim(t.Context(), "billing")
	if err != nil || !ok || !c1.NominalAt.Equal(at[1]) {
		t.Fatalf("second claim = %+v, %t, %v; want 01:00", c1, ok, err)
	}
	c2, ok, err := a.Claim(t.Context(), "billing")
	if err != nil || !ok || !c2.NominalAt.Equal(at[2]) {
		t.Fatalf("third claim = %+v, %t, %v; want 02:00", c2, ok, err)
	}
	if n := count(t, pool, `SELECT count(*) FROM studio_backfill WHERE nominal_at = $1 AND outcome = 'abandoned'`, at[1]); n != 1 {
		t.Errorf("01:00 not abandoned (%d rows)", n)
	}
	if more, err := b.End(t.Context(), c1, 102, jobs.OutcomeSucceeded); err != nil || !more {
		t.Errorf("the dead claimer's late End = %t, %v; want nothing changed, more pending", more, err)
	}
	if n := count(t, pool, `SELECT count(*) FROM studio_backfill WHERE nominal_at = $1 AND outcome = 'abandoned' AND run_seq IS NULL`, at[1]); n != 1 {
		t.Errorf("the late End rewrote the abandoned occurrence")
	}
	// The second request's last occurrence ends it.
	if _, err := a.End(t.Context(), c2, 103, jobs.OutcomeFailed); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, `SELECT count(*) FROM studio_request WHERE seq = $1 AND done_at IS NOT NULL AND done_by = 'web-1'`, second); n != 1 {
		t.Errorf("the second request is not done after its last occurrence")
	}
	if n := count(t, pool, `SELECT count(*) FROM studio_request WHERE seq = $1 AND done_at IS NULL`, first); n != 1 {
		t.Errorf("the first request is done with 03:00 pending")
	}
	// Release gives a claim back: it is claimed again, by anyone.
	c3, ok, err := a.Claim(t.Context(), "billing")
	if err != nil || !ok || !c3.NominalAt.Equal(at[3]) {
		t.Fatalf("fourth claim = %+v, %t, %v; want 03:00", c3, ok, err)
	}
	if err := a.Release(t.Context(), c3); err != nil {
		t.Fatal(err)
	}
	c3, ok, err = b.Claim(t.Context(), "billing")
	if err != nil || !ok || !c3.NominalAt.Equal(at[3]) {
		t.Fatalf("claim after release = %+v, %t, %v; want 03:00", c3, ok, err)
	}
	if more, err := b.End(t.Context(), c3, 104, jobs.OutcomeSucceeded); err != nil || more {
		t.Errorf("last End = %t, %v; want nothing more", more, err)
	}
	if _, ok, err := a.Claim(t.Context(), "billing"); err != nil || ok {
		t.Errorf("a claim with nothing pending: %t, %v", ok, err)
	}
	if n := count(t, pool, `SELECT count(*) FROM studio_request WHERE kind = 'job.backfill' AND done_at IS NULL`); n != 0 {
		t.Errorf("%d backfill requests not done", n)
	}
}

// Claims at once never take one occurrence twice (the runner claims only
// under the job's lock; this is the statement's own guarantee).
func TestConcurrentBackfillClaimsTakeEachOccurrenceOnce(t *testing.T) {
	t.Parallel()
	_, url := newPool(t)
	pool := bigPool(t, url)
	reportJob(t, pool, "billing")
	const n = 20
	if _, err := jobstore.RequestBackfill(t.Context(), pool, jobstore.BackfillRequest{Job: "billing", Actor: "ana", NominalAt: hours(t, "2026-11-01T00:00:00Z", n)}); err != nil {
		t.Fatal(err)
	}
	got := make([]bool, n)
	concurrently(n, func(i int) {
		_, got[i], _ = jobstore.NewBackfills(pool, "web-"+string(rune('a'+i))).Claim(t.Context(), "billing")
	})
	claimed := 0
	for _, ok := range got {
		if ok {
			claimed++
		}
	}
	if claimed == 0 {
		t.Fatal("no claim succeeded")
	}
	if k := count(t, pool, `SELECT count(*) FROM studio_backfill WHERE claimed_at IS NOT NULL`); k != claimed {
		t.Errorf("%d occurrences claimed, %d claims succeeded", k, claimed)
	}
}

// A run's backfill mark reaches studio_occurrences.
func TestABackfillRunIsMarkedInTheOccurrences(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	s := jobstore.NewStore(pool, "web-1", nil)
	nominal := time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC)
	started := time.Now().UTC()
	s.PutRun(jobs.Run{Seq: 7, JobID: "billing", ReplicaID: "web-1", StartedAt: started, FinishedAt: &started, Outcome: jobs.OutcomeSucceeded,
		NominalAt: nominal, Backfill: true})
	mustFlush(t, s)
	occ, err := jobstore.ListOccurrences(t.Context(), pool, jobstore.OccurrenceQuery{Job: "billing", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(occ) != 1 || !occ[0].Backfill || occ[0].Triggered || !occ[0].NominalAt.Equal(nominal) {
		t.Errorf("occurrences = %+v, want one backfill run at 02:00", occ)
	}
}

// A paused job's pending occurrences are not offered to the replicas.
func TestPendingBackfillsLeaveOutPausedJobs(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	reportJob(t, pool, "billing")
	if _, err := jobstore.RequestBackfill(t.Context(), pool, jobstore.BackfillRequest{Job: "billing", Actor: "ana", NominalAt: hours(t, "2026-11-30T00:00:00Z", 2)}); err != nil {
		t.Fatal(err)
	}
	setSetting(t, pool, "billing", "", true)
	if got, err := jobstore.PendingBackfills(t.Context(), pool, []string{"billing"}); err != nil || len(got) != 0 {
		t.Errorf("PendingBackfills of a paused job = %v, %v; want none", got, err)
	}
	setSetting(t, pool, "billing", "", false)
	if got, err := jobstore.PendingBackfills(t.Context(), pool, []string{"billing"}); err != nil || len(got) != 1 {
		t.Errorf("PendingBackfills after resume = %v, %v; want [billing]", got, err)
	}
}

// The claim, under the lock, leaves out an occurrence asked for without
// --again that ran after the request: a run of the job in its slot (not a
// trigger's), another backfill occurrence of it that ran (its run row not
// yet written), or the job's last run whose row is not written yet (the
// claim waits for it). --again runs it anyway. A request left with nothing
// to run is done. (Review D1: the claim never looked at the runs.)
func TestBackfillClaimLeavesOutWhatRanAfterTheRequest(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	reportJob(t, pool, "billing")
	at := hours(t, "2026-11-30T00:00:00Z", 4)
	until := make([]time.Time, len(at))
	for i := range at {
		until[i] = at[i].Add(time.Hour)
	}
	a, err := jobstore.RequestBackfill(t.Context(), pool, jobstore.BackfillRequest{Job: "billing", Actor: "ana", NominalAt: at, SlotUntil: until})
	if err != nil {
		t.Fatal(err)
	}
	b, err := jobstore.RequestBackfill(t.Context(), pool, jobstore.BackfillRequest{Job: "billing", Actor: "ana", Again: true,
		NominalAt: at[:1], SlotUntil: until[:1]})
	if err != nil {
		t.Fatal(err)
	}
	c, err := jobstore.RequestBackfill(t.Context(), pool, jobstore.BackfillRequest{Job: "billing", Actor: "ana", NominalAt: at[1:2], SlotUntil: until[1:2]})
	if err != nil {
		t.Fatal(err)
	}
	// After the requests: a live run of 00:00's slot (a fixed delay's
	// nominal time, 7 s into it) and a trigger in 02:00's.
	if _, err := pool.Exec(t.Context(), `
INSERT INTO studio_job_run (seq, job_id, replica_id, started_at, finished_at, outcome, nominal_at, scope_key, triggered) VALUES
  (1, 'billing', 'web-1', now(), now(), 'succeeded', '2026-11-30T00:00:07Z', '', false),
  (2, 'billing', 'web-1', now(), now(), 'succeeded', '2026-11-30T02:05:00Z', '', true)`); err != nil {
		t.Fatal(err)
	}
	w := jobstore.NewBackfills(pool, "web-1")
	claim := func(want time.Time, seq int64) jobs.BackfillClaim {
		t.Helper()
		got, ok, err := w.Claim(t.Context(), "billing")
		if err != nil || !ok || !got.NominalAt.Equal(want) || got.RequestSeq != seq {
			t.Fatalf("claim = %+v, %t, %v; want %s of request %d", got, ok, err, want.Format(time.RFC3339), seq)
		}
		return got
	}
	// 00:00 of a ran: left out; 00:00 of b (--again) runs.
	if _, err := w.End(t.Context(), claim(at[0], b), 10, jobs.OutcomeSucceeded); err != nil {
		t.Fatal(err)
	}
	// 01:00 of a runs (no run row written yet); then 01:00 of c is left
	// out for it, and request c is done; 02:00 of a runs (a trigger does
	// not count).
	if _, err := w.End(t.Context(), claim(at[1], a), 11, jobs.OutcomeSucceeded); err != nil {
		t.Fatal(err)
	}
	c2 := claim(at[2], a)
	if n := count(t, pool, `SELECT count(*) FROM studio_request WHERE seq = $1 AND done_at IS NOT NULL AND done_by = 'web-1'`, c); n != 1 {
		t.Errorf("request %d, all left out, is not done", c)
	}
	if _, err := w.End(t.Context(), c2, 12, jobs.OutcomeSucceeded); err != nil {
		t.Fatal(err)
	}
	// A live run of 03:00's slot ended just now elsewhere: its end is in
	// the shared schedule, its run row not yet written. The claim waits.
	if _, err := pool.Exec(t.Context(), `INSERT INTO studio_job_schedule (job_id, last_ended_at, last_started_at, last_replica_id, last_seq)
VALUES ('billing', now(), now(), 'web-2', 99)`); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := w.Claim(t.Context(), "billing"); err != nil || ok {
		t.Fatalf("claim with the last run's row unwritten = %+v, %t, %v; want none (wait)", got, ok, err)
	}
	if n := count(t, pool, `SELECT count(*) FROM studio_backfill WHERE nominal_at = $1 AND claimed_at IS NULL`, at[3]); n != 1 {
		t.Errorf("03:00 was touched while the claim waited")
	}
	if _, err := pool.Exec(t.Context(), `INSERT INTO studio_job_run (seq, job_id, replica_id, started_at, finished_at, outcome, nominal_at, scope_key, triggered)
VALUES (99, 'billing', 'web-2', now(), now(), 'succeeded', '2026-11-30T03:00:00Z', '', false)`); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := w.Claim(t.Context(), "billing"); err != nil || ok {
		t.Fatalf("claim after 03:00 ran = %+v, %t, %v; want none", got, ok, err)
	}
	rows, err := pool.Query(t.Context(), `SELECT request_seq, nominal_at, outcome FROM studio_backfill WHERE outcome = 'left_out' ORDER BY nominal_at, request_seq`)
	if err != nil {
		t.Fatal(err)
	}
	type left struct {
		seq int64
		at  time.Time
	}
	var got []left
	var outcome string
	var l left
	if _, err := pgx.ForEachRow(rows, []any{&l.seq, &l.at, &outcome}, func() error { got = append(got, left{l.seq, l.at.UTC()}); return nil }); err != nil {
		t.Fatal(err)
	}
	want := []left{{a, at[0]}, {c, at[1]}, {a, at[3]}}
	if len(got) != len(want) {
		t.Fatalf("left out %v, want %v", got, want)
	}
	for i := range want {
		if got[i].seq != want[i].seq || !got[i].at.Equal(want[i].at) {
			t.Errorf("left out %v, want %v", got, want)
			break
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM studio_request WHERE kind = 'job.backfill' AND done_at IS NULL`); n != 0 {
		t.Errorf("%d backfill requests not done with nothing left to run", n)
	}
}

// An occurrence claimed and never ended that was its request's last is
// abandoned by the next claim, and the request is done. (Review D3.)
func TestBackfillAbandonedLastOccurrenceEndsItsRequest(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	reportJob(t, pool, "billing")
	seq, err := jobstore.RequestBackfill(t.Context(), pool, jobstore.BackfillRequest{Job: "billing", Actor: "ana", NominalAt: hours(t, "2026-11-30T00:00:00Z", 1)})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := jobstore.NewBackfills(pool, "web-2").Claim(t.Context(), "billing"); err != nil || !ok {
		t.Fatalf("claim = %t, %v", ok, err)
	}
	if _, ok, err := jobstore.NewBackfills(pool, "web-1").Claim(t.Context(), "billing"); err != nil || ok {
		t.Fatalf("claim after the claimer died = %t, %v; want none", ok, err)
	}
	if n := count(t, pool, `SELECT count(*) FROM studio_request q JOIN studio_backfill b ON b.request_seq = q.seq
WHERE q.seq = $1 AND q.done_at IS NOT NULL AND b.outcome = 'abandoned'`, seq); n != 1 {
		t.Errorf("the request of an abandoned last occurrence is not done")
	}
}

// The database refuses a backfill occurrence in the future.
func TestBackfillRefusesAFutureOccurrence(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	reportJob(t, pool, "billing")
	_, err := jobstore.RequestBackfill(t.Context(), pool, jobstore.BackfillRequest{Job: "billing", Actor: "ana",
		NominalAt: []time.Time{time.Now().Add(-time.Hour), time.Now().Add(time.Hour)}})
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "23514" {
		t.Fatalf("a future occurrence: %v, want a check_violation", err)
	}
	if n := count(t, pool, `SELECT count(*) FROM studio_request WHERE kind = 'job.backfill'`); n != 0 {
		t.Errorf("%d requests written", n)
	}
}
