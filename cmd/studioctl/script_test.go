package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rogpeppe/go-internal/testscript"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/pgcluster"
	"github.com/studioctl/studioctl/internal/tasks"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

// harness runs the tests inside pgtest.Main, so scripts get a server.
type harness struct{ m *testing.M }

func (h harness) Run() int {
	scriptParallelism()
	return pgtest.Main(h.m)
}

// scriptsPerCore is how many scripts run at once per core unless
// -test.parallel says otherwise. A script mostly waits (for a replica to
// start, a heartbeat, a job's next run): all the scripts together used
// 217 s of CPU (user + sys) on a 2-core machine, and took 547 s of a CI
// run two at a time, so two a core keeps the cores busier without making
// the waits late.
const scriptsPerCore = 2

// scriptParallelism sets -test.parallel to scriptsPerCore × GOMAXPROCS
// when the command line did not set it (go test's default is GOMAXPROCS).
func scriptParallelism() {
	if !flag.Parsed() {
		flag.Parse()
	}
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", strconv.Itoa(scriptsPerCore*runtime.GOMAXPROCS(0)))
	}
}

func TestMain(m *testing.M) {
	// Before testscript: a replica run by a script starts this binary again
	// as a job shim, under the name studioctl.
	if tasks.IsShim() {
		os.Exit(tasks.ShimMain())
	}
	testscript.Main(harness{m}, map[string]func(){
		"studioctl": func() { os.Exit(Main()) },
	})
}

// envUpdateScripts, set to 1, rewrites each failing `cmp stdout golden`'s
// golden section in the script with the output got (testscript's
// UpdateScripts): STUDIO_UPDATE_SCRIPTS=1 go test ./cmd/studioctl -run TestScripts.
const envUpdateScripts = "STUDIO_UPDATE_SCRIPTS"

// TestScripts runs testdata/scripts/*.txtar against the real binary, each
// with a fresh migrated database in $STUDIO_DATABASE_URL.
func TestScripts(t *testing.T) {
	t.Parallel()
	testscript.Run(t, testscript.Params{
		Dir:                 "../../testdata/scripts",
		RequireExplicitExec: true,
		RequireUniqueNames:  true,
		UpdateScripts:       os.Getenv(envUpdateScripts) == "1",
		Setup: func(env *testscript.Env) error {
			if down, why := pgtest.Unavailable(); down {
				return fmt.Errorf("postgresql unavailable: %s", why)
			}
			url, drop, err := pgtest.CreateDB("script", true)
			if err != nil {
				return err
			}
			env.Defer(drop)
			env.Setenv("STUDIO_DATABASE_URL", url)
			env.Setenv("USER", "tester")
			env.Setenv("XDG_CONFIG_HOME", env.WorkDir+"/.config")
			env.Setenv("XDG_DATA_HOME", env.WorkDir+"/.local/share")
			repo, err := filepath.Abs("../..")
			if err != nil {
				return err
			}
			env.Setenv("REPO", repo)
			// THISHOST is the host name, for goldens that show the
			// default actor (user@host).
			host, err := os.Hostname()
			if err != nil {
				return err
			}
			env.Setenv("THISHOST", host)
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"sql":      cmdSQL,
			"newdb":    cmdNewDB,
			"pgdir":    cmdPgDir,
			"waitsql":  cmdWaitSQL,
			"sqlfile":  cmdSQLFile,
			"roleurl":  cmdRoleURL,
			"exitcode": cmdExitCode,
			"waitfile": cmdWaitFile,
			"sqlenv":   cmdSQLEnv,
			"beat":     cmdBeat,
			"renew":    cmdRenew,
		},
	})
}

// beat keeps the heartbeat of replica rows the script inserted fresh,
// every second as a replica's registry would, until the script ends: beat
// ID... (a row is live only while its heartbeat is recent and not ahead of
// database time: liveness.LiveSQL). A row the script set to stopped is left
// alone, as a stopped replica writes no heartbeat: a golden may show the
// heartbeat it stopped with.
func cmdBeat(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) == 0 || neg {
		ts.Fatalf("usage: beat ID...")
	}
	keepFresh(ts, "beat", `UPDATE studio_replica SET heartbeat_at = now() WHERE id = ANY($1) AND state <> 'stopped'`, args)
}

