package netio

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// WriteBufferSize is the buffer the server writes an answer through: fasthttp's
// Server.WriteBufferSize, which the client connection relies on (Write). It is lent per answer
// (ReduceMemoryUsage; a committed stream writes on its own), so its size costs memory only
// while an answer is written. fasthttp sends an answer larger than the buffer with writev on a
// *net.TCPConn, but client connections are ClientConns: sized so that a typical answer (head
// and body) goes out in one write, the one that waits for the next request (endAnswer).
const WriteBufferSize = 32 << 10

// ClientConn is a client connection of the proxy listener (Listener), as fasthttp's server
// reads and writes it with ReduceMemoryUsage and a write buffer of WriteBufferSize. It does
// three jobs besides reading and writing:
//
//   - One read per request. fasthttp waits for a request's first byte with a read of one byte
//     (which keeps an idle keep-alive connection from holding its 16 KiB read buffer) and only
//     then reads the rest through a buffer: two read system calls per request. Here the one-byte
//     read takes whatever has arrived (the whole request, as a rule) into a buffer lent from a
//     pool while it holds bytes (readAhead), and the reads that follow are served from it.
//     While the connection waits, it holds no buffer (on Linux; client_portable.go says how the
//     portable path differs).
//   - Refusing a request head with a bare LF (headScan), which fasthttp would read in a way
//     another server on the path may not.
//   - Waiting, in the write that ends an answer, for the client's next request (on Linux:
//     endAnswer), when the client waits for its answers (pace): the read that follows finds
//     the request rather than looking once for nothing.
//
// It also keeps an answer's body lent to fasthttp until the answer is written (LendBody).
//
// Read, Write and the deadlines are called by the connection's serving goroutine only; Close
// may run concurrently with them (the server's shutdown): a connection closed with bytes still
// read ahead (a request it never served) leaves its buffer to the garbage collector.
type ClientConn struct {
	*net.TCPConn
	clientIO            // the socket's reads and writes: client_linux.go, client_portable.go
	conns    *Conns     // the list it is in while open (nil: none)
	ahead    *readAhead // bytes read but not yet returned; nil when none
	// pending are bytes of the client's next requests that fasthttp had read before a stream
	// hijacked the connection (a pipelining client), given back by Reclaim: read first.
	pending    []byte
	reclaiming bool        // Reclaim is reading what fasthttp's wrapper holds: the socket is not read
	rset       time.Time   // the read deadline on the socket (zero: none)
	idle       atomic.Bool // waiting for a request's first byte (read by Conns.CloseIdle)
	// delivered counts the bytes Read returned since the current request's first byte; with
	// the head's size (headScan) and the body's, it tells whether fasthttp read more than the
	// request (Begin).
	delivered int
	// answer is the head of the answer fasthttp writes next, when that answer may wait for
	// the client's next request in the write that ends it (AwaitAfter); nil otherwise.
	answer *fasthttp.ResponseHeader
	// pace is how the client sends its requests; signs, what was seen of it since the current
	// request's first byte (pace.go).
	pace  pace
	signs signs
	wait  answerWait // the wait after an answer, as Conns.EndLongWaits sees it
	// target is the start of the request target in the request line read last (requestTarget):
	// what an error fasthttp reports after it reset the request (431, a chunked 413) is shaped by.
	target    [maxTargetBytes]byte
	targetLen int
	head      headScan // the request head being read, for a bare LF
	bareLF    bool     // the head had one: every read fails with ErrBareLF

	// lent holds the body of the answer fasthttp writes after the handler returns (LendBody),
	// in its holder from bodyBuffers; nil when none. Atomic: Close may run on another
	// goroutine (Shutdown's), though only once the answer is written.
	lent atomic.Pointer[[]byte]
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
// found with a bare LF ends the reading: the reads that follow return ErrBareLF, and so does
// this one unless it is that one-byte read (fasthttp closes the connection without an answer
// when the first byte's read fails), so that fasthttp answers 400 without parsing any of it.
func (c *ClientConn) Read(p []byte) (int, error) {
	if c.reclaiming {
		return 0, errReclaimed
	}
	if c.bareLF {
		return 0, ErrBareLF
	}
	// fasthttp reads only once it has written the answer.
	c.takeBack()
	first := len(p) == 1 && !c.head.on // a request's first byte
	if first {
		c.head = headScan{on: true}
		c.delivered = 0
		c.signs.set(signFoundNone, false)
	}
	c.answer = nil // a read comes after the answer's end, or instead of a wait for it
	n, err := c.read(p)
	c.delivered += n
	if first && n > 0 {
		c.pace = c.pace.next(c.signs)
		c.signs = 0
	}
	if c.head.on && n > 0 && c.head.bare(p[:n]) {
		c.bareLF = true
		if len(p) > 1 {
			return 0, ErrBareLF
		}
	}
	return n, err
}

// readHeld reads from the bytes held, pending then the read-ahead; ok is false when there are
// none.
func (c *ClientConn) readHeld(p []byte) (n int, ok bool) {
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		if c.pending = c.pending[n:]; len(c.pending) == 0 {
			c.pending = nil
		}
		return n, true
	}
	if a := c.ahead; a != nil {
		n := copy(p, a.b[a.off:a.end])
		a.off += n
		if a.off == a.end {
			c.ahead = nil
			readAheads.Put(a)
		}
		return n, true
	}
	return 0, false
}

