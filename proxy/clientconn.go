package proxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/llm-failover/failover/stream"
)

// clientListener wraps the proxy listener's connections in clientConn.
type clientListener struct{ net.Listener }

func (l clientListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c, nil
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return c, nil
	}
	c2 := &clientConn{TCPConn: tc, raw: raw}
	c2.readFn = c2.readInto
	c2.sock.init(raw)
	return c2, nil
}

// clientConn is a client connection that answers a one-byte read from a read-ahead buffer.
//
// fasthttp's server, with ReduceMemoryUsage (which keeps an idle keep-alive connection from
// holding its 16 KiB read buffer), waits for a request's first byte with a read of one byte and
// only then reads the rest through a buffer: two read syscalls for every request. Here the
// one-byte read takes whatever has arrived (the whole request, as a rule) into a buffer lent
// from a pool while it holds bytes, and the reads that follow are served from it: one syscall.
// While the connection waits, it holds no buffer. Every other read goes to the socket. A
// connection closed with bytes still read ahead (a request it never served) leaves its buffer
// to the garbage collector: Close may run concurrently with Read (the server's shutdown).
type clientConn struct {
	*net.TCPConn
	raw   syscall.RawConn
	sock  rawSocket  // every other read and write
	ahead *readAhead // bytes read but not yet returned; nil when none
	// pending are bytes of the client's next requests that fasthttp had read before a stream
	// hijacked the connection (a pipelining client), given back by reclaim: read first.
	pending    []byte
	reclaiming bool        // reclaim is reading what fasthttp's wrapper holds: the socket is not read
	rset       time.Time   // the read deadline on the socket (zero: none)
	idle       atomic.Bool // waiting for a request's first byte (read by Server.closeIdleHandedBack)
	// lineFamily is the family of the request line read last (requestLineFamily): the shape
	// for an error fasthttp reports after it reset the request (431, a chunked 413).
	lineFamily stream.Family
	head       headScan // the request head being read, for a bare LF
	bareLF     bool     // the head had one: every read fails with errBareLF

	// The read-ahead's RawConn callback, made once (a closure per read would allocate), and
	// what it reports.
	readFn func(fd uintptr) bool
	got    *readAhead
	n      int
	rerr   error
}

type readAhead struct {
	b   [readAheadSize]byte
	off int
	end int
}

// readAheadSize covers an SDK's request head and a typical chat body; what does not fit is
// read by fasthttp's own buffer, as without the read-ahead.
const readAheadSize = 4 << 10

var readAheads = sync.Pool{New: func() any { return new(readAhead) }}

// Read reads from what is held (pending, then the read-ahead) or the socket, and scans a
// request head as it passes (headScan). A one-byte read while no head is being read is a
// request's first byte: fasthttp reads it alone (ReduceMemoryUsage) before the rest. A head
// found with a bare LF ends the reading: the reads that follow return errBareLF, and so does
// this one unless it is that one-byte read (fasthttp closes the connection without an answer
// when the first byte's read fails), so that fasthttp answers 400 without parsing any of it.
func (c *clientConn) Read(p []byte) (int, error) {
	if c.reclaiming {
		return 0, errReclaimed
	}
	if c.bareLF {
		return 0, errBareLF
	}
	if len(p) == 1 && !c.head.on {
		c.head = headScan{on: true}
	}
	n, err := c.read(p)
	if c.head.on && n > 0 && c.head.bare(p[:n]) {
		c.bareLF = true
		if len(p) > 1 {
			return 0, errBareLF
		}
	}
	return n, err
}

// read is Read without the head scan.
func (c *clientConn) read(p []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		if c.pending = c.pending[n:]; len(c.pending) == 0 {
			c.pending = nil
		}
		return n, nil
	}
	if a := c.ahead; a != nil {
		n := copy(p, a.b[a.off:a.end])
		a.off += n
		if a.off == a.end {
			c.ahead = nil
			readAheads.Put(a)
		}
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
	p[0] = a.b[0]
	if n == 1 {
		readAheads.Put(a)
	} else {
		a.off, a.end = 1, n
		c.ahead = a
	}
	return 1, nil
}

// errReclaimed ends reclaim's reads where they would reach the socket.
var errReclaimed = errors.New("reclaimed")

// errBareLF is the read error of a connection whose request head has a bare LF; fasthttp
// hands it (wrapped) to Server.serveError, which answers 400.
var errBareLF = errors.New("a line of the request head ends in LF without CR")

// headScan follows a request head through the reads that deliver it, looking for a bare LF:
// a line that ends in LF without CR. fasthttp takes a bare LF as a line end within a head but
// waits for CRLFCRLF to end one, so a client that ends its lines with LF alone would get no
// answer until the read timeout (120 s) and then a 408; and a head it does end, with a bare LF
// inside, is read in a way another server on the path may not share (request smuggling
// hides in such differences). Both are refused at once, with 400, as nginx and HAProxy do.
//
// The scan starts at a request's first byte and stops at the empty line that ends the head:
// a body is not scanned. Empty lines before the request line are skipped, as fasthttp skips
// them (RFC 9112 section 2.2). Bytes are looked at in place, once, with IndexByte: no copy. A
// head that arrives pipelined behind another request is read by fasthttp from its own buffer,
// without a read here, and is not scanned. Not safe for concurrent use.
type headScan struct {
	on    bool // a head is being read: its end is not seen yet
	begun bool // a line other than an empty one was seen (the request line)
	line  int  // bytes of the current line scanned so far
	cr    bool // the last byte scanned was CR
}

