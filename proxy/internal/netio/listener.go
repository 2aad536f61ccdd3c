package netio

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Listener wraps the proxy listener's connections in ClientConn, and lists them in Conns while
// they are open.
type Listener struct {
	net.Listener
	Conns   *Conns       // the list; nil: not listed (tests of a connection alone)
	Closing *atomic.Bool // the server's shutdown began; nil: never
}

// Accept returns the next connection, a *ClientConn unless it is not TCP or its socket cannot
// be reached (it is then served as it is).
func (l Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c, nil
	}
	cc, ok := newClientConn(tc, l.Closing)
	if !ok {
		return c, nil
	}
	cc.conns = l.Conns
	l.Conns.add(cc)
	return cc, nil
}

// Conns are the open client connections, for the server to close those that wait for a
// request (CloseIdle) and to end the waits after an answer that last (EndLongWaits). A
// connection is listed once, when accepted, and left when closed. Safe for concurrent use;
// the zero Conns is an empty list.
type Conns struct {
	mu sync.Mutex
	m  map[*ClientConn]struct{}
	// looked are the connections of EndLongWaits' current look, guarded by lookMu (held for
	// the whole look, so that looks do not overlap).
	lookMu sync.Mutex
	looked []*ClientConn
}

func (cs *Conns) add(c *ClientConn) {
	if cs == nil {
		return
	}
	cs.mu.Lock()
	if cs.m == nil {
		cs.m = make(map[*ClientConn]struct{})
	}
	cs.m[c] = struct{}{}
	cs.mu.Unlock()
}

func (cs *Conns) remove(c *ClientConn) {
	if cs == nil {
		return
	}
	cs.mu.Lock()
	delete(cs.m, c)
	cs.mu.Unlock()
}

// EndLongWaits is one look at the connections that wait, after an answer, for the client's
// next request (ClientConn.endAnswer): it ends, with a read deadline in the past, each wait
// that has lasted since the last look. Called at a steady tick, it ends a wait after one to
// two ticks. A wait holds fasthttp's write buffer (WriteBufferSize, lent per answer), which an
// idle keep-alive connection should not keep: one whose client sends nothing for a while gives
// it back and waits for its next request as it did before (a read that looks once first). It
// also bounds a wait for a request that had arrived before it began, which the poller forgot
// (pace): the read after it finds the request, and the next answer does not wait. Under load a
// client's next request follows its answer within milliseconds, and no wait is ended.
func (cs *Conns) EndLongWaits() {
	cs.lookMu.Lock()
	defer cs.lookMu.Unlock()
	cs.mu.Lock()
	cs.looked = cs.looked[:0]
	for c := range cs.m {
		cs.looked = append(cs.looked, c)
	}
	cs.mu.Unlock()
	for _, c := range cs.looked {
		c.wait.endIfLasted(c.TCPConn)
	}
	clear(cs.looked)
}

// CloseIdle closes the connections that wait for a request: a keep-alive connection between
// requests, and one given back to the server after a stream. One whose request arrives at the
// same moment is lost, as with fasthttp's own closing of idle connections; the client sees a
// closed keep-alive connection and retries (the request was not forwarded: a request that
// arrives once shutdown began is answered 503).
func (cs *Conns) CloseIdle() {
	cs.mu.Lock()
	idle := make([]*ClientConn, 0, len(cs.m))
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

// answerWait is a client connection's wait after an answer (endAnswer), as EndLongWaits sees
// it. Its fields are guarded by mu.
type answerWait struct {
	mu    sync.Mutex
	on    bool   // a wait may be under way
	poked bool   // EndLongWaits ended it with a past read deadline
	n     uint64 // the waits begun
	seen  uint64 // n at EndLongWaits' last look
}

// endIfLasted is EndLongWaits' look at the connection conn: a wait under way that began
// before its last look, and was not ended yet, is ended with a read deadline in the past on
// conn. The deadline is set under mu: end, which waits for it, comes after it, and the serving
// goroutine's next deadline (ClientConn.rset, which endAnswer resets) replaces it.
func (w *answerWait) endIfLasted(conn *net.TCPConn) {
	w.mu.Lock()
	if w.on && w.n == w.seen && !w.poked {
		w.poked = true
		conn.SetReadDeadline(time.Unix(1, 0))
	}
	w.seen = w.n
	w.mu.Unlock()
}
