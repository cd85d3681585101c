// Package pgcluster runs a PostgreSQL cluster from the binaries installed on
// the machine: initdb, pg_ctl and postgres. The embedded default database and
// the test harness both stand on it. As root it runs every binary as the
// postgres user, because PostgreSQL refuses to run as root.
package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// startTimeout bounds how long pg_ctl waits for a cluster to accept connections.
const startTimeout = 60 * time.Second

// ErrNoBinaries is returned when initdb and pg_ctl cannot be found.
var ErrNoBinaries = errors.New("postgresql binaries (initdb, pg_ctl) not found on PATH or in /usr/lib/postgresql/*/bin: " +
	"install PostgreSQL (for example `apt-get install postgresql`) or set database.url / STUDIO_DATABASE_URL")

// searchDirs are the usual install folders, tried after PATH.
func searchDirs() []string {
	var dirs []string
	for _, pattern := range []string{"/usr/lib/postgresql/*/bin", "/usr/pgsql-*/bin", "/opt/homebrew/opt/postgresql@*/bin", "/usr/local/opt/postgresql@*/bin"} {
		m, _ := filepath.Glob(pattern)
		// Highest version first.
		sort.Slice(m, func(i, j int) bool { return versionOf(m[i]) > versionOf(m[j]) })
		dirs = append(dirs, m...)
	}
	return append(dirs, "/usr/local/pgsql/bin", "/opt/homebrew/bin", "/usr/local/bin")
}

func versionOf(dir string) int {
	for _, part := range strings.Split(dir, string(filepath.Separator)) {
		part = strings.TrimPrefix(strings.TrimPrefix(part, "pgsql-"), "postgresql@")
		if n, err := strconv.Atoi(part); err == nil {
			return n
		}
	}
	return 0
}

// FindBinDir returns the folder that holds initdb, pg_ctl and postgres.
func FindBinDir() (string, error) {
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		dir := filepath.Dir(p)
		if hasBinaries(dir) {
			return dir, nil
		}
	}
	for _, dir := range searchDirs() {
		if hasBinaries(dir) {
			return dir, nil
		}
	}
	return "", ErrNoBinaries
}

func hasBinaries(dir string) bool {
	for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.IsDir() {
			return false
		}
	}
	return true
}

// Cluster is one PostgreSQL data directory and the server that runs on it.
type Cluster struct {
	BinDir   string   // folder of initdb, pg_ctl, postgres
	DataDir  string   // PGDATA
	Port     int      // TCP port on 127.0.0.1
	TimeZone string   // the server's default time zone
	Settings []string // extra "name=value" server settings
	Auth     string   // initdb --auth: the method for every connection (trust when empty)
	PwFile   string   // initdb --pwfile: a file holding the superuser's password (none when empty)

	owner *user.User // non-nil when running as root: the postgres user
}

// New prepares a cluster description. It finds the binaries and, as root, the
// postgres user that will own the data.
func New(dataDir string, port int, timeZone string, settings ...string) (*Cluster, error) {
	bin, err := FindBinDir()
	if err != nil {
		return nil, err
	}
	c := &Cluster{BinDir: bin, DataDir: dataDir, Port: port, TimeZone: timeZone, Settings: settings}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root, PostgreSQL must run as the postgres user, which does not exist: %w", err)
		}
		c.owner = u
	}
	return c, nil
}

// LogFile is where the server writes its log.
func (c *Cluster) LogFile() string { return filepath.Join(c.DataDir, "server.log") }

// Initialized reports whether DataDir already holds a cluster.
func (c *Cluster) Initialized() bool {
	_, err := os.Stat(filepath.Join(c.DataDir, "PG_VERSION"))
	return err == nil
}

// Init runs initdb: superuser postgres, Auth (default trust) authentication,
// the password in PwFile if set, UTF8, C locale.
func (c *Cluster) Init(ctx context.Context) error {
	if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
		return fmt.Errorf("create data directory: %w", err)
	}
	if err := c.chown(c.DataDir); err != nil {
		return err
	}
	auth := c.Auth
	if auth == "" {
		auth = "trust"
	}
	args := []string{"-D", c.DataDir, "-U", "postgres", "--auth=" + auth, "-E", "UTF8", "--locale=C", "--no-sync"}
	if c.PwFile != "" {
		args = append(args, "--pwfile="+c.PwFile)
	}
	_, err := c.run(ctx, "initdb", args...)
	if err != nil {
		return fmt.Errorf("initdb: %w", err)
	}
	return nil
}

// Start starts the server and waits until it accepts connections.
func (c *Cluster) Start(ctx context.Context) error {
	opts := []string{
		"-p", strconv.Itoa(c.Port),
		"-k", c.DataDir,
		"-c", "listen_addresses=127.0.0.1",
	}
	if c.TimeZone != "" {
		opts = append(opts, "-c", "timezone="+c.TimeZone, "-c", "log_timezone="+c.TimeZone)
	}
	for _, s := range c.Settings {
		opts = append(opts, "-c", s)
	}
	// Close the log file descriptor handed to postgres so the caller is not
	// tied to the server's lifetime.
	_, err := c.run(ctx, "pg_ctl", "start", "-w", "-t", strconv.Itoa(int(startTimeout/time.Second)),
		"-D", c.DataDir, "-l", c.LogFile(), "-o", strings.Join(opts, " "))
	if err != nil {
		return fmt.Errorf("pg_ctl start: %w%s", err, c.logTail())
	}
	return nil
}

