// Package e2efleet holds the end-to-end tests of the designated replica
// (issue 28, docs/schedules.md "Designated replica"): real `studioctl run`
// processes share installation jobs, and for each job only the replica the
// rendezvous hash designates tries the lock at the due time. It checks
// the attempts per due time in steady state and what a kill -9 of a
// designated replica costs its jobs; its opt-in measurements (bench/
// run-fleet.sh) compare 3, 10 and 30 replicas before and after, and the
// cost of an idle fleet. It has only tests.
package e2efleet
