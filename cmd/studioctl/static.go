package main

// The release binary runs in a container image built FROM scratch
// (Containerfile): no /usr/share/zoneinfo and no /etc/ssl/certs there. The
// zone database and the CA roots come inside the binary instead; on a
// host that has them, Go prefers the system's (deploy/README.md).
import (
	_ "time/tzdata" // about 450 KB: time.LoadLocation without /usr/share/zoneinfo

	_ "golang.org/x/crypto/x509roots/fallback" // CA roots when the system has none
)
