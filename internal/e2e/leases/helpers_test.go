package e2eleases

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"gopkg.in/yaml.v3"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/leases"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

// queryTimeout bounds one statement of the test.
const queryTimeout = 10 * time.Second

// schema: one row per execution of the per-cluster duty, written by the
// duty's own command (its run seq, cluster, replica, start and end in
// database time).
const schema = `CREATE TABLE duty (
    seq        bigint      PRIMARY KEY,
    cluster    text        NOT NULL,
    replica    text        NOT NULL,
    started_at timestamptz NOT NULL,
    ended_at   timestamptz NULL
)`

// dutyCommand records its start, works for a moment and records its end,
// in one psql session that replaces the shell. It sees EXP_DB through its
// env: and STUDIO_CLUSTER, STUDIO_REPLICA_ID, STUDIO_RUN_SEQ from the runner.
const dutyCommand = `exec psql "$EXP_DB" -qX -v ON_ERROR_STOP=1 ` +
	`-c "INSERT INTO duty(seq, cluster, replica, started_at) VALUES ($STUDIO_RUN_SEQ, '$STUDIO_CLUSTER', '$STUDIO_REPLICA_ID', clock_timestamp())" ` +
	`-c "SELECT pg_sleep(0.1)" -o /dev/null ` +
	`-c "UPDATE duty SET ended_at = clock_timestamp() WHERE seq = $STUDIO_RUN_SEQ"`

type fixture struct {
	t        testing.TB
	dbURL    string
	pool     *pgxpool.Pool
	config   string
	clusters []string
	env      []string // more environment for the replicas
}

type jobConf struct {
	ID       string            `yaml:"id"`
	Scope    string            `yaml:"scope"`
	Clusters string            `yaml:"clusters,omitempty"`
	Every    string            `yaml:"every"`
	Run      map[string]any    `yaml:"run"`
	Env      map[string]string `yaml:"env"`
}

