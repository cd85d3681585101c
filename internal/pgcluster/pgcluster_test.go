package pgcluster_test

import (
	"context"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/pgcluster"
)

// A standby's data directory is copied from the primary's, which is also
// the primary's socket directory: it held the socket lock files of servers
// that ran there, each naming their pid. One on the standby's own port whose
// pid a live process has taken since made the standby refuse to start (a
// nemesis run's promote: "lock file ... already exists"). StartStandby
// removes them.
func TestAStandbyStartsDespiteACopiedSocketLockOfALivePid(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "studioctl-pgcluster-") // t.TempDir's parent is not the postgres user's to reach
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ports := make([]int, 2)
	for i := range ports {
		p, err := pgcluster.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = p
	}
	p, err := pgcluster.New(filepath.Join(dir, "primary"), ports[0], "UTC", "fsync=off", "wal_level=replica", "max_wal_senders=5")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Init(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.StopImmediate(context.Background()) })
	// A lock file as a server on the standby's port left it, its pid now
	// a live server's (the primary's postmaster): PostgreSQL takes a pid it
	// may not signal for a dead one, so it must be the postgres user's.
	pid, err := os.ReadFile(filepath.Join(p.DataDir, "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	lock := filepath.Join(p.DataDir, ".s.PGSQL."+strconv.Itoa(ports[1])+".lock")
	body := strings.Join([]string{strings.SplitN(string(pid), "\n", 2)[0], p.DataDir, "0", strconv.Itoa(ports[1]), p.DataDir, ""}, "\n")
	if err := os.WriteFile(lock, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatal(err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(lock, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	s, err := pgcluster.StartStandby(ctx, p, filepath.Join(dir, "standby"), ports[1])
	if err != nil {
		t.Fatalf("start the standby: %v", err)
	}
	t.Cleanup(func() { s.StopImmediate(context.Background()) })
	if !s.Running(ctx) {
		t.Fatal("the standby is not running")
	}
}