// renew keeps the renewal of cluster leases the script inserted fresh,
// every second as their owner's lease loop would, until the script ends:
// renew CLUSTER... (a lease renewed longer than leases.LeaseTTL ago is
// expired). A lease without an owner is left alone, as nobody renews it.
func cmdRenew(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) == 0 || neg {
		ts.Fatalf("usage: renew CLUSTER...")
	}
	keepFresh(ts, "renew", `UPDATE cluster_lease SET renewed_at = now() WHERE cluster = ANY($1) AND owner IS NOT NULL`, args)
}

// keepFresh runs stmt (an UPDATE of the rows whose keys are $1) at once,
// then every second on a connection of its own until the script ends.
func keepFresh(ts *testscript.TestScript, name, stmt string, keys []string) {
	url := ts.Getenv("STUDIO_DATABASE_URL")
	cfg, err := db.ParseConnConfig(url)
	ts.Check(err)
	ctx, cancel := context.WithCancel(context.Background())
	conn, err := db.Connect(ctx, cfg, url)
	if err != nil {
		cancel()
		ts.Fatalf("%s: %v", name, err)
	}
	if _, err := conn.Exec(ctx, stmt, keys); err != nil {
		cancel()
		conn.Close(context.Background())
		ts.Fatalf("%s: %v", name, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer conn.Close(context.Background())
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				conn.Exec(ctx, stmt, keys)
			}
		}
	}()
	ts.Defer(func() { cancel(); <-done })
}

// waitsqlTimeout bounds waitsql's polling.
const waitsqlTimeout = 60 * time.Second

// sql runs one statement on $STUDIO_DATABASE_URL and prints the rows, tab-separated.
func cmdSQL(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 {
		ts.Fatalf("usage: sql 'STATEMENT'")
	}
	out, err := querySQL(ts, args[0])
	ts.Stdout().Write([]byte(out))
	if neg {
		if err == nil {
			ts.Fatalf("sql succeeded unexpectedly")
		}
		return
	}
	ts.Check(err)
}

// newdb creates an empty database (no migrations) and sets VAR to its URL.
func cmdNewDB(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 || neg {
		ts.Fatalf("usage: newdb VAR")
	}
	url, drop, err := pgtest.CreateDB("script_empty", false)
	ts.Check(err)
	ts.Defer(drop)
	ts.Setenv(args[0], url)
}

// pgdir makes a folder the postgres user can reach (the work directory is
// private), sets VAR to it, and at the end stops any server left in it.
func cmdPgDir(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 || neg {
		ts.Fatalf("usage: pgdir VAR")
	}
	dir, err := os.MkdirTemp("", "studioctl-script-pg-")
	ts.Check(err)
	ts.Check(os.Chmod(dir, 0o755))
	ts.Setenv(args[0], dir)
	ts.Defer(func() {
		data := filepath.Join(dir, "data")
		if _, err := os.Stat(filepath.Join(data, "postmaster.pid")); err == nil {
			if c, err := pgcluster.New(data, 0, ""); err == nil {
				c.Stop(context.Background())
			}
		}
		os.RemoveAll(dir)
	})
}

// querySQL runs stmt on the script's database and renders its rows.
func querySQL(ts *testscript.TestScript, stmt string) (string, error) {
	url := ts.Getenv("STUDIO_DATABASE_URL")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, err := db.ParseConnConfig(url)
	if err != nil {
		return "", err
	}
	conn, err := db.Connect(ctx, cfg, url)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, stmt, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var out strings.Builder
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return out.String(), err
		}
		cells := make([]string, len(vals))
		for i, v := range vals {
			cells[i] = fmt.Sprint(v)
		}
		out.WriteString(strings.Join(cells, "\t") + "\n")
	}
	return out.String(), rows.Err()
}

