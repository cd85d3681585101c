package doctor

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/studioctl/studioctl/internal/liveness"
)

// UnhostedDutyGrace: a cluster acquired this recently may not have the
// status rows of its duties yet (the run store writes them within a
// second of the acquisition); past it, a missing row means the owner does
// not run that duty.
const UnhostedDutyGrace = time.Minute

// unhostedDutiesSQL finds the per-cluster duties that no replica runs
// although a live replica declares them: clusters owned (for longer than
// the grace) by a live replica that has no status row of the duty, while
// another live replica has rows of that per-cluster job. Lease placement
// (rendezvous hashing over the live replicas) does not look at which jobs
// a replica declares, so with configurations that differ, the clusters
// placed on a replica without the job never run it (docs/leases.md,
// "Replicas with different jobs"). A replica's rows of a job it no longer
// declares are deleted at its start (jobstore.RetireUndeclared), so a live
// replica's rows name the per-cluster jobs it declares.
var unhostedDutiesSQL = `
WITH live AS (SELECT r.id FROM studio_replica r WHERE ` + liveness.LiveSQL("r") + `),
declared AS (
  SELECT DISTINCT split_part(s.job_id, '@', 1) AS job
  FROM studio_job_status s JOIN live ON live.id = s.replica_id
  WHERE s.job_id LIKE '%@%'),
owned AS (
  SELECT l.cluster, l.owner FROM cluster_lease l JOIN live ON live.id = l.owner
  WHERE l.acquired_at < now() - make_interval(secs => $1))
SELECT d.job, o.cluster, o.owner
FROM declared d CROSS JOIN owned o
WHERE NOT EXISTS (SELECT 1 FROM studio_job_status s WHERE s.replica_id = o.owner AND s.job_id = d.job || '@' || o.cluster)
ORDER BY d.job, o.owner, o.cluster
LIMIT 1000`

// unhostedDuties says, when it is so, which per-cluster duties do not run
// because their cluster's owner does not declare the job ("" when every
// owner runs every declared duty).
func unhostedDuties(ctx context.Context, e *env) (detail, hint string, err error) {
	if !e.tables["studio_job_status"] {
		return "", "", nil
	}
	rows, err := e.pool.Query(ctx, unhostedDutiesSQL, UnhostedDutyGrace.Seconds())
	if err != nil {
		return "", "", fmt.Errorf("read the duties of owned clusters: %w", err)
	}
	type miss struct{ job, cluster, owner string }
	found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (miss, error) {
		var m miss
		err := r.Scan(&m.job, &m.cluster, &m.owner)
		return m, err
	})
	if err != nil {
		return "", "", fmt.Errorf("read the duties of owned clusters: %w", err)
	}
	if len(found) == 0 {
		return "", "", nil
	}
	var items []string
	for _, m := range found {
		items = append(items, fmt.Sprintf("%s on %s (owner %s does not declare it)", m.job, m.cluster, m.owner))
	}
	count := plural(len(found), "per-cluster duty does", "per-cluster duties do")
	if len(found) == 1000 {
		count = "at least 1000 per-cluster duties do"
	}
	detail = count + " not run: " + list(items)
	hint = fmt.Sprintf("give every replica the same jobs: %s's configuration lacks %s (studioctl config show --jobs there); lease placement does not look at which jobs a replica declares",
		found[0].owner, found[0].job)
	return detail, hint, nil
}
