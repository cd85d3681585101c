package jobstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/liveness"
	"github.com/studioctl/studioctl/internal/locks"
)

// The write side of occurrences (docs/occurrences.md): a run is its own
// occurrence (studio_job_run.nominal_at, in the run upsert); the skips and
// misses the runner records are queued here and written by the flush, in
// its transaction, with one INSERT for all of them, and none when there
// are none.

// occurrenceKey is studio_occurrence's UNIQUE key: one queued record per
// occurrence (the first wins, as the table's ON CONFLICT DO NOTHING).
type occurrenceKey struct {
	job, scope string
	nominal    time.Time
}

// SetLockTable names the lock table whose holders a held-elsewhere skip
// reads (default ShedLock's). Call it before Start.
func (s *Store) SetLockTable(t locks.Table) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.insertOccSQL = insertOccurrencesSQL(t)
}

// PutOccurrence queues a skip or a miss; the next flush writes it.
func (s *Store) PutOccurrence(o jobs.OccurrenceRecord) {
	o.NominalAt = jobs.Nominal(o.NominalAt)
	if !o.LastNominalAt.IsZero() {
		o.LastNominalAt = jobs.Nominal(o.LastNominalAt)
	}
	if o.Count < 1 {
		o.Count = 1
	}
	if o.ReplicaID == "" {
		o.ReplicaID = s.replicaID
	}
	o.PausedBy = jobs.Storable(o.PausedBy)
	k := occurrenceKey{o.JobID, o.ScopeKey, o.NominalAt}
	s.mu.Lock()
	if _, dup := s.occ[k]; !dup {
		s.occ[k] = o
	}
	n := len(s.runs) + len(s.status) + len(s.occ)
	s.mu.Unlock()
	s.maybeKick(n)
}

// DropOccurrence takes back the skip or miss of that key queued by
// PutOccurrence, if the next flush has not written it yet (the runner
// learnt that another replica ran that occurrence).
func (s *Store) DropOccurrence(job, scopeKey string, nominal time.Time) {
	s.mu.Lock()
	delete(s.occ, occurrenceKey{job, scopeKey, jobs.Nominal(nominal)})
	s.mu.Unlock()
}

// insertOccurrencesSQL writes a batch of skips and misses. A held-elsewhere
// skip names the lock's holder as the lock table says (locked_by) and
// whether that holder is a registered replica. It is not written when the
// holder is another live replica (the occurrence ran or runs there: a
// replica that finds another replica's lock did not skip anything), nor
// when the lock has no row. A holder that is the recording replica's own
// id is written: this process held no lock of the job when its tick
// failed to take it (one tick of a job at a time, and no two jobs share a
// lock), so the lock was its previous process's, which died holding it
// (a restart under the same id), or its own, kept for the minimum gap
// (lockAtLeastFor) after a run that ended just before (a jobs trigger run
// before a cron time): either way no run was that due time's. Nor is it
// written when a run carries that due time (a run row of the same job,
// scope key and nominal time, read through the job's start-time index
// from a minute before it): the due time is the run's occurrence, ran or
// missed/lost. A replica started after another died mid-run, before the
// next due time, retries the lost run's due time at once and finds the
// dead replica's lock: its skip counted that due time twice.
//
// Every replica that records the same occurrence writes the same key, and
// the first insert counts (ON CONFLICT DO NOTHING); the table's trigger
// puts each row inserted on the event stream.
func insertOccurrencesSQL(t locks.Table) string {
	return `
INSERT INTO studio_occurrence (job_id, scope_key, nominal_at, outcome, reason, replica_id, seq, holder, holder_known, paused_by, count, last_nominal_at)
SELECT u.job_id, u.scope_key, u.nominal_at, u.outcome, u.reason, u.replica_id, nullif(u.seq, 0),
       h.holder, CASE WHEN h.holder IS NOT NULL THEN r.id IS NOT NULL END,
       nullif(u.paused_by, ''), u.count, u.last_nominal_at
FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::text[], $5::text[], $6::text[], $7::bigint[], $8::text[], $9::text[], $10::bigint[], $11::timestamptz[])
  AS u(job_id, scope_key, nominal_at, outcome, reason, replica_id, seq, lock_name, paused_by, count, last_nominal_at)
CROSS JOIN LATERAL (SELECT CASE WHEN u.lock_name <> '' THEN ` + t.HolderSQL("u.lock_name") + ` END AS holder) h
LEFT JOIN studio_replica r ON r.id = h.holder
WHERE u.lock_name = '' OR (h.holder IS NOT NULL AND (h.holder = u.replica_id OR NOT ` + liveness.LiveSQL("r") + `)
  AND NOT EXISTS (SELECT 1 FROM studio_job_run x WHERE x.job_id = u.job_id AND x.started_at >= u.nominal_at - interval '1 minute'
                    AND x.nominal_at = u.nominal_at AND coalesce(x.scope_key, '') = u.scope_key))
ON CONFLICT (job_id, scope_key, nominal_at) DO NOTHING`
}

