package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llm-failover/failover/classify"
)

// The sidecar keeps its own HTTP/1.1 connections to each target instead of fasthttp's
// HostClient: HostClient's deadlines are absolute over headers and the streamed body, and it
// gives no handle on the connection, so a time-to-first-content, an idle gap between reads and
// "the client left, close the upstream now" cannot be expressed with it. Owning the net.Conn,
// each phase sets its own read deadline, and closing the conn aborts whatever is in flight.
// fasthttp still writes requests and parses response headers (Request.Write, Response.Read
// with SkipBody); bodies are decoded in place (body.go).

const (
	// idleConnTimeout: a pooled connection idle longer is closed rather than reused. Providers'
	// load balancers close idle keep-alive connections after about a minute; staying well below
	// avoids writing a request into a connection the far side is closing.
	idleConnTimeout = 30 * time.Second
	// maxIdlePerTarget bounds the pool; more concurrent attempts dial and close.
	maxIdlePerTarget = 512
	// stalePeekAfter: a pooled connection idle longer is checked for the far side's close
	// before it is used again (pool.get, upConn.spent).
	stalePeekAfter = 100 * time.Millisecond
	// sweepInterval is how often a pool that holds idle connections looks at all of them
	// without waiting for a request (pool.sweep): one the far side closed is closed within
	// about sweepInterval, any other within idleConnTimeout+sweepInterval (README, Three
	// actions, never confused).
	sweepInterval = 2 * time.Second
	// pollInterval is how often a wait on an upstream checks that the client is still there:
	// fasthttp gives no signal while a handler waits, so the wait is cut into slices.
	pollInterval = 250 * time.Millisecond
	// upstreamBufferSize sizes the pooled read buffers. A response's header block that does
	// not fit is read again with a larger buffer (growReader).
	upstreamBufferSize = 4096
)

// upConn is one connection to a target. Owned by one attempt at a time.
type upConn struct {
	conn     net.Conn // what HTTP goes through (*net.TCPConn or *tls.Conn)
	upSocket          // the TCP socket under conn, for the idle peek (idleInput; see attach)
	rd       pollReader
	// sock reads and writes the TCP socket and waits on it without a buffer; unused under TLS
	// (tls.Conn buffers itself), where rd.sock is nil.
	sock      rawSocket
	br        *bufio.Reader // reads through rd; lent from readerPool while it holds bytes or a read runs
	idleSince time.Time
	reused    bool
	wset      time.Time // the write deadline on the socket (zero: none)
	iov       [2][]byte // writeRequest's head and body, for writev
	bufs      net.Buffers
}

var readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, upstreamBufferSize) }}

// reader returns the connection's buffered reader, borrowing one when it has none.
func (c *upConn) reader() *bufio.Reader {
	if c.br == nil {
		c.br = readerPool.Get().(*bufio.Reader)
		c.br.Reset(&c.rd)
	}
	return c.br
}

// releaseReader gives the buffered reader back when it holds nothing, so a connection that
// waits (an idle committed stream, a pooled keep-alive connection) holds no buffer.
func (c *upConn) releaseReader() {
	if c.br != nil && c.br.Buffered() == 0 {
		c.dropReader()
	}
}

// dropReader lets go of the reader: a pooled one goes back to the pool, a grown one to the
// garbage collector.
func (c *upConn) dropReader() {
	c.br.Reset(nil)
	if c.br.Size() == upstreamBufferSize {
		readerPool.Put(c.br)
	}
	c.br = nil
}

// maxResponseHeaderBytes bounds an upstream response's header block. Most fit the pooled
// reader (upstreamBufferSize); a larger block gets a reader of this size (growReader).
const maxResponseHeaderBytes = 64 << 10

