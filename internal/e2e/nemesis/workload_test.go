package e2enemesis

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/testkit/faultproxy"
	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

// The workload: what the jobs do and record. It knows nothing of the
// nemesis or the checker.

// schema is the jobs' own tables. Every execution inserts its row in
// nemesis_exec with its start (the transaction's start, now()) and, at its
// commit, a deferred trigger stamps its end (clock_timestamp()) and makes
// the job's fenced write: docs/fencing.md's one-line conditional write on
// nemesis_fence, refused when a newer token was accepted first. The write
// happens at the commit, the last moment of the run, as a real job's last
// write would: a holder paused or cut off before its commit writes late,
// and the fence refuses it. wseq numbers the writes of one target in the
// order they took its row lock (so in commit order).
const schema = `
CREATE SEQUENCE nemesis_wseq;
CREATE TABLE nemesis_fence (target text PRIMARY KEY, fence bigint NOT NULL DEFAULT 0);
CREATE TABLE nemesis_exec (
    id           bigserial   PRIMARY KEY,
    job          text        NOT NULL,
    scope        text        NOT NULL,
    replica      text        NOT NULL,
    token        bigint      NULL,
    nominal      timestamptz NULL,
    started_at   timestamptz NOT NULL,
    ended_at     timestamptz NULL,
    wseq         bigint      NULL,
    accepted     boolean     NULL,
    fence_before bigint      NULL
);
CREATE FUNCTION nemesis_commit() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    tgt text := NEW.job || '/' || NEW.scope;
    before bigint;
    n int := 0;
BEGIN
    IF NEW.token IS NOT NULL THEN
        INSERT INTO nemesis_fence (target) VALUES (tgt) ON CONFLICT DO NOTHING;
        SELECT fence INTO before FROM nemesis_fence WHERE target = tgt FOR UPDATE;
        IF NEW.job = 'duty' THEN
            -- a duty's runs share their lease's generation: <= (docs/fencing.md)
            UPDATE nemesis_fence SET fence = NEW.token WHERE target = tgt AND fence <= NEW.token;
        ELSE
            -- one write per token: <
            UPDATE nemesis_fence SET fence = NEW.token WHERE target = tgt AND fence < NEW.token;
        END IF;
        GET DIAGNOSTICS n = ROW_COUNT;
    END IF;
    UPDATE nemesis_exec SET ended_at = clock_timestamp(),
        wseq = CASE WHEN NEW.token IS NOT NULL THEN nextval('nemesis_wseq') END,
        accepted = CASE WHEN NEW.token IS NOT NULL THEN n > 0 END, fence_before = before
    WHERE id = NEW.id;
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER nemesis_commit AFTER INSERT ON nemesis_exec
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION nemesis_commit();
-- Every studio_job_run row as it was last written, kept from
-- housekeeping, which prunes a job's history to its newest 100 runs
-- (docs/history.md): the checker compares every execution with its run row.
CREATE TABLE nemesis_run (LIKE studio_job_run);
ALTER TABLE nemesis_run ADD PRIMARY KEY (seq);
CREATE FUNCTION nemesis_keep_run() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO nemesis_run SELECT NEW.* ON CONFLICT (seq) DO UPDATE SET
        outcome = EXCLUDED.outcome, finished_at = EXCLUDED.finished_at, error = EXCLUDED.error;
    RETURN NULL;
END $$;
CREATE TRIGGER nemesis_keep_run AFTER INSERT OR UPDATE ON studio_job_run
    FOR EACH ROW EXECUTE FUNCTION nemesis_keep_run();
`

// jobSpec is one job of the workload.
type jobSpec struct {
	ID    string
	Scope string // installation, instance, duty
	Every time.Duration
	Cron  string
	Sleep string // pg_sleep's seconds: the run's work
}

// workloadJobs: installation jobs at 1 s and 2 s, an instance job, a cron
// job, and a clusters: owned duty.
var workloadJobs = []jobSpec{
	{ID: "inst1", Scope: "installation", Every: time.Second, Sleep: "0.2"},
	{ID: "inst2", Scope: "installation", Every: 2 * time.Second, Sleep: "0.3"},
	{ID: "minute", Scope: "installation", Cron: "* * * * *", Sleep: "0.2"},
	{ID: "local", Scope: "instance", Every: 2 * time.Second, Sleep: "0.1"},
	{ID: "duty", Scope: "duty", Every: 2 * time.Second, Sleep: "0.2"},
}

func jobByID(id string) (jobSpec, bool) {
	for _, j := range workloadJobs {
		if j.ID == id {
			return j, true
		}
	}
	return jobSpec{}, false
}

// statement is a job's sql: task: it records itself, then works.
func (j jobSpec) statement() string {
	return `INSERT INTO nemesis_exec (job, scope, replica, token, nominal, started_at) VALUES ('` + j.ID + `',
  split_part(current_setting('studio.occurrence_key'), '/', 2), current_setting('application_name'),
  nullif(current_setting('studio.fencing_token'), '')::bigint,
  nullif(current_setting('studio.scheduled_at'), '')::timestamptz, now());
SELECT pg_sleep(` + j.Sleep + `)`
}

