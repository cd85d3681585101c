package jobstore

// Configuration drift between replicas (issue 24 part 7, migration 00015,
// docs/schedules.md "Drift between replicas"). Each replica publishes the
// effective definition of every job it declares once, at the start of its
// runner (PublishDefinitions); jobs list (View.Drift), jobs diff and
// doctor's config_drift compare what the live replicas published.
//
// Which replicas are compared: the live replicas that publish definitions
// (at least one row in studio_job_definition). A live replica that
// publishes none is older than migration 00015: it is unknown, left out of
// the comparison, and never drift. Among those compared, a replica without
// a row of the job has it absent (the job is gone from its configuration),
// which is drift when another compared replica declares it. Built-in jobs
// (studio-housekeeping) are published but not compared: their definitions
// change with the version, not with the configuration.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/liveness"
)

// publishDefinitionsSQL replaces replica $1's definitions with the jobs
// $2, digests $3, definitions $4 (JSON text) and built-in flags $5, in one
// statement. A row whose digest did not change is not written again (a
// restart with the same configuration writes nothing): published_at is
// when the definition was first published as it is. NOT IN over the
// unnested ids is a hashed anti-join; "<> ALL($2)" compared every row with
// every id (1 s for 10,000 jobs).
const publishDefinitionsSQL = `
WITH gone AS (DELETE FROM studio_job_definition WHERE replica_id = $1 AND job_id NOT IN (SELECT unnest($2::text[])))
INSERT INTO studio_job_definition (replica_id, job_id, digest, definition, builtin, published_at)
SELECT $1, t.job_id, t.digest, t.definition::jsonb, t.builtin, now()
FROM unnest($2::text[], $3::text[], $4::text[], $5::boolean[]) AS t(job_id, digest, definition, builtin)
ON CONFLICT (replica_id, job_id) DO UPDATE SET digest = EXCLUDED.digest, definition = EXCLUDED.definition,
  builtin = EXCLUDED.builtin, published_at = EXCLUDED.published_at
WHERE (studio_job_definition.digest, studio_job_definition.builtin) IS DISTINCT FROM (EXCLUDED.digest, EXCLUDED.builtin)`

// PublishDefinitions replaces this replica's published definitions with
// defs (its configuration's jobs).
func (s *Store) PublishDefinitions(ctx context.Context, defs []jobs.PublishedDefinition) error {
	return PublishDefinitions(ctx, s.q, s.replicaID, defs)
}

// PublishDefinitions is Store.PublishDefinitions for replica.
func PublishDefinitions(ctx context.Context, q Querier, replica string, defs []jobs.PublishedDefinition) error {
	ids, digests, texts, builtin := make([]string, 0, len(defs)), make([]string, 0, len(defs)), make([]string, 0, len(defs)), make([]bool, 0, len(defs))
	for _, d := range defs {
		ids, digests = append(ids, d.JobID), append(digests, d.Definition.Digest())
		texts, builtin = append(texts, d.Definition.JSON()), append(builtin, d.Builtin)
	}
	if _, err := q.Exec(ctx, publishDefinitionsSQL, replica, ids, digests, texts, builtin); err != nil {
		return fmt.Errorf("publish job definitions: %w", err)
	}
	return nil
}

// publishersSQL are the live replicas that publish definitions.
var publishersSQL = `SELECT r.id FROM studio_replica r WHERE ` + liveness.LiveSQL("r") + `
  AND EXISTS (SELECT 1 FROM studio_job_definition d WHERE d.replica_id = r.id)`

// driftedSQL are the jobs (not built-in) whose compared replicas disagree:
// two digests, or a compared replica without the job.
var driftedSQL = `WITH pub AS (` + publishersSQL + `),
defs AS (SELECT d.job_id, d.digest FROM studio_job_definition d JOIN pub ON pub.id = d.replica_id WHERE NOT d.builtin)
SELECT job_id FROM defs GROUP BY job_id
HAVING count(DISTINCT digest) > 1 OR count(*) < (SELECT count(*) FROM pub)
ORDER BY job_id`

