package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

func TestMain(m *testing.M) {
	code := pgtest.MainNoLeaks(m)
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

var (
	buildOnce sync.Once
	buildDir  string
	built     *replicaproc.Binary
	buildErr  error
)

// binary builds the race-enabled studioctl once for the package's tests.
func binary(t *testing.T) *replicaproc.Binary {
	t.Helper()
	buildOnce.Do(func() {
		if buildDir, buildErr = os.MkdirTemp("", "studioctl-demo-test-"); buildErr == nil {
			built, buildErr = replicaproc.Build(buildDir)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return built
}

// demoTimeout bounds the whole demo process of the end-to-end test: the
// race-enabled replicas, the 15 s replica TTL of the crash, the drain.
const demoTimeout = 80 * time.Second

// testPassword is put in the demo's database URL; it must appear in no
// output (the test cluster trusts local connections, so any password
// passes).
const testPassword = "s3cr3t-demo-Pa55"

// TestDemoWithFaultsReportsNoOverlapAndItsIncidents runs the real binary's
// `studioctl demo --duration 10s --faults -o json` against the test
// server and checks the report: no overlapping executions, the kill, the
// stale lock and its release, the takeover, the drain and the handover
// happened and were timed; the demo database is gone afterwards, no child
// process is left, and the password appears in no output.
func TestDemoWithFaultsReportsNoOverlapAndItsIncidents(t *testing.T) {
	admin := pgtest.AdminURL(t)
	bin := binary(t)
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), testPassword)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), demoTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin.Path, "demo", "--duration", "10s", "--faults", "-o", "json")
	cmd.Dir = dir
	cmd.Env = bin.Env(dir, "STUDIO_DATABASE_URL="+u.String(), "TMPDIR="+dir)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err = cmd.Run()
	t.Logf("demo took %s", time.Since(start).Round(100*time.Millisecond))
	if err != nil {
		t.Fatalf("demo: %v\nstderr:\n%s\nstdout:\n%s", err, stderr.String(), stdout.String())
	}
	for name, out := range map[string]string{"stdout": stdout.String(), "stderr": stderr.String()} {
		if strings.Contains(out, testPassword) {
			t.Errorf("the password appears on the demo's %s", name)
		}
	}

	var keys map[string]json.RawMessage
	if err := json.Unmarshal(stdout.Bytes(), &keys); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, stdout.String())
	}
	for _, k := range []string{"replicas", "executions_per_replica", "overlapping_pairs", "runs", "due", "lock", "takeover_seconds", "handover_seconds"} {
		if _, ok := keys[k]; !ok {
			t.Errorf("the report has no key %q", k)
		}
	}
	var rep Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	t.Logf("report: runs %d, due %.1f, per replica %v, takeover %v s, handover %v s, overlaps %d", rep.Runs, rep.Due, rep.ExecutionsPerReplica, deref(rep.Takeover), deref(rep.Handover), rep.OverlappingPairs)
	if rep.OverlappingPairs != 0 {
		t.Errorf("overlapping pairs %d, want 0: %v", rep.OverlappingPairs, rep.Overlaps)
	}
	if len(rep.ExecutionsPerReplica) < 2 {
		t.Errorf("executions per replica %v: want the work shared by at least two replicas", rep.ExecutionsPerReplica)
	}
	if rep.Runs == 0 || rep.Due <= 0 {
		t.Errorf("runs %d, due %.1f: want both positive", rep.Runs, rep.Due)
	}
	if rep.Lock == nil || rep.Lock.Name != MainJob || rep.Lock.LockedBy == "" {
		t.Errorf("lock row %+v: want the row of %s", rep.Lock, MainJob)
	}
	fates := map[string]int{}
	for _, r := range rep.Replicas {
		fates[r.Fate]++
	}
	if len(rep.Replicas) != 3 || fates["killed"] != 1 || fates["drained"] != 1 || fates["stopped"] != 1 {
		t.Errorf("replicas %+v: want three, one killed, one drained, one stopped", rep.Replicas)
	}
	steps := map[string]Incident{}
	for _, in := range rep.Incidents {
		steps[in.Step] = in
	}
	for _, s := range []string{"kill", "stale", "release", "takeover", "drain", "handover"} {
		if _, ok := steps[s]; !ok {
			t.Errorf("no %s among the incidents %+v", s, rep.Incidents)
		}
	}
	if c := steps["release"].Command; !strings.Contains(c, "locks release "+MainJob) || strings.Contains(c, testPassword) {
		t.Errorf("release command %q: want studioctl locks release %s, without the password", c, MainJob)
	}
	if c := steps["drain"].Command; !strings.Contains(c, "replicas drain ") {
		t.Errorf("drain command %q: want studioctl replicas drain", c)
	}
	if rep.Takeover == nil || *rep.Takeover <= 0 || rep.Handover == nil || *rep.Handover < 0 {
		t.Errorf("takeover %v, handover %v: want both measured", rep.Takeover, rep.Handover)
	}
	// The narration is in the order things happened: the killed replica
	// starts nothing after the kill, so nothing it started is told after
	// the kill line (it used to be, 0.3 s late, by the live view's poll).
	var victim string
	for _, r := range rep.Replicas {
		if r.Fate == "killed" {
			victim = r.ID
		}
	}
	if _, after, ok := strings.Cut(stderr.String(), "kill -9 "+victim+" "); !ok {
		t.Errorf("no kill -9 %s line in the narration", victim)
	} else if strings.Contains(after, victim+" started execution") {
		t.Errorf("an execution of %s is told after its kill:\n%s", victim, after)
	}
	for _, want := range []string{"kill -9", "is stale", "$ PGPASSFILE=", "locks release " + MainJob, "replicas drain", "replicas list"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("the narration on stderr does not say %q", want)
		}
	}

	// The demo database is gone, and so is every child.
	if !rep.Dropped || !strings.HasPrefix(rep.Database, DatabasePrefix) {
		t.Errorf("database %q dropped %v: want a demo database, dropped", rep.Database, rep.Dropped)
	}
	conn, err := pgx.Connect(context.Background(), admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_database WHERE datname = $1`, rep.Database).Scan(&n); err != nil || n != 0 {
		t.Errorf("database %s: %d left (%v), want dropped", rep.Database, n, err)
	}
	if len(rep.Children) < 3 {
		t.Errorf("child pids %v: want the replicas and the commands", rep.Children)
	}
	for _, pid := range rep.Children {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("child %d is still there after the demo (%v)", pid, err)
		}
	}
	if left := childrenOf(dir); len(left) > 0 {
		t.Errorf("processes left that run with the demo's files: %v", left)
	}
}

// childrenOf lists the processes whose command line names a file below
// dir (the replicas run --config DIR/studioctl-demo-*/demo.yaml).
func childrenOf(dir string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if cl := strings.ReplaceAll(string(b), "\x00", " "); strings.Contains(cl, dir+"/studioctl-demo-") {
			out = append(out, e.Name()+": "+cl)
		}
	}
	return out
}

// TestDemoStopsEveryChildOnCtrlCAndWhenKilled: a demo interrupted with
// SIGINT stops and reaps every replica, drops its database and exits 1;
// a demo killed with SIGKILL takes its replicas with it (Pdeathsig).
func TestDemoStopsEveryChildOnCtrlCAndWhenKilled(t *testing.T) {
	admin := pgtest.AdminURL(t)
	bin := binary(t)
	conn, err := pgx.Connect(context.Background(), admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	dbRE := regexp.MustCompile(`creating the demo database (` + DatabasePrefix + `[0-9a-f]+)`)

	for _, tc := range []struct {
		name string
		sig  syscall.Signal
	}{
		{"ctrl-c", syscall.SIGINT},
		{"kill -9", syscall.SIGKILL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command(bin.Path, "demo", "--duration", "5m")
			cmd.Env = bin.Env(dir, "STUDIO_DATABASE_URL="+admin, "TMPDIR="+dir)
			var stderr replicaproc.SyncBuffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan struct{})
			go func() { cmd.Wait(); close(exited) }()
			defer func() {
				cmd.Process.Kill()
				<-exited
			}()
			replicaproc.Eventually(t, 60*time.Second, "the demo's replicas to be ready", func() error {
				if !strings.Contains(stderr.String(), "replicas ready") {
					return errors.New("not yet:\n" + stderr.String())
				}
				return nil
			})
			if n := len(childrenOf(dir)); n < 3 {
				t.Fatalf("%d replicas running, want 3", n)
			}
			m := dbRE.FindStringSubmatch(stderr.String())
			if m == nil {
				t.Fatalf("no database named on stderr:\n%s", stderr.String())
			}
			name := m[1]
			cmd.Process.Signal(tc.sig)
			select {
			case <-exited:
			case <-time.After(30 * time.Second):
				t.Fatalf("the demo still runs 30s after %v", tc.sig)
			}
			replicaproc.Eventually(t, 10*time.Second, "every replica to be gone", func() error {
				if left := childrenOf(dir); len(left) > 0 {
					return fmt.Errorf("left: %v", left)
				}
				return nil
			})
			var n int
			if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_database WHERE datname = $1`, name).Scan(&n); err != nil {
				t.Fatal(err)
			}
			switch tc.sig {
			case syscall.SIGINT:
				if code := cmd.ProcessState.ExitCode(); code != 1 || n != 0 {
					t.Errorf("exit %d, database left %d: want exit 1 and the database dropped\n%s", code, n, stderr.String())
				}
			case syscall.SIGKILL:
				// Killed, the demo cannot drop its database: the test does.
				if _, err := conn.Exec(context.Background(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1`, name); err != nil {
					t.Fatal(err)
				}
				if _, err := conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func deref(f *float64) any {
	if f == nil {
		return nil
	}
	return *f
}

// TestTargetKeepsThePasswordFromTheChildren: the children's connection
// string names the demo database without the password, which is in a
// 0600 pgpass file, for a URL and for a keyword/value string alike.
func TestTargetKeepsThePasswordFromTheChildren(t *testing.T) {
	for _, tc := range []struct {
		name, admin string
	}{
		{"a URL", "postgres://app:" + testPassword + "@db.example:6543/app?sslmode=require"},
		{"a keyword/value string", "host=db.example port=6543 user=app password=" + testPassword + " dbname=app sslmode=require"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tg, err := newTarget(tc.admin, "studioctl_demo_x", dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range []string{tg.public, tg.withApp("demo-1")} {
				if strings.Contains(s, testPassword) {
					t.Errorf("%q holds the password", s)
				}
				cfg, err := db.ParseConnConfig(s + map[bool]string{true: "&passfile=/nonexistent", false: " passfile=/nonexistent"}[tg.isURL])
				if err != nil {
					t.Fatal(err)
				}
				if cfg.Database != "studioctl_demo_x" || cfg.Host != "db.example" || cfg.Port != 6543 || cfg.User != "app" || cfg.TLSConfig == nil {
					t.Errorf("%q: database %q host %q port %d user %q tls %v", s, cfg.Database, cfg.Host, cfg.Port, cfg.User, cfg.TLSConfig != nil)
				}
			}
			cfg, _ := db.ParseConnConfig(tg.withApp("demo-1"))
			if got := cfg.RuntimeParams["application_name"]; got != "demo-1" {
				t.Errorf("application_name %q, want demo-1", got)
			}
			sec, err := db.ParseConnConfig(tg.secret)
			if err != nil || sec.Password != testPassword || sec.Database != "studioctl_demo_x" {
				t.Errorf("the demo's own connection: password kept %v, database %q (%v)", sec != nil && sec.Password == testPassword, sec.Database, err)
			}
			fi, err := os.Stat(tg.passfile)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != 0o600 || filepath.Dir(tg.passfile) != dir {
				t.Errorf("password file %s mode %v, want 0600 in %s", tg.passfile, fi.Mode().Perm(), dir)
			}
			b, _ := os.ReadFile(tg.passfile)
			if want := "*:*:studioctl_demo_x:app:" + testPassword + "\n"; string(b) != want {
				t.Errorf("password file holds %q, want %q", b, want)
			}
		})
	}
}

// TestChildEnvDropsEverySecretAndOtherDatabase: nothing that carries a
// password or names another database reaches a child.
func TestChildEnvDropsEverySecretAndOtherDatabase(t *testing.T) {
	env := childEnv([]string{"PATH=/bin", "PGPASSWORD=x", "PGPASSFILE=/home/u/.pgpass", "PGDATABASE=prod", "PGSERVICE=prod", "PGSERVICEFILE=/f",
		"STUDIO_DATABASE_URL=postgres://u:x@h/prod", "STUDIO_LOCKS_TABLE=other", "NO_COLOR=1", "PGSSLROOTCERT=/ca.pem"}, "PGPASSFILE=/tmp/demo/pgpass")
	got := strings.Join(env, " ")
	if want := "PATH=/bin PGSSLROOTCERT=/ca.pem PGPASSFILE=/tmp/demo/pgpass"; got != want {
		t.Errorf("child environment %q, want %q", got, want)
	}
}

// TestValidateNamesTheFlag: bad options are refused, naming the flag.
func TestValidateNamesTheFlag(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{Replicas: 0, Duration: time.Minute}, "--replicas 0: want 1 to 9"},
		{Options{Replicas: 10, Duration: time.Minute}, "--replicas 10: want 1 to 9"},
		{Options{Replicas: 2, Duration: time.Minute, Faults: true}, "--replicas 2: --faults needs at least 3"},
		{Options{Replicas: 3, Duration: time.Second}, "--duration 1s: want at least 5s"},
		{Options{Replicas: 3, Duration: 2 * time.Hour}, "--duration 2h0m0s: want at most 1h0m0s"},
		{Options{Replicas: 1, Duration: 5 * time.Second}, ""},
	} {
		err := tc.o.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v, want no error", tc.o, err)
		case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want) || !errors.Is(err, ErrInvalid)):
			t.Errorf("%+v: %v, want %q (ErrInvalid)", tc.o, err, tc.want)
		}
	}
}