// configClusters are the clusters of the configuration.
func configClusters() []string {
	var out []string
	for i := 1; i <= 12; i++ {
		out = append(out, fmt.Sprintf("c%02d", i))
	}
	return out
}

// writeConfig writes the replicas' one configuration file.
func writeConfig(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("clusters: [" + strings.Join(configClusters(), ", ") + "]\njobs:\n")
	for _, j := range workloadJobs {
		fmt.Fprintf(&b, "  - id: %s\n", j.ID)
		switch j.Scope {
		case "duty":
			b.WriteString("    scope: instance\n    clusters: owned\n")
		default:
			fmt.Fprintf(&b, "    scope: %s\n", j.Scope)
		}
		if j.Cron != "" {
			fmt.Fprintf(&b, "    cron: %q\n", j.Cron)
		} else {
			fmt.Fprintf(&b, "    every: %s\n", j.Every)
		}
		fmt.Fprintf(&b, "    run:\n      sql: %q\n", j.statement())
	}
	path := filepath.Join(t.TempDir(), "studio.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// replica is one replica id: its two proxies (one per database port) and
// its current process.
type replica struct {
	id      string
	proxies [2]*faultproxy.Proxy

	mu   sync.Mutex
	proc *replicaproc.Proc
}

func (r *replica) current() *replicaproc.Proc {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.proc
}

// workload is the five replicas.
type workload struct {
	t        *testing.T
	pair     *pgPair
	config   string
	replicas []*replica
}

// replicaConnectTimeout is the replicas' connect_timeout, in seconds: a
// loaded 2-core machine answers a connection in more than 2 s.
const replicaConnectTimeout = 5

// replicaCount is the number of replicas.
const replicaCount = 5

// newWorkload starts the replicas (each behind a proxy per port) and waits
// until every one is ready.
func newWorkload(t *testing.T, pair *pgPair) *workload {
	t.Helper()
	w := &workload{t: t, pair: pair, config: writeConfig(t)}
	for i := 1; i <= replicaCount; i++ {
		r := &replica{id: fmt.Sprintf("r%d", i)}
		for k, port := range pair.ports {
			px, err := faultproxy.Start(fmt.Sprintf("127.0.0.1:%d", port))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { px.Close() })
			r.proxies[k] = px
		}
		w.replicas = append(w.replicas, r)
	}
	for _, r := range w.replicas {
		w.start(r, 0)
	}
	for _, r := range w.replicas {
		if err := waitReady(r.current(), replicaproc.ReadyTimeout); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// start starts r's process, its clock off by offset (0: none).
func (w *workload) start(r *replica, offset time.Duration) {
	env := []string{"STUDIO_DATABASE_SQL_AS_REPLICA=true"}
	if offset != 0 {
		env = append(env, "STUDIO_TEST_CLOCK_OFFSET="+offset.String())
	}
	p := studioctlBin.Start(w.t, replicaproc.Options{
		ID:          r.id,
		DatabaseURL: multiHostURL(r.id, replicaConnectTimeout, r.proxies[0].Port(), r.proxies[1].Port()),
		Args:        []string{"--config", w.config},
		Env:         env,
		FailOnRace:  true,
	})
	r.mu.Lock()
	r.proc = p
	r.mu.Unlock()
}

// waitReady waits for p's "replica ready" line; an error, never a fatal
// (the nemesis calls it from its own goroutines).
func waitReady(p *replicaproc.Proc, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		if p.Logged("replica ready") {
			return nil
		}
		if p.Exited() {
			return fmt.Errorf("replica %s exited before it was ready (%v)", p.ID(), p.State())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("replica %s not ready after %s", p.ID(), d)
		}
		time.Sleep(replicaproc.PollEvery)
	}
}

// waitExit waits for p to end.
func waitExit(p *replicaproc.Proc, d time.Duration) error {
	deadline := time.Now().Add(d)
	for !p.Exited() {
		if time.Now().After(deadline) {
			return fmt.Errorf("replica %s still running after %s", p.ID(), d)
		}
		time.Sleep(replicaproc.PollEvery)
	}
	return nil
}

// waitGone waits until the database counts id as gone (no heartbeat for
// GoneAfter, or stopped): only then may a process take the id again.
func waitGone(pool *pgxpool.Pool, id string, d time.Duration) error {
	deadline := time.Now().Add(d)
	var last error
	for {
		ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
		var live bool
		err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM studio_replica r WHERE r.id = $1 AND `+liveSQL+`)`, id).Scan(&live)
		cancel()
		if err == nil && !live {
			return nil
		}
		if err == nil {
			err = errors.New("still live")
		}
		last = err
		if time.Now().After(deadline) {
			return fmt.Errorf("replica %s not gone after %s: %v", id, d, last)
		}
		time.Sleep(replicaproc.PollEvery)
	}
}
