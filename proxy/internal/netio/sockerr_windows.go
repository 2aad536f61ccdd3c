package netio

import (
	"errors"
	"syscall"
)

// How Windows names a refused connection and a reset one, for FailureOf. The POSIX names in
// package syscall are placeholders there that Winsock never returns, and errors.Is does not
// map one to the other (golang/go#45621): these are Winsock's and the overlapped I/O's own.
const (
	wsaeConnRefused        syscall.Errno = 10061 // WSAECONNREFUSED: connect refused
	errorConnectionRefused syscall.Errno = 1225  // ERROR_CONNECTION_REFUSED: the same, from ConnectEx
	wsaeShutdown           syscall.Errno = 10058 // WSAESHUTDOWN: a write after the connection was shut down
)

// isRefused reports whether err is a connection the target refused.
func isRefused(err error) bool {
	return errors.Is(err, wsaeConnRefused) || errors.Is(err, errorConnectionRefused) ||
		errors.Is(err, syscall.ECONNREFUSED)
}

// isReset reports whether err is a connection the peer reset or the system aborted, or a write
// to one that was closed.
func isReset(err error) bool {
	return errors.Is(err, syscall.WSAECONNRESET) || errors.Is(err, syscall.WSAECONNABORTED) ||
		errors.Is(err, syscall.ERROR_NETNAME_DELETED) || errors.Is(err, wsaeShutdown) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
