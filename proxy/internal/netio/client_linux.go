//go:build linux && !failover_portable

package netio

import (
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"
)

// A client connection's reads and writes on Linux, the fast path: through the raw socket
// (rawsock_linux.go). The one-byte read of a request's first byte takes whatever has arrived
// without waiting, or waits for the socket without a buffer; the write that ends an answer may
// wait for the client's next request in the same call (endAnswer). client_portable.go is the
// slow path it shortcuts.

// clientIO is the Linux part of a ClientConn.
type clientIO struct {
	raw  syscall.RawConn
	sock rawSocket // every other read and write
	// The read-ahead's RawConn callback, made once (a closure per read would allocate), and
	// what it reports.
	readFn func(fd uintptr) bool
	got    *readAhead
	n      int
	rerr   error
	// empty counts the request reads that found nothing and waited: what endAnswer saves.
	empty atomic.Int64
}

// newClientConn wraps an accepted connection; ok is false when its socket cannot be reached
// (it is then served as it is). closing is the server's shutdown flag (nil: never).
func newClientConn(tc *net.TCPConn, closing *atomic.Bool) (c *ClientConn, ok bool) {
	raw, err := tc.SyscallConn()
	if err != nil {
		return nil, false
	}
	c = &ClientConn{TCPConn: tc}
	c.raw = raw
	c.readFn = c.readInto
	if closing == nil {
		closing = new(atomic.Bool)
	}
	c.sock.initClient(raw, &c.idle, closing)
	return c, true
}

// read is Read without the head scan.
func (c *ClientConn) read(p []byte) (int, error) {
	if n, ok := c.readHeld(p); ok {
		return n, nil
	}
	if len(p) != 1 {
		n, err := c.sock.read(p)
		if err != nil && err != io.EOF {
			err = c.opError("read", err)
		}
		return n, err
	}
	c.idle.Store(true)
	err := c.raw.Read(c.readFn)
	c.idle.Store(false)
	a, n, rerr := c.got, c.n, c.rerr
	c.got, c.rerr = nil, nil
	switch {
	case err != nil: // the read deadline, or the connection closed under the read
		return 0, c.opError("read", err)
	case rerr != nil:
		readAheads.Put(a)
		return 0, c.opError("read", os.NewSyscallError("read", rerr))
	case n <= 0:
		readAheads.Put(a)
		return 0, io.EOF
	}
	c.keepAhead(p, a, n)
	return 1, nil
}

// readInto is the RawConn.Read callback of a one-byte read: it reads what has arrived into a
// lent buffer, or gives the buffer back and asks to wait when nothing has.
func (c *ClientConn) readInto(fd uintptr) bool {
	a := readAheads.Get().(*readAhead)
	n, e := sysRead(fd, a.b[:])
	for e == syscall.EINTR {
		n, e = sysRead(fd, a.b[:])
	}
	var err error
	switch e {
	case syscall.EAGAIN:
		readAheads.Put(a) // nothing yet: wait for the socket without the buffer
		c.empty.Add(1)
		c.signs.set(signFoundNone, true)
		return false
	case 0:
	default:
		n, err = -1, e
	}
	c.got, c.n, c.rerr = a, n, err
	return true
}

// Write writes all of p (see rawSocket). The write that ends an answer armed by AwaitAfter
// also waits for the client's next request (endAnswer).
func (c *ClientConn) Write(p []byte) (int, error) {
	c.signs.set(signAnswered, true)
	if h := c.answer; h != nil && len(p) < WriteBufferSize {
		// fasthttp writes an answer through a bufio.Writer of WriteBufferSize: every write
		// before the last is a full buffer or more, and the last (the flush) is shorter, as
		// a rule. One of exactly the buffer's size, or a body written past the buffer, is
		// not told from the ones before it: that answer ends without the wait.
		c.answer = nil
		if !h.ConnectionClose() && c.ahead == nil && len(c.pending) == 0 {
			return c.endAnswer(p)
		}
	}
	n, err := c.sock.write(p)
	if err != nil {
		err = c.opError("write", err)
	}
	return n, err
}

// endAnswer writes the end of an answer and waits, in the same call, until the client's next
// request arrives (or the connection ends, or the read deadline passes), so that the read that
// follows finds it. Without the wait, fasthttp's read of the next request's first byte would
// look first and find nothing, as the client sends it only once it has the answer: a system
// call for nothing on every keep-alive request (BENCHMARKS.md, The tail and the stream path, the
// read before each request),
// which nginx does not make. The connection counts as idle while it waits (Conns.CloseIdle
// closes it); whatever ended the wait, the read that follows finds it. A request that arrived
// before the wait began is not seen by it (the poller forgets it as the wait begins): answers
// wait only for clients that wait for them (pace), and Conns.EndLongWaits bounds the rest.
func (c *ClientConn) endAnswer(p []byte) (int, error) {
	c.wait.begin()
	n, _, err := c.sock.writeThenPark(p)
	c.idle.Store(false)
	c.signs.set(signWoke, c.sock.woke)
	poked := c.wait.end()
	c.signs.set(signPoked, poked)
	if poked {
		// EndLongWaits set a read deadline in the past: the next one fasthttp sets must reach
		// the socket (SetReadDeadline keeps one that is close enough to the last it set).
		c.rset = time.Time{}
	}
	if err == nil && n < len(p) { // a full send buffer: wait for room as any write does
		var m int
		m, err = c.sock.write(p[n:])
		n += m
	}
	if err != nil {
		err = c.opError("write", err)
	}
	return n, err
}

// begin marks a wait after an answer begun (endAnswer), by the connection's serving goroutine.
func (w *answerWait) begin() {
	w.mu.Lock()
	w.on = true
	w.n++
	w.mu.Unlock()
}

// end marks the wait over, and reports whether EndLongWaits ended it.
func (w *answerWait) end() (poked bool) {
	w.mu.Lock()
	w.on = false
	poked, w.poked = w.poked, false
	w.mu.Unlock()
	return poked
}

// opError wraps err as net.TCPConn's Read and Write would.
func (c *ClientConn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}
