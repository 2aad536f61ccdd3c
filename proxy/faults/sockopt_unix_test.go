//go:build unix

package faults_test

import "syscall"

// setReceiveBuffer sets the receive buffer (SO_RCVBUF) of the socket fd, as a
// syscall.RawConn's Control hands it.
func setReceiveBuffer(fd uintptr, size int) {
	syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, size)
}