// keepAhead keeps what a request's first read found, a.b[:n], n >= 1: p[0] gets its first
// byte, and the read-ahead the rest (a goes back to its pool when there is none). It notes the
// request line's target.
func (c *ClientConn) keepAhead(p []byte, a *readAhead, n int) {
	c.setTarget(a.b[:n])
	p[0] = a.b[0]
	if n == 1 {
		readAheads.Put(a)
		return
	}
	a.off, a.end = 1, n
	c.ahead = a
}

// setTarget notes the request target of the request line at the start of b.
func (c *ClientConn) setTarget(b []byte) { c.targetLen = copy(c.target[:], requestTarget(b)) }

// RequestTarget is the start of the request target (its path, without the query) in the
// request line read last, at most 64 bytes: empty when the read held no whole one. fasthttp
// resets the request before it reports an error it found in it (431, a chunked 413), and this
// still names the API the error's body is shaped for.
func (c *ClientConn) RequestTarget() []byte { return c.target[:c.targetLen] }

// errReclaimed ends Reclaim's reads where they would reach the socket.
var errReclaimed = errors.New("reclaimed")

// Reclaim takes back the connection from hijacked, fasthttp's wrapper of it after a stream
// hijacked it, so that the server is handed c itself for the next requests. The bytes the
// wrapper's reader holds (requests the client sent before the stream ended) are read through
// it, and go before what c still holds itself; nothing is read from the socket. It reports
// false when the wrapper's reader failed otherwise: the connection cannot serve another request.
func (c *ClientConn) Reclaim(hijacked io.Reader) bool {
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

// Begin is the handler's first word on a request read from c, whose body was bodyLen bytes as
// sent. The answer before it has been written: its lent body comes back (LendBody). It reports
// whether this request's answer may wait for the client's next request in the write that ends
// it (AwaitAfter): the client sent this one only after the answer before it (pace), and what
// Read returned since the request's first byte ends where the request ends, a head of
// head.size bytes and a body of bodyLen bytes (chunked framing makes it more), so that
// fasthttp holds no bytes of a next request and reads it from the connection. Once per
// request: it forgets the head's size.
func (c *ClientConn) Begin(bodyLen int) (answerMayWait bool) {
	c.takeBack()
	size := c.head.size
	c.head.size = 0
	return c.pace == paceSequential && !c.head.on && size > 0 && c.delivered == size+bodyLen
}

// AwaitAfter arms the write that ends the answer of h (fasthttp writes it once the handler
// returns) to wait for the client's next request (endAnswer), unless the answer closes the
// connection. The handler calls it only for an answer fasthttp writes itself, on a request
// whose Begin said it may wait. Read disarms it: it comes after the answer.
func (c *ClientConn) AwaitAfter(h *fasthttp.ResponseHeader) { c.answer = h }

// Close closes the connection and takes it off the server's list.
func (c *ClientConn) Close() error {
	// fasthttp closes a connection after its last answer; the shutdown (Conns.CloseIdle, and
	// fasthttp's own) only one whose answer is written, idle: the lent body is no longer read.
	// A Close that could come while an answer is being written would have to leave it be.
	c.takeBack()
	c.conns.remove(c)
	return c.TCPConn.Close()
}

// SetReadDeadline leaves the deadline where it is when t is less than deadlineSlack later:
// fasthttp sets the read deadline twice per request (the idle timeout while it waits, the read
// timeout at the first byte), each time a lock and a runtime timer move, and a deadline that
// comes at most deadlineSlack early does not matter at these lengths. A sooner deadline, or
// none, is always set. Called only by the connection's serving goroutine.
func (c *ClientConn) SetReadDeadline(t time.Time) error {
	if keepDeadline(c.rset, t, deadlineSlack) {
		return nil
	}
	c.rset = t
	return c.TCPConn.SetReadDeadline(t)
}

// SetDeadline sets both deadlines (fasthttp clears them when it hijacks a connection).
func (c *ClientConn) SetDeadline(t time.Time) error {
	c.rset = t
	return c.TCPConn.SetDeadline(t)
}
