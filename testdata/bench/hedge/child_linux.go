package main

import "syscall"

// childAttr makes the kernel end a sidecar the runner started when the runner itself ends, even
// killed: the runner ends its sidecars on its way out, and this covers the way out it cannot see.
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
