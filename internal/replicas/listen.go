package replicas

import (
	"net"
	"net/netip"
)

// Exposure says where an HTTP address (replica.listen as the replica
// listens on it, or what it recorded in studio_replica.http_addr) can be
// reached from, for the warning at start and doctor's finding (issue 21,
// finding 8): "" for loopback (127.0.0.0/8, ::1, localhost) and for no
// address; "every interface" for an unspecified host (0.0.0.0, ::, or
// none: Go's listener on 0.0.0.0 takes IPv6 as well, and records [::]);
// otherwise the address itself. The page and the stream served there have
// no authentication (docs/status-page.md).
func Exposure(addr string) string {
	if addr == "" {
		return ""
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if host == "" {
		return "every interface"
	}
	if host == "localhost" {
		return ""
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return addr // a name: it may resolve to anything
	}
	switch {
	case ip.IsLoopback():
		return ""
	case ip.IsUnspecified():
		return "every interface"
	default:
		return addr
	}
}
