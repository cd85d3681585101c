// Package jobstore keeps the job model of internal/jobs in PostgreSQL: the
// batching writer of status and history (Store, a startstop service), the
// reads behind jobs list/status/history and /v1/jobs, operator settings and
// trigger requests, and the built-in housekeeping job's statements.
package jobstore

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/studioctl/studioctl/internal/bus"
	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/locks"
	"github.com/studioctl/studioctl/internal/startstop"
)

// The batching writer of SPEC §3: per-run writes (status, history) are
// coalesced and flushed at most every second, or sooner at a size bound, so
// statements per second stay bounded however many jobs a replica hosts.
// The bound is 5,000 queued rows (runs plus status): at 10,000 jobs on
// 1-10 s delays (about 2,900 runs and 2,900 status rows a second) a bound of
// 500 made 12.7 flushes a second, and each flush's fixed cost (a
// transaction, five statements, the event writer's row lock, two
// notifications) was a fifth of the server's CPU per run (docs/cost.md).
const (
	FlushEvery = time.Second
	FlushBatch = 5000
	// seqBlock run seqs are taken from the sequence in one statement. At
	// 10,000 jobs on 1-10 s delays (about 3,000 runs a second) a block of
	// 100 meant 29 refills a second, each holding up every starting run.
	seqBlock = 1000
	// flushTimeout bounds one flush.
	flushTimeout = 10 * time.Second
)

// Store writes status and history for one replica through a batching writer.
type Store struct {
	q         Querier
	replicaID string
	log       *slog.Logger
	// execMode: q sends statements in pgx's exec mode (a pool behind a
	// pooler, docs/poolers.md); the flush gives pgx plain slices then.
	execMode bool

	mu     sync.Mutex
	runs   map[int64]jobs.Run
	status map[string]jobs.Status
	occ    map[occurrenceKey]jobs.OccurrenceRecord // skips and misses (occurrence_write.go)
	// insertOccSQL is insertOccurrencesSQL for the lock table in use.
	insertOccSQL string
	kick         chan struct{}
	seqs         []int64
	seqMu        sync.Mutex
	// prefetching is closed when the prefetch of the next block under way
	// ends (nil: none); runCtx is the writer's context, nil before Start.
	prefetching chan struct{}
	runCtx      context.Context
	startstop.Base
	final   sync.Once // the last flush, after the writer ended
	failing bool

	flushes, statements int64 // for measurements

	// enc holds the flush's parameters from one flush to the next
	// (flush_encode.go); legacyFlush sends them through pgx instead (tests).
	enc         flushEncoder
	legacyFlush bool
	// spareRuns and spareStatus are the maps of a flush before, cleared,
	// for the pending rows after the next one (flush_encode.go).
	spareRuns   map[int64]jobs.Run
	spareStatus map[string]jobs.Status

	starts startWriter // RecordStart's group commit (start.go)
}

// NewStore returns a store for replicaID; Start runs its writer.
func NewStore(q Querier, replicaID string, log *slog.Logger) *Store {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Store{q: q, replicaID: replicaID, log: log, execMode: execMode(q), runs: map[int64]jobs.Run{}, status: map[string]jobs.Status{},
		occ: map[occurrenceKey]jobs.OccurrenceRecord{}, insertOccSQL: insertOccurrencesSQL(locks.DefaultTable()),
		kick: make(chan struct{}, 1)}
}

// Start takes the first block of run seqs, which fails for real when the
// database cannot be written (a standby, a missing grant), then runs the
// writer goroutine until Stop.
func (s *Store) Start(ctx context.Context) error {
	runCtx, err := s.StartInit(ctx)
	if err != nil {
		return fmt.Errorf("start run store: %w", err)
	}
	if err := s.fillSeqs(ctx); err != nil {
		s.StartFailed()
		return fmt.Errorf("start run store: %w", err)
	}
	s.seqMu.Lock()
	s.runCtx = runCtx // from now on, blocks are prefetched
	s.seqMu.Unlock()
	if !s.Go(func() { s.loop(runCtx) }) {
		return fmt.Errorf("start run store: %w", startstop.ErrStopped)
	}
	s.MarkStarted()
	return nil
}

