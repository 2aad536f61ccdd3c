//go:build !windows

package netio

import (
	"errors"
	"syscall"
)

// How the system names a refused connection and a reset one, for FailureOf.
// sockerr_windows.go has Winsock's names.

// isRefused reports whether err is a connection the target refused.
func isRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// isReset reports whether err is a connection the peer reset, or a write to one it closed.
func isReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
