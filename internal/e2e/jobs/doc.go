// Package e2ejobs holds the process-level fault tests of the job runner
// (issue 4, SPEC §5 and §11): real `studioctl run` processes against a real
// PostgreSQL share installation jobs through the shedlock table, and are
// hurt by a timeout, SIGSTOP past lockAtMostFor and kill -9. It has only
// tests; see docs/jobs-faults.md.
package e2ejobs