// Stop ends the writer, then flushes what is pending. Safe to call twice,
// concurrently, and without Start (it still flushes).
func (s *Store) Stop() {
	s.starts.stop() // a write of starts waiting to try again ends (start.go)
	s.Base.Stop()
	s.final.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
		defer cancel()
		if err := s.Flush(ctx); err != nil {
			s.log.Warn("jobs: final flush failed", "error", err)
		}
	})
}

func (s *Store) loop(ctx context.Context) {
	t := time.NewTicker(FlushEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.kick:
		}
		// This flush takes everything queued so far: a kick sent meanwhile
		// would only start a second, nearly empty flush.
		select {
		case <-s.kick:
		default:
		}
		// A flush under way finishes even if Stop comes meanwhile (Stop then
		// flushes what is left).
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
		err := s.Flush(fctx)
		cancel()
		switch {
		case err != nil && !s.failing:
			s.failing = true
			s.log.Warn("jobs: writing status and history failed; will retry", "error", err)
		case err == nil && s.failing:
			s.failing = false
			s.log.Info("jobs: writing status and history recovered")
		}
	}
}

// NextSeq returns a run seq, taking a block from the sequence when needed.
// A started store takes the next block in the background once half of the
// current one is handed out (prefetch), so runs do not wait for it: a
// refill held every run that started meanwhile, 2.9 times a second at
// 10,000 jobs, which was a good part of the fires' lateness p99 on a
// loaded machine (docs/cost.md). A run that finds no seq left waits for a
// prefetch under way, or takes a block itself.
func (s *Store) NextSeq(ctx context.Context) (int64, error) {
	s.seqMu.Lock()
	for len(s.seqs) == 0 {
		if wait := s.prefetching; wait != nil {
			s.seqMu.Unlock()
			select {
			case <-wait:
			case <-ctx.Done():
				return 0, fmt.Errorf("allocate run seqs: %w", context.Cause(ctx))
			}
			s.seqMu.Lock()
			continue // a prefetch that failed left none: take a block below
		}
		if err := s.fillSeqsLocked(ctx); err != nil {
			s.seqMu.Unlock()
			return 0, err
		}
	}
	n := s.seqs[0]
	s.seqs = s.seqs[1:]
	if len(s.seqs) < seqBlock/2 && s.prefetching == nil && s.runCtx != nil {
		s.prefetchLocked()
	}
	s.seqMu.Unlock()
	return n, nil
}

// prefetchLocked takes the next block of seqs in a goroutine of the store
// (none once it stopped), appended to the current one. seqMu held.
func (s *Store) prefetchLocked() {
	done := make(chan struct{})
	ctx := s.runCtx
	if !s.Go(func() {
		defer close(done)
		fctx, cancel := context.WithTimeout(ctx, flushTimeout)
		block, err := s.takeSeqs(fctx)
		cancel()
		s.seqMu.Lock()
		s.seqs = append(s.seqs, block...)
		s.prefetching = nil
		s.seqMu.Unlock()
		if err != nil && ctx.Err() == nil {
			s.log.Debug("jobs: taking the next block of run seqs failed; the runs take it", "error", err)
		}
	}) {
		return
	}
	s.prefetching = done
}

// seqBlockSQL takes $1 run seqs. The sequence is named once, as a constant
// the parser resolves: pg_get_serial_sequence in the select list was
// evaluated for every row, a catalog lookup per seq that cost the server
// 7 us of CPU per run at 10,000 jobs (docs/cost.md). The name is the one
// migration 00001's bigserial gives it, and docs/roles.sql grants.
const seqBlockSQL = `SELECT nextval('studio_job_run_seq_seq') FROM generate_series(1, $1)`

