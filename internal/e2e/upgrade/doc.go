// Package e2eupgrade holds the rolling-upgrade test of docs/upgrades.md: it
// builds studioctl from an earlier commit of this repository (the last one
// whose newest migration is 00006) and from the working tree (its newest), runs
// two old replicas on a fresh database, starts a new one that migrates it,
// and checks from the jobs' own records that the old ones keep running
// their jobs beside the new one, an installation job never on two replicas
// at once, and what an old replica that restarts meanwhile does. It needs
// the repository's git history (a full clone); it has only tests.
package e2eupgrade
