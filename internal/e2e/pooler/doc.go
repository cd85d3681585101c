// Package e2epooler holds the end-to-end tests of docs/poolers.md: real
// `studioctl run` replicas and operator commands through a real PgBouncer
// (internal/testkit/pgbouncer) in session and transaction mode, with and without
// database.listen_url.
package e2epooler
