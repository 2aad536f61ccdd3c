//go:build linux && !failover_portable && !race

package netio

import (
	"syscall"
	"unsafe"
)

// sysRead and sysWrite are one read(2) and one write(2) on a non-blocking socket, without
// entering the scheduler's system-call state (see rawSocket). p is not empty.
//
// Under the race detector (rawsys_race.go) they are syscall.Read and syscall.Write, whose
// annotations tell the detector that a write on one end of a socket happens before the read
// on the other: without them it reports races between goroutines that only a socket orders,
// such as a test and the sidecar it talks to.
func sysRead(fd uintptr, p []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	return int(n), e
}

func sysWrite(fd uintptr, p []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	return int(n), e
}