// Stop stops the server with the fast mode and waits for it.
func (c *Cluster) Stop(ctx context.Context) error {
	if _, err := c.run(ctx, "pg_ctl", "stop", "-w", "-m", "fast", "-D", c.DataDir); err != nil {
		return fmt.Errorf("pg_ctl stop: %w", err)
	}
	return nil
}

// Restart stops and starts the server (used by fault tests).
func (c *Cluster) Restart(ctx context.Context) error {
	if err := c.Stop(ctx); err != nil {
		return err
	}
	return c.Start(ctx)
}

// Running reports whether a server runs on DataDir.
func (c *Cluster) Running(ctx context.Context) bool {
	_, err := c.run(ctx, "pg_ctl", "status", "-D", c.DataDir)
	return err == nil
}

// URL is a connection string for database db as the postgres superuser.
func (c *Cluster) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.Port, db)
}

func (c *Cluster) logTail() string {
	b, err := os.ReadFile(c.LogFile())
	if err != nil || len(b) == 0 {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return "\nserver log (" + c.LogFile() + "):\n" + string(b)
}

func (c *Cluster) run(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.BinDir, name), args...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	// pg_ctl start leaves postgres running: put it in its own process group so
	// a terminal's Ctrl-C aimed at studioctl does not stop the server.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if c.owner != nil {
		uid, _ := strconv.Atoi(c.owner.Uid)
		gid, _ := strconv.Atoi(c.owner.Gid)
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		cmd.Dir = "/"
		cmd.Env = append(cmd.Env, "HOME="+c.owner.HomeDir)
	}
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("%s: %w: %s", name, err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// chown gives path to the postgres user when running as root.
func (c *Cluster) chown(path string) error {
	if c.owner == nil {
		return nil
	}
	uid, _ := strconv.Atoi(c.owner.Uid)
	gid, _ := strconv.Atoi(c.owner.Gid)
	if err := os.Chown(path, uid, gid); err != nil {
		return fmt.Errorf("give %s to the postgres user: %w", path, err)
	}
	return nil
}

// PrepareParent creates dir (mode 0755) so that, as root, the postgres user
// can reach the data directory inside it.
func (c *Cluster) PrepareParent(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if c.owner == nil {
		return nil
	}
	// Every parent must be searchable by the postgres user.
	for d := dir; d != "/" && d != "."; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("the postgres user cannot reach %s (mode %v): choose a data folder outside private directories", d, fi.Mode().Perm())
		}
	}
	return nil
}

// FreePort asks the kernel for a free TCP port on 127.0.0.1.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// StopImmediate stops the server with the immediate mode: no checkpoint,
// no goodbye to the clients, as a crash would (failover tests).
func (c *Cluster) StopImmediate(ctx context.Context) error {
	if _, err := c.run(ctx, "pg_ctl", "stop", "-w", "-m", "immediate", "-D", c.DataDir); err != nil {
		return fmt.Errorf("pg_ctl stop -m immediate: %w", err)
	}
	return nil
}

// StartStandby makes a hot standby of primary in dataDir with
// `pg_basebackup -R` (streaming the WAL, standby.signal and
// primary_conninfo written), listening on port, and starts it. The primary
// must accept replication connections from 127.0.0.1 as postgres, which
// initdb's trust pg_hba.conf does. The standby gets the primary's time
// zone and settings but synchronous_standby_names: once promoted it has no
// standby of its own, and waiting for one would hang every commit.
func StartStandby(ctx context.Context, primary *Cluster, dataDir string, port int) (*Cluster, error) {
	var settings []string
	for _, kv := range primary.Settings {
		if !strings.HasPrefix(strings.TrimSpace(kv), "synchronous_standby_names") {
			settings = append(settings, kv)
		}
	}
	s := &Cluster{BinDir: primary.BinDir, DataDir: dataDir, Port: port, TimeZone: primary.TimeZone,
		Settings: settings, Auth: primary.Auth, owner: primary.owner}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create standby data directory: %w", err)
	}
	if err := s.chown(dataDir); err != nil {
		return nil, err
	}
	if _, err := s.run(ctx, "pg_basebackup", "-D", dataDir, "-R", "-X", "stream", "-c", "fast",
		"-h", "127.0.0.1", "-p", strconv.Itoa(primary.Port), "-U", "postgres", "--no-sync"); err != nil {
		return nil, fmt.Errorf("pg_basebackup: %w", err)
	}
	// The copy holds the primary's log; the standby writes its own.
	os.Remove(s.LogFile())
	// The data directory is also the socket directory (-k), so the copy
	// holds the socket lock files of every server that ran in the one it
	// came from, each with that server's pid. A lock file on this port
	// whose pid another PostgreSQL process has taken since (pids are
	// reused fast on a busy machine) makes the standby refuse to start
	// ("lock file already exists"): a nemesis run's promote failed so.
	// They are not the standby's: remove them.
	if stale, err := filepath.Glob(filepath.Join(dataDir, ".s.PGSQL.*")); err == nil {
		for _, f := range stale {
			os.Remove(f)
		}
	}
	if err := s.Start(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// Promote turns a standby into a primary (pg_ctl promote) and waits until
// it accepts writes.
func (c *Cluster) Promote(ctx context.Context) error {
	if _, err := c.run(ctx, "pg_ctl", "promote", "-w", "-t", strconv.Itoa(int(startTimeout/time.Second)), "-D", c.DataDir); err != nil {
		return fmt.Errorf("pg_ctl promote: %w%s", err, c.logTail())
	}
	return nil
}
