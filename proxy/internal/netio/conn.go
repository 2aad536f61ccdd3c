package netio

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/llm-failover/failover/proxy/internal/bufpool"
	"github.com/valyala/fasthttp"
)

// Conn is one HTTP/1.1 connection to a target, from a Pool. The request path uses it in this
// order: Send a request, Wait for the answer, ReadHead, then read the body in place with a Body
// (waiting again whenever nothing is buffered), then Put it back to the Pool when the answer was
// read to its framed end, or Close it.
//
// The sidecar keeps its own connections to targets rather than fasthttp's HostClient, whose
// deadline is one absolute one over the head and the streamed body, and which gives no handle
// on the connection: a time to first content, an idle gap between reads and "the client left,
// close the upstream now" cannot be expressed with it. Owning the connection, each phase sets
// its own read deadline, and closing the connection aborts whatever is in flight. fasthttp
// only parses the answer's head (ReadHead).
//
// Owned by one goroutine at a time (the attempt that took it from the Pool); not safe for
// concurrent use.
type Conn struct {
	conn   net.Conn // what HTTP goes through: the *net.TCPConn, or a *tls.Conn over it
	socket          // the TCP socket under conn: rawsock_linux.go, rawsock_portable.go
	rd     pollReader
	br     *bufio.Reader // reads through rd; lent from readerPool while it holds bytes or a read runs

	idleSince time.Time
	reused    bool
	longWaits bool      // ExpectLongWaits: a wait holds no buffer where the socket can wait without one
	wset      time.Time // the write deadline on the socket (zero: none)
	iov       [2][]byte // Send's head and body, for writev
	bufs      net.Buffers
}

// newConn makes a Conn of conn, whose TCP connection is tcp (conn itself, unless TLS runs over
// it: plain is then false).
func newConn(conn net.Conn, tcp *net.TCPConn, plain bool) *Conn {
	c := &Conn{conn: conn}
	c.rd.c = c
	c.attach(tcp, plain)
	return c
}

// ReadBufferSize sizes the pooled read buffers of upstream connections. A response's header
// block that does not fit is read again with a larger buffer (maxResponseHeaderBytes).
const ReadBufferSize = 4096

// maxResponseHeaderBytes bounds an upstream response's header block.
const maxResponseHeaderBytes = 64 << 10

var readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, ReadBufferSize) }}

// reader returns the connection's buffered reader, borrowing one when it has none.
func (c *Conn) reader() *bufio.Reader {
	if c.br == nil {
		c.br = readerPool.Get().(*bufio.Reader)
		c.br.Reset(&c.rd)
	}
	return c.br
}

// releaseReader gives the buffered reader back when it holds nothing, so a connection that
// waits (an idle committed stream, a pooled keep-alive connection) holds no buffer.
func (c *Conn) releaseReader() {
	if c.br != nil && c.br.Buffered() == 0 {
		c.dropReader()
	}
}

// dropReader lets go of the reader: a pooled one goes back to the pool, a grown one to the
// garbage collector.
func (c *Conn) dropReader() {
	c.br.Reset(nil)
	if c.br.Size() == ReadBufferSize {
		readerPool.Put(c.br)
	}
	c.br = nil
}

// growReader replaces the connection's reader, full with a header block it cannot hold, with
// a larger one that reads the same bytes first. It reports false when the reader is already
// the larger one.
func (c *Conn) growReader() bool {
	if c.br == nil || c.br.Size() >= maxResponseHeaderBytes {
		return false
	}
	held, _ := c.br.Peek(c.br.Buffered())
	held = append([]byte(nil), held...) // rare: one allocation for an oversized header block
	c.dropReader()
	c.br = bufio.NewReaderSize(io.MultiReader(bytes.NewReader(held), &c.rd), maxResponseHeaderBytes)
	return true
}

// buffered reports how many unread bytes the connection's reader holds.
func (c *Conn) buffered() int {
	if c.br == nil {
		return 0
	}
	return c.br.Buffered()
}

// Reused reports whether the connection came from the Pool's idle ones rather than a dial.
func (c *Conn) Reused() bool { return c.reused }

// ExpectLongWaits tells the connection that its next waits may be long (a committed stream's
// gaps between events): from now on a Wait with nothing buffered holds no read buffer, where
// the socket can wait without one. Until the connection goes back to the Pool.
func (c *Conn) ExpectLongWaits() { c.longWaits = true }

// Close closes the connection and gives back its reader.
func (c *Conn) Close() {
	c.conn.Close()
	if c.br != nil {
		c.dropReader()
	}
}

// Interrupt ends, from another goroutine, whatever the connection's owner is blocked in: the
// socket is closed under it, so its wait, read or write fails at once. The owner still calls
// Close, which gives back what it holds. Safe to call while the owner uses the connection, and
// more than once; the connection is never pooled again.
func (c *Conn) Interrupt() { c.conn.Close() }

// cause returns why a read on c failed: the pollReader's reason when it gave up, else err.
func (c *Conn) cause(err error) error {
	if err != nil && c.rd.why != nil {
		return c.rd.why
	}
	return err
}

// maxCopiedBody is the largest request body Send copies behind the head.
const maxCopiedBody = 32 << 10

