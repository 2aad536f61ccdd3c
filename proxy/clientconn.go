package proxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llm-failover/failover/stream"
)

// clientListener wraps the proxy listener's connections in clientConn, and lists them in
// conns while they are open (nil: not listed, as in tests of the connection alone).
type clientListener struct {
	net.Listener
	conns   *clientConns
	closing *atomic.Bool // the server's shutdown began (nil: never)
}

func (l clientListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c, nil
	}
	c2, ok := newClientConn(tc, l.closing)
	if !ok {
		return c, nil
	}
	c2.conns = l.conns
	l.conns.add(c2)
	return c2, nil
}

// clientConns are the open client connections, for Shutdown to close those that wait for a
// request (closeIdle). A connection is listed once, when accepted, and left when closed.
type clientConns struct {
	mu sync.Mutex
	m  map[*clientConn]struct{}
}

func (cs *clientConns) add(c *clientConn) {
	if cs == nil {
		return
	}
	cs.mu.Lock()
	if cs.m == nil {
		cs.m = make(map[*clientConn]struct{})
	}
	cs.m[c] = struct{}{}
	cs.mu.Unlock()
}

func (cs *clientConns) remove(c *clientConn) {
	if cs == nil {
		return
	}
	cs.mu.Lock()
	delete(cs.m, c)
	cs.mu.Unlock()
}

// endLongWaits runs until quit is closed: every tick (waitTick), it ends the waits of
// writeAwait that have lasted since its last look (between one and two ticks), with a read
// deadline in the past. A wait holds fasthttp's write buffer (writeBufferSize, lent per
// answer), which an idle keep-alive connection should not keep: one whose client sends nothing
// for a while gives it back and waits for its next request as it did before (a read that looks
// once first). It also bounds a wait for a request that had arrived before it began, which the
// poller forgot (clientConn.sequential): the read after it finds the request, and the next
// answer does not wait. Under load a client's next request follows its answer within
// milliseconds, and no wait is ended. At every tick it also calls also (when not nil) with the
// tick's time: the server's other periodic look (Server.retireWorkers), on the same timer.
func (cs *clientConns) endLongWaits(quit <-chan struct{}, every time.Duration, also func(time.Time)) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	var conns []*clientConn
	for {
		var now time.Time
		select {
		case <-quit:
			return
		case now = <-tick.C:
		}
		if also != nil {
			also(now)
		}
		cs.mu.Lock()
		conns = conns[:0]
		for c := range cs.m {
			conns = append(conns, c)
		}
		cs.mu.Unlock()
		past := time.Unix(1, 0)
		for _, c := range conns {
			c.waitMu.Lock()
			if c.awaiting && c.waits == c.seen && !c.poked {
				c.poked = true
				c.TCPConn.SetReadDeadline(past) // c.rset is the serving goroutine's: writeAwait resets it
			}
			c.seen = c.waits
			c.waitMu.Unlock()
		}
		clear(conns)
	}
}

// waitTick is how often endLongWaits looks: a connection whose client is idle holds its write
// buffer for less than twice as long, and a request the wait missed (a client that sent it
// before the answer, though it had waited for the answer before) waits as long at most. A
// variable for tests (read by New).
var waitTick = 50 * time.Millisecond

// closeIdle closes the connections that wait for a request: a keep-alive connection between
// requests, and one given back to the server after a stream. One whose request arrives at the
// same moment is lost, as with fasthttp's own closing of idle connections; the client sees a
// closed keep-alive connection and retries (the request was not forwarded: a request that
// arrives once shutdown began is answered 503).
func (cs *clientConns) closeIdle() {
	cs.mu.Lock()
	idle := make([]*clientConn, 0, len(cs.m))
	for c := range cs.m {
		if c.idle.Load() {
			idle = append(idle, c)
		}
	}
	cs.mu.Unlock()
	for _, c := range idle {
		c.Close() // outside the lock: Close leaves the list
	}
}

