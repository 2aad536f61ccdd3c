package proxytest

import "syscall"

// socket is a socket's handle.
type socket = syscall.Handle

// openSocket opens an IPv4 TCP socket that a child process does not inherit. Winsock is
// started by package net, which this package imports.
func openSocket() (socket, error) {
	s, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, syscall.IPPROTO_TCP)
	if err != nil {
		return syscall.InvalidHandle, err
	}
	syscall.CloseOnExec(s)
	return s, nil
}

func closeSocket(s socket) error { return syscall.Closesocket(s) }