// fillSeqs takes a block of run seqs unless some are left.
func (s *Store) fillSeqs(ctx context.Context) error {
	s.seqMu.Lock()
	defer s.seqMu.Unlock()
	return s.fillSeqsLocked(ctx)
}

func (s *Store) fillSeqsLocked(ctx context.Context) error {
	if len(s.seqs) > 0 {
		return nil
	}
	block, err := s.takeSeqs(ctx)
	if err != nil {
		return err
	}
	s.seqs = block
	return nil
}

// takeSeqs takes a block of seqs from the sequence.
func (s *Store) takeSeqs(ctx context.Context) ([]int64, error) {
	rows, err := s.q.Query(ctx, seqBlockSQL, seqBlock)
	if err != nil {
		return nil, fmt.Errorf("allocate run seqs: %w", err)
	}
	block := make([]int64, 0, seqBlock)
	var n int64
	for rows.Next() {
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return nil, fmt.Errorf("allocate run seqs: %w", err)
		}
		block = append(block, n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("allocate run seqs: %w", err)
	}
	if len(block) == 0 {
		return nil, fmt.Errorf("allocate run seqs: the sequence returned no values")
	}
	return block, nil
}

// PutRun queues a run row (the latest version of a seq wins).
func (s *Store) PutRun(r jobs.Run) {
	r.Error, r.OutputTail = jobs.Storable(r.Error), jobs.Storable(r.OutputTail)
	s.mu.Lock()
	s.runs[r.Seq] = r
	n := len(s.runs) + len(s.status)
	s.mu.Unlock()
	s.maybeKick(n)
}

// PutStatus queues a status snapshot (the latest per job wins).
func (s *Store) PutStatus(st jobs.Status) {
	st.LastError, st.InvalidSchedule = jobs.Storable(st.LastError), jobs.Storable(st.InvalidSchedule)
	s.mu.Lock()
	s.status[st.JobID] = st
	n := len(s.runs) + len(s.status)
	s.mu.Unlock()
	s.maybeKick(n)
}

