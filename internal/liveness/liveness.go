// Package liveness holds the one rule every part of studioctl uses to decide
// whether a replica is alive (SPEC §6), so locks, replicas and leases agree.
package liveness

import (
	"fmt"
	"time"
)

// HeartbeatEvery is how often a replica writes its heartbeat.
const HeartbeatEvery = 5 * time.Second

// GoneAfter is how long without a heartbeat makes a replica gone.
const GoneAfter = 15 * time.Second

// LiveSQL returns a boolean SQL expression that is true when the
// studio_replica row aliased as alias is live: a heartbeat within GoneAfter
// of database time, and a state other than stopped. It is false for a NULL
// row (no such replica).
func LiveSQL(alias string) string {
	return fmt.Sprintf("(%[1]s.id IS NOT NULL AND %[1]s.state <> 'stopped' AND %[1]s.heartbeat_at > now() - make_interval(secs => %[2]d))",
		alias, int(GoneAfter/time.Second))
}
