package netio

import (
	"errors"
	"io"
	"net"
	"os"

	"github.com/valyala/fasthttp"
)

// The ends of a wait that are not the connection's own: a Stop's two reasons, and the
// deadline a wait was given.
var (
	// ErrClientGone ends a wait because the client disconnected.
	ErrClientGone = errors.New("client went away")
	// ErrShutdown ends a wait because the sidecar's shutdown timeout has passed.
	ErrShutdown = errors.New("the sidecar is shutting down")
	// ErrDeadline ends a wait that reached its deadline.
	ErrDeadline = errors.New("deadline reached")
	// ErrYield ends a Wait that reached the time its caller set with YieldAt, with nothing to
	// read yet. It is no failure: the connection is as it was, and a Wait called again (on any
	// goroutine, the caller's owning it from then on) goes on waiting.
	ErrYield = errors.New("the wait yielded")
)

// ErrBrokenChunk is a chunked body whose framing is not HTTP/1.1's: the connection is unusable.
var ErrBrokenChunk = errors.New("malformed chunked body from the upstream")

// IsTimeout reports whether err is a deadline that a socket call ran into.
func IsTimeout(err error) bool {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Failure names what went wrong with a connection to an upstream, for the request path to
// tell the decision function (which has its own names for them: classify.Transport).
type Failure uint8

const (
	FailureOther   Failure = iota // none of the below (a closed client, a protocol error, ...)
	FailureTimeout                // a deadline passed: ErrDeadline, or a socket call's own
	FailureDNS                    // the target's name did not resolve
	FailureRefused                // the target refused the connection
	FailureTLS                    // the TCP connection worked, the TLS handshake did not
	FailureReset                  // the connection was reset, closed early or broke its framing
)

// Closed reports whether err is the peer ending the connection: a reset, or a close before
// the answer's end. Broken framing, a deadline, a stop or the sidecar's own close are not.
func Closed(err error) bool {
	return isReset(err) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// FailureOf names the failure err reports. ErrClientGone and ErrShutdown are no failure of
// the connection's: they name none (FailureOther), and the caller tells them apart first.
func FailureOf(err error) Failure {
	var de *dialError
	isDial := errors.As(err, &de)
	var dns *net.DNSError
	switch {
	case err == ErrDeadline || IsTimeout(err):
		return FailureTimeout
	case errors.As(err, &dns):
		return FailureDNS
	case isRefused(err):
		return FailureRefused
	case isDial && de.tls:
		return FailureTLS
	case isReset(err), errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed), errors.Is(err, ErrBrokenChunk):
		return FailureReset
	}
	var be fasthttp.ErrBrokenChunk
	if errors.As(err, &be) {
		return FailureReset
	}
	return FailureOther
}

// dialError marks a failure to connect (as opposed to one on an established connection).
type dialError struct {
	err error
	tls bool // the TCP connection worked; the TLS handshake did not
}

func (e *dialError) Error() string { return e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }
