// Package e2enemesis is the nemesis run of issue 26: five real `studioctl
// run` replicas on a primary with a synchronous standby, jobs that record
// every execution in a table of their own with a fenced write, a nemesis
// that breaks things at random from a printed seed, and an independent
// checker that reads only what the jobs recorded and PostgreSQL's own
// tables. See docs/reliability.md.
package e2enemesis
