package tasks

import "os"

// shimArg is argv[1] of a job shim: the replica's own executable, started
// again in this hidden mode to run one command (docs/jobs-processes.md).
const shimArg = "__studio-job-shim"

// shimEnv marks a job shim's environment. The shim removes it before it
// starts the command; Run refuses to start a shim from a process that has
// it, so a binary that forgot to dispatch (IsShim) fails loudly instead of
// running itself again and again.
const shimEnv = "STUDIO_JOB_SHIM"

// IsShim reports whether this process was started as a job shim. Every
// binary that runs commands must check it first thing, before parsing flags
// or starting anything:
//
//	if tasks.IsShim() {
//		os.Exit(tasks.ShimMain())
//	}
//
// cmd/studioctl does it in main, and test binaries in pgtest.Main.
func IsShim() bool { return len(os.Args) > 1 && os.Args[1] == shimArg }
