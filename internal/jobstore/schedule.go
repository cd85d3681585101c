package jobstore

import (
	"context"
	"fmt"
	"time"

	"github.com/studioctl/studioctl/internal/bus"
)

// KindJobSchedule is the bus signal (key: the job id) sent when a run of
// an installation job ends: every replica rereads the job's row of
// studio_job_schedule and moves its timer to the new due time.
const KindJobSchedule = "job.schedule"

// KindJobStarted is the bus signal (key: the job id) sent when a replica
// holds an installation job's lock for a run (LoadRunAnnouncing): the
// replicas waiting on the designated one give up their fallback
// (docs/schedules.md, "Designated replica").
const KindJobStarted = "job.started"

// Schedules is the installation-wide schedule of installation jobs
// (studio_job_schedule, migrations/00004): the end of each job's last run
// anywhere, in database time. The runner's timers follow it
// (docs/schedules.md).
type Schedules struct{ q Querier }

// NewSchedules returns the schedule table on q.
func NewSchedules(q Querier) *Schedules { return &Schedules{q: q} }

// loadSQL reads the ends and the database's now in one statement (one
// round trip, and one snapshot for both).
const loadSQL = `SELECT now(), coalesce(array_agg(job_id), '{}'), coalesce(array_agg(last_ended_at), '{}')
FROM studio_job_schedule WHERE job_id = ANY($1) AND isfinite(last_ended_at)`

// Load returns the end of the last run anywhere of each of jobIDs (a job
// that never ran has no entry, nor one whose end is 'infinity' or
// '-infinity': no replica writes one) and the database's now() of the same
// statement.
func (s *Schedules) Load(ctx context.Context, jobIDs []string) (map[string]time.Time, time.Time, error) {
	var now time.Time
	var ids []string
	var ends []time.Time
	if err := s.q.QueryRow(ctx, loadSQL, jobIDs).Scan(&now, &ids, &ends); err != nil {
		return nil, time.Time{}, fmt.Errorf("read job schedules: %w", err)
	}
	if len(ids) != len(ends) {
		return nil, time.Time{}, fmt.Errorf("read job schedules: %d job ids for %d ends", len(ids), len(ends))
	}
	out := make(map[string]time.Time, len(ids))
	for i, id := range ids {
		out[id] = ends[i]
	}
	return out, now, nil
}

// loadRunSQL reads one job's last end and that run's start with the
// database's now (one row, also when the job never ran).
const loadRunSQL = `SELECT now(), CASE WHEN isfinite(s.last_ended_at) THEN s.last_ended_at END,
  CASE WHEN isfinite(s.last_started_at) THEN s.last_started_at END
FROM (SELECT 1) x LEFT JOIN studio_job_schedule s ON s.job_id = $1`

// LoadRun returns the end of job's last run anywhere and that run's start
// (zero when it never ran), and the database's now() of the same
// statement (runner.RunLoader).
func (s *Schedules) LoadRun(ctx context.Context, job string) (end, started, now time.Time, err error) {
	var e, st *time.Time
	if err := s.q.QueryRow(ctx, loadRunSQL, job).Scan(&now, &e, &st); err != nil {
		return time.Time{}, time.Time{}, time.Time{}, fmt.Errorf("read job schedule: %w", err)
	}
	if e != nil {
		end = *e
	}
	if st != nil {
		started = *st
	}
	return end, started, now, nil
}

// loadRunAnnounceSQL is loadRunSQL that also sends $2's payloads on channel
// $3 when its implicit transaction commits.
const loadRunAnnounceSQL = `WITH n AS (SELECT pg_notify($3, p) FROM unnest($2::text[]) AS t(p))
SELECT now(), CASE WHEN isfinite(s.last_ended_at) THEN s.last_ended_at END,
  CASE WHEN isfinite(s.last_started_at) THEN s.last_started_at END, (SELECT count(*) FROM n)
FROM (SELECT 1) x LEFT JOIN studio_job_schedule s ON s.job_id = $1`