// growReader replaces the connection's reader, full with a header block it cannot hold, with
// a larger one that reads the same bytes first. It reports false when the reader is already
// the larger one.
func (c *upConn) growReader() bool {
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
func (c *upConn) buffered() int {
	if c.br == nil {
		return 0
	}
	return c.br.Buffered()
}

// close closes the connection and gives back its reader.
func (c *upConn) close() {
	c.conn.Close()
	if c.br != nil {
		c.dropReader()
	}
}

// pollReader is what an upstream connection's buffered reader reads through. It cuts every
// blocking read into slices of pollInterval, so a read blocked anywhere (waiting for the
// status line, halfway through the headers, inside a chunk's framing) still ends at the
// attempt's deadline, when the client leaves, or at the shutdown timeout. The watchers are
// also asked once per pollInterval of reads that do find data: an upstream that keeps sending
// (keep-alive comments, whitespace, a slow body) never lets a slice end empty, and must not
// keep a request whose client left going until it is done. A slice that ends without data is
// never seen by fasthttp's parsers, only those three endings are; the reader records which one
// it was in why, because the parsers wrap the error they get (fasthttp.ErrBrokenChunk does not
// unwrap). Owned by the attempt using the connection; its watchers run on the reading
// goroutine (exchange.clientGone says how the client's departure is seen).
type pollReader struct {
	conn     net.Conn
	sock     *rawSocket  // reads conn's socket when not nil (not under TLS)
	deadline time.Time   // zero: no deadline
	gone     func() bool // the client left; nil when there is nobody to watch
	stop     func() bool // the shutdown timeout passed
	why      error       // errDeadline, errClientGone or errShutdown once a read gave up
	set      time.Time   // the read deadline last set on conn
	watched  time.Time   // when the watchers were last asked (or the attempt began: watchFrom)
	// now is a reading of the clock its owner took after its last operation that may wait
	// (exchange: waitData, waitIdle), for the next read's first slice, which takes it and so
	// reads no clock of its own; the zero time: that slice reads the clock. Every later slice
	// of a wait comes after a read that may have waited, and reads the clock.
	now time.Time
}

// watchFrom starts an attempt's reads: the watchers are next asked pollInterval after t, or
// earlier when a slice ends empty.
func (r *pollReader) watchFrom(t time.Time) { r.watched = t }

// arm sets the deadline and the watchers for the reads that follow.
func (r *pollReader) arm(deadline time.Time, gone, stop func() bool) {
	r.deadline, r.gone, r.stop, r.why, r.now = deadline, gone, stop, nil, time.Time{}
}

// start returns the reading the next slice starts from: the owner's (now), taken once, or
// the clock's.
func (r *pollReader) start() time.Time {
	now := r.now
	if now.IsZero() {
		return time.Now()
	}
	r.now = time.Time{}
	return now
}

func (r *pollReader) Read(p []byte) (int, error) {
	now := r.start()
	for {
		if err := r.slice(now); err != nil {
			return 0, err
		}
		var n int
		var err error
		if r.sock != nil {
			n, err = r.sock.read(p)
		} else {
			n, err = r.conn.Read(p)
		}
		if n > 0 || err == nil || !isTimeout(err) {
			return n, err
		}
		now = time.Now()
		if err := r.expired(now); err != nil {
			return 0, err
		}
	}
}

// waitReadable blocks, in the same slices as Read and with the same endings, until the socket
// has something to read (or an error to report), without a buffer to read into: the reads
// that follow find the data. Only for a plain TCP connection (sock set).
func (r *pollReader) waitReadable() error {
	now := r.start()
	for {
		if err := r.slice(now); err != nil {
			return err
		}
		err := r.sock.awaitInput()
		if err == nil || !isTimeout(err) {
			return nil
		}
		now = time.Now()
		if err := r.expired(now); err != nil {
			return err
		}
	}
}

// slice sets the read deadline for the next slice of a wait, which starts now, or reports
// errDeadline. now must come after the last read that may have waited: a reading taken
// before it would set the slice's deadline early (never past the wait's own deadline) and
// ask the watchers late.
func (r *pollReader) slice(now time.Time) error {
	if !r.deadline.IsZero() && !now.Before(r.deadline) {
		r.why = errDeadline
		return errDeadline
	}
	if now.Sub(r.watched) >= pollInterval {
		if err := r.expired(now); err != nil {
			return err
		}
	}
	// The deadline already set serves while it leaves at least half a slice and does not
	// pass the wait's own deadline: a read that finds its data at once (the common case)
	// then costs no deadline update, which takes a lock and moves a runtime timer.
	if r.set.Sub(now) >= pollInterval/2 && (r.deadline.IsZero() || !r.set.After(r.deadline)) {
		return nil
	}
	end := now.Add(pollInterval)
	if !r.deadline.IsZero() && r.deadline.Before(end) {
		end = r.deadline
	}
	r.conn.SetReadDeadline(end)
	r.set = end
	return nil
}

// expired is called when a slice ended without data, and once per pollInterval of reads that
// found some, at now: the reason to stop waiting, or nil.
func (r *pollReader) expired(now time.Time) error {
	r.watched = now
	switch {
	case r.gone != nil && r.gone():
		r.why = errClientGone
		return errClientGone
	case r.stop != nil && r.stop():
		r.why = errShutdown
		return errShutdown
	}
	return nil
}

// cause returns why a read on c failed: the pollReader's reason when it gave up, else err.
func (c *upConn) cause(err error) error {
	if err != nil && c.rd.why != nil {
		return c.rd.why
	}
	return err
}

// pool holds one target's idle connections (LIFO, so the warmest is reused first). Safe for
// concurrent use.
type pool struct {
	addr           string
	tlsConfig      *tls.Config
	connectTimeout time.Duration
	janitor        *time.Timer // runs sweep; armed while idle holds connections

	mu     sync.Mutex
	idle   []*upConn
	swept  time.Time // when put last looked at the oldest idle connections (dropStale)
	armed  bool      // the janitor will run
	closed bool      // closeIdle ran (shutdown): a connection put back is closed
}

func newPool(addr string, tlsConfig *tls.Config, connectTimeout time.Duration) *pool {
	p := &pool{addr: addr, tlsConfig: tlsConfig, connectTimeout: connectTimeout}
	p.janitor = time.AfterFunc(sweepInterval, p.sweep)
	p.janitor.Stop() // put arms it
	return p
}

// spent reports whether an idle connection must be closed rather than used: idle past
// idleConnTimeout, or holding anything no request asked for, in its reader or (once idle for
// longer than stalePeekAfter, so worth a syscall) on its socket: bytes, the end or an error.
// An HTTP/1.1 server sends nothing on an idle keep-alive connection but its close: over http
// the end itself (or a reset), over https first the TLS close_notify alert, which a check for
// the end alone takes for data, so the connection would be reused and the request written
// into a connection already closed. A TLS 1.3 session ticket, sent after the handshake, comes
// before the first response and is read with it (README, Three actions, never confused).
func (c *upConn) spent(now time.Time) bool {
	idle := now.Sub(c.idleSince)
	return idle > idleConnTimeout || c.buffered() > 0 || idle > stalePeekAfter && c.idleInput()
}

// get returns a live idle connection or dials a new one; a dial ends early, with their
// error, when gone or stop says so (either may be nil). dialed is how long dialing took (0
// for a pooled connection): time spent waiting on the target, not in the sidecar.
func (p *pool) get(now time.Time, gone, stop func() bool) (c *upConn, dialed time.Duration, err error) {
	for {
		p.mu.Lock()
		n := len(p.idle)
		if n == 0 {
			p.mu.Unlock()
			start := time.Now()
			c, err = p.dial(gone, stop)
			return c, time.Since(start), err
		}
		c = p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		// A connection idle for longer than stalePeekAfter is peeked before reuse: a request
		// written to a connection the far side has closed fails after it was sent, and is then
		// an attempt for the decision function, never sent again behind its back (the far side
		// may have read it). One idle for less is taken as alive without a syscall: servers
		// close idle keep-alive connections after seconds, and under load connections come
		// back within milliseconds.
		if c.spent(now) {
			c.close()
			continue
		}
		c.reused = true
		return c, 0, nil
	}
}

// put returns a connection whose last response was read to its end.
func (p *pool) put(c *upConn, now time.Time) {
	c.idleSince = now
	c.releaseReader()
	p.mu.Lock()
	if now.Sub(p.swept) >= stalePeekAfter {
		p.swept = now
		p.dropStale(now)
	}
	if len(p.idle) < maxIdlePerTarget && !p.closed {
		p.idle = append(p.idle, c)
		c = nil
		if !p.armed {
			p.armed = true
			p.janitor.Reset(sweepInterval)
		}
	}
	p.mu.Unlock()
	if c != nil {
		c.close()
	}
}

// dropStale closes the oldest idle connections while they are spent. get takes the newest,
// so after a burst the connections below the few that steady traffic keeps using are reached
// only here or by sweep: else they stayed open for as long as the traffic stayed below the
// burst, each a descriptor, in CLOSE_WAIT once the target let them go. Called with mu held,
// at most once per stalePeekAfter: one peek, and one more per connection it closes.
func (p *pool) dropStale(now time.Time) {
	n := 0
	for _, c := range p.idle {
		if !c.spent(now) {
			break
		}
		c.close()
		n++
	}
	if n > 0 {
		m := copy(p.idle, p.idle[n:])
		clear(p.idle[m:])
		p.idle = p.idle[:m]
	}
}

// sweep is the janitor: every sweepInterval while the pool holds idle connections, with or
// without requests, it closes those that are spent. Without it, once traffic stopped, the
// connections a target closed stayed open (CLOSE_WAIT, each a descriptor) until the next
// request to that target. It runs on the timer's goroutine, one per firing: no goroutine waits
// for an idle pool. It peeks every idle connection with mu held (one non-blocking syscall
// each, at most maxIdlePerTarget) and closes the spent ones after letting go of it.
func (p *pool) sweep() {
	now := time.Now()
	var spent []*upConn
	p.mu.Lock()
	kept := p.idle[:0]
	for _, c := range p.idle {
		if c.spent(now) {
			spent = append(spent, c)
		} else {
			kept = append(kept, c)
		}
	}
	clear(p.idle[len(kept):])
	p.idle = kept
	p.armed = len(p.idle) > 0 && !p.closed
	if p.armed {
		p.janitor.Reset(sweepInterval)
	}
	p.mu.Unlock()
	for _, c := range spent {
		c.close()
	}
}

// closeIdle closes every idle connection and stops the janitor for good (shutdown): a
// connection put back afterwards is closed.
func (p *pool) closeIdle() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.closed = true
	p.armed = false
	p.janitor.Stop()
	p.mu.Unlock()
	for _, c := range idle {
		c.close()
	}
}