// undefinedTable is PostgreSQL's code for a relation that does not exist:
// a schema before migration 00015 (a newer command on an older schema).
const undefinedTable = "42P01"

func noDefinitions(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == undefinedTable
}

// DriftedJobs returns the ids of the jobs whose live replicas disagree
// (none on a schema before migration 00015).
func DriftedJobs(ctx context.Context, q Querier) ([]string, error) {
	ids, err := func() ([]string, error) {
		rows, err := q.Query(ctx, driftedSQL)
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, pgx.RowTo[string])
	}()
	if noDefinitions(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read job definitions: %w", err)
	}
	return ids, nil
}

// AddDrift sets Drift on the views (a per-cluster duty's, job@cluster, by
// its job) of the jobs whose live replicas disagree.
func AddDrift(ctx context.Context, q Querier, views []View) error {
	ids, err := DriftedJobs(ctx, q)
	if err != nil || len(ids) == 0 {
		return err
	}
	for i := range views {
		k, _ := jobs.ParseDutyKey(views[i].ID)
		_, views[i].Drift = slices.BinarySearch(ids, k.Job)
	}
	return nil
}

// ReplicaDefinition is one compared replica's definition of a job.
type ReplicaDefinition struct {
	ReplicaID  string
	Absent     bool // the replica publishes definitions, none of this job
	Digest     string
	Definition jobs.Definition
}

// JobDefinitions is what the live replicas publish of one job.
type JobDefinitions struct {
	Job string
	// Replicas are the compared replicas, by id.
	Replicas []ReplicaDefinition
	// Unknown are the live replicas that report the job (a status row of
	// it or of one of its duties) but publish no definition: older than
	// migration 00015, not compared.
	Unknown []string
	// Builtin: a live replica publishes it as a built-in job (not compared).
	Builtin bool
}

// jobDefinitionsSQL: every live replica that publishes definitions or
// reports job $1, with its definition of the job (NULLs when it has
// none), whether it publishes any, and whether the definition is
// built-in.
var jobDefinitionsSQL = `SELECT r.id, d.digest, d.definition::text, coalesce(d.builtin, false),
  EXISTS (SELECT 1 FROM studio_job_definition a WHERE a.replica_id = r.id)
FROM studio_replica r
LEFT JOIN studio_job_definition d ON d.replica_id = r.id AND d.job_id = $1
WHERE ` + liveness.LiveSQL("r") + `
  AND (EXISTS (SELECT 1 FROM studio_job_definition a WHERE a.replica_id = r.id)
    OR EXISTS (SELECT 1 FROM studio_job_status s WHERE s.replica_id = r.id AND ` + jobRowsSQL("s", 1) + `))
ORDER BY r.id`

