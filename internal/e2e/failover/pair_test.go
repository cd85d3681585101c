package e2efailover

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"gopkg.in/yaml.v3"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/migrate"
	"github.com/studioctl/studioctl/internal/pgcluster"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

const (
	// queryTimeout bounds one statement of the test.
	queryTimeout = 10 * time.Second
	// testAppName marks the test's own sessions.
	testAppName = "studioctl-e2efailover"
	// dbName is the database of the pair.
	dbName = "studio"
)

// pair is a primary and its hot standby, made with pg_basebackup -R.
type pair struct {
	t                *testing.T
	primary, standby *pgcluster.Cluster
	// URL is the multi-host URL the replicas and commands use:
	// postgres://postgres@127.0.0.1:P,127.0.0.1:S/studio?target_session_attrs=read-write
	URL string
}

// pairOptions tune the primary.
type pairOptions struct {
	// Sync makes the standby synchronous (synchronous_standby_names = '*',
	// synchronous_commit = on): a commit returns once the standby has
	// flushed it.
	Sync bool
	// Settings are more primary settings ("synchronous_commit=off").
	Settings []string
}

// newPair starts a primary, creates and migrates the studio database
// (plus schema, when not empty), and starts a hot standby of it. Both
// servers are stopped and their data removed when the test ends.
func newPair(t *testing.T, o pairOptions, schema string) *pair {
	t.Helper()
	if gone, why := pgtest.Unavailable(); gone {
		t.Fatalf("PostgreSQL is required and unavailable: %s", why)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "studioctl-failover-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	pport, err := pgcluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	settings := []string{"fsync=off", "full_page_writes=off", "max_connections=200", "wal_level=replica", "max_wal_senders=5"}
	if o.Sync {
		// synchronous_standby_names is set once the standby streams (below):
		// before, every commit would wait for it.
		settings = append(settings, "synchronous_commit=on")
	}
	settings = append(settings, o.Settings...)
	p, err := pgcluster.New(filepath.Join(dir, "primary"), pport, pgtest.TimeZone, settings...)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Init(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopQuietly(p) })
	if err := createAndMigrate(ctx, p, schema); err != nil {
		t.Fatal(err)
	}
	sport, err := pgcluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	s, err := pgcluster.StartStandby(ctx, p, filepath.Join(dir, "standby"), sport)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopQuietly(s) })
	pr := &pair{t: t, primary: p, standby: s, URL: multiHostURL(pport, sport)}
	if o.Sync {
		pr.makeSynchronous()
	}
	return pr
}

// multiHostURL lists the primary first and the standby second, with
// target_session_attrs=read-write: pgx (and libpq, for psql) tries them in
// order and keeps the first that accepts writes.
func multiHostURL(ports ...int) string {
	var hosts []string
	for _, p := range ports {
		hosts = append(hosts, "127.0.0.1:"+strconv.Itoa(p))
	}
	return "postgres://postgres@" + strings.Join(hosts, ",") + "/" + dbName + "?sslmode=disable&target_session_attrs=read-write&connect_timeout=2"
}

func stopQuietly(c *pgcluster.Cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if c.Running(ctx) {
		c.StopImmediate(ctx)
	}
}

func createAndMigrate(ctx context.Context, p *pgcluster.Cluster, schema string) error {
	admin, err := db.Open(ctx, p.URL("postgres"))
	if err != nil {
		return err
	}
	_, err = admin.Exec(ctx, "CREATE DATABASE "+dbName)
	admin.Close()
	if err != nil {
		return fmt.Errorf("create database: %w", err)
	}
	pool, err := db.Open(ctx, p.URL(dbName))
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := migrate.Up(ctx, pool); err != nil {
		return err
	}
	if schema != "" {
		if _, err := pool.Exec(ctx, schema); err != nil {
			return fmt.Errorf("schema: %w", err)
		}
	}
	return nil
}

// pool opens a test pool on url (marked testAppName), closed at the end.
func testPool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	pool, err := db.Open(ctx, url+sep+"application_name="+testAppName)
	if err != nil {
		t.Fatalf("open test pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// waitStandbyCaughtUp waits until the standby has replayed everything the
// primary has written so far.
func (p *pair) waitStandbyCaughtUp(d time.Duration) {
	p.t.Helper()
	pp := testPool(p.t, p.primary.URL(dbName))
	replicaproc.Eventually(p.t, d, "the standby to stream", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
		defer cancel()
		var n int
		if err := pp.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'`).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("no streaming standby in pg_stat_replication")
		}
		return nil
	})
	pp.Close()
}