// writeOccurrences runs insertOccurrencesSQL for occ in tx.
func (s *Store) writeOccurrences(ctx context.Context, tx pgx.Tx, occ map[occurrenceKey]jobs.OccurrenceRecord) error {
	n := len(occ)
	job, scope, outcome, reason, rep, lock, paused := make(pgArray[pgText], 0, n), make(pgArray[pgText], 0, n), make(pgArray[pgText], 0, n),
		make(pgArray[pgText], 0, n), make(pgArray[pgText], 0, n), make(pgArray[pgText], 0, n), make(pgArray[pgText], 0, n)
	nominal, last := make(pgArray[pgTime], 0, n), make(pgArray[pgTime], 0, n)
	seq, count := make(pgArray[pgInt8], 0, n), make(pgArray[pgInt8], 0, n)
	for _, o := range occ {
		job, scope, nominal = append(job, pgText(o.JobID)), append(scope, pgText(o.ScopeKey)), append(nominal, pgTime{t: o.NominalAt})
		outcome, reason, rep = append(outcome, pgText(o.Outcome)), append(reason, pgText(o.Reason)), append(rep, pgText(o.ReplicaID))
		seq, lock, paused = append(seq, pgInt8(o.Seq)), append(lock, pgText(o.LockName)), append(paused, pgText(o.PausedBy))
		count, last = append(count, pgInt8(o.Count)), append(last, pgTime{t: o.LastNominalAt, null: o.LastNominalAt.IsZero()})
	}
	s.mu.Lock()
	q := s.insertOccSQL
	s.mu.Unlock()
	args := []any{job, scope, nominal, outcome, reason, rep, seq, lock, paused, count, last}
	if s.execMode {
		args = plainArgs(args)
	}
	if _, err := tx.Exec(ctx, q, args...); err != nil {
		return fmt.Errorf("write job occurrences: %w", err)
	}
	return nil
}

// goneAfterSQL is liveness.GoneAfter as an SQL interval.
var goneAfterSQL = fmt.Sprintf("interval '%d seconds'", int(liveness.GoneAfter.Seconds()))

// lostRunDeathSQL is, for the run aliased n and its replica's row p, the
// time its replica died while it ran (the dead incarnation's last
// heartbeat), or NULL when the run ended or its replica lives: a run
// still marked running while its replica is not live died at the
// replica's last heartbeat; a run marked interrupted (by a restart under
// the same id, by housekeeping, or at a shutdown) at the earliest of that
// mark, the crashed incarnation's last heartbeat (last_crash_at) and a
// dead replica's last heartbeat. The crashed incarnation's last heartbeat
// may come before the run's start (a run starts between two heartbeats):
// when the run was marked at this incarnation's registration (finished at
// or after its start) and that heartbeat is within GoneAfter before the
// run's start, it is the incarnation that ran it, and it died at the run's
// start at the earliest. Without that, a replica killed a few seconds
// into a run and restarted under its id had the run "going on" until the
// restart, and its outage was overrun (or, for a shared fixed-delay job,
// nothing at all) instead of missed/down.
func lostRunDeathSQL(n, p string) string {
	return `CASE WHEN ` + n + `.outcome = 'running' AND NOT coalesce(` + liveness.LiveSQL(p) + `, false)
    THEN greatest(` + n + `.started_at, coalesce(` + p + `.heartbeat_at, ` + n + `.started_at))
  WHEN ` + n + `.outcome = 'interrupted'
    THEN greatest(` + n + `.started_at, least(` + n + `.finished_at,
      CASE WHEN ` + p + `.last_crash_at >= ` + n + `.started_at
             OR (` + p + `.last_crash_at >= ` + n + `.started_at - ` + goneAfterSQL + ` AND ` + n + `.finished_at >= ` + p + `.started_at)
           THEN ` + p + `.last_crash_at END,
      CASE WHEN NOT coalesce(` + liveness.LiveSQL(p) + `, false) THEN ` + p + `.heartbeat_at END))
  END`
}

// pauseUntilSQL is the end a jobs.pause audit row a gave its pause
// (migration 00014: detail paused_until_after), NULL for none or for a
// value that is not a time as studioctl writes it.
func pauseUntilSQL(a string) string {
	return `CASE WHEN ` + a + `.action = 'jobs.pause' AND ` + a + `.detail->>'paused_until_after' ~ '^\d{4}-\d\d-\d\dT[0-9:.]+(Z|[+-]\d\d:\d\d)$'
     THEN (` + a + `.detail->>'paused_until_after')::timestamptz END`
}

