// Command studioctl hosts a replica (`studioctl run`) and is the operator's
// tool for the tables replicas share (SPEC §9).
package main

import (
	"os"

	"github.com/studioctl/studioctl/internal/tasks"
)

func main() {
	// A replica runs each job command under its own executable started
	// again as a job shim; that mode comes before any flag parsing.
	if tasks.IsShim() {
		os.Exit(tasks.ShimMain())
	}
	// Any local user can read /proc/<pid>/cmdline: hide the password of a
	// --database-url from ps before anything else runs.
	if err := tasks.HideArgSecrets(); err != nil {
		os.Stderr.WriteString("studioctl: could not hide the --database-url password from ps: " + err.Error() + "\n")
	}
	os.Exit(Main())
}