// clientConn is a client connection that answers a one-byte read from a read-ahead buffer.
//
// fasthttp's server, with ReduceMemoryUsage (which keeps an idle keep-alive connection from
// holding its 16 KiB read buffer), waits for a request's first byte with a read of one byte and
// only then reads the rest through a buffer: two read syscalls for every request. Here the
// one-byte read takes whatever has arrived (the whole request, as a rule) into a buffer lent
// from a pool while it holds bytes, and the reads that follow are served from it: one syscall.
// While the connection waits, it holds no buffer (on Linux; clientconn_portable.go says how the
// portable path differs). Every other read goes to the socket. A
// connection closed with bytes still read ahead (a request it never served) leaves its buffer
// to the garbage collector: Close may run concurrently with Read (the server's shutdown).
type clientConn struct {
	*net.TCPConn
	clientIO              // the socket's reads and writes: clientconn_raw.go on Linux, else clientconn_portable.go
	conns    *clientConns // the list it is in while open (nil: none)
	ahead    *readAhead   // bytes read but not yet returned; nil when none
	// pending are bytes of the client's next requests that fasthttp had read before a stream
	// hijacked the connection (a pipelining client), given back by reclaim: read first.
	pending    []byte
	reclaiming bool        // reclaim is reading what fasthttp's wrapper holds: the socket is not read
	rset       time.Time   // the read deadline on the socket (zero: none)
	idle       atomic.Bool // waiting for a request's first byte (read by clientConns.closeIdle)
	// delivered counts the bytes Read returned since the current request's first byte; with
	// the head's size (headScan) and the body's, it tells whether fasthttp read more than the
	// request (atRequestEnd).
	delivered int
	// answer is the head of the answer fasthttp writes next, when that answer may wait for
	// the client's next request in the write that ends it (awaitAfter); nil otherwise.
	answer *fasthttp.ResponseHeader
	// sequential: the client sent its last request only after it had the answer before it (the
	// read of the request's first byte found nothing at first, or the wait after that answer
	// ended when the request arrived). Only then does an answer wait (atRequestEnd): the poller
	// forgets, as the wait begins, a request that arrived before it, which a client that does
	// not wait for its answers (pipelining) may have sent while the handler ran.
	// foundNone and wokeByData are this request's evidence, read when its first byte arrives;
	// wrote tells that an answer was written before it (a connection's first request has
	// none: that its read found nothing tells nothing of the client).
	sequential, foundNone, wokeByData, wrote bool
	// afterPoke: the wait after the last answer was ended by endLongWaits. pipelines: the read
	// after such a wait found the next request there at once, which the wait missed (the
	// client sent it before it had the answer): its answers never wait again, however long it
	// waits between its bursts of requests.
	afterPoke, pipelines bool
	// The wait of writeAwait, as clientConns.endLongWaits sees it: awaiting while it may wait,
	// waits counts them, and poked tells that endLongWaits ended one with a past read deadline.
	// seen is endLongWaits' own: the count it saw at its last look.
	waitMu   sync.Mutex
	awaiting bool
	poked    bool
	waits    uint64
	seen     uint64
	// lineFamily is the family of the request line read last (requestLineFamily): the shape
	// for an error fasthttp reports after it reset the request (431, a chunked 413).
	lineFamily stream.Family
	head       headScan // the request head being read, for a bare LF
	bareLF     bool     // the head had one: every read fails with errBareLF

	// lent holds the body of the answer fasthttp writes after the handler returns (lendBody),
	// in its holder from bodyBuffers; nil when none. Atomic: Close may run on another
	// goroutine (Shutdown's), though only once the answer is written.
	lent atomic.Pointer[[]byte]
}

// bodyBuffers recycles the buffers that held answers: an exchange reads an answer's body into
// its buffer, gives it to fasthttp as the answer's body (lendBody), and takes another from
// here; the connection puts it back once the answer is written (takeBack). Each is a *[]byte,
// so that putting one allocates nothing.
//
// fasthttp's own way (Response.SwapBody) hands the buffer to fasthttp's pool of body buffers,
// which keeps only buffers up to a size it learns from the answers it sees: after many small
// chat answers it drops each larger one (a stream sent whole, a long completion), and every
// such answer then allocated twice, a new buffer for fasthttp and a larger one for the next
// body. Here a buffer is kept whatever its size, up to maxPooledBody.
var bodyBuffers sync.Pool

