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
	os.Exit(Main())
}
