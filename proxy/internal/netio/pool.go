package netio

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"time"
)

const (
	// idleConnTimeout: a pooled connection idle longer is closed rather than reused. Providers'
	// load balancers close idle keep-alive connections after about a minute; staying well below
	// avoids writing a request into a connection the far side is closing.
	idleConnTimeout = 30 * time.Second
	// maxIdlePerTarget bounds the pool; more concurrent attempts dial and close.
	maxIdlePerTarget = 512
	// stalePeekAfter: a pooled connection idle longer is checked for the far side's close
	// before it is used again (Pool.Get, Conn.spent).
	stalePeekAfter = 100 * time.Millisecond
	// sweepInterval is how often a pool that holds idle connections looks at all of them
	// without waiting for a request (Pool.sweep): one the far side closed is closed within
	// about sweepInterval, any other within idleConnTimeout+sweepInterval (docs/decisions.md,
	// Three actions, never confused).
	sweepInterval = 2 * time.Second
)

// Pool holds one target's idle connections (LIFO, so the warmest is reused first) and dials
// new ones. Safe for concurrent use.
type Pool struct {
	addr           string
	tlsConfig      *tls.Config // nil: plain TCP
	connectTimeout time.Duration
	janitor        *time.Timer // runs sweep; armed while idle holds connections

	mu     sync.Mutex
	idle   []*Conn
	swept  time.Time // when Put last looked at the oldest idle connections (dropStale)
	armed  bool      // the janitor will run
	closed bool      // CloseIdle ran (shutdown): a connection put back is closed
}

// NewPool makes the pool of the target at addr (host:port), over TLS with tlsConfig unless it
// is nil, dialing within connectTimeout (0: no limit).
func NewPool(addr string, tlsConfig *tls.Config, connectTimeout time.Duration) *Pool {
	p := &Pool{addr: addr, tlsConfig: tlsConfig, connectTimeout: connectTimeout}
	p.janitor = time.AfterFunc(sweepInterval, p.sweep)
	p.janitor.Stop() // Put arms it
	return p
}

// spent reports whether an idle connection must be closed rather than used: idle past
// idleConnTimeout, or holding anything no request asked for, in its reader or (once idle for
// longer than stalePeekAfter, so worth a system call) on its socket: bytes, the end or an error.
// An HTTP/1.1 server sends nothing on an idle keep-alive connection but its close: over http
// the end itself (or a reset), over https first the TLS close_notify alert, which a check for
// the end alone takes for data, so the connection would be reused and the request written
// into a connection already closed. A TLS 1.3 session ticket, sent after the handshake, comes
// before the first response and is read with it (docs/decisions.md, Three actions, never
// confused).
func (c *Conn) spent(now time.Time) bool {
	idle := now.Sub(c.idleSince)
	return idle > idleConnTimeout || c.buffered() > 0 || idle > stalePeekAfter && c.idleInput()
}

// Get returns a live idle connection or dials a new one; a dial ends early, with its reason,
// when stop gives one. dialed is how long dialing took (0 for a pooled connection): time spent
// waiting on the target, not in the sidecar.
func (p *Pool) Get(stop Stop) (c *Conn, dialed time.Duration, err error) {
	for {
		p.mu.Lock()
		n := len(p.idle)
		if n == 0 {
			p.mu.Unlock()
			start := time.Now()
			if c, err = p.dial(stop); err != nil {
				return nil, time.Since(start), err
			}
			c.rd.watched = start // stop is next asked PollInterval after the attempt began
			return c, time.Since(start), nil
		}
		c = p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		if c = p.take(c); c != nil {
			return c, 0, nil
		}
	}
}

// take readies the idle connection c for a request, or closes it and returns nil when it is
// spent. A connection idle for longer than stalePeekAfter is peeked before reuse: a request
// written to a connection the far side has closed fails after it was sent, and is then an
// attempt for the decision function, never sent again behind its back (the far side may have
// read it). One idle for less is taken as alive without a system call: servers close idle
// keep-alive connections after seconds, and under load connections come back within
// milliseconds.
func (p *Pool) take(c *Conn) *Conn {
	now := time.Now()
	if c.spent(now) {
		c.Close()
		return nil
	}
	c.reused = true
	c.rd.watched, c.rd.yieldAt = now, time.Time{}
	return c
}

// TryGet returns a live idle connection, as Get does, or nil where Get would have to dial.
func (p *Pool) TryGet() *Conn {
	for {
		p.mu.Lock()
		n := len(p.idle)
		if n == 0 {
			p.mu.Unlock()
			return nil
		}
		c := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		if c = p.take(c); c != nil {
			return c
		}
	}
}

// Put returns a connection whose last answer was read to its framed end.
func (p *Pool) Put(c *Conn) {
	now := time.Now()
	c.idleSince = now
	c.longWaits = false
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
		c.Close()
	}
}

// dropStale closes the oldest idle connections while they are spent. Get takes the newest,
// so after a burst the connections below the few that steady traffic keeps using are reached
// only here or by sweep: else they stayed open for as long as the traffic stayed below the
// burst, each a descriptor, in CLOSE_WAIT once the target let them go. Called with mu held,
// at most once per stalePeekAfter: one peek, and one more per connection it closes.
func (p *Pool) dropStale(now time.Time) {
	n := 0
	for _, c := range p.idle {
		if !c.spent(now) {
			break
		}
		c.Close()
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
// for an idle pool. It peeks every idle connection with mu held (one non-blocking system call
// each, at most maxIdlePerTarget) and closes the spent ones after letting go of it.
func (p *Pool) sweep() {
	now := time.Now()
	var spent []*Conn
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
		c.Close()
	}
}

// CloseIdle closes every idle connection and stops the janitor for good (shutdown): a
// connection put back afterwards is closed.
func (p *Pool) CloseIdle() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.closed = true
	p.armed = false
	p.janitor.Stop()
	p.mu.Unlock()
	for _, c := range idle {
		c.Close()
	}
}

// Dial connects to the target as Get does, for a caller that reads, writes and closes the
// connection itself and never puts it back (the background probe).
func (p *Pool) Dial(stop Stop) (net.Conn, error) {
	c, err := p.dial(stop)
	if err != nil {
		return nil, err
	}
	return c.conn, nil
}

// dial connects within the connect timeout: one deadline for TCP and TLS together. It gives
// up at once, with stop's reason, when stop gives one: no connection is worth finishing for a
// client that left.
func (p *Pool) dial(stop Stop) (*Conn, error) {
	var deadline time.Time
	if p.connectTimeout > 0 {
		deadline = time.Now().Add(p.connectTimeout)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := startWatch(stop, cancel)
	c, err := p.connect(ctx, deadline)
	if why := w.end(); why != nil {
		if c != nil {
			c.Close()
		}
		return nil, why
	}
	return c, err
}

// connect dials and, for https, shakes hands, until deadline or until ctx ends.
func (p *Pool) connect(ctx context.Context, deadline time.Time) (*Conn, error) {
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
	if p.tlsConfig == nil {
		return newConn(tcp, tcp, true), nil
	}
	tc := tls.Client(conn, p.tlsConfig)
	tc.SetDeadline(deadline)
	if err := tc.HandshakeContext(ctx); err != nil {
		conn.Close()
		return nil, &dialError{err: err, tls: true}
	}
	tc.SetDeadline(time.Time{})
	return newConn(tc, tcp, false), nil
}
