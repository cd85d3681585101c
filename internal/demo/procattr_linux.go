package demo

import "syscall"

// procAttr puts a child in a process group of its own (a Ctrl-C on the
// terminal reaches the demo, which stops the children in order) and has
// the kernel kill it if the demo dies without stopping it.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// killGroup kills what is left in the process group pgid.
func killGroup(pgid int) { syscall.Kill(-pgid, syscall.SIGKILL) }
