package e2edeploy

import (
	"bufio"
	"bytes"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/liveness"
	"github.com/studioctl/studioctl/internal/sdnotify"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

// unit is a parsed systemd unit file: section -> key -> values in order.
type unit map[string]map[string][]string

func (u unit) get(section, key string) string {
	v := u[section][key]
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

func parseUnit(t testing.TB, b []byte) unit {
	t.Helper()
	u := unit{}
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "["):
			section = strings.Trim(line, "[]")
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("unit line %q is no key=value in a section", line)
			}
			u[section][k] = append(u[section][k], v)
		}
	}
	return u
}

// TestSystemdUnits checks both units against the binary: Type=notify (run
// notifies), KillMode=control-group (a killed replica's job processes go
// with it), restart on failure, a TimeoutStopSec that covers the drain,
// flags the binary accepts, and systemd-analyze verify without a word.
func TestSystemdUnits(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatalf("systemd-analyze is needed to verify the units (apt-get install systemd): %v", err)
	}
	dir := t.TempDir()
	for _, tt := range []struct{ file, instance string }{
		{"studioctl.service", "studioctl.service"},
		{"studioctl@.service", "studioctl@web-1.service"},
	} {
		t.Run(tt.file, func(t *testing.T) {
			b := readDeploy(t, "systemd", tt.file)
			u := parseUnit(t, b)
			s := "Service"
			for key, want := range map[string]string{
				"Type": "notify", "NotifyAccess": "main", "KillMode": "control-group", "KillSignal": "SIGTERM", "Restart": "on-failure",
			} {
				if got := u.get(s, key); got != want {
					t.Errorf("%s=%q, want %q", key, got, want)
				}
			}
			// After a crash the replica id stays live until its last
			// heartbeat is liveness.GoneAfter old, and a restart is
			// refused meanwhile: the restarts in that time must stay
			// under systemd's default start limit (5 starts in 10 s),
			// or the unit fails for good (seen under systemd-nspawn with
			// RestartSec=2s: four refused starts).
			restart, err := time.ParseDuration(u.get(s, "RestartSec"))
			if err != nil {
				t.Fatalf("RestartSec: %v", err)
			}
			const startLimitBurst, startLimitInterval = 5, 10 * time.Second
			if starts := int(startLimitInterval/restart) + 1; starts >= startLimitBurst {
				t.Errorf("RestartSec=%s: %d starts fit in systemd's %s start limit interval (burst %d) while a crashed replica's id is live for %s",
					restart, starts, startLimitInterval, startLimitBurst, liveness.GoneAfter)
			}
			stop, err := time.ParseDuration(u.get(s, "TimeoutStopSec"))
			if err != nil {
				t.Fatalf("TimeoutStopSec: %v", err)
			}
			env := map[string]string{}
			for _, e := range u[s]["Environment"] {
				k, v, _ := strings.Cut(e, "=")
				env[k] = strings.ReplaceAll(v, "%i", "web-1")
			}
			checkGrace(t, tt.file+" TimeoutStopSec", stop, checkEnv(t, tt.file, env))
			argv := strings.Fields(u.get(s, "ExecStart"))
			if len(argv) < 2 || argv[1] != "run" {
				t.Fatalf("ExecStart=%q does not run `studioctl run`", u.get(s, "ExecStart"))
			}
			checkArgs(t, tt.file+" ExecStart", argv[1:])

			// systemd-analyze verify wants the binary where ExecStart
			// says: the test's binary stands in for it.
			text := strings.ReplaceAll(string(b), argv[0], studioctlBin.Path)
			if err := os.WriteFile(filepath.Join(dir, tt.file), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(analyze, "verify", "./"+tt.instance)
			cmd.Dir = dir
			out, err := cmd.CombinedOutput()
			if err != nil || len(bytes.TrimSpace(out)) > 0 {
				t.Errorf("systemd-analyze verify %s: %v\n%s", tt.instance, err, out)
			}
		})
	}
}

// TestRunNotifiesSystemd runs a replica as a Type=notify unit would, with
// NOTIFY_SOCKET naming a socket the test listens on: READY=1 comes once
// and only when /readyz passes, STOPPING=1 at the drain (SIGTERM) while the
// process still drains, and nothing else.
func TestRunNotifiesSystemd(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	read := func() string {
		t.Helper()
		conn.SetReadDeadline(time.Now().Add(replicaproc.ReadyTimeout))
		buf := make([]byte, 4096)
		n, _, err := conn.ReadFromUnix(buf)
		if err != nil {
			t.Fatalf("no notification: %v", err)
		}
		return string(buf[:n])
	}

	p := studioctlBin.Start(t, replicaproc.Options{ID: "notify-1", DatabaseURL: pgtest.NewDB(t),
		Env: []string{sdnotify.EnvSocket + "=" + sock, "STUDIO_DRAIN_DELAY=2s"}})
	if got := read(); got != sdnotify.Ready {
		t.Fatalf("first notification %q, want %q", got, sdnotify.Ready)
	}
	addr := p.WaitReady(t)
	if code, body, err := replicaproc.Get(addr, "/readyz"); err != nil || code != http.StatusOK {
		t.Fatalf("READY=1 was sent but /readyz answers %d %q %v", code, body, err)
	}

	p.Signal(t, syscall.SIGTERM)
	if got := read(); got != sdnotify.Stopping {
		t.Fatalf("notification after SIGTERM %q, want %q", got, sdnotify.Stopping)
	}
	if p.Exited() {
		t.Errorf("STOPPING=1 came after the exit, want it at the start of the drain")
	}
	if code := p.WaitExit(t, replicaproc.ExitTimeout); code != 0 {
		t.Errorf("exit code after a drain %d, want 0", code)
	}
	// Nothing more.
	conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	buf := make([]byte, 4096)
	if n, _, err := conn.ReadFromUnix(buf); err == nil {
		t.Errorf("unexpected notification %q after STOPPING=1", buf[:n])
	}
}
