package embedded

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/studioctl/studioctl/internal/pgcluster"
)

// How the embedded cluster authenticates (docs/embedded.md):
//
//   - The server listens on 127.0.0.1 only, and on a Unix socket inside its
//     own data directory, which initdb makes 0700 and which belongs to the
//     user that runs the server (postgres when studioctl runs as root).
//   - Every connection, socket or TCP, must prove the postgres role's
//     password with SCRAM-SHA-256. There is no trust line and no replication
//     line in pg_hba.conf.
//   - The password is 32 bytes from crypto/rand, hex-encoded, kept in
//     Dir/pgpass (libpq's PGPASSFILE format), mode 0600, owned by the user
//     that runs studioctl. As root that is root: the postgres user runs the
//     server but cannot read the file, other local users can read neither
//     the file nor the socket directory.
//
// SCRAM on loopback rather than peer on a socket: as root, studioctl
// connects as root while the server runs as postgres, which peer would
// refuse without an ident map; and a socket path under a user's data folder
// may exceed the 107 bytes a socket address can hold.

// passFileName is the password file, beside data/.
const passFileName = "pgpass"

// hbaConf is the whole pg_hba.conf of the embedded cluster.
const hbaConf = `# Written by studioctl (docs/embedded.md). Every connection proves the
# password kept in ../pgpass with SCRAM-SHA-256. No trust, no replication.
# TYPE  DATABASE  USER  ADDRESS        METHOD
local   all       all                  scram-sha-256
host    all       all   127.0.0.1/32   scram-sha-256
host    all       all   ::1/128        scram-sha-256
`

// upgradeHBA is pg_hba.conf only while studioctl sets the password of a
// stopped cluster that an older studioctl made with trust: the postgres
// role, over the socket in the 0700 data directory, which only the data's
// owner (and root) can reach. No TCP connection is accepted meanwhile.
const upgradeHBA = "# Written by studioctl while it sets a password; replaced at once.\nlocal postgres postgres trust\n"

// serverSettings are the embedded server's settings beyond pgcluster's
// (listen_addresses=127.0.0.1, the socket in the data directory).
var serverSettings = []string{"password_encryption=scram-sha-256", "unix_socket_permissions=0700"}

// secureTimeout bounds the wait for a reloaded pg_hba.conf to refuse a
// connection without a password.
const secureTimeout = 15 * time.Second

// PasswordFile is where the postgres role's password is kept.
func (e *Embedded) PasswordFile() string { return filepath.Join(e.Dir, passFileName) }

func (e *Embedded) hbaFile() string { return filepath.Join(e.dataDir(), "pg_hba.conf") }

// newPassword returns 32 random bytes, hex-encoded: no character that a
// URL, a pgpass line or a SQL literal would need to escape.
func newPassword() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// readPassword returns the password in the password file, "" when there is
// none. It refuses a file that others could read or that belongs to another
// user: the password would not be a secret.
func (e *Embedded) readPassword() (string, error) {
	return readPassFile(e.PasswordFile())
}

// readPassFile returns the password in the pgpass file name, "" when there
// is none (readPassword's checks).
func readPassFile(name string) (string, error) {
	f, err := os.Open(name)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return "", fmt.Errorf("password file %s has mode %#o: others may read it; make it 0600 (chmod 600 %s)", name, perm, name)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return "", fmt.Errorf("password file %s belongs to uid %d, not to the user running studioctl (uid %d)", name, st.Uid, os.Geteuid())
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Split(line, ":")
		if len(fields) != 5 || fields[4] == "" {
			return "", fmt.Errorf("password file %s: want one line host:port:database:user:password", name)
		}
		return fields[4], nil
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("password file %s holds no password", name)
}

// writePassword writes the password file, mode 0600, atomically.
func (e *Embedded) writePassword(pw string) error {
	return writeFileAtomic(e.PasswordFile(), []byte(Host+":*:*:"+User+":"+pw+"\n"), -1, -1)
}

// writeFileAtomic writes name through a 0600 temporary file and a rename,
// owned by uid:gid when they are not -1.
func writeFileAtomic(name string, data []byte, uid, gid int) error {
	f, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".tmp-")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op once renamed
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if uid != -1 {
		if err := f.Chown(uid, gid); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, name)
}

// writeHBA replaces pg_hba.conf, owned like the data directory so the
// server, which may run as another user, can read it.
func (e *Embedded) writeHBA(content string) error {
	fi, err := os.Stat(e.dataDir())
	if err != nil {
		return err
	}
	uid, gid := -1, -1
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		uid, gid = int(st.Uid), int(st.Gid)
	}
	if err := writeFileAtomic(e.hbaFile(), []byte(content), uid, gid); err != nil {
		return fmt.Errorf("write %s: %w", e.hbaFile(), err)
	}
	return nil
}

// trusting reports whether pg_hba.conf has a trust line (an older studioctl
// wrote one for every connection).
func (e *Embedded) trusting() (bool, error) {
	b, err := os.ReadFile(e.hbaFile())
	if err != nil {
		return false, err
	}
	return hasTrustLine(b), nil
}

func hasTrustLine(conf []byte) bool {
	sc := bufio.NewScanner(bytes.NewReader(conf))
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		for _, w := range strings.Fields(line) {
			if strings.EqualFold(w, "trust") {
				return true
			}
		}
	}
	return false
}