// makeSynchronous sets synchronous_standby_names = '*' on the primary
// (ALTER SYSTEM, reloaded) and waits until the standby is its synchronous
// standby: from then on a commit returns once the standby has flushed it.
// The standby's own configuration was copied before, so once promoted it
// waits for no standby.
func (p *pair) makeSynchronous() {
	p.t.Helper()
	pp := testPool(p.t, p.primary.URL(dbName))
	defer pp.Close()
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	for _, sql := range []string{`ALTER SYSTEM SET synchronous_standby_names = '*'`, `SELECT pg_reload_conf()`} {
		if _, err := pp.Exec(ctx, sql); err != nil {
			p.t.Fatalf("%s: %v", sql, err)
		}
	}
	replicaproc.Eventually(p.t, 30*time.Second, "the standby to be synchronous", func() error {
		var n int
		if err := pp.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'`).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("no synchronous standby in pg_stat_replication")
		}
		return nil
	})
}

// failover stops the primary with -m immediate, calls gap (while no
// primary answers), then promotes the standby. It returns when the
// primary stopped and when the promotion returned (local clock).
func (p *pair) failover(gap func()) (stopped, promoted time.Time) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := p.primary.StopImmediate(ctx); err != nil {
		p.t.Fatal(err)
	}
	stopped = time.Now()
	if gap != nil {
		gap()
	}
	if err := p.standby.Promote(ctx); err != nil {
		p.t.Fatal(err)
	}
	return stopped, time.Now()
}

// jobConf is one job of the configuration file.
type jobConf struct {
	ID    string            `yaml:"id"`
	Scope string            `yaml:"scope"`
	Every string            `yaml:"every"`
	Run   map[string]any    `yaml:"run"`
	Env   map[string]string `yaml:"env,omitempty"`
}

// recordCommand appends its start and end to $EXP_DIR/executions (local
// clock, nanoseconds): a file, not the database, so that an execution is
// recorded even when the database loses the transactions of a failover.
func recordCommand(seconds string) []string {
	return []string{"sh", "-c", `f="$EXP_DIR/executions"; ` +
		`echo "start $STUDIO_JOB_ID $STUDIO_REPLICA_ID $STUDIO_RUN_SEQ $(date +%s%N)" >> "$f"; ` +
		`sleep ` + seconds + `; ` +
		`echo "end $STUDIO_JOB_ID $STUDIO_REPLICA_ID $STUDIO_RUN_SEQ $(date +%s%N)" >> "$f"`}
}

// writeConfig writes a studio.yaml with jobs (each given EXP_DIR) and
// clusters, and returns its path.
func writeConfig(t *testing.T, expDir string, clusters []string, list ...jobConf) string {
	t.Helper()
	for i := range list {
		list[i].Env = map[string]string{"EXP_DIR": expDir}
	}
	b, err := yaml.Marshal(struct {
		Clusters []string  `yaml:"clusters,omitempty"`
		Jobs     []jobConf `yaml:"jobs"`
	}{clusters, list})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "studio.yaml")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// execution is one run of a job command, as it recorded itself.
type execution struct {
	Job, Replica, Seq string
	Start, End        time.Time // End is zero when the command did not finish
}

// readExecutions parses $EXP_DIR/executions.
func readExecutions(t testing.TB, expDir string) []execution {
	t.Helper()
	f, err := os.Open(filepath.Join(expDir, "executions"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	byKey := map[string]*execution{}
	var order []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 5 {
			continue // a line cut by a kill
		}
		ns, err := strconv.ParseInt(fs[4], 10, 64)
		if err != nil {
			continue
		}
		key := fs[1] + " " + fs[2] + " " + fs[3]
		e := byKey[key]
		if e == nil {
			e = &execution{Job: fs[1], Replica: fs[2], Seq: fs[3]}
			byKey[key] = e
			order = append(order, key)
		}
		if fs[0] == "start" {
			e.Start = time.Unix(0, ns)
		} else {
			e.End = time.Unix(0, ns)
		}
	}
	out := make([]execution, 0, len(order))
	for _, k := range order {
		out = append(out, *byKey[k])
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out
}

// overlap is two executions of one job that ran at the same time.
type overlap struct{ A, B execution }

func (o overlap) String() string {
	return fmt.Sprintf("%s: %s seq %s [%s, %s] and %s seq %s [%s, %s]", o.A.Job,
		o.A.Replica, o.A.Seq, o.A.Start.Format("15:04:05.000"), endText(o.A.End),
		o.B.Replica, o.B.Seq, o.B.Start.Format("15:04:05.000"), endText(o.B.End))
}

func endText(t time.Time) string {
	if t.IsZero() {
		return "unfinished"
	}
	return t.Format("15:04:05.000")
}

// overlaps lists the pairs of executions of one job that overlap. An
// unfinished execution counts as running until its start plus maxRun.
func overlaps(list []execution, maxRun time.Duration) []overlap {
	var out []overlap
	end := func(e execution) time.Time {
		if e.End.IsZero() {
			return e.Start.Add(maxRun)
		}
		return e.End
	}
	for i := range list {
		for j := i + 1; j < len(list); j++ {
			a, b := list[i], list[j]
			if a.Job == b.Job && b.Start.Before(end(a)) && a.Start.Before(end(b)) {
				out = append(out, overlap{a, b})
			}
		}
	}
	return out
}
