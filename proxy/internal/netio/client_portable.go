//go:build !linux || failover_portable

package netio

import (
	"net"
	"sync/atomic"
	"time"
)

// A client connection's reads and writes on the portable path, the slow path of
// client_linux.go: through the connection itself. A request's first byte is read with
// whatever else has arrived into a lent buffer, as on Linux, but the read waits holding that
// buffer; an answer's last write does not wait for the next request (an answer never arms it
// here: the reads never tell that the client waits for its answers, pace); and the look that
// tells that the client left (peerClosed) reads what it finds rather than peeking at it.

// clientIO is the portable part of a ClientConn.
type clientIO struct {
	// peeked holds what peerClosed read (a request the client sent early): read after
	// pending and the read-ahead, before the socket. nil when none.
	peeked *readAhead
}

// newClientConn wraps an accepted connection. closing (the server's shutdown flag) is for
// the wait after an answer, which the portable path does not make.
func newClientConn(tc *net.TCPConn, closing *atomic.Bool) (*ClientConn, bool) {
	return &ClientConn{TCPConn: tc}, true
}

// read is Read without the head scan.
func (c *ClientConn) read(p []byte) (int, error) {
	if len(c.pending) == 0 && c.ahead == nil && c.peeked != nil {
		// What peerClosed read comes next. A one-byte read would have read it from the
		// socket, with the request line it begins with.
		c.ahead, c.peeked = c.peeked, nil
		if len(p) == 1 {
			c.setTarget(c.ahead.b[c.ahead.off:c.ahead.end])
		}
	}
	if n, ok := c.readHeld(p); ok {
		return n, nil
	}
	if len(p) != 1 {
		return c.TCPConn.Read(p)
	}
	a := readAheads.Get().(*readAhead)
	c.idle.Store(true)
	n, err := c.TCPConn.Read(a.b[:])
	c.idle.Store(false)
	if n <= 0 {
		readAheads.Put(a)
		return 0, err
	}
	c.keepAhead(p, a, n)
	return 1, nil
}

// Write writes all of p.
func (c *ClientConn) Write(p []byte) (int, error) {
	c.signs.set(signAnswered, true)
	c.answer = nil
	return c.TCPConn.Write(p)
}

// peerClosed reports whether the client closed or reset its connection, without waiting: a
// read with a deadline peekWait away, which then gets the deadline the connection had back
// (rset). Bytes it finds (a request sent before this one's answer) are no close, as for the
// Linux peek, and are kept for the reads that follow (peeked); once some are kept, it reads no
// more. Called by the connection's serving goroutine, or by a watch on its behalf while that
// goroutine waits for the watch (Stop).
func (c *ClientConn) peerClosed() bool {
	if c.peeked != nil {
		return false
	}
	a := readAheads.Get().(*readAhead)
	c.TCPConn.SetReadDeadline(time.Now().Add(peekWait))
	n, err := c.TCPConn.Read(a.b[:])
	c.TCPConn.SetReadDeadline(c.rset)
	if n > 0 {
		a.off, a.end = 0, n
		c.peeked = a
		return false
	}
	readAheads.Put(a)
	return !IsTimeout(err) // the end, a reset, a closed connection: the client is gone
}
