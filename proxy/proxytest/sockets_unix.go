//go:build unix

package proxytest

import "syscall"

// socket is a socket's descriptor.
type socket = int

// openSocket opens an IPv4 TCP socket that a child process does not inherit. ForkLock keeps
// a fork from coming between the socket and its close-on-exec flag (as package net does where
// there is no SOCK_CLOEXEC).
func openSocket() (socket, error) {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		return -1, err
	}
	syscall.CloseOnExec(fd)
	return fd, nil
}

func closeSocket(fd socket) error { return syscall.Close(fd) }