// newFixture makes a database with the duty table and a configuration
// listing n clusters (c1 ... cn) and, unless every is "", a clusters:
// owned job running dutyCommand at that fixed delay.
func newFixture(t testing.TB, n int, every string) *fixture {
	t.Helper()
	f := &fixture{t: t, dbURL: pgtest.NewDB(t)}
	f.pool = testPool(t, f.dbURL)
	f.exec(schema)
	for i := 1; i <= n; i++ {
		f.clusters = append(f.clusters, fmt.Sprintf("c%d", i))
	}
	conf := struct {
		Clusters []string  `yaml:"clusters"`
		Jobs     []jobConf `yaml:"jobs,omitempty"`
	}{Clusters: f.clusters}
	if every != "" {
		conf.Jobs = []jobConf{{ID: "duty", Scope: "instance", Clusters: "owned", Every: every,
			Run: map[string]any{"command": []string{"sh", "-c", dutyCommand}}, Env: map[string]string{"EXP_DB": f.dbURL}}}
	}
	b, err := yaml.Marshal(conf)
	if err != nil {
		t.Fatal(err)
	}
	f.config = filepath.Join(t.TempDir(), "studio.yaml")
	if err := os.WriteFile(f.config, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

func testPool(t testing.TB, dbURL string) *pgxpool.Pool {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", "studioctl-e2eleases")
	u.RawQuery = q.Encode()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := db.Open(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func (f *fixture) exec(sql string, args ...any) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	if _, err := f.pool.Exec(ctx, sql, args...); err != nil {
		f.t.Fatalf("exec %q: %v", sql, err)
	}
}

// start starts a replica with the fixture's configuration and waits until
// it is ready.
func (f *fixture) start(id string) *replicaproc.Proc {
	f.t.Helper()
	p := studioctlBin.Start(f.t, replicaproc.Options{ID: id, DatabaseURL: f.dbURL, Args: []string{"--config", f.config}, FailOnRace: true, Env: f.env})
	p.WaitReady(f.t)
	return p
}

func (f *fixture) dbNow() time.Time {
	f.t.Helper()
	var now time.Time
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	if err := f.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
		f.t.Fatal(err)
	}
	return now
}

func (f *fixture) leases() []leases.Info {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	in, err := leases.List(ctx, f.pool)
	if err != nil {
		f.t.Fatal(err)
	}
	return in
}

// settled says whether every cluster is owned, ok (renewed, by the replica
// placement picks), by one of ids.
func (f *fixture) settled(ids ...string) error {
	for _, in := range f.leases() {
		if in.State != leases.StateOK || !slices.Contains(ids, in.Owner) {
			return fmt.Errorf("cluster %s: owner %q state %s placement %q", in.Cluster, in.Owner, in.State, in.Placement)
		}
	}
	return nil
}

func (f *fixture) waitSettled(d time.Duration, ids ...string) {
	f.t.Helper()
	replicaproc.Eventually(f.t, d, fmt.Sprintf("every cluster ok on %v", ids), func() error { return f.settled(ids...) })
}

// ownedBy returns the clusters each replica owns now.
func (f *fixture) ownedBy() map[string][]string {
	out := map[string][]string{}
	for _, in := range f.leases() {
		if in.Owner != "" {
			out[in.Owner] = append(out[in.Owner], in.Cluster)
		}
	}
	return out
}

// firstStarts returns, for each of clusters, the first duty start after
// since by a replica other than not, if there is one yet.
func (f *fixture) firstStarts(clusters []string, not string, since time.Time) map[string]time.Time {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	rows, err := f.pool.Query(ctx, `SELECT cluster, min(started_at) FROM duty
WHERE cluster = ANY($1) AND replica <> $2 AND started_at > $3 GROUP BY cluster`, clusters, not, since)
	if err != nil {
		f.t.Fatal(err)
	}
	out := map[string]time.Time{}
	for rows.Next() {
		var c string
		var at time.Time
		if err := rows.Scan(&c, &at); err != nil {
			f.t.Fatal(err)
		}
		out[c] = at
	}
	if err := rows.Err(); err != nil {
		f.t.Fatal(err)
	}
	return out
}

// firstRunStarts is firstStarts as the runner recorded it: the start of
// each new owner's first duty run (studio_job_run), before its command's
// process start, which a loaded CI delays by seconds.
func (f *fixture) firstRunStarts(clusters []string, not string, since time.Time) []time.Duration {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	rows, err := f.pool.Query(ctx, `SELECT min(started_at) FROM studio_job_run
WHERE job_id = 'duty' AND cluster = ANY($1) AND replica_id <> $2 AND started_at > $3 GROUP BY cluster`, clusters, not, since)
	if err != nil {
		f.t.Fatal(err)
	}
	ats, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
	if err != nil {
		f.t.Fatal(err)
	}
	var out []time.Duration
	for _, at := range ats {
		out = append(out, at.Sub(since))
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// waitFirstStarts waits until each of clusters has a duty start after
// since on a replica other than not, and returns the delay of each.
func (f *fixture) waitFirstStarts(d time.Duration, clusters []string, not string, since time.Time) []time.Duration {
	f.t.Helper()
	var got map[string]time.Time
	replicaproc.Eventually(f.t, d, fmt.Sprintf("a new owner's duty for each of %v", clusters), func() error {
		got = f.firstStarts(clusters, not, since)
		if len(got) < len(clusters) {
			return fmt.Errorf("%d of %d clusters have started on a new owner", len(got), len(clusters))
		}
		return nil
	})
	var out []time.Duration
	for _, at := range got {
		out = append(out, at.Sub(since))
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// overlaps lists executions of one cluster's duty that overlapped in time.
// An execution ends when its command wrote its end, else when the runner
// recorded the run's end (a cancelled command), else (a replica killed with
// its command) one second after its start, far longer than it works.
func (f *fixture) overlaps() []string {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	rows, err := f.pool.Query(ctx, `WITH d AS (
  SELECT d.seq, d.cluster, d.replica, d.started_at,
         coalesce(d.ended_at, r.finished_at, d.started_at + interval '1 second') AS ended_at
  FROM duty d LEFT JOIN studio_job_run r ON r.seq = d.seq)
SELECT format('%s: run %s on %s [%s, %s] and run %s on %s [%s, %s]', a.cluster,
              a.seq, a.replica, a.started_at, a.ended_at, b.seq, b.replica, b.started_at, b.ended_at)
FROM d a JOIN d b ON a.cluster = b.cluster AND a.seq < b.seq AND a.started_at < b.ended_at AND b.started_at < a.ended_at
ORDER BY a.cluster, a.seq`)
	if err != nil {
		f.t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		f.t.Fatal(err)
	}
	return out
}

// leaseRow is one element of `studioctl leases list -o json`.
type leaseRow struct {
	Cluster    string  `json:"cluster"`
	Owner      *string `json:"owner"`
	OwnerState string  `json:"owner_state"`
	Generation int64   `json:"generation"`
	Placement  *string `json:"placement"`
	State      string  `json:"state"`
}

// leasesList runs `studioctl leases list -o json`.
func (f *fixture) leasesList() []leaseRow {
	f.t.Helper()
	dir := f.t.TempDir()
	cmd := exec.Command(studioctlBin.Path, "leases", "list", "-o", "json")
	cmd.Dir = dir
	cmd.Env = studioctlBin.Env(dir, "STUDIO_DATABASE_URL="+f.dbURL)
	out, err := cmd.Output()
	if err != nil {
		f.t.Fatalf("studioctl leases list: %v\n%s", err, out)
	}
	var rows []leaseRow
	if err := json.Unmarshal(out, &rows); err != nil {
		f.t.Fatalf("leases list -o json: %v\n%s", err, out)
	}
	return rows
}

// pct is the q-quantile of sorted ds (nearest rank).
func pct(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	i := int(q*float64(len(ds))+0.999999) - 1
	return ds[max(0, min(i, len(ds)-1))]
}

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }
