package sdnotify_test

import (
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/sdnotify"
)

// listen listens on a unixgram socket at name, as systemd does for a
// Type=notify unit, and returns what reads one datagram.
func listen(t *testing.T, name string) func() string {
	t.Helper()
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return func() string {
		t.Helper()
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		buf := make([]byte, 4096)
		n, _, err := conn.ReadFromUnix(buf)
		if err != nil {
			t.Fatalf("read a notification: %v", err)
		}
		return string(buf[:n])
	}
}

func env(socket string) func(string) string {
	return func(k string) string {
		if k == sdnotify.EnvSocket {
			return socket
		}
		return ""
	}
}

func TestNotifySendsEachStateAsOneDatagram(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, socket string }{
		{"to a socket file", filepath.Join(t.TempDir(), "notify.sock")},
		{"to an abstract socket, as systemd names it with @", "@studioctl-sdnotify-test-" + t.Name()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			read := listen(t, tt.socket)
			n := sdnotify.FromEnv(env(tt.socket))
			if !n.Enabled() {
				t.Fatal("a notifier with NOTIFY_SOCKET set is not enabled")
			}
			for _, state := range []string{sdnotify.Ready, sdnotify.Stopping} {
				if err := n.Notify(state); err != nil {
					t.Fatal(err)
				}
				if got := read(); got != state {
					t.Errorf("datagram %q, want %q", got, state)
				}
			}
		})
	}
}

func TestWithoutNotifySocketNothingIsSent(t *testing.T) {
	t.Parallel()
	n := sdnotify.FromEnv(env(""))
	if n.Enabled() {
		t.Fatal("a notifier without NOTIFY_SOCKET is enabled")
	}
	if err := n.Notify(sdnotify.Ready); err != nil {
		t.Fatalf("Notify without a socket: %v, want nil", err)
	}
}

func TestANotifySocketThatIsGoneIsAnErrorNamingIt(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(t.TempDir(), "gone.sock")
	err := sdnotify.FromEnv(env(sock)).Notify(sdnotify.Ready)
	if err == nil {
		t.Fatal("Notify to a missing socket succeeded")
	}
	if want := "sd_notify READY=1 to " + sock; len(err.Error()) < len(want) || err.Error()[:len(want)] != want {
		t.Errorf("error %q does not start with %q", err, want)
	}
}
