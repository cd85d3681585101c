// Package e2e holds the fault tests of the replica process: real
// `studioctl run` processes against a real PostgreSQL, hurt by kill -9,
// SIGSTOP, terminated backends, a database restart and a black-holed
// network (SPEC §11). It has only tests; see docs/replica-faults.md.
package e2e
