// Package e2eleases holds the process-level tests of the cluster leases
// (issue 10, SPEC §7): real `studioctl run` processes with a clusters:
// list and a clusters: owned job share the clusters; a kill -9 of an owner
// and a drain move them. The job records each of its executions, with its
// cluster and replica, in a table of its own. The opt-in benchmarks
// (STUDIO_BENCH_LEASES=1) measure what docs/benchmarks.md reports. It has
// only tests.
package e2eleases
