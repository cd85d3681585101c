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

// FutureTolerance is how far ahead of database time a heartbeat may be and
// still count. Heartbeats are written with the database's now(), so a
// legitimate one is never in the future, except across a failover (or a
// restore) to a server whose clock is behind the old one's: the rows then
// carry the old server's times until each replica's next heartbeat, at
// most HeartbeatEvery later, rewrites them. 5 s absorbs such a step of up
// to 5 s without a replica looking gone; a larger one makes the replicas
// look gone for up to one HeartbeatEvery. A row further ahead was not
// written by a replica's heartbeat (a hand-made row, or one a role with the
// replica's grants inserted, `infinity` included): it is not live, owns
// nothing and is shown as such (docs/leases.md, doctor's
// crashed_replicas; `replicas forget --force` removes it).
const FutureTolerance = 5 * time.Second

// LiveSQL returns a boolean SQL expression that is true when the
// studio_replica row aliased as alias is live: a heartbeat within GoneAfter
// of database time and no more than FutureTolerance ahead of it, and a
// state other than stopped. It is false for a NULL row (no such replica).
func LiveSQL(alias string) string {
	return fmt.Sprintf("(%[1]s.id IS NOT NULL AND %[1]s.state <> 'stopped' AND %[1]s.heartbeat_at > now() - make_interval(secs => %[2]d) AND %[1]s.heartbeat_at <= now() + make_interval(secs => %[3]d))",
		alias, int(GoneAfter/time.Second), int(FutureTolerance/time.Second))
}

// AheadSQL returns a boolean SQL expression that is true when the
// studio_replica row aliased as alias has a heartbeat more than
// FutureTolerance ahead of database time (such a row is not live).
func AheadSQL(alias string) string {
	return fmt.Sprintf("coalesce(%[1]s.heartbeat_at > now() + make_interval(secs => %[2]d), false)",
		alias, int(FutureTolerance/time.Second))
}
