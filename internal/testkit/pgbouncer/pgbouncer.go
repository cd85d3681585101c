// Package pgbouncer runs a real PgBouncer in front of a test PostgreSQL, in
// session or transaction mode, for the pooler tests of docs/poolers.md. It
// uses Debian's pgbouncer package (/usr/sbin/pgbouncer); .ci/run installs it
// when it is missing.
package pgbouncer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

// Pool modes (pool_mode).
const (
	Session     = "session"
	Transaction = "transaction"
	Statement   = "statement"
)

// Defaults of a test bouncer.
const (
	// DefaultPoolSize is default_pool_size: server connections per
	// database and user. Small, so that clients share them.
	DefaultPoolSize = 4
	// startTimeout bounds the wait for the listening port.
	startTimeout = 15 * time.Second
	// stopTimeout bounds the wait for the process after SIGINT.
	stopTimeout = 10 * time.Second
)

// Options describe one bouncer.
type Options struct {
	Dir          string   // its folder: config, auth file, log
	Mode         string   // pool_mode: Session, Transaction or Statement
	UpstreamPort int      // the PostgreSQL server's TCP port on 127.0.0.1
	PoolSize     int      // default_pool_size; 0: DefaultPoolSize
	Users        []string // roles that may log in (trust); postgres is always one
	Port         int      // 0: a free port
}

// Bouncer is one running PgBouncer process.
type Bouncer struct {
	Port int
	Dir  string
	Mode string

	cmd    *exec.Cmd
	exited chan struct{} // closed once the process is reaped
	werr   error         // its exit, once exited is closed
}

// Find returns the pgbouncer binary: $PATH, then Debian's /usr/sbin.
func Find() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	const debian = "/usr/sbin/pgbouncer"
	if _, err := os.Stat(debian); err == nil {
		return debian, nil
	}
	return "", errors.New("pgbouncer not found (install Debian's pgbouncer package: apt-get install pgbouncer)")
}

// Start writes the configuration and starts PgBouncer, listening on
// 127.0.0.1 only, and returns once it accepts connections. PgBouncer
// refuses to run as root: as root it runs as the postgres user.
func Start(ctx context.Context, o Options) (*Bouncer, error) {
	bin, err := Find()
	if err != nil {
		return nil, err
	}
	switch o.Mode {
	case Session, Transaction, Statement:
	default:
		return nil, fmt.Errorf("pgbouncer: mode %q: want session, transaction or statement", o.Mode)
	}
	if o.PoolSize <= 0 {
		o.PoolSize = DefaultPoolSize
	}
	if o.Port == 0 {
		if o.Port, err = freePort(); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	users := append([]string{"postgres"}, o.Users...)
	var auth strings.Builder
	for _, u := range users {
		fmt.Fprintf(&auth, "%q \"\"\n", u)
	}
	ini := fmt.Sprintf(`[databases]
* = host=127.0.0.1 port=%d

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = %s
default_pool_size = %d
max_client_conn = 500
logfile = %s
pidfile = %s
admin_users = postgres
ignore_startup_parameters = extra_float_digits
server_reset_query = DISCARD ALL
`, o.UpstreamPort, o.Port, filepath.Join(o.Dir, "userlist.txt"), o.Mode, o.PoolSize,
		filepath.Join(o.Dir, "pgbouncer.log"), filepath.Join(o.Dir, "pgbouncer.pid"))
	if err := os.WriteFile(filepath.Join(o.Dir, "userlist.txt"), []byte(auth.String()), 0o644); err != nil {
		return nil, err
	}
	iniPath := filepath.Join(o.Dir, "pgbouncer.ini")
	if err := os.WriteFile(iniPath, []byte(ini), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, iniPath)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("pgbouncer refuses root and there is no postgres user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(o.Dir, uid, gid); err != nil {
			return nil, err
		}
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		cmd.Dir = "/"
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start pgbouncer: %w", err)
	}
	b := &Bouncer{Port: o.Port, Dir: o.Dir, Mode: o.Mode, cmd: cmd, exited: make(chan struct{})}
	go func() { b.werr = cmd.Wait(); close(b.exited) }()
	deadline := time.Now().Add(startTimeout)
	for {
		c, err := net.DialTimeout("tcp", b.addr(), time.Second)
		if err == nil {
			c.Close()
			return b, nil
		}
		select {
		case <-b.exited:
			return nil, fmt.Errorf("pgbouncer exited at start: %v: %s%s", b.werr, strings.TrimSpace(out.String()), b.logTail())
		case <-ctx.Done():
			b.Stop()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			b.Stop()
			return nil, fmt.Errorf("pgbouncer did not listen on %s within %s%s", b.addr(), startTimeout, b.logTail())
		}
	}
}

func (b *Bouncer) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(b.Port)) }

// Log is what PgBouncer logged so far.
func (b *Bouncer) Log() string {
	data, _ := os.ReadFile(filepath.Join(b.Dir, "pgbouncer.log"))
	return string(data)
}

func (b *Bouncer) logTail() string {
	l := b.Log()
	if len(l) > 2000 {
		l = l[len(l)-2000:]
	}
	if l == "" {
		return ""
	}
	return "\npgbouncer log:\n" + l
}

// Stop ends PgBouncer (SIGINT: a fast shutdown, SIGKILL after stopTimeout)
// and waits for it.
func (b *Bouncer) Stop() error {
	select {
	case <-b.exited:
		return nil
	default:
	}
	_ = b.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-b.exited:
		return nil
	case <-time.After(stopTimeout):
		_ = b.cmd.Process.Kill()
		<-b.exited
		return fmt.Errorf("pgbouncer did not stop within %s: killed", stopTimeout)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ForTest starts a bouncer in mode in front of the test harness's
// PostgreSQL (internal/testkit/pgtest) and stops it when the test ends. Its folder
// sits directly under the temporary directory, where the postgres user
// can read it. A missing pgbouncer fails the test: .ci/run installs it.
func ForTest(t testing.TB, mode string, poolSize int) *Bouncer {
	t.Helper()
	u, err := url.Parse(pgtest.AdminURL(t))
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatalf("pgbouncer: the harness URL has no port: %v", err)
	}
	dir, err := os.MkdirTemp("", "studioctl-pgbouncer-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout+5*time.Second)
	defer cancel()
	b, err := Start(ctx, Options{Dir: dir, Mode: mode, UpstreamPort: port, PoolSize: poolSize})
	if err != nil {
		os.RemoveAll(dir)
		t.Fatalf("pgbouncer: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Stop(); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("pgbouncer log (%s mode):\n%s", mode, b.logTail())
		}
		os.RemoveAll(dir)
	})
	return b
}

// Through returns dbURL (a postgres:// URL of the harness) with its host
// and port replaced by the bouncer's: the same database, user and
// password, through the pooler.
func (b *Bouncer) Through(t testing.TB, dbURL string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = b.addr()
	return u.String()
}