// pauseChangesSQL reads, as four arrays (the fourth: each pause's end), the pause and resume changes of
// job id (a column name) from the last one at or before since (an SQL
// expression; NULL: all), oldest first, through studio_audit's target
// index. The audit row is written with every change of the setting
// (migration 00009) and no retention prunes it.
func pauseChangesSQL(id, since string) string {
	return `(SELECT array_agg(a.at ORDER BY a.at, a.seq), array_agg(a.action = 'jobs.pause' ORDER BY a.at, a.seq), array_agg(a.actor ORDER BY a.at, a.seq),
     array_agg(` + pauseUntilSQL("a") + ` ORDER BY a.at, a.seq)
   FROM studio_audit a WHERE a.target = ` + id + ` AND a.action IN ('jobs.pause', 'jobs.resume')
     AND a.at >= coalesce((SELECT max(b.at) FROM studio_audit b WHERE b.target = ` + id + `
                             AND b.action IN ('jobs.pause', 'jobs.resume') AND b.at <= ` + since + `), '-infinity'))`
}

// occurrenceStartSQL: for each job id, whether a live replica other than
// $2 has a status row of it; the latest nominal time accounted for under
// scope "" or $2: recorded in studio_occurrence (read through the UNIQUE
// index), or carried by the job's newest run there (read newest first
// through the job's seq index; a run that started and never ended, its
// replica killed, is its due time's occurrence, missed/lost); when that
// newest run never ended, its start and its replica's death; and the
// job's pause and resume changes since before its newest run or the
// shared schedule's last end.
var occurrenceStartSQL = `
SELECT j.id,
  EXISTS (SELECT 1 FROM studio_job_status s JOIN studio_replica r ON r.id = s.replica_id
          WHERE s.job_id = j.id AND s.replica_id <> $2 AND ` + liveness.LiveSQL("r") + `),
  greatest(
    (SELECT max(coalesce(o.last_nominal_at, o.nominal_at)) FROM studio_occurrence o
     WHERE o.job_id = j.id AND o.scope_key IN ('', $2)),
    n.nominal_at),
  n.started_at, ` + lostRunDeathSQL("n", "p") + `,
  pz.*, g.paused, g.updated_at, g.updated_by, CASE WHEN g.paused AND isfinite(g.paused_until) THEN g.paused_until END
FROM unnest($1::text[]) AS j(id)
LEFT JOIN studio_job_setting g ON g.job_id = j.id
LEFT JOIN LATERAL (SELECT r.nominal_at, r.started_at, r.finished_at, r.outcome, r.replica_id FROM studio_job_run r
     WHERE r.job_id = j.id AND r.cluster IS NULL AND r.nominal_at IS NOT NULL AND r.scope_key IN ('', $2)
     ORDER BY r.seq DESC LIMIT 1) n ON true
LEFT JOIN studio_replica p ON p.id = n.replica_id
CROSS JOIN LATERAL ` + pauseChangesSQL("j.id", `least(n.started_at, (SELECT s.last_ended_at FROM studio_job_schedule s WHERE s.job_id = j.id))`) + ` pz`

// scanStartTrace scans the trace columns after dest: recorded, the lost
// run's start and death, the pause changes and the setting row. A setting
// whose state the audit rows do not end with (paused or resumed by a
// direct write, or before audit rows were required) adds its own change,
// at its updated_at.
func scanStartTrace(rows pgx.Rows, dest ...any) (jobs.StartTrace, error) {
	var rec, lostStarted, lostUntil, setAt *time.Time
	var at []time.Time
	var paused []bool
	var by []string
	var until []*time.Time
	var setPaused *bool
	var setBy *string
	var setUntil *time.Time
	if err := rows.Scan(append(dest, &rec, &lostStarted, &lostUntil, &at, &paused, &by, &until, &setPaused, &setAt, &setBy, &setUntil)...); err != nil {
		return jobs.StartTrace{}, err
	}
	var tr jobs.StartTrace
	if rec != nil {
		tr.Recorded = *rec
	}
	if lostStarted != nil && lostUntil != nil {
		tr.LostStarted, tr.LostUntil = *lostStarted, *lostUntil
	}
	if len(at) == len(paused) && len(at) == len(by) && len(at) == len(until) {
		for i := range at {
			c := jobs.PauseChange{At: at[i], Paused: paused[i], By: by[i]}
			if until[i] != nil {
				c.Until = until[i].UTC()
			}
			tr.Pauses = append(tr.Pauses, c)
		}
	}
	if setPaused != nil && setAt != nil && setBy != nil {
		last := len(tr.Pauses) - 1
		if (last < 0 && *setPaused) || (last >= 0 && tr.Pauses[last].Paused != *setPaused && !setAt.Before(tr.Pauses[last].At)) {
			c := jobs.PauseChange{At: *setAt, Paused: *setPaused, By: *setBy}
			if setUntil != nil {
				c.Until = setUntil.UTC()
			}
			tr.Pauses = append(tr.Pauses, c)
		}
	}
	return tr, nil
}

