package embedded

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/goleak"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/migrate"
	"github.com/studioctl/studioctl/internal/pgcluster"
)

func TestMain(m *testing.M) {
	if _, err := pgcluster.FindBinDir(); err != nil && os.Getenv("CI") == "" {
		fmt.Fprintln(os.Stderr, "embedded tests need the PostgreSQL binaries:", err)
	}
	goleak.VerifyTestMain(m)
}

// testTimeout bounds each test's work with the server.
const testTimeout = 2 * time.Minute

// newEmbedded returns an Embedded in a fresh folder the postgres user can
// reach, whose server is stopped at the end of the test.
func newEmbedded(t *testing.T) *Embedded {
	t.Helper()
	if _, err := pgcluster.FindBinDir(); err != nil {
		t.Fatal(err) // never skip: the embedded database is what is under test
	}
	dir, err := os.MkdirTemp("", "studioctl-embedded-test-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	e := &Embedded{Dir: filepath.Join(dir, "embedded")}
	t.Cleanup(func() {
		stopServer(t, e)
		os.RemoveAll(dir)
	})
	return e
}

func stopServer(t *testing.T, e *Embedded) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(e.dataDir(), "postmaster.pid")); err != nil {
		return
	}
	c, err := pgcluster.New(e.dataDir(), 0, "")
	if err != nil {
		t.Error(err)
		return
	}
	if err := c.Stop(context.Background()); err != nil {
		t.Error(err)
	}
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

func ensure(t *testing.T, ctx context.Context, e *Embedded) (url string, started bool) {
	t.Helper()
	url, started, err := e.Ensure(ctx)
	if err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	return url, started
}

func password(t *testing.T, e *Embedded) string {
	t.Helper()
	pw, err := e.readPassword()
	if err != nil || pw == "" {
		t.Fatalf("read password: %q, %v", pw, err)
	}
	return pw
}

func port(t *testing.T, e *Embedded) int {
	t.Helper()
	p, err := e.port()
	if err != nil || p == 0 {
		t.Fatalf("read port: %d, %v", p, err)
	}
	return p
}

// dial connects with pgconn; host is 127.0.0.1 or a socket directory.
func dial(ctx context.Context, host string, port int, user, pw string, params map[string]string) error {
	cfg, err := pgconn.ParseConfig("")
	if err != nil {
		return err
	}
	cfg.Host, cfg.Port, cfg.User, cfg.Database, cfg.Password = host, uint16(port), user, "postgres", pw
	cfg.TLSConfig, cfg.Fallbacks = nil, nil
	for k, v := range params {
		cfg.RuntimeParams[k] = v
	}
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}

// checkSecured asserts what holds for every embedded cluster studioctl
// leaves behind: no trust line, a private password file and data folder,
// and no way in without the password.
func checkSecured(t *testing.T, ctx context.Context, e *Embedded) {
	t.Helper()
	hba, err := os.ReadFile(e.hbaFile())
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(hba), "\n") {
		if l, _, _ := strings.Cut(line, "#"); strings.Contains(strings.ToLower(l), "trust") || strings.Contains(l, "replication") {
			t.Errorf("pg_hba.conf has a trust or replication line: %q", line)
		}
	}
	if !strings.Contains(string(hba), "host    all       all   127.0.0.1/32   scram-sha-256") {
		t.Errorf("pg_hba.conf is not studioctl's:\n%s", hba)
	}
	fi, err := os.Stat(e.PasswordFile())
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("password file mode %#o, want 0600", perm)
	}
	if uid := fi.Sys().(*syscall.Stat_t).Uid; int(uid) != os.Geteuid() {
		t.Errorf("password file owned by uid %d, want %d", uid, os.Geteuid())
	}
	if fi, err := os.Stat(e.dataDir()); err != nil {
		t.Fatal(err)
	} else if perm := fi.Mode().Perm(); perm != 0o700 {
		t.Errorf("data directory (the socket's directory) mode %#o, want 0700", perm)
	}

	pw, p := password(t, e), port(t, e)
	refused := []struct {
		name, host, user, pw string
		params               map[string]string
	}{
		{"postgres over TCP without a password", Host, User, "", nil},
		{"postgres over TCP with a wrong password", Host, User, "not-the-password", nil},
		{"another role over TCP without a password", Host, "alice", "", nil},
		{"postgres over the socket without a password", e.dataDir(), User, "", nil},
		{"a replication connection with the password", Host, User, pw, map[string]string{"replication": "true"}},
	}
	for _, r := range refused {
		err := dial(ctx, r.host, p, r.user, r.pw, r.params)
		if !isAuthError(err) {
			t.Errorf("%s: want an authentication error, got %v", r.name, err)
		}
	}
	if err := dial(ctx, Host, p, User, pw, nil); err != nil {
		t.Errorf("postgres over TCP with the password: %v", err)
	}
	if err := dial(ctx, e.dataDir(), p, User, pw, nil); err != nil {
		t.Errorf("postgres over the socket with the password: %v", err)
	}
}

