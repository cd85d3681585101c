package e2eleases

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"gopkg.in/yaml.v3"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/leases"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

// execSchema: one row per execution of a job's command, written by the
// command itself: its start, and a heartbeat (seen_at) every
// heartbeatEvery while it runs, all in database time (clock_timestamp()).
const execSchema = `CREATE TABLE exec_run (
    seq        bigint      PRIMARY KEY,
    job        text        NOT NULL,
    cluster    text        NOT NULL,
    replica    text        NOT NULL,
    started_at timestamptz NOT NULL,
    seen_at    timestamptz NOT NULL
)`

// heartbeatCommand records its start, then beats until it is killed: a
// shell loop feeding one psql session an UPDATE every 0.25 s. Killed, it
// writes nothing more (an UPDATE in flight lands a few milliseconds late,
// which only makes an overlap look longer).
const heartbeatCommand = `psql "$EXP_DB" -qX -v ON_ERROR_STOP=1 -c "INSERT INTO exec_run VALUES ($STUDIO_RUN_SEQ, '$STUDIO_JOB_ID', '$STUDIO_CLUSTER', '$STUDIO_REPLICA_ID', clock_timestamp(), clock_timestamp())" || exit 1
while :; do echo "UPDATE exec_run SET seen_at = clock_timestamp() WHERE seq = $STUDIO_RUN_SEQ;"; sleep 0.25; done | psql "$EXP_DB" -qX -o /dev/null`

// beatSlack is how long after its last heartbeat an execution may still
// have been running: the beat period and a psql round trip.
const beatSlack = 500 * time.Millisecond