func (s *Store) maybeKick(n int) {
	if n >= FlushBatch {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
}

// Stats returns how many flushes and statements the writer has made.
func (s *Store) Stats() (flushes, statements int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.flushes, s.statements
}

// Flush writes what is pending in one transaction: one statement for runs,
// one for status, one bus notification of the flushed run seqs, and one
// for the skips and misses when there are some (occurrence_write.go).
func (s *Store) Flush(ctx context.Context) error {
	s.mu.Lock()
	runs, status, occ := s.runs, s.status, s.occ
	s.runs, s.status = s.takeSpares() // the maps of a flush before, cleared (flush_encode.go)
	if len(occ) > 0 {
		s.occ = map[occurrenceKey]jobs.OccurrenceRecord{}
	} else {
		occ = nil // the empty map stays the store's (no allocation per flush)
	}
	s.mu.Unlock()
	if len(runs) == 0 && len(status) == 0 && len(occ) == 0 {
		s.keepSpares(runs, status)
		return nil
	}
	err := s.write(ctx, runs, status, occ)
	defer s.keepSpares(runs, status)
	if err != nil {
		// Put them back unless a newer version arrived meanwhile.
		s.mu.Lock()
		for k, v := range occ {
			if _, newer := s.occ[k]; !newer {
				s.occ[k] = v
			}
		}
		for k, v := range runs {
			if _, newer := s.runs[k]; !newer {
				s.runs[k] = v
			}
		}
		for k, v := range status {
			if _, newer := s.status[k]; !newer {
				s.status[k] = v
			}
		}
		s.mu.Unlock()
	}
	return err
}

const upsertRunsSQL = `
INSERT INTO studio_job_run (seq, job_id, replica_id, cluster, started_at, finished_at, outcome, error, output_tail, nominal_at, scope_key, triggered, backfill)
SELECT seq, job_id, replica_id, NULLIF(cluster, ''), started_at, finished_at, outcome, NULLIF(error, ''), NULLIF(output_tail, ''), nominal_at, scope_key, triggered, backfill
FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::timestamptz[], $6::timestamptz[], $7::text[], $8::text[], $9::text[],
            $10::timestamptz[], $11::text[], $12::boolean[], $13::boolean[])
  AS t(seq, job_id, replica_id, cluster, started_at, finished_at, outcome, error, output_tail, nominal_at, scope_key, triggered, backfill)
ON CONFLICT (seq) DO UPDATE SET finished_at = EXCLUDED.finished_at, outcome = EXCLUDED.outcome,
  error = EXCLUDED.error, output_tail = EXCLUDED.output_tail
WHERE studio_job_run.outcome = 'running'
   -- A replica that was paused past the gone threshold finds its run marked
   -- interrupted by housekeeping; its own final outcome is the truth.
   OR (studio_job_run.outcome = 'interrupted' AND EXCLUDED.outcome <> 'running'
       AND studio_job_run.replica_id = EXCLUDED.replica_id)
RETURNING seq`

// upsertRunsDutyEndsSQL is upsertRunsSQL for a flush that holds the end of
// a per-cluster duty's run: the same upsert, and in the same statement (a
// data-modifying CTE) the end of each duty's newest ended run per cluster
// in studio_duty_end (migrations/00012: what a missed stretch of the duty
// counts from once the run history was pruned). Only a run's own end
// counts: an interrupted mark of housekeeping or of a restart is not one.
// A flush without such an end uses upsertRunsSQL, as before.
var upsertRunsDutyEndsSQL = `
WITH w AS (` + strings.TrimSuffix(upsertRunsSQL, "RETURNING seq") + `RETURNING seq, job_id, cluster, replica_id, started_at, finished_at),
d AS (
INSERT INTO studio_duty_end AS d (job_id, cluster, last_ended_at, last_started_at, last_replica_id, last_seq)
SELECT DISTINCT ON (w.job_id, w.cluster) w.job_id, w.cluster, w.finished_at, w.started_at, w.replica_id, w.seq
FROM w WHERE w.cluster IS NOT NULL AND w.finished_at IS NOT NULL
ORDER BY w.job_id, w.cluster, w.finished_at DESC
ON CONFLICT (job_id, cluster) DO UPDATE SET last_ended_at = EXCLUDED.last_ended_at, last_started_at = EXCLUDED.last_started_at,
  last_replica_id = EXCLUDED.last_replica_id, last_seq = EXCLUDED.last_seq,
  prev_ended_at = d.last_ended_at, prev_started_at = d.last_started_at
WHERE EXCLUDED.last_ended_at > d.last_ended_at)
SELECT seq FROM w`

// eventRunsSQL writes the event stream's rows of the runs the upsert
// changed and sends the flush's bus messages (the seqs batch, and one
// events frame), in one statement (migrations/00006_events.sql).
const eventRunsSQL = `SELECT studio_event_runs($1::jsonb[], $2::text[])`

// runEvent is the data of a run event (docs/events.md); the SQL function
// studio_event_run_data builds the same for housekeeping.
type runEvent struct {
	Seq        int64    `json:"seq"`
	JobID      string   `json:"job_id"`
	ReplicaID  string   `json:"replica_id"`
	Cluster    string   `json:"cluster"`
	Outcome    string   `json:"outcome"`
	StartedAt  string   `json:"started_at"`
	FinishedAt string   `json:"finished_at,omitempty"`
	Duration   *float64 `json:"duration_seconds,omitempty"`
	Error      string   `json:"error,omitempty"`
}

// eventTime is the events' time format: RFC 3339, UTC, microseconds.
const eventTime = "2006-01-02T15:04:05.000000Z"

// runEventData is the event of run r as stored (its error already made
// storable and scrubbed by PutRun).
func runEventData(r jobs.Run) string {
	return string(appendRunEvent(nil, r))
}

// appendRunEvent appends the JSON of runEvent for r: the same object as
// json.Marshal of a runEvent (TestAppendRunEventIsJSONMarshal), written
// without reflection, which was most of the flush's encoding CPU per run.
func appendRunEvent(b []byte, r jobs.Run) []byte {
	b = append(b, `{"seq":`...)
	b = strconv.AppendInt(b, r.Seq, 10)
	b = append(b, `,"job_id":`...)
	b = appendJSONString(b, r.JobID)
	b = append(b, `,"replica_id":`...)
	b = appendJSONString(b, r.ReplicaID)
	b = append(b, `,"cluster":`...)
	b = appendJSONString(b, r.Cluster)
	b = append(b, `,"outcome":`...)
	b = appendJSONString(b, string(r.Outcome))
	b = append(b, `,"started_at":"`...)
	b = r.StartedAt.UTC().AppendFormat(b, eventTime)
	b = append(b, '"')
	if r.FinishedAt != nil {
		b = append(b, `,"finished_at":"`...)
		b = r.FinishedAt.UTC().AppendFormat(b, eventTime)
		b = append(b, `","duration_seconds":`...)
		d := math.Round(r.FinishedAt.Sub(r.StartedAt).Seconds()*1000) / 1000
		if a := math.Abs(d); a != 0 && (a < 1e-6 || a >= 1e21) {
			j, _ := json.Marshal(d) // json's exponent form; a rounded duration never gets here
			b = append(b, j...)
		} else {
			b = strconv.AppendFloat(b, d, 'f', -1, 64)
		}
	}
	if r.Error != "" {
		b = append(b, `,"error":`...)
		b = appendJSONString(b, r.Error)
	}
	return append(b, '}')
}

// appendJSONString appends s as a JSON string. s is valid UTF-8 (job ids
// are validated, errors made storable), which JSON takes as it is; quotes,
// backslashes and control characters are escaped.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

func (s *Store) write(ctx context.Context, runs map[int64]jobs.Run, status map[string]jobs.Status, occ map[occurrenceKey]jobs.OccurrenceRecord) error {
	tx, err := s.q.Begin(ctx)
	if err != nil {
		return fmt.Errorf("write job history: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	stmts := int64(0)
	if !s.legacyFlush { // the parameters encoded into the store's buffers (flush_encode.go)
		s.enc.mu.Lock()
		n, ok, err := s.writeEncoded(ctx, tx, runs, status)
		s.enc.mu.Unlock()
		if err != nil {
			return err
		}
		if ok {
			stmts, runs, status = n, nil, nil
		}
	}
	if len(runs) > 0 {
		n := len(runs)
		seqs := make([]int64, 0, n)
		seq := make(pgArray[pgInt8], 0, n)
		job, rep, cl, out, errs, tail := make(pgArray[pgText], 0, n), make(pgArray[pgText], 0, n), make(pgArray[pgText], 0, n),
			make(pgArray[pgText], 0, n), make(pgArray[pgText], 0, n), make(pgArray[pgText], 0, n)
		started, finished, nominal := make(pgArray[pgTime], 0, n), make(pgArray[pgTime], 0, n), make(pgArray[pgTime], 0, n)
		scope, triggered, backfill := make(pgArray[pgText], 0, n), make(pgArray[pgBool], 0, n), make(pgArray[pgBool], 0, n)
		q := upsertRunsSQL
		for _, r := range runs {
			if r.Cluster != "" && r.FinishedAt != nil {
				q = upsertRunsDutyEndsSQL
			}
			seqs, seq = append(seqs, r.Seq), append(seq, pgInt8(r.Seq))
			job, rep, cl = append(job, pgText(r.JobID)), append(rep, pgText(r.ReplicaID)), append(cl, pgText(r.Cluster))
			started, finished = append(started, pgTime{t: r.StartedAt}), append(finished, pgTimeOf(r.FinishedAt))
			out, errs, tail = append(out, pgText(r.Outcome)), append(errs, pgText(r.Error)), append(tail, pgText(r.OutputTail))
			nominal = append(nominal, pgTime{t: r.NominalAt, null: r.NominalAt.IsZero()})
			scope, triggered = append(scope, pgText(r.ScopeKey)), append(triggered, pgBool(r.Triggered))
			backfill = append(backfill, pgBool(r.Backfill))
		}
		args := []any{seq, job, rep, cl, started, finished, out, errs, tail, nominal, scope, triggered, backfill}
		if s.execMode {
			args = plainArgs(args)
		}
		rows, err := tx.Query(ctx, q, args...)
		if err != nil {
			return fmt.Errorf("write job history: %w", err)
		}
		changed := make([]int64, 0, n)
		var c int64
		for rows.Next() { // pgx.RowTo would allocate a value per row
			if err := rows.Scan(&c); err != nil {
				rows.Close()
				return fmt.Errorf("write job history: %w", err)
			}
			changed = append(changed, c)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("write job history: %w", err)
		}
		stmts++
		payloads, err := bus.Encode(bus.Seqs(seqs...))
		if err != nil {
			return fmt.Errorf("announce job runs: %w", err)
		}
		events := make([]string, 0, len(changed))
		var buf []byte
		for _, n := range changed {
			buf = appendRunEvent(buf[:0], runs[n])
			events = append(events, string(buf))
		}
		if _, err := tx.Exec(ctx, eventRunsSQL, events, payloads); err != nil {
			return fmt.Errorf("announce job runs: %w", err)
		}
		stmts++
	}
	if len(status) > 0 {
		args := statusArgs(s.replicaID, status)
		if s.execMode {
			args = plainArgs(args)
		}
		if _, err := tx.Exec(ctx, upsertStatusSQL, args...); err != nil {
			return fmt.Errorf("write job status: %w", err)
		}
		stmts++
	}
	if len(occ) > 0 {
		if err := s.writeOccurrences(ctx, tx, occ); err != nil {
			return err
		}
		stmts++
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("write job history: %w", err)
	}
	s.mu.Lock()
	s.flushes++
	s.statements += stmts + 2 // BEGIN and COMMIT
	s.mu.Unlock()
	return nil
}

// LoadStatus reads this replica's status rows, so counters survive a
// restart with the same replica id.
func (s *Store) LoadStatus(ctx context.Context) (map[string]jobs.Status, error) {
	rows, err := s.q.Query(ctx, `SELECT `+statusColumns+` FROM studio_job_status s WHERE s.replica_id = $1`, s.replicaID)
	if err != nil {
		return nil, fmt.Errorf("read job status: %w", err)
	}
	defer rows.Close()
	out := map[string]jobs.Status{}
	if err := scanStatus(rows, nil, func(st jobs.Status) { out[st.JobID] = st }); err != nil {
		return nil, err
	}
	return out, nil
}

// LastStartAfter is the start of the newest run of job id that started
// after since and ended (not running, not interrupted), a backfill's aside
// (zero: none). A catch-up asks it under the job's lock: a run after the
// shared schedule's last recorded run is one whose end could not be
// recorded there (runner, catchUpLock), and its due times must not run
// again. A run whose replica died while it ran is left out: its due time
// is caught up again, as it did not finish. One index lookup (job_id,
// started_at).
func (s *Store) LastStartAfter(ctx context.Context, id string, since time.Time) (time.Time, error) {
	var last *time.Time
	err := s.q.QueryRow(ctx, `SELECT max(started_at) FROM studio_job_run
WHERE job_id = $1 AND started_at > $2 AND NOT backfill AND outcome NOT IN ('running', 'interrupted')`, id, since).Scan(&last)
	if err != nil {
		return time.Time{}, fmt.Errorf("read the last run of job %q: %w", id, err)
	}
	if last == nil {
		return time.Time{}, nil
	}
	return last.UTC(), nil
}