// OccurrenceStart returns, for each of jobIDs, whether a live replica
// other than this store's declares it, and what the database knows of
// its occurrences under scope "" or this replica's id (jobs.StartTrace).
// The runner reads it once at start (runner.OccurrenceRecorder).
func (s *Store) OccurrenceStart(ctx context.Context, jobIDs []string) (map[string]bool, map[string]jobs.StartTrace, error) {
	rows, err := s.q.Query(ctx, occurrenceStartSQL, jobIDs, s.replicaID)
	if err != nil {
		return nil, nil, fmt.Errorf("read job occurrences: %w", err)
	}
	defer rows.Close()
	hosted, traces := map[string]bool{}, map[string]jobs.StartTrace{}
	for rows.Next() {
		var id string
		var elsewhere bool
		tr, err := scanStartTrace(rows, &id, &elsewhere)
		if err != nil {
			return nil, nil, fmt.Errorf("read job occurrences: %w", err)
		}
		if elsewhere {
			hosted[id] = true
		}
		traces[id] = tr
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("read job occurrences: %w", err)
	}
	return hosted, traces, nil
}

// dutyStartSQL: for each job id, the end of its last run for cluster $2 on
// any replica: the newer of studio_duty_end's (migrations/00012, which no
// retention prunes) and the run history's newest run (read newest first
// through the job's start-time index; a run that never ended, its
// replica dead or its end not flushed yet, counts from its start: its own
// occurrence is that run's). Only runs started before $3, the
// acquisition, count: the new owner's own first run, which starts at once
// and may be flushed before this read, is not the previous owner's last
// (under load it made the stretch empty). Then the latest nominal time
// recorded under that cluster, the lost run's start and death when the
// newest run never ended, and the pause changes.
var dutyStartSQL = `
SELECT j.id, greatest(
    CASE WHEN d.last_started_at < $3 THEN d.last_ended_at WHEN d.prev_started_at < $3 THEN d.prev_ended_at END,
    CASE WHEN l.died IS NOT NULL THEN n.started_at ELSE coalesce(n.finished_at, n.started_at) END) AS anchor,
  greatest((SELECT max(coalesce(o.last_nominal_at, o.nominal_at)) FROM studio_occurrence o WHERE o.job_id = j.id AND o.scope_key = $2),
    n.nominal_at),
  n.started_at, l.died,
  pz.*, g.paused, g.updated_at, g.updated_by, CASE WHEN g.paused AND isfinite(g.paused_until) THEN g.paused_until END
FROM unnest($1::text[]) AS j(id)
LEFT JOIN studio_job_setting g ON g.job_id = j.id
LEFT JOIN studio_duty_end d ON d.job_id = j.id AND d.cluster = $2
LEFT JOIN LATERAL (SELECT r.nominal_at, r.started_at, r.finished_at, r.outcome, r.replica_id FROM studio_job_run r
     WHERE r.job_id = j.id AND r.cluster = $2 AND r.started_at < $3
     ORDER BY r.started_at DESC LIMIT 1) n ON true
LEFT JOIN studio_replica p ON p.id = n.replica_id
CROSS JOIN LATERAL (SELECT ` + lostRunDeathSQL("n", "p") + ` AS died) l
CROSS JOIN LATERAL ` + pauseChangesSQL("j.id", `least(n.started_at, d.last_ended_at, d.prev_ended_at)`) + ` pz`

// DutyStart returns, for each of jobIDs, what the database knows of its
// occurrences under cluster (jobs.StartTrace, with Anchor the end of its
// last run there on any replica). The runner reads it when it acquires a
// cluster (runner.DutyOccurrenceRecorder).
func (s *Store) DutyStart(ctx context.Context, jobIDs []string, cluster string, before time.Time) (map[string]jobs.StartTrace, error) {
	rows, err := s.q.Query(ctx, dutyStartSQL, jobIDs, cluster, before)
	if err != nil {
		return nil, fmt.Errorf("read the duties' last runs: %w", err)
	}
	defer rows.Close()
	traces := map[string]jobs.StartTrace{}
	for rows.Next() {
		var id string
		var anchor *time.Time
		tr, err := scanStartTrace(rows, &id, &anchor)
		if err != nil {
			return nil, fmt.Errorf("read the duties' last runs: %w", err)
		}
		if anchor != nil {
			tr.Anchor = *anchor
		}
		traces[id] = tr
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the duties' last runs: %w", err)
	}
	return traces, nil
}
