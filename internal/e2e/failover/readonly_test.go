package e2efailover

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/testkit/pgtest"
	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

// waitingLine is the start of the log line of a replica that waits at
// start; readOnlyLine the one of a ready replica whose database turned
// read-only.
const (
	waitingLine  = "waiting for a writable primary before registering"
	readOnlyLine = "the database does not accept writes: claiming nothing"
	writableLine = "the database accepts writes again"
)

// waitLogged waits for a log line of p whose message starts with prefix
// and returns its attributes.
func waitLogged(t *testing.T, p *replicaproc.Proc, prefix string, d time.Duration) replicaproc.LogLine {
	t.Helper()
	var found replicaproc.LogLine
	replicaproc.Eventually(t, d, fmt.Sprintf("%s to log %q", p.ID(), prefix), func() error {
		for _, l := range p.Logs() {
			if strings.HasPrefix(l.Msg(), prefix) {
				found = l
				return nil
			}
		}
		if p.Exited() {
			t.Fatalf("replica %s exited (%v) instead of logging %q:\n%s", p.ID(), p.State(), prefix, p.Stderr())
		}
		return fmt.Errorf("not yet")
	})
	return found
}

// TestAReplicaStartedWhileOnlyTheStandbyAnswersWaitsForThePromotion: with
// the primary stopped and the standby not yet promoted, one replica on the
// multi-host URL (target_session_attrs=read-write refuses the standby) and
// one on the standby's own URL (it accepts the connection, and refuses
// writes) must not exit 1 at registration, as they did: each says once
// what it waits for, writes nothing, answers /livez and fails /readyz
// with the reason. Once the standby is promoted both start, on the
// address they waited on, and run their job.
func TestAReplicaStartedWhileOnlyTheStandbyAnswersWaitsForThePromotion(t *testing.T) {
	p := newPair(t, pairOptions{}, "")
	p.waitStandbyCaughtUp(30 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.primary.StopImmediate(ctx); err != nil {
		t.Fatal(err)
	}
	expDir := t.TempDir()
	config := writeConfig(t, expDir, nil,
		jobConf{ID: "every-1s", Scope: "instance", Every: "1s", Run: map[string]any{"command": recordCommand("0.1")}})
	urls := map[string]string{
		"multi-host":   withPassword(p.URL),
		"standby-only": withPassword(multiHostURL(p.standby.Port)),
	}
	procs := map[string]*replicaproc.Proc{}
	for id, url := range urls {
		if id == "standby-only" {
			url = strings.Replace(url, "&target_session_attrs=read-write", "", 1)
		}
		procs[id] = studioctlBin.Start(t, replicaproc.Options{ID: id, DatabaseURL: url, Args: []string{"--config", config}, FailOnRace: true})
	}
	addrs := map[string]string{}
	for id, r := range procs {
		l := waitLogged(t, r, waitingLine, 30*time.Second)
		addrs[id], _ = l["listen"].(string)
		reason, _ := l["reason"].(string)
		t.Logf("%s waits: %s", id, reason)
		if !strings.Contains(reason, "read-only") {
			t.Errorf("%s: the waiting line's reason %q does not say read-only", id, reason)
		}
		code, body := readyz(addrs[id])
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "waiting for a writable primary") {
			t.Errorf("%s: /readyz while waiting = %d %q, want 503 waiting for a writable primary", id, code, body)
		}
		if code, _, err := replicaproc.Get(addrs[id], "/livez"); err != nil || code != http.StatusOK {
			t.Errorf("%s: /livez while waiting = %d %v", id, code, err)
		}
	}
	// Still waiting a few retries later (1 s apart), not exited, nothing written.
	for id, r := range procs {
		replicaproc.Eventually(t, 20*time.Second, id+" to retry", func() error {
			if r.Exited() {
				t.Fatalf("replica %s exited while waiting (%v):\n%s", id, r.State(), r.Stderr())
			}
			if strings.Count(r.Stderr(), "cannot execute") > 0 {
				t.Fatalf("replica %s tried to write:\n%s", id, r.Stderr())
			}
			return nil
		})
		if n := countLogged(r, waitingLine); n != 1 {
			t.Errorf("%s said %d times what it waits for, want once", id, n)
		}
	}
	if got := readExecutions(t, expDir); len(got) != 0 {
		t.Errorf("a waiting replica ran its job: %v", got)
	}

	if err := p.standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	promoted := time.Now()
	pool := testPool(t, p.URL)
	for id, r := range procs {
		addr := r.WaitReady(t)
		if addr != addrs[id] {
			t.Errorf("%s ready on %s, but waited on %s", id, addr, addrs[id])
		}
		waitReadyz(t, addr, healWithin)
		t.Logf("%s ready %s after the promotion", id, time.Since(promoted).Round(time.Millisecond))
		var state string
		if err := pool.QueryRow(ctx, `SELECT state FROM studio_replica WHERE id = $1`, id).Scan(&state); err != nil || state != "ready" {
			t.Errorf("%s: row state %q, %v", id, state, err)
		}
		if strings.Contains(r.Stderr(), secret) {
			t.Errorf("%s logged the password", id)
		}
	}
	replicaproc.Eventually(t, healWithin, "both replicas to run their job", func() error {
		n := map[string]int{}
		for _, e := range readExecutions(t, expDir) {
			n[e.Replica]++
		}
		if n["multi-host"] == 0 || n["standby-only"] == 0 {
			return fmt.Errorf("executions per replica %v", n)
		}
		return nil
	})
}