// dialError marks a failure to connect (as opposed to one on an established connection).
type dialError struct {
	err error
	tls bool // the TCP connection worked; the TLS handshake did not
}

func (e *dialError) Error() string { return e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// dial connects within FAILOVER_CONNECT_TIMEOUT: one deadline for TCP and TLS together. It
// gives up at once, with errClientGone or errShutdown, when gone or stop says so: no
// connection is worth finishing for a client that left.
func (p *pool) dial(gone, stop func() bool) (*upConn, error) {
	var deadline time.Time
	if p.connectTimeout > 0 {
		deadline = time.Now().Add(p.connectTimeout)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := startWatch(gone, stop, cancel)
	c, err := p.connect(ctx, deadline)
	if why := w.end(); why != nil {
		if c != nil {
			c.close()
		}
		return nil, why
	}
	return c, err
}

// connect dials and, for https, shakes hands, until deadline or until ctx ends.
func (p *pool) connect(ctx context.Context, deadline time.Time) (*upConn, error) {
	d := net.Dialer{Deadline: deadline, KeepAlive: 30 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, &dialError{err: err}
	}
	tcp, ok := conn.(*net.TCPConn)
	if !ok {
		conn.Close()
		return nil, &dialError{err: errors.New("not a TCP connection")}
	}
	tcp.SetNoDelay(true)
	c := &upConn{conn: conn}
	if p.tlsConfig != nil {
		tc := tls.Client(conn, p.tlsConfig)
		tc.SetDeadline(deadline)
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, &dialError{err: err, tls: true}
		}
		tc.SetDeadline(time.Time{})
		c.conn = tc
	}
	c.rd.conn = c.conn
	c.attach(tcp, p.tlsConfig == nil)
	return c, nil
}

// writeRequest sends a request on c before the deadline in one write: a body up to
// maxCopiedBody is copied behind the head in a buffer lent for the write (nothing of the
// body stays with the exchange, which a committed stream keeps), a larger one is sent from
// where it is with the head in one writev (on TLS, net.Buffers writes them one after the
// other). A write that has to wait for the upstream to read (a large prompt, a target that
// does not read) ends at once, with errClientGone or errShutdown, when gone or stop says so.
// waited is how long such a write waited: the target reading it (its receive window), time
// the sidecar spends waiting on the target, not working (a write the kernel takes at once is
// not timed). now is a reading taken after the caller's last operation that may wait.
//
// A request the socket takes whole at once (one write, on a plain TCP connection) is
// followed, in the same call, by the wait for the answer (sendAwait), up to the read deadline
// the caller set: sent is then when it was written; the zero time when it was not so sent.
func writeRequest(c *upConn, head, body []byte, deadline, now time.Time, gone, stop func() bool) (waited time.Duration, sent time.Time, err error) {
	// Each attempt's deadline comes a little later than the last one's: the one set stays while
	// it is at most a sixteenth of the time left (and a second) early.
	if !keepDeadline(c.wset, deadline, min(deadlineSlack, deadline.Sub(now)/16)) {
		c.conn.SetWriteDeadline(deadline)
		c.wset = deadline
	}
	switch {
	case len(body) == 0:
		return c.sendAwait(head, now, gone, stop)
	case len(body) <= maxCopiedBody:
		bp := requestBuffers.Get().(*[]byte)
		b := append(append((*bp)[:0], head...), body...)
		waited, sent, err = c.sendAwait(b, now, gone, stop)
		if cap(b) <= 2*maxCopiedBody {
			*bp = b[:0]
			requestBuffers.Put(bp)
		}
		return waited, sent, err
	}
	start := time.Now()
	c.iov = [2][]byte{head, body}
	c.bufs = c.iov[:] // WriteTo consumes the slice, not the array
	w := startWatch(gone, stop, c.abortWrite)
	_, err = c.bufs.WriteTo(c.conn)
	c.iov, c.bufs = [2][]byte{}, nil
	if why := w.end(); why != nil {
		err = why
	}
	return time.Since(start), time.Time{}, err
}

// sendAwait writes p: at once when the socket takes it whole, as it takes a request up to
// maxCopiedBody but for a target that has stopped reading, and then waits for the answer in
// the same call (rawSocket.sendAwait), sent telling when p was written; else it waits for
// room for the rest, watched by gone and stop, and how long it waited is returned (on the
// portable path the socket never takes p at once: all of it is written so). Under TLS (no
// socket of its own, rd.sock nil) the write is neither watched nor timed, and the wait is the
// caller's.
func (c *upConn) sendAwait(p []byte, now time.Time, gone, stop func() bool) (waited time.Duration, sent time.Time, err error) {
	if c.rd.sock == nil {
		_, err = c.conn.Write(p)
		return 0, time.Time{}, err
	}
	n, sent, err := c.sock.sendAwait(p, now)
	if err != nil || n == len(p) {
		return 0, sent, err
	}
	start := time.Now()
	w := startWatch(gone, stop, c.abortWrite)
	_, err = c.sock.write(p[n:])
	if why := w.end(); why != nil {
		err = why
	}
	return time.Since(start), time.Time{}, err
}

// abortWrite ends a write blocked on c (from the goroutine of a watch): the connection is
// dropped after it.
func (c *upConn) abortWrite() {
	c.conn.SetWriteDeadline(time.Unix(1, 0)) // a closed connection has no write to end
}

// watch asks a client's watchers (it left; the shutdown timeout passed) every pollInterval,
// from a goroutine of its own, while a call that cannot wait in slices as reads do is blocked:
// a dial, a TLS handshake, a request write (a tls.Conn whose write timed out is broken for
// good). When one says stop, it calls abort once. It starts a goroutine: only for calls that
// already cost far more (a dial) or that already wait.
//
// The watchers run on the watch's goroutine and may write their owner's state
// (exchange.clientGone does): the owner must not touch that state between startWatch and end,
// and end, which waits for the goroutine to exit, orders those writes before what follows it.
type watch struct {
	quit chan struct{}
	done chan struct{}
	why  error // errClientGone or errShutdown once abort was called
}

// startWatch starts watching gone and stop (either may be nil) for a call abort ends.
func startWatch(gone, stop func() bool, abort func()) *watch {
	w := &watch{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(pollInterval)
		defer tick.Stop()
		for {
			select {
			case <-w.quit:
				return
			case <-tick.C:
			}
			switch {
			case gone != nil && gone():
				w.why = errClientGone
			case stop != nil && stop():
				w.why = errShutdown
			default:
				continue
			}
			abort()
			return
		}
	}()
	return w
}

// end stops the watch and reports why it ended the call (nil: it did not). After end, what
// the watchers touched is the caller's again.
func (w *watch) end() error {
	close(w.quit)
	<-w.done
	return w.why
}

// maxCopiedBody is the largest request body writeRequest copies behind the head.
const maxCopiedBody = 32 << 10

// requestBuffers lend writeRequest the buffer a request is assembled in, for one write.
var requestBuffers = sync.Pool{New: func() any { b := make([]byte, 0, maxCopiedBody+4<<10); return &b }}

func isTimeout(err error) bool {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// transportOf names a transport failure for the decision function.
func transportOf(err error) classify.Transport {
	var de *dialError
	isDial := errors.As(err, &de)
	var dns *net.DNSError
	switch {
	case err == errDeadline || isTimeout(err):
		return classify.TransportTimeout
	case errors.As(err, &dns):
		return classify.TransportDNS
	case isRefused(err):
		return classify.TransportRefused
	case isDial && de.tls:
		return classify.TransportTLS
	case isReset(err), errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed), errors.Is(err, errBrokenChunk):
		return classify.TransportReset
	}
	var be fasthttp.ErrBrokenChunk
	if errors.As(err, &be) {
		return classify.TransportReset
	}
	return classify.TransportOther
}