// initCluster runs initdb with SCRAM authentication and the password pw.
// initdb reads it from a temporary file that the server's user can read
// (as root, that is postgres, which cannot read the password file).
func (e *Embedded) initCluster(ctx context.Context, c *pgcluster.Cluster, pw string) error {
	uid, gid := -1, -1
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return fmt.Errorf("look up the postgres user: %w", err)
		}
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
	}
	tmp := filepath.Join(e.Dir, ".initdb-password")
	if err := writeFileAtomic(tmp, []byte(pw+"\n"), uid, gid); err != nil {
		return err
	}
	defer os.Remove(tmp)
	c.Auth, c.PwFile = "scram-sha-256", tmp
	if err := c.Init(ctx); err != nil {
		return err
	}
	// initdb's own file allows replication; ours does not.
	return e.writeHBA(hbaConf)
}

// secure sets a password on a cluster that has none studioctl knows, and
// replaces a pg_hba.conf with trust lines: a data directory made by an older
// studioctl, or one whose password file was removed. A stopped cluster is
// started with upgradeHBA for the change and stopped again; a running one
// must still trust its socket (an older studioctl's), else it is refused.
func (e *Embedded) secure(ctx context.Context, c *pgcluster.Cluster, pw string, trusting bool) (err error) {
	running := c.Running(ctx)
	if running && !trusting {
		return fmt.Errorf("the server running in %s asks for a password and %s does not hold it: "+
			"stop the server (studioctl embedded stop --force) and run again, studioctl then sets a new password", e.dataDir(), e.PasswordFile())
	}
	if !running {
		if err := e.writeHBA(upgradeHBA); err != nil {
			return err
		}
		if err := c.Start(ctx); err != nil {
			return err
		}
		defer func() {
			// Never leave the one-line trust running: stop on failure.
			if err != nil {
				c.Stop(context.WithoutCancel(ctx))
			}
		}()
	}
	if err := setPassword(ctx, e.dataDir(), c.Port, pw); err != nil {
		return fmt.Errorf("set the postgres password: %w", err)
	}
	if err := e.writeHBA(hbaConf); err != nil {
		return err
	}
	if !running {
		// Stopped again, the server reads the new pg_hba.conf when it starts.
		return c.Stop(ctx)
	}
	if err := reload(ctx, c.Port, pw); err != nil {
		return err
	}
	return waitRefused(ctx, c.Port)
}

// setPassword connects over the socket in dataDir without a password (the
// trust that secure replaces) and stores pw's SCRAM verifier for postgres,
// so the password itself never reaches the server or its log.
func setPassword(ctx context.Context, dataDir string, port int, pw string) error {
	cfg, err := pgx.ParseConfig("")
	if err != nil {
		return err
	}
	cfg.Host, cfg.Port, cfg.User, cfg.Database, cfg.Password = dataDir, uint16(port), User, "postgres", ""
	cfg.TLSConfig, cfg.Fallbacks = nil, nil
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	v, err := scramVerifier(pw)
	if err != nil {
		return err
	}
	// ALTER ROLE takes no parameters; v is base64, '$' and ':' only.
	_, err = conn.Exec(ctx, "ALTER ROLE postgres PASSWORD '"+v+"'")
	return err
}

// reload asks the server to read pg_hba.conf again.
func reload(ctx context.Context, port int, pw string) error {
	conn, err := connect(ctx, URL(port, pw, "postgres"), pw)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		return fmt.Errorf("reload pg_hba.conf: %w", err)
	}
	return nil
}

// waitRefused polls until a connection without a password is refused over
// TCP: the reloaded pg_hba.conf is in force.
func waitRefused(ctx context.Context, port int) error {
	ctx, cancel := context.WithTimeout(ctx, secureTimeout)
	defer cancel()
	for {
		err := tryNoPassword(ctx, port)
		if isAuthError(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the server on port %d still accepts connections without a password after reloading pg_hba.conf (%v)", port, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// tryNoPassword connects to 127.0.0.1:port as postgres without a password.
func tryNoPassword(ctx context.Context, port int) error {
	cfg, err := pgconn.ParseConfig("")
	if err != nil {
		return err
	}
	cfg.Host, cfg.Port, cfg.User, cfg.Database, cfg.Password = Host, uint16(port), User, "postgres", ""
	cfg.TLSConfig, cfg.Fallbacks = nil, nil
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	conn.Close(ctx)
	return nil
}

// isAuthError reports a refusal by pg_hba.conf or a failed password.
func isAuthError(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "28P01" || pgErr.Code == "28000")
}

// scramIterations is PostgreSQL's default scram_iterations.
const scramIterations = 4096

// scramVerifier computes what PostgreSQL stores for a SCRAM-SHA-256
// password (RFC 5802, RFC 7677): SCRAM-SHA-256$iter:salt$StoredKey:ServerKey.
func scramVerifier(pw string) (string, error) {
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	salted, err := pbkdf2.Key(sha256.New, pw, salt, scramIterations, sha256.Size)
	if err != nil {
		return "", err
	}
	mac := func(key []byte, msg string) []byte {
		h := hmac.New(sha256.New, key)
		h.Write([]byte(msg))
		return h.Sum(nil)
	}
	stored := sha256.Sum256(mac(salted, "Client Key"))
	server := mac(salted, "Server Key")
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("SCRAM-SHA-256$%d:%s$%s:%s", scramIterations, b64(salt), b64(stored[:]), b64(server)), nil
}
