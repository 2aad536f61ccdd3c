//go:build !linux

package main

import "syscall"

// childAttr: elsewhere the runner ends its sidecars on its way out (it stops each after its run,
// and on an interrupt), which covers every way out but being killed.
func childAttr() *syscall.SysProcAttr { return nil }