// requestBuffers lend Send the buffer a request is assembled in, for one write.
var requestBuffers = bufpool.New(maxCopiedBody+4<<10, 2*maxCopiedBody)

// Send writes a request, head then body, before writeBy, in one write: a body up to
// maxCopiedBody is copied behind the head in a buffer lent for the write (nothing of the body
// stays with the connection), a larger one is sent from where it is with the head in one
// writev (on TLS, net.Buffers writes them one after the other). A write that has to wait for
// the target to read (a large prompt, a target that does not read) ends at once with stop's
// reason when stop gives one. It also starts the wait for the answer, bounded by answerBy
// (zero: no bound) and stop: where the socket takes the request whole at once (a plain TCP
// connection on Linux), that wait begins in the same call, and the Wait that follows finds
// what it found.
//
// sent is when the request was written whole. waited is how long the call waited on the
// target: for room in the socket's send buffer, and for the answer when its wait began here;
// a write the kernel takes at once is not time spent waiting.
func (c *Conn) Send(head, body []byte, writeBy, answerBy time.Time, stop Stop) (sent time.Time, waited time.Duration, err error) {
	now := time.Now()
	// The wait for the answer's first slice is armed before the write, as its own (Wait) is.
	c.rd.arm(answerBy, stop)
	if err := c.rd.slice(now); err != nil {
		return time.Time{}, 0, err
	}
	// Each attempt's deadline comes a little later than the last one's: the one set stays while
	// it is at most a sixteenth of the time left (and a second) early.
	if !keepDeadline(c.wset, writeBy, min(deadlineSlack, writeBy.Sub(now)/16)) {
		c.conn.SetWriteDeadline(writeBy)
		c.wset = writeBy
	}
	switch {
	case len(body) == 0:
		return c.send(head, stop)
	case len(body) <= maxCopiedBody:
		bp := requestBuffers.Get()
		b := append(append((*bp)[:0], head...), body...)
		sent, waited, err = c.send(b, stop)
		*bp = b
		requestBuffers.Put(bp)
		return sent, waited, err
	}
	start := time.Now()
	c.iov = [2][]byte{head, body}
	c.bufs = c.iov[:] // WriteTo consumes the slice, not the array
	w := startWatch(stop, c.abortWrite)
	_, err = c.bufs.WriteTo(c.conn)
	c.iov, c.bufs = [2][]byte{}, nil
	if why := w.end(); why != nil {
		err = why
	}
	sent = time.Now()
	return sent, sent.Sub(start), err
}

// send writes p: at once when the socket takes it whole, as it takes a request up to
// maxCopiedBody but for a target that has stopped reading, and then waits for the answer in
// the same call (sendThenWait); else it waits for room for the rest, watched by stop (on the
// portable path the socket never takes p at once: all of it is written so). Under TLS
// (tls.Conn buffers and writes itself) the write is neither watched nor timed.
func (c *Conn) send(p []byte, stop Stop) (sent time.Time, waited time.Duration, err error) {
	if !c.plain {
		_, err = c.conn.Write(p)
		return time.Now(), 0, err
	}
	n, sent, err := c.sendThenWait(p)
	switch {
	case err != nil:
		return time.Time{}, 0, err
	case n == len(p):
		return sent, time.Since(sent), nil
	}
	start := time.Now()
	w := startWatch(stop, c.abortWrite)
	_, err = c.writeSocket(p[n:])
	if why := w.end(); why != nil {
		err = why
	}
	sent = time.Now()
	return sent, sent.Sub(start), err
}

// abortWrite ends a write blocked on c (from the goroutine of a watch): the connection is
// dropped after it.
func (c *Conn) abortWrite() {
	c.conn.SetWriteDeadline(time.Unix(1, 0)) // a closed connection has no write to end
}

// ReadHead reads an answer's status line and header block into resp, after a Wait; the body
// is left on the connection, for a Body to read in place. A header block larger than the
// pooled buffer (many or long headers: cookies, policy headers from a gateway) is read again
// with room for maxResponseHeaderBytes. When it fails, err says why (the wait's reason when
// one gave up: ErrDeadline, ErrClientGone, ErrShutdown), and silent tells that the connection
// ended without a byte of the answer: the target closed or reset it.
func (c *Conn) ReadHead(resp *fasthttp.Response) (silent bool, err error) {
	// Wait ended at the answer's first byte, or at the connection's end: nothing buffered means
	// that it ended before one came.
	silent = c.buffered() == 0
	resp.Reset()
	resp.SkipBody = true
	err = resp.Read(c.reader())
	if err != nil && isSmallBuffer(err) && c.growReader() {
		resp.Reset()
		resp.SkipBody = true
		err = resp.Read(c.reader())
	}
	if err != nil {
		return silent, c.cause(err)
	}
	return false, nil
}

// isSmallBuffer reports whether err is fasthttp's "header block larger than the buffer". A
// function of its own: the target errors.As needs escapes, and would be allocated on every
// request if it were declared where the response is read.
func isSmallBuffer(err error) bool {
	var small *fasthttp.ErrSmallBuffer
	return errors.As(err, &small)
}