// ReadJobDefinitions reads what the live replicas publish of job. known is
// false when no replica, live or gone, has a status row or a definition of
// the job.
func ReadJobDefinitions(ctx context.Context, q Querier, job string) (defs JobDefinitions, known bool, err error) {
	defs.Job = job
	err = q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM studio_job_status s WHERE `+jobRowsSQL("s", 1)+`)
  OR EXISTS (SELECT 1 FROM studio_job_definition WHERE job_id = $1)`, job).Scan(&known)
	if noDefinitions(err) {
		// A schema before 00015: nothing is published.
		err = q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM studio_job_status s WHERE `+jobRowsSQL("s", 1)+`)`, job).Scan(&known)
		if err != nil {
			return defs, false, fmt.Errorf("read job definitions of %q: %w", job, err)
		}
		return defs, known, nil
	}
	if err != nil || !known {
		if err != nil {
			err = fmt.Errorf("read job definitions of %q: %w", job, err)
		}
		return defs, known, err
	}
	rows, err := q.Query(ctx, jobDefinitionsSQL, job)
	if err != nil {
		return defs, true, fmt.Errorf("read job definitions of %q: %w", job, err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var digest, text *string
		var builtin, publishes bool
		if err := rows.Scan(&id, &digest, &text, &builtin, &publishes); err != nil {
			return defs, true, fmt.Errorf("read job definitions of %q: %w", job, err)
		}
		switch {
		case !publishes:
			defs.Unknown = append(defs.Unknown, id)
		case digest == nil:
			defs.Replicas = append(defs.Replicas, ReplicaDefinition{ReplicaID: id, Absent: true})
		default:
			rd := ReplicaDefinition{ReplicaID: id, Digest: *digest, Definition: jobs.Definition{}}
			if err := json.Unmarshal([]byte(*text), &rd.Definition); err != nil {
				return defs, true, fmt.Errorf("read job definitions of %q: replica %q: %w", job, id, err)
			}
			defs.Replicas = append(defs.Replicas, rd)
			defs.Builtin = defs.Builtin || builtin
		}
	}
	if err := rows.Err(); err != nil {
		return defs, true, fmt.Errorf("read job definitions of %q: %w", job, err)
	}
	return defs, true, nil
}

// Difference is one replica's value of a field on which the compared
// replicas disagree (jobs diff).
type Difference struct {
	ReplicaID string `json:"replica_id" yaml:"replica_id"`
	Field     string `json:"field" yaml:"field"`
	Value     string `json:"value" yaml:"value"`
}

// Diff is where the compared replicas disagree: when one of them has the
// job absent, the field "defined" of each ("present" or "absent"); then,
// among those that define it, each field whose values differ, one
// Difference per replica. Fields come in jobs.FieldNames' order, replicas
// by id. None when they agree, when fewer than two replicas are compared,
// and for a built-in job.
func (d JobDefinitions) Diff() []Difference {
	if d.Builtin {
		return nil
	}
	var out []Difference
	var present []ReplicaDefinition
	for _, r := range d.Replicas {
		if !r.Absent {
			present = append(present, r)
		}
	}
	if len(present) > 0 && len(present) < len(d.Replicas) {
		for _, r := range d.Replicas {
			v := jobs.DefinedPresent
			if r.Absent {
				v = jobs.DefinedAbsent
			}
			out = append(out, Difference{ReplicaID: r.ReplicaID, Field: jobs.FieldDefined, Value: v})
		}
	}
	if len(present) < 2 {
		return out
	}
	all := make([]jobs.Definition, len(present))
	same := true
	for i, r := range present {
		all[i] = r.Definition
		same = same && r.Digest == present[0].Digest
	}
	if same {
		return out
	}
	for _, f := range jobs.FieldNames(all...) {
		differ := false
		for _, def := range all[1:] {
			differ = differ || def.Value(f) != all[0].Value(f)
		}
		if !differ {
			continue
		}
		for _, r := range present {
			out = append(out, Difference{ReplicaID: r.ReplicaID, Field: f, Value: r.Definition.Value(f)})
		}
	}
	return out
}

// Drifted is a job whose compared replicas disagree, and how (doctor's
// config_drift).
type Drifted struct {
	Job         string
	Differences []Difference
}

// Drift reads every job whose live replicas disagree, with its
// differences (none on a schema before migration 00015).
func Drift(ctx context.Context, q Querier) ([]Drifted, error) {
	ids, err := DriftedJobs(ctx, q)
	if err != nil {
		return nil, err
	}
	out := make([]Drifted, 0, len(ids))
	for _, id := range ids {
		defs, _, err := ReadJobDefinitions(ctx, q, id)
		if err != nil {
			return nil, err
		}
		if diff := defs.Diff(); len(diff) > 0 { // it may have settled meanwhile
			out = append(out, Drifted{Job: id, Differences: diff})
		}
	}
	return out, nil
}