// TestAPausedReplicasCommandsEndBeforeTheNextOwnerStarts is item 7 of
// issue 21: two replicas share four clusters, a clusters: owned duty and an
// installation job whose commands run until they are killed, recording
// themselves. The holder of the installation job's lock, which also owns
// some clusters, is stopped with SIGSTOP until the other replica has
// started both its duties and the installation job. No execution of the
// paused replica may still be running when the other's starts: the job
// shims, which SIGSTOP does not stop, end them at their deadlines (the
// trust window of each lease; lock_until minus 5 s). Before the deadline,
// each overlapped the next owner's until the replica was continued.
//
// It takes a little over a minute: the lock is taken for lockAtMostFor,
// whose floor is 60 s.
func TestAPausedReplicasCommandsEndBeforeTheNextOwnerStarts(t *testing.T) {
	dbURL := pgtest.NewDB(t)
	f := &fixture{t: t, dbURL: dbURL, pool: testPool(t, dbURL)}
	f.exec(execSchema)
	ids := []string{"p1", "p2"}
	f.clusters = []string{"c1", "c2", "c3", "c4"}
	shares := map[string]int{}
	for _, c := range f.clusters {
		shares[leases.Place(c, ids)]++
	}
	if shares["p1"] == 0 || shares["p2"] == 0 {
		t.Fatalf("placement gives %v: pick cluster names that both replicas own some of", shares)
	}
	run := map[string]any{"command": []string{"sh", "-c", heartbeatCommand}}
	env := map[string]string{"EXP_DB": dbURL}
	conf := struct {
		Clusters []string  `yaml:"clusters"`
		Jobs     []jobConf `yaml:"jobs"`
	}{Clusters: f.clusters, Jobs: []jobConf{
		{ID: "duty", Scope: "instance", Clusters: "owned", Every: "1s", Run: run, Env: env},
		{ID: "nightly", Scope: "installation", Every: "2s", Run: run, Env: env},
	}}
	b, err := yaml.Marshal(conf)
	if err != nil {
		t.Fatal(err)
	}
	f.config = filepath.Join(t.TempDir(), "studio.yaml")
	if err := os.WriteFile(f.config, b, 0o644); err != nil {
		t.Fatal(err)
	}
	procs := map[string]*replicaproc.Proc{}
	for _, id := range ids {
		procs[id] = f.start(id)
	}
	f.waitSettled(30*time.Second, ids...)

	// The lock holder, once every cluster's duty and the installation job
	// are running.
	var holder string
	replicaproc.Eventually(t, 30*time.Second, "every duty running on its placement, and the installation job", func() error {
		rows := f.execRows()
		running := map[jobs.DutyKey]string{} // the replica of the latest execution
		for _, r := range rows {
			running[r.key()] = r.replica
		}
		for _, c := range f.clusters {
			if got, want := running[jobs.DutyKey{Job: "duty", Cluster: c}], leases.Place(c, ids); got != want {
				return fmt.Errorf("the latest duty execution for %s is on %q, placement says %s", c, got, want)
			}
		}
		if holder = running[nightlyKey]; holder == "" {
			return fmt.Errorf("no execution of the installation job yet")
		}
		return nil
	})
	other := ids[0]
	if other == holder {
		other = ids[1]
	}
	moved := f.ownedBy()[holder]
	if len(moved) == 0 {
		t.Fatalf("the lock holder %s owns no cluster", holder)
	}

	stoppedAt := f.dbNow()
	procs[holder].Signal(t, syscall.SIGSTOP)
	t.Logf("SIGSTOP of %s, which holds the installation job's lock and the leases of %v", holder, moved)
	took := f.waitExecStarts(90*time.Second, other, stoppedAt, append(dutyKeys(moved), nightlyKey))
	t.Logf("%s started the duties after %v and the installation job after %v", other, took[:len(took)-1], took[len(took)-1])

	// A measurement window: what the paused replica's commands do after
	// the other's have started gets recorded too.
	lastStart := stoppedAt.Add(took[len(took)-1])
	for _, d := range took {
		lastStart = maxTime(lastStart, stoppedAt.Add(d))
	}
	replicaproc.Eventually(t, 10*time.Second, "2 s past the last start", func() error {
		if now := f.dbNow(); now.Before(lastStart.Add(2 * time.Second)) {
			return fmt.Errorf("database time %s", now.Format(time.RFC3339Nano))
		}
		return nil
	})

	// The checker: the commands' own records only.
	gaps, overlaps := f.handovers(holder, other, stoppedAt)
	for _, g := range gaps {
		t.Logf("handover: %s", g)
	}
	for _, o := range overlaps {
		t.Errorf("overlap: %s", o)
	}
	if state := procState(procs[holder].PID()); state != "T" {
		t.Errorf("the paused replica's state is %q, want T (stopped) throughout", state)
	}
	procs[holder].Signal(t, syscall.SIGCONT)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// nightlyKey is the installation job's key: its own id (no cluster).
var nightlyKey = jobs.DutyKey{Job: "nightly"}

// dutyKeys are the keys of the duty job's duties for clusters.
func dutyKeys(clusters []string) []jobs.DutyKey {
	var out []jobs.DutyKey
	for _, c := range clusters {
		out = append(out, jobs.DutyKey{Job: "duty", Cluster: c})
	}
	return out
}

type execRow struct {
	seq               int64
	job, cluster      string
	replica           string
	startedAt, seenAt time.Time
}

// key is the execution's job and cluster as a duty key (the job's own id
// when the command ran without a cluster).
func (r execRow) key() jobs.DutyKey { return jobs.DutyKey{Job: r.job, Cluster: r.cluster} }

func (f *fixture) execRows() []execRow {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	rows, err := f.pool.Query(ctx, `SELECT seq, job, cluster, replica, started_at, seen_at FROM exec_run ORDER BY seq`)
	if err != nil {
		f.t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (execRow, error) {
		var e execRow
		err := r.Scan(&e.seq, &e.job, &e.cluster, &e.replica, &e.startedAt, &e.seenAt)
		return e, err
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return out
}

// waitExecStarts waits until replica has started an execution of each of
// keys after since, and returns how long after since each started, in the
// order of keys.
func (f *fixture) waitExecStarts(d time.Duration, replica string, since time.Time, keys []jobs.DutyKey) []time.Duration {
	f.t.Helper()
	var out []time.Duration
	replicaproc.Eventually(f.t, d, fmt.Sprintf("%s to start %v", replica, keys), func() error {
		first := map[jobs.DutyKey]time.Time{}
		for _, r := range f.execRows() {
			k := r.key()
			if r.replica == replica && r.startedAt.After(since) && first[k].IsZero() {
				first[k] = r.startedAt
			}
		}
		out = out[:0]
		for _, k := range keys {
			at, ok := first[k]
			if !ok {
				return fmt.Errorf("no execution of %s on %s yet", k, replica)
			}
			out = append(out, at.Sub(since).Round(time.Millisecond))
		}
		return nil
	})
	return out
}

// handovers compares, for each job@cluster, the last heartbeat of the
// paused replica's execution with the start of the other replica's first
// one after the pause. An overlap is a start less than beatSlack after
// that heartbeat.
func (f *fixture) handovers(paused, other string, since time.Time) (gaps, overlaps []string) {
	rows := f.execRows()
	lastSeen := map[jobs.DutyKey]time.Time{}
	firstStart := map[jobs.DutyKey]time.Time{}
	for _, r := range rows {
		k := r.key()
		switch {
		case r.replica == paused && r.seenAt.After(lastSeen[k]):
			lastSeen[k] = r.seenAt
		case r.replica == other && r.startedAt.After(since) && (firstStart[k].IsZero() || r.startedAt.Before(firstStart[k])):
			firstStart[k] = r.startedAt
		}
	}
	for k, seen := range lastSeen {
		start, ok := firstStart[k]
		if !ok {
			continue
		}
		gap := start.Sub(seen)
		line := fmt.Sprintf("%s: %s's last heartbeat %s after the SIGSTOP, %s's start %s after it: gap %s",
			k, paused, seen.Sub(since).Round(time.Millisecond), other, start.Sub(since).Round(time.Millisecond), gap.Round(time.Millisecond))
		gaps = append(gaps, line)
		if gap < beatSlack {
			overlaps = append(overlaps, line)
		}
	}
	return gaps, overlaps
}

// procState is the state letter of /proc/<pid>/stat ("" if unreadable).
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == ')' && i+2 < len(b) {
			return string(b[i+2])
		}
	}
	return ""
}
