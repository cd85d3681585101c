// Package sdnotify tells systemd about a service's state through the
// notification socket of a Type=notify unit (sd_notify(3)): one datagram
// per state change to the unix socket named by NOTIFY_SOCKET. Without
// NOTIFY_SOCKET it does nothing, so the same binary runs under systemd,
// in a container and in a terminal.
package sdnotify

import (
	"fmt"
	"net"
	"time"
)

// EnvSocket names the socket systemd listens on for this service.
const EnvSocket = "NOTIFY_SOCKET"

// The states studioctl run sends (sd_notify(3)).
const (
	// Ready: start-up is finished (the replica's /readyz passes).
	Ready = "READY=1"
	// Stopping: the service is stopping (the replica drains).
	Stopping = "STOPPING=1"
)

// sendTimeout bounds one datagram: systemd reads its socket at once, and a
// replica must never hang on a supervisor that does not.
const sendTimeout = 2 * time.Second

// Notifier sends states to one notification socket. The nil Notifier (no
// NOTIFY_SOCKET) sends nothing.
type Notifier struct {
	addr *net.UnixAddr
}

// FromEnv returns the Notifier of NOTIFY_SOCKET read through getenv, or
// nil when it is unset. An address starting with @ is an abstract socket,
// as systemd writes it.
func FromEnv(getenv func(string) string) *Notifier {
	s := getenv(EnvSocket)
	if s == "" {
		return nil
	}
	return &Notifier{addr: &net.UnixAddr{Name: s, Net: "unixgram"}}
}

// Enabled reports whether n sends anything.
func (n *Notifier) Enabled() bool { return n != nil }

// Notify sends state (for example Ready) in one datagram. It does nothing
// on the nil Notifier.
func (n *Notifier) Notify(state string) error {
	if n == nil {
		return nil
	}
	conn, err := net.DialUnix("unixgram", nil, n.addr)
	if err != nil {
		return fmt.Errorf("sd_notify %s to %s: %w", state, n.addr.Name, err)
	}
	defer conn.Close()
	conn.SetWriteDeadline(time.Now().Add(sendTimeout))
	if _, err := conn.Write([]byte(state)); err != nil {
		return fmt.Errorf("sd_notify %s to %s: %w", state, n.addr.Name, err)
	}
	return nil
}