// TestAReadyReplicaWhosePrimaryTurnsReadOnlyClaimsNothingAndRecovers: the
// server turns read-only under a ready replica (ALTER SYSTEM SET
// default_transaction_read_only = on, reloaded: what a failover tool does
// to fence an old primary). The replica must fail /readyz saying why, say
// so once, start no run, take no lock and renew no lease, and not exit;
// once the server accepts writes again it is ready and runs again. The
// test uses the package's own throwaway cluster: ALTER SYSTEM reaches
// every database of it.
func TestAReadyReplicaWhosePrimaryTurnsReadOnlyClaimsNothingAndRecovers(t *testing.T) {
	dbURL := pgtest.NewDB(t)
	admin := testPool(t, pgtest.AdminURL(t))
	pool := testPool(t, dbURL)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	setReadOnly := func(on bool) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
		defer cancel()
		conn, err := admin.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		stmt := `ALTER SYSTEM RESET default_transaction_read_only`
		if on {
			stmt = `ALTER SYSTEM SET default_transaction_read_only = on`
		}
		for _, sql := range []string{`SET default_transaction_read_only = off`, stmt, `SELECT pg_reload_conf()`, `RESET default_transaction_read_only`} {
			if _, err := conn.Exec(ctx, sql); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
		}
	}
	t.Cleanup(func() { setReadOnly(false) })

	expDir := t.TempDir()
	config := writeConfig(t, expDir, []string{"c1"},
		jobConf{ID: "every-1s", Scope: "installation", Every: "1s", Run: map[string]any{"command": recordCommand("0.1")}})
	r := studioctlBin.Start(t, replicaproc.Options{ID: "turns-ro", DatabaseURL: dbURL, Args: []string{"--config", config}, FailOnRace: true})
	addr := r.WaitReady(t)
	waitReadyz(t, addr, healWithin)
	replicaproc.Eventually(t, 30*time.Second, "runs and the lease", func() error {
		if n := len(readExecutions(t, expDir)); n < 2 {
			return fmt.Errorf("%d executions", n)
		}
		return leasesOK(pool, nil)
	})

	setReadOnly(true)
	turned := time.Now()
	why := waitUnready(t, addr, 10*time.Second)
	t.Logf("/readyz %s after the server turned read-only: %s", time.Since(turned).Round(time.Millisecond), why)
	if !strings.Contains(why, "read-only") {
		t.Errorf("/readyz does not say the database is read-only: %s", why)
	}
	waitLogged(t, r, readOnlyLine, 15*time.Second)
	// Two failed heartbeats (5 s apart) later: still not ready, said once,
	// nothing claimed.
	before, err := replicaproc.Metric(addr, "studio_replica_heartbeat_failures_total")
	if err != nil {
		t.Fatal(err)
	}
	replicaproc.Eventually(t, 20*time.Second, "two failed heartbeats", func() error {
		if r.Exited() {
			t.Fatalf("replica exited on a read-only database (%v):\n%s", r.State(), r.Stderr())
		}
		n, err := replicaproc.Metric(addr, "studio_replica_heartbeat_failures_total")
		if err != nil {
			return err
		}
		if n < before+2 {
			return fmt.Errorf("%v failures", n)
		}
		return nil
	})
	if code, body := readyz(addr); code == http.StatusOK {
		t.Errorf("/readyz on a read-only database: %d %s", code, body)
	}
	if n := countLogged(r, readOnlyLine); n != 1 {
		t.Errorf("said %d times that the database does not accept writes, want once", n)
	}
	// The job's last execution may have begun just before the reload: allow 1 s.
	grace := turned.Add(time.Second)
	for _, e := range readExecutions(t, expDir) {
		if e.Start.After(grace) {
			t.Errorf("an execution started %s after the server turned read-only: %+v", e.Start.Sub(turned), e)
		}
	}
	var lockedAt, renewedAt time.Time
	if err := pool.QueryRow(ctx, `SELECT (SELECT max(locked_at) FROM shedlock), (SELECT max(renewed_at) FROM cluster_lease)`).Scan(&lockedAt, &renewedAt); err != nil {
		t.Fatal(err)
	}
	if dbNowAt := dbNow(t, pool); lockedAt.After(dbNowAt.Add(-time.Since(grace))) || renewedAt.After(dbNowAt.Add(-time.Since(grace))) {
		t.Errorf("a lock (locked_at %s) or a lease (renewed_at %s) was written while read-only (db now %s)", lockedAt, renewedAt, dbNowAt)
	}

	setReadOnly(false)
	back := time.Now()
	waitReadyz(t, addr, healWithin)
	t.Logf("ready %s after the server accepted writes again", time.Since(back).Round(time.Millisecond))
	waitLogged(t, r, writableLine, healWithin)
	replicaproc.Eventually(t, healWithin, "a run after the recovery, and the lease renewed", func() error {
		for _, e := range readExecutions(t, expDir) {
			if e.Start.After(back) {
				return leasesOK(pool, nil)
			}
		}
		return fmt.Errorf("no execution since the server accepted writes again")
	})
}
