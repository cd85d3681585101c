package tasks

import "syscall"

// procAttr puts a command in its own process group and, on Linux, has the
// kernel SIGKILL it if the replica dies (kill -9), so an orphaned command
// does not go on running beside the replica that takes the job over once the
// lock expires. Only the group leader gets the signal; a grandchild that
// outlives it is the command's own business.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