// waitsql polls a query until its output matches a regexp (60 s at most).
func cmdWaitSQL(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 || neg {
		ts.Fatalf("usage: waitsql 'QUERY' 'REGEXP'")
	}
	re, err := regexp.Compile("(?m)" + args[1])
	ts.Check(err)
	deadline := time.Now().Add(waitsqlTimeout)
	var last string
	for time.Now().Before(deadline) {
		out, err := querySQL(ts, args[0])
		if err == nil && re.MatchString(out) {
			return
		}
		last = out
		if err != nil {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond) // a poll interval inside a deadline, not synchronisation
	}
	ts.Fatalf("waitsql: no match for %q after %s; last output:\n%s", args[1], waitsqlTimeout, last)
}

// sqlfile runs a file of SQL statements (simple protocol, so several at
// once) on $STUDIO_DATABASE_URL.
func cmdSQLFile(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 || neg {
		ts.Fatalf("usage: sqlfile FILE")
	}
	b, err := os.ReadFile(ts.MkAbs(args[0]))
	ts.Check(err)
	_, err = querySQL(ts, string(b))
	ts.Check(err)
}

// roleurl sets VAR to $STUDIO_DATABASE_URL with the user (and password)
// replaced: roleurl VAR USER [PASSWORD].
func cmdRoleURL(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 2 || len(args) > 3 || neg {
		ts.Fatalf("usage: roleurl VAR USER [PASSWORD]")
	}
	u, err := url.Parse(ts.Getenv("STUDIO_DATABASE_URL"))
	ts.Check(err)
	if len(args) == 3 {
		u.User = url.UserPassword(args[1], args[2])
	} else {
		u.User = url.User(args[1])
	}
	ts.Setenv(args[0], u.String())
}

// sqlenv sets VAR to the one value a query returns: sqlenv VAR 'QUERY'
// (for goldens compared with cmpenv, such as the server's version).
func cmdSQLEnv(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 || neg {
		ts.Fatalf("usage: sqlenv VAR 'QUERY'")
	}
	out, err := querySQL(ts, args[1])
	ts.Check(err)
	ts.Setenv(args[0], strings.TrimSuffix(out, "\n"))
}

// exitcode runs a program and checks its exit status, keeping its stdout
// and stderr for the next commands: exitcode N PROGRAM [ARGS...].
func cmdExitCode(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 2 || neg {
		ts.Fatalf("usage: exitcode N PROGRAM [ARGS...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil || want < 0 {
		ts.Fatalf("usage: exitcode N PROGRAM [ARGS...]: N %q is not an exit status", args[0])
	}
	err = ts.Exec(args[1], args[2:]...)
	got := 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("exitcode: %v", err)
		}
		got = ee.ExitCode()
	}
	if got != want {
		ts.Fatalf("exitcode: %s exited %d, want %d", args[1], got, want)
	}
}

// waitfile polls a file (a background command's redirected output) until
// its content matches a regexp, for at most TIMEOUT: waitfile FILE REGEXP
// TIMEOUT. It is how a script asserts that a --watch showed a change
// within a deadline.
func cmdWaitFile(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 3 || neg {
		ts.Fatalf("usage: waitfile FILE REGEXP TIMEOUT")
	}
	re, err := regexp.Compile("(?m)" + args[1])
	ts.Check(err)
	timeout, err := time.ParseDuration(args[2])
	ts.Check(err)
	start := time.Now()
	deadline := start.Add(timeout)
	var last []byte
	for {
		last, _ = os.ReadFile(ts.MkAbs(args[0]))
		if re.Match(last) {
			ts.Logf("waitfile: %s matched %q after %s", args[0], args[1], time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // a poll interval inside a deadline, not synchronisation
	}
	ts.Fatalf("waitfile: no match for %q in %s after %s; it holds:\n%s", args[1], args[0], timeout, last)
}