// bare scans b, the head's next bytes, and reports whether a line in it ends in a bare LF.
// It turns the scan off at the head's end.
func (h *headScan) bare(b []byte) bool {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			h.line += len(b)
			h.cr = b[len(b)-1] == '\r'
			return false
		}
		if i > 0 {
			h.cr = b[i-1] == '\r'
		}
		if !h.cr {
			return true
		}
		empty := h.line+i == 1 // the line was its CR alone
		b = b[i+1:]
		h.line, h.cr = 0, false
		switch {
		case !empty:
			h.begun = true
		case h.begun:
			h.on = false
			return false
		}
	}
	return false
}

// reclaim takes back the connection from hijacked, fasthttp's wrapper of it after a stream
// hijacked it, so that the server is handed c itself for the next requests. The bytes the
// wrapper's reader holds (requests the client sent before the stream ended) are read through
// it, and go before what c still holds itself; nothing is read from the socket. It reports
// false when the wrapper's reader failed otherwise: the connection cannot serve another request.
func (c *clientConn) reclaim(hijacked io.Reader) bool {
	c.reclaiming = true
	defer func() { c.reclaiming = false }()
	a := readAheads.Get().(*readAhead)
	defer readAheads.Put(a)
	var held []byte
	for {
		n, err := hijacked.Read(a.b[:])
		held = append(held, a.b[:n]...) // rare: only a client that pipelined has any
		switch {
		case err == errReclaimed:
			if len(held) > 0 {
				c.pending = append(held, c.pending...)
			}
			return true
		case err != nil:
			return false
		}
	}
}

// readInto is the RawConn.Read callback of a one-byte read: it reads what has arrived into a
// lent buffer, or gives the buffer back and asks to wait when nothing has.
func (c *clientConn) readInto(fd uintptr) bool {
	a := readAheads.Get().(*readAhead)
	n, e := sysRead(fd, a.b[:])
	for e == syscall.EINTR {
		n, e = sysRead(fd, a.b[:])
	}
	var err error
	switch e {
	case syscall.EAGAIN:
		readAheads.Put(a) // nothing yet: wait for the socket without the buffer
		return false
	case 0:
	default:
		n, err = -1, e
	}
	c.got, c.n, c.rerr = a, n, err
	if n > 0 {
		c.lineFamily = requestLineFamily(a.b[:n])
	}
	return true
}

// requestLineFamily is the family of the path in the request line at the start of b (Other
// when b holds no whole one, or an absolute URI).
func requestLineFamily(b []byte) stream.Family {
	sp := bytes.IndexByte(b, ' ')
	if sp < 0 {
		return stream.Other
	}
	target := b[sp+1:]
	end := bytes.IndexAny(target, " ?\r\n")
	if end < 0 {
		return stream.Other
	}
	return familyOf(target[:end])
}

// Write writes all of p (see rawSocket).
func (c *clientConn) Write(p []byte) (int, error) {
	n, err := c.sock.write(p)
	if err != nil {
		err = c.opError("write", err)
	}
	return n, err
}

// opError wraps err as net.TCPConn's Read and Write would.
func (c *clientConn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

// SetReadDeadline leaves the deadline where it is when t is less than deadlineSlack later:
// fasthttp sets the read deadline twice per request (the idle timeout while it waits, the read
// timeout at the first byte, both clientTimeout), each time a lock and a runtime timer move,
// and a deadline that comes at most deadlineSlack early does not matter at these lengths. A
// sooner deadline, or none, is always set. Called only by the connection's serving goroutine.
func (c *clientConn) SetReadDeadline(t time.Time) error {
	if keepDeadline(c.rset, t, deadlineSlack) {
		return nil
	}
	c.rset = t
	return c.TCPConn.SetReadDeadline(t)
}

// SetDeadline sets both deadlines (fasthttp clears them when it hijacks a connection).
func (c *clientConn) SetDeadline(t time.Time) error {
	c.rset = t
	return c.TCPConn.SetDeadline(t)
}

// deadlineSlack is how much earlier than asked a kept deadline may come (keepDeadline).
const deadlineSlack = time.Second

// keepDeadline reports whether the deadline set (zero: none) may stay when want is asked:
// both are the same, or want is no sooner than set and less than slack later.
func keepDeadline(set, want time.Time, slack time.Duration) bool {
	if want.IsZero() || set.IsZero() {
		return want.IsZero() && set.IsZero()
	}
	return !want.Before(set) && want.Sub(set) < slack
}