// LoadRunAnnouncing is LoadRun that, in the same statement, signals
// job.started for job (runner.StartAnnouncer): the designated replica's
// read under the lock tells the others that a run started, without a
// statement more.
func (s *Schedules) LoadRunAnnouncing(ctx context.Context, job string) (end, started, now time.Time, err error) {
	payloads, err := bus.Encode(bus.Signal(KindJobStarted, job))
	if err != nil {
		return time.Time{}, time.Time{}, time.Time{}, fmt.Errorf("announce the start of job %q: %w", job, err)
	}
	var e, st *time.Time
	var sent int64
	if err := s.q.QueryRow(ctx, loadRunAnnounceSQL, job, payloads, bus.Channel).Scan(&now, &e, &st, &sent); err != nil {
		return time.Time{}, time.Time{}, time.Time{}, fmt.Errorf("read job schedule: %w", err)
	}
	if e != nil {
		end = *e
	}
	if st != nil {
		started = *st
	}
	return end, started, now, nil
}

// EndOf is the end and the start a job.schedule signal carries (ok false:
// an older sender's signal without them, or a malformed one: read the row).
func EndOf(m bus.Message) (end, started time.Time, ok bool) {
	if m.Kind != KindJobSchedule || m.End == "" {
		return time.Time{}, time.Time{}, false
	}
	end, err := time.Parse(time.RFC3339Nano, m.End)
	if err != nil {
		return time.Time{}, time.Time{}, false
	}
	if m.Started != "" {
		if started, err = time.Parse(time.RFC3339Nano, m.Started); err != nil {
			return time.Time{}, time.Time{}, false
		}
	}
	return end, started, true
}

// endSignalSQL is the payload of the job.schedule signal, built in the
// statement that records the end so that it carries the end recorded ($1:
// the job, s: the row written, $2: the run's start).
const endSignalSQL = `json_build_object('v', 1, 'type', 'signal', 'kind', '` + KindJobSchedule + `', 'key', $1::text,
  'end', to_char(s.last_ended_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
  'started', to_char($2::timestamptz AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))::text`

// recordEndSQL writes the end and sends the bus signal ($5, the channel;
// the payload, endSignalSQL, carries the end written) in one statement, so
// one implicit transaction: the listeners hear it when the end is
// committed, as with the BEGIN, INSERT, NOTIFY, COMMIT it replaces in a
// quarter of the round trips.
const recordEndSQL = `
WITH s AS (
  INSERT INTO studio_job_schedule AS s (job_id, last_ended_at, last_started_at, last_replica_id, last_seq, updated_at)
  VALUES ($1, now(), $2, $3, $4, now())
  ON CONFLICT (job_id) DO UPDATE SET last_ended_at = greatest(s.last_ended_at, now()),
    last_started_at = EXCLUDED.last_started_at, last_replica_id = EXCLUDED.last_replica_id,
    last_seq = EXCLUDED.last_seq, updated_at = now()
  RETURNING last_ended_at)
SELECT s.last_ended_at, (SELECT count(*) FROM (SELECT pg_notify($5, ` + endSignalSQL + `)) n)
FROM s`

// RecordEnd records that run seq of job, started at started by replica,
// ended now in database time, and signals every replica on the bus in the
// same transaction. It returns the end recorded.
func (s *Schedules) RecordEnd(ctx context.Context, job, replica string, seq int64, started time.Time) (time.Time, error) {
	// The signal as sent, with the longest end and start, must fit one
	// payload (it is built in the statement).
	longest := bus.Signal(KindJobSchedule, job)
	longest.End, longest.Started = "2006-01-02T15:04:05.000000Z", "2006-01-02T15:04:05.000000Z"
	if _, err := bus.Encode(longest); err != nil {
		return time.Time{}, fmt.Errorf("announce the end of job %q: %w", job, err)
	}
	var end time.Time
	var sent int64 // the notifications, read so that they are sent (TestRecordEndWritesAndSignalsInOneStatement)
	if err := s.q.QueryRow(ctx, recordEndSQL, job, started, replica, seq, bus.Channel).Scan(&end, &sent); err != nil {
		return time.Time{}, fmt.Errorf("record the end of job %q: %w", job, err)
	}
	return end, nil
}