// maxPooledBody is the largest buffer bodyBuffers keeps, as the exchange's own limit.
const maxPooledBody = 1 << 20

// lendBody makes b the answer's body without copying it (fasthttp writes it after the handler
// returns, when the exchange that read it may serve another request), keeps b until the
// answer is written, and returns a buffer from bodyBuffers (empty, possibly nil) for the
// exchange to read its next body into.
func (c *clientConn) lendBody(resp *fasthttp.Response, b []byte) []byte {
	c.takeBack() // not expected: one answer per request, and the last was taken back
	resp.SetBodyRaw(b)
	h, _ := bodyBuffers.Get().(*[]byte)
	if h == nil {
		h = new([]byte)
	}
	spare := (*h)[:0]
	*h = b
	c.lent.Store(h)
	return spare
}

// takeBack puts the lent body back into bodyBuffers. It is called where the answer has been
// written: when the connection reads again, when its next request begins (a request that was
// already read, behind the one answered, is served without a read), and when it closes.
func (c *clientConn) takeBack() {
	if c.lent.Load() == nil {
		return
	}
	if h := c.lent.Swap(nil); h != nil && cap(*h) <= maxPooledBody {
		*h = (*h)[:0]
		bodyBuffers.Put(h)
	}
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
	// fasthttp reads only once it has written the answer.
	c.takeBack()
	first := len(p) == 1 && !c.head.on // a request's first byte
	if first {
		c.head = headScan{on: true}
		c.delivered = 0
		c.foundNone = false
	}
	c.answer = nil // a read comes after the answer's end, or instead of a wait for it
	n, err := c.read(p)
	c.delivered += n
	if first && n > 0 {
		c.pipelines = c.pipelines || c.afterPoke && !c.foundNone
		c.sequential = c.wrote && !c.pipelines && (c.foundNone || c.wokeByData)
		c.wokeByData, c.wrote, c.afterPoke = false, false, false
	}
	if c.head.on && n > 0 && c.head.bare(p[:n]) {
		c.bareLF = true
		if len(p) > 1 {
			return 0, errBareLF
		}
	}
	return n, err
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
	size  int  // bytes scanned, the empty lines before the request line included: the head's size once it ended
}

// bare scans b, the head's next bytes, and reports whether a line in it ends in a bare LF.
// It turns the scan off at the head's end.
func (h *headScan) bare(b []byte) bool {
	h.size += len(b) // less what follows the head's end, below
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
			h.size -= len(b)
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

// atRequestEnd reports whether this request's answer may wait for the next request: the
// client sent this one only after the answer before it (sequential), and what Read returned
// since the request's first byte ends where the request ends, a head of head.size bytes and a
// body of bodyLen bytes as sent (chunked framing makes it more), so that fasthttp holds no
// bytes of a next request and reads it from the connection. Once per request: it forgets the
// head's size.
func (c *clientConn) atRequestEnd(bodyLen int) bool {
	size := c.head.size
	c.head.size = 0
	return c.sequential && !c.head.on && size > 0 && c.delivered == size+bodyLen
}

// awaitAfter arms the write that ends the answer of h (fasthttp writes it once the handler
// returns) to wait for the client's next request (writeAwait), unless the answer closes the
// connection. The handler calls it only for an answer fasthttp writes itself, on a request
// that ended at its last byte (atRequestEnd). Read disarms it: it comes after the answer.
func (c *clientConn) awaitAfter(h *fasthttp.ResponseHeader) { c.answer = h }

// Close closes the connection and takes it off the server's list.
func (c *clientConn) Close() error {
	// fasthttp closes a connection after its last answer; Shutdown (closeIdle, and fasthttp's
	// own) only one whose answer is written, idle: the lent body is no longer read. A Close
	// that could come while an answer is being written would have to leave it be.
	c.takeBack()
	c.conns.remove(c)
	return c.TCPConn.Close()
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
