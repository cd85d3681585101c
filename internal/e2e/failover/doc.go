// Package e2efailover holds the failover tests of issue 13: a primary and
// a hot standby made with pg_basebackup -R, real `studioctl run` replicas
// on a multi-host URL with target_session_attrs=read-write, the primary
// stopped with pg_ctl stop -m immediate and the standby promoted; and
// replicas that reach only a read-only server. See docs/failover.md.
package e2efailover
