//go:build !linux

package demo

import "syscall"

// procAttr puts a child in a process group of its own. (There is no
// Pdeathsig outside Linux: a demo killed with SIGKILL leaves its replicas
// running there.)
func procAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// killGroup kills what is left in the process group pgid.
func killGroup(pgid int) { syscall.Kill(-pgid, syscall.SIGKILL) }