func TestEnsureFreshClusterAsksEveryConnectionForThePassword(t *testing.T) {
	ctx := testContext(t)
	e := newEmbedded(t)
	url, started := ensure(t, ctx, e)
	if !started {
		t.Error("started = false for a fresh folder")
	}
	pw := password(t, e)
	if len(pw) != 64 {
		t.Errorf("password has %d characters, want 64 hex", len(pw))
	}
	if want := URL(port(t, e), pw, Database); url != want {
		t.Errorf("url = %s, want %s", db.Redact(url), db.Redact(want))
	}
	checkSecured(t, ctx, e)

	// The URL it returns reaches the studio database.
	conn, err := connect(ctx, url, pw)
	if err != nil {
		t.Fatal(err)
	}
	var who, dbname string
	if err := conn.QueryRow(ctx, `SELECT current_user, current_database()`).Scan(&who, &dbname); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	if who != User || dbname != Database {
		t.Errorf("connected as %s to %s", who, dbname)
	}

	// Status shows how to connect and never the password; its psql line works.
	st, err := e.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(st)
	if strings.Contains(string(b), pw) {
		t.Fatalf("status shows the password: %s", b)
	}
	if !st.Running || st.PasswordFile != e.PasswordFile() || !strings.Contains(st.Connect, "PGPASSFILE="+e.PasswordFile()) {
		t.Errorf("status = %s", b)
	}
	cmd := exec.CommandContext(ctx, "sh", "-c", st.Connect+" -XtAc 'SELECT current_user'")
	cmd.Env = append(os.Environ(), "PATH="+st.BinDir+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != User {
		t.Errorf("%s: %v: %s", st.Connect, err, out)
	}

	// A second Ensure shares the server and keeps the password.
	url2, started := ensure(t, ctx, e)
	if started || url2 != url {
		t.Errorf("second Ensure: started=%v, same url=%v", started, url2 == url)
	}
}

// Another local account cannot read the password file nor reach the socket,
// and has no way in without the password.
func TestEnsureOtherLocalUserCannotConnect(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Log("not root: the test cannot act as another user; checkSecured covers the rest")
		return
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Fatalf("setpriv is needed to act as nobody: %v", err)
	}
	ctx := testContext(t)
	e := newEmbedded(t)
	ensure(t, ctx, e)
	st, err := e.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	psql := filepath.Join(st.BinDir, "psql")
	asNobody := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, setpriv, append([]string{"--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"}, args...)...)
		cmd.Dir = "/"
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent", "PGCONNECT_TIMEOUT=10"}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for _, tc := range []struct{ name, out string }{
		{"cat the password file", must(asNobody("cat", e.PasswordFile()))},
		{"psql over TCP", must(asNobody(psql, "-w", "-XtAc", "SELECT 1", fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres", Host, st.Port)))},
		{"psql over the socket", must(asNobody(psql, "-w", "-XtAc", "SELECT 1", fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres", e.dataDir(), st.Port)))},
	} {
		if !strings.HasPrefix(tc.out, "error:") {
			t.Errorf("nobody could %s: %s", tc.name, tc.out)
		} else {
			t.Logf("nobody cannot %s: %s", tc.name, strings.TrimSpace(tc.out))
		}
	}
}

// must folds a command's result into one string, "error: ..." on failure.
func must(out string, err error) string {
	if err != nil {
		return "error: " + err.Error() + ": " + out
	}
	return out
}

// oldCluster makes a folder the way studioctl did before: trust for every
// local connection, replication included, no password. A table marks its data.
func oldCluster(t *testing.T, ctx context.Context, e *Embedded, running bool) *pgcluster.Cluster {
	t.Helper()
	p, err := pgcluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	c, err := pgcluster.New(e.dataDir(), p, "UTC")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.PrepareParent(e.Dir); err != nil {
		t.Fatal(err)
	}
	if err := c.Init(ctx); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.portFile(), []byte(strconv.Itoa(p)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if ok, _ := e.trusting(); !ok {
		t.Fatal("the old-style cluster does not trust: the test would prove nothing")
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := dial(ctx, Host, p, "postgres", "", nil); err != nil {
		t.Fatalf("old cluster refuses a passwordless connection: %v", err)
	}
	conn, err := pgx.Connect(ctx, fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres sslmode=disable", Host, p))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE kept (v text); INSERT INTO kept VALUES ('old data')`); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	if !running {
		if err := c.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func TestEnsureSecuresAFolderMadeWithTrust(t *testing.T) {
	for _, running := range []bool{false, true} {
		t.Run(map[bool]string{false: "stopped", true: "running"}[running], func(t *testing.T) {
			ctx := testContext(t)
			e := newEmbedded(t)
			oldCluster(t, ctx, e, running)
			pidBefore := e.postmasterPID()
			url, started := ensure(t, ctx, e)
			if started == running {
				t.Errorf("started = %v for a server that was running=%v", started, running)
			}
			if running && e.postmasterPID() != pidBefore {
				t.Error("the running server was restarted: its clients were cut off")
			}
			checkSecured(t, ctx, e)
			conn, err := connect(ctx, URL(port(t, e), password(t, e), "postgres"), password(t, e))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			var v string
			if err := conn.QueryRow(ctx, `SELECT v FROM kept`).Scan(&v); err != nil || v != "old data" {
				t.Errorf("old data: %q, %v", v, err)
			}
			if _, err := connect(ctx, url, password(t, e)); err != nil {
				t.Error(err)
			}
		})
	}
}

func (e *Embedded) postmasterPID() string {
	b, _ := os.ReadFile(filepath.Join(e.dataDir(), "postmaster.pid"))
	first, _, _ := strings.Cut(string(b), "\n")
	return first
}

// Without its password file a stopped cluster gets a new password; a running
// one is refused with advice that never says to delete the data.
func TestEnsureLostPasswordFile(t *testing.T) {
	ctx := testContext(t)
	e := newEmbedded(t)
	ensure(t, ctx, e)
	old := password(t, e)
	if err := os.Remove(e.PasswordFile()); err != nil {
		t.Fatal(err)
	}
	_, _, err := e.Ensure(ctx)
	if err == nil || !strings.Contains(err.Error(), "embedded stop --force") {
		t.Fatalf("running server, no password file: want advice to stop it, got %v", err)
	}
	if msg := strings.ToLower(err.Error()); strings.Contains(msg, "remove") || strings.Contains(msg, "delete") || strings.Contains(msg, "rm ") {
		t.Errorf("the message advises deleting data: %v", err)
	}
	if err := e.Stop(ctx, true); err != nil {
		t.Fatal(err)
	}
	ensure(t, ctx, e)
	if password(t, e) == old {
		t.Error("the password did not change")
	}
	checkSecured(t, ctx, e)
}

// A port file lost under a running server is read back from postmaster.pid,
// instead of advising to remove the folder.
func TestEnsureLostPortFile(t *testing.T) {
	ctx := testContext(t)
	e := newEmbedded(t)
	url, _ := ensure(t, ctx, e)
	if err := os.Remove(e.portFile()); err != nil {
		t.Fatal(err)
	}
	url2, started := ensure(t, ctx, e)
	if started || url2 != url {
		t.Errorf("started=%v, same url=%v", started, url2 == url)
	}
}

func TestEnsureRefusesAReadablePasswordFile(t *testing.T) {
	ctx := testContext(t)
	e := newEmbedded(t)
	ensure(t, ctx, e)
	if err := os.Chmod(e.PasswordFile(), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := e.Ensure(ctx)
	if err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("want a refusal naming chmod 600, got %v", err)
	}
}

// Several processes that start at once on a fresh folder share one server
// (goroutines here: each opens the lock file itself, and flock excludes
// open file descriptions; testdata/scripts/embedded_concurrent.txtar does it
// with processes).
func TestEnsureConcurrentFreshStart(t *testing.T) {
	ctx := testContext(t)
	e := newEmbedded(t)
	const n = 4
	var wg sync.WaitGroup
	urls, starts, errs := make([]string, n), make([]bool, n), make([]error, n)
	for i := range n {
		wg.Go(func() {
			urls[i], starts[i], errs[i] = (&Embedded{Dir: e.Dir}).Ensure(ctx)
		})
	}
	wg.Wait()
	started := 0
	for i := range n {
		if errs[i] != nil {
			t.Errorf("Ensure %d: %v", i, errs[i])
		}
		if starts[i] {
			started++
		}
		if urls[i] != urls[0] {
			t.Errorf("Ensure %d got another URL", i)
		}
	}
	if started != 1 {
		t.Errorf("%d calls started the server, want 1", started)
	}
	checkSecured(t, ctx, e)
}

func TestStopRefusesWhileLiveReplicasUseIt(t *testing.T) {
	ctx := testContext(t)
	e := newEmbedded(t)
	url, _ := ensure(t, ctx, e)
	pool, err := db.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := migrate.Up(ctx, pool); err != nil {
		t.Fatal(err)
	}
	_, err = pool.Exec(ctx, `INSERT INTO studio_replica (id, incarnation, host, pid, version, state, heartbeat_at) VALUES
  ('web-1', gen_random_uuid(), 'host-a', 101, 'test', 'ready', now()),
  ('web-2', gen_random_uuid(), 'host-b', 102, 'test', 'ready', now() - interval '1 minute'),
  ('web-3', gen_random_uuid(), 'host-c', 103, 'test', 'stopped', now())`)
	if err != nil {
		t.Fatal(err)
	}

	err = e.Stop(ctx, false)
	if !errors.Is(err, ErrInUse) {
		t.Fatalf("Stop with a live replica: want ErrInUse, got %v", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, "web-1 (host host-a pid 101)") || strings.Contains(msg, "web-2") || strings.Contains(msg, "web-3") || !strings.Contains(msg, "--force") {
		t.Errorf("message should name web-1 only and --force: %s", msg)
	}
	if st, _ := e.Status(ctx); !st.Running {
		t.Fatal("the refused stop stopped the server")
	}

	// Once web-1 stops, stop works without --force.
	if _, err := pool.Exec(ctx, `UPDATE studio_replica SET state = 'stopped' WHERE id = 'web-1'`); err != nil {
		t.Fatal(err)
	}
	pool.Close()
	if err := e.Stop(ctx, false); err != nil {
		t.Fatalf("Stop with no live replica: %v", err)
	}
	if err := e.Stop(ctx, false); !errors.Is(err, ErrNotRunning) {
		t.Errorf("second Stop: want ErrNotRunning, got %v", err)
	}
}

func TestStopForceStopsUnderLiveReplicas(t *testing.T) {
	ctx := testContext(t)
	e := newEmbedded(t)
	url, _ := ensure(t, ctx, e)
	pool, err := db.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrate.Up(ctx, pool); err != nil {
		t.Fatal(err)
	}
	_, err = pool.Exec(ctx, `INSERT INTO studio_replica (id, incarnation, host, pid, version, state) VALUES ('web-1', gen_random_uuid(), 'h', 1, 'test', 'ready')`)
	pool.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Stop(ctx, false); !errors.Is(err, ErrInUse) {
		t.Fatalf("want ErrInUse, got %v", err)
	}
	if err := e.Stop(ctx, true); err != nil {
		t.Fatalf("Stop --force: %v", err)
	}
	if st, _ := e.Status(ctx); st.Running {
		t.Error("still running after Stop --force")
	}
}

// A folder without the studio database or its tables has no replicas.
func TestStopWithoutSchema(t *testing.T) {
	ctx := testContext(t)
	e := newEmbedded(t)
	ensure(t, ctx, e)
	if err := e.Stop(ctx, false); err != nil {
		t.Fatal(err)
	}
}

func TestHasTrustLine(t *testing.T) {
	for _, tc := range []struct {
		conf string
		want bool
	}{
		{hbaConf, false},
		{"# trust nobody\nlocal all all scram-sha-256\n", false},
		{"host all all 127.0.0.1/32 trust\n", true},
		{"local replication all TRUST # old\n", true},
		{upgradeHBA, true},
	} {
		if got := hasTrustLine([]byte(tc.conf)); got != tc.want {
			t.Errorf("hasTrustLine(%q) = %v, want %v", tc.conf, got, tc.want)
		}
	}
}

// The verifier is what PostgreSQL would store: checked against the server
// in every test that logs in, here for its shape.
func TestScramVerifierShape(t *testing.T) {
	v, err := scramVerifier("secret")
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(v, "$")
	if len(parts) != 3 || parts[0] != "SCRAM-SHA-256" || !strings.HasPrefix(parts[1], "4096:") || strings.Count(parts[2], ":") != 1 {
		t.Errorf("verifier %q", v)
	}
	if strings.Contains(v, "secret") {
		t.Error("the verifier holds the password")
	}
}

func TestHideRemovesThePassword(t *testing.T) {
	pw := "0123456789abcdef"
	err := hide(fmt.Errorf("connect to postgres://postgres:%s@h: %w", pw, context.Canceled), pw)
	if strings.Contains(err.Error(), pw) || !errors.Is(err, context.Canceled) {
		t.Errorf("hide: %v", err)
	}
}

// The lock file was 0644: flock needs only a descriptor open for reading,
// so any local user could hold a lock on it (flock -s lock sleep 1d) and
// block every studioctl of this user. It is 0600 now, one left 0644 by an
// older studioctl is made 0600, and one of another user is refused.
func TestLockFileIsPrivate(t *testing.T) {
	// Not t.TempDir: its parent is 0700, and another user must be able to
	// reach the folder, as in ~/.local/share/studioctl/embedded.
	dir, err := os.MkdirTemp("", "embedded-lock-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	e := &Embedded{Dir: dir}
	name := filepath.Join(dir, "lock")
	mode := func() os.FileMode {
		t.Helper()
		fi, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Mode().Perm()
	}
	unlock, err := e.lock()
	if err != nil {
		t.Fatal(err)
	}
	unlock()
	if m := mode(); m != 0o600 {
		t.Errorf("a new lock file has mode %#o, want 0600", m)
	}
	if err := os.Chmod(name, 0o644); err != nil {
		t.Fatal(err)
	}
	if unlock, err = e.lock(); err != nil {
		t.Fatal(err)
	}
	unlock()
	if m := mode(); m != 0o600 {
		t.Errorf("an old 0644 lock file kept mode %#o, want 0600", m)
	}
	if os.Geteuid() != 0 {
		return
	}
	// Another user can no longer open it to hold a lock.
	other := exec.Command("sh", "-c", `exec 3<"$1"`, "sh", name)
	other.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if out, err := other.CombinedOutput(); err == nil {
		t.Errorf("another user opened the lock file: %s", out)
	}
	// A lock file that belongs to another user is refused.
	if err := os.Chown(name, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := e.lock(); err == nil || !strings.Contains(err.Error(), "belongs to uid 65534") {
		t.Errorf("lock on another user's file: %v, want a refusal naming its owner", err)
	}
}

// A stopped cluster whose port another program took meanwhile starts on a
// free port and records it (a script test's replica failed to start when a
// parallel test's embedded database took port 54329 in the gap).
func TestEnsureMovesAStoppedClusterOffATakenPort(t *testing.T) {
	ctx := testContext(t)
	e := newEmbedded(t)
	ensure(t, ctx, e)
	if err := e.Stop(ctx, true); err != nil {
		t.Fatal(err)
	}
	port, err := e.port()
	if err != nil || port == 0 {
		t.Fatalf("the port file after a stop: %d, %v", port, err)
	}
	taken, err := netListen(port)
	if err != nil {
		t.Fatalf("take port %d: %v", port, err)
	}
	defer taken.Close()
	url, started := ensure(t, ctx, e)
	moved, err := e.port()
	if err != nil {
		t.Fatal(err)
	}
	if !started || moved == port || !strings.Contains(url, ":"+strconv.Itoa(moved)+"/") {
		t.Errorf("started=%v on port %d (was %d, taken), url %s", started, moved, port, url)
	}
	checkSecured(t, ctx, e)
}
