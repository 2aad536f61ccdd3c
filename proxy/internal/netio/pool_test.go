package netio

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// idleListener accepts connections and holds them open, reading, until the sidecar closes
// them: each connection's end is sent on the returned channel.
func idleListener(t *testing.T) (addr string, ended <-chan net.Addr) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ch := make(chan net.Addr, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				io.Copy(io.Discard, c) // ends when the sidecar closes
				c.Close()
				ch <- c.RemoteAddr()
			}()
		}
	}()
	return ln.Addr().String(), ch
}

// With no request at all, the pool's janitor closes a connection idle for longer than
// idleConnTimeout although its far side keeps it open, and keeps one that is not.
func TestJanitorClosesConnectionsIdleTooLong(t *testing.T) {
	addr, ended := idleListener(t)
	p := NewPool(addr, nil, time.Second)
	t.Cleanup(p.CloseIdle)
	fresh, _, err := p.Get(nil)
	if err != nil {
		t.Fatal(err)
	}
	old, _, err := p.Get(nil)
	if err != nil {
		t.Fatal(err)
	}
	p.Put(fresh)
	p.Put(old)
	p.mu.Lock()
	old.idleSince = time.Now().Add(-idleConnTimeout) // as if it went idle idleConnTimeout ago
	p.mu.Unlock()
	select {
	case a := <-ended:
		if a.String() != old.conn.LocalAddr().String() {
			t.Fatal("the fresh connection was closed, not the one idle too long")
		}
	case <-time.After(10 * time.Second): // five sweeps, for a loaded machine
		t.Fatal("a connection idle for longer than idleConnTimeout is still open 10 s later")
	}
	// The sweep that closed the old connection peeked the fresh one, idle for a sweepInterval.
	p.mu.Lock()
	kept := len(p.idle) == 1 && p.idle[0] == fresh
	p.mu.Unlock()
	if !kept {
		t.Fatal("the janitor let go of a connection that was neither idle too long nor closed")
	}
	select {
	case <-ended:
		t.Fatal("the janitor closed a connection that was neither idle too long nor closed")
	default:
	}
}

// CloseIdle (the server's shutdown) closes the idle connections and stops the janitor for
// good: none is pending afterwards, and a connection put back later (a request the shutdown
// timeout cut short) is closed, not pooled, so it cannot arm the janitor again.
func TestCloseIdleStopsTheJanitorForGood(t *testing.T) {
	addr, ended := idleListener(t)
	p := NewPool(addr, nil, time.Second)
	armed := func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.armed
	}
	c, _, err := p.Get(nil)
	if err != nil {
		t.Fatal(err)
	}
	p.Put(c)
	if !armed() {
		t.Fatal("the pool holds an idle connection and its janitor is not armed")
	}
	p.CloseIdle()
	if armed() || p.janitor.Stop() {
		t.Fatal("the janitor is still armed after CloseIdle")
	}
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the idle connection is still open 5 s after CloseIdle")
	}
	if c, _, err = p.Get(nil); err != nil {
		t.Fatal(err)
	}
	p.Put(c)
	p.mu.Lock()
	pooled := len(p.idle)
	p.mu.Unlock()
	if pooled != 0 || armed() || p.janitor.Stop() {
		t.Fatalf("a connection put back after CloseIdle was pooled (%d idle) or armed the janitor", pooled)
	}
}

// countingSessionCache counts the session tickets a TLS client received.
type countingSessionCache struct {
	tls.ClientSessionCache
	puts atomic.Int64
}

func (c *countingSessionCache) Put(key string, cs *tls.ClientSessionState) {
	c.puts.Add(1)
	c.ClientSessionCache.Put(key, cs)
}

// exchange sends a request on a connection from p, reads its answer whole, and puts the
// connection back; it returns the answer's status.
func exchange(t *testing.T, p *Pool, request string) int {
	t.Helper()
	c, _, err := p.Get(nil)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	if _, _, err := c.Send([]byte(request), nil, deadline, deadline, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(deadline, nil); err != nil {
		t.Fatal(err)
	}
	var resp fasthttp.Response
	if _, err := c.ReadHead(&resp); err != nil {
		t.Fatal(err)
	}
	var b Body
	b.Reset(c, &resp, false)
	if _, err := readAll(&b); err != io.EOF || !b.Reusable() {
		t.Fatalf("the answer's body ended with %v, reusable %v", err, b.Reusable())
	}
	p.Put(c)
	return resp.StatusCode()
}

// A TLS 1.3 server sends its session tickets after the handshake, which the client has left by
// then: they are read with the first response, which they precede. The connection is then idle
// with nothing waiting on it and is reused after more than stalePeekAfter, not taken for one
// the server closed (Conn.spent). A Go server sends tickets only to a client that keeps them,
// so the pool here gets a session cache (the sidecar keeps none).
func TestSessionTicketsDoNotCondemnAPooledTLSConnection(t *testing.T) {
	var conns atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true}`)
	}))
	up.TLS = &tls.Config{MinVersion: tls.VersionTLS13}
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	up.StartTLS()
	defer up.Close()
	roots := x509.NewCertPool()
	roots.AddCert(up.Certificate())
	tickets := &countingSessionCache{ClientSessionCache: tls.NewLRUClientSessionCache(8)}
	addr := up.Listener.Addr().String()
	host, _, _ := net.SplitHostPort(addr)
	p := NewPool(addr, &tls.Config{ServerName: host, RootCAs: roots, NextProtos: []string{"http/1.1"},
		ClientSessionCache: tickets}, 5*time.Second)
	defer p.CloseIdle()
	body := `{"model":"m","messages":[]}`
	request := "POST /v1/chat/completions HTTP/1.1\r\nHost: target\r\nContent-Type: application/json\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	for i := range 3 {
		if i > 0 {
			time.Sleep(3 * stalePeekAfter)
		}
		if status := exchange(t, p, request); status != 200 {
			t.Fatalf("request %d: %d", i, status)
		}
		if i == 0 && tickets.puts.Load() == 0 {
			t.Fatal("the target sent no session ticket: the test shows nothing")
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d TLS connections for three requests, want 1 (kept alive)", n)
	}
}

// TryGet takes an idle connection as Get does, and never dials: nil when none waits, or when
// the one that waits is spent (the far side closed it), which it closes.
func TestTryGetNeverDials(t *testing.T) {
	var conns atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"ok":true}`)
	}))
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	up.Start()
	defer up.Close()
	p := NewPool(up.Listener.Addr().String(), nil, 5*time.Second)
	defer p.CloseIdle()
	if c := p.TryGet(); c != nil {
		t.Fatal("TryGet on an empty pool returned a connection")
	}
	request := "GET /v1/models HTTP/1.1\r\nHost: target\r\n\r\n"
	if status := exchange(t, p, request); status != 200 {
		t.Fatalf("status %d", status)
	}
	c := p.TryGet()
	if c == nil || !c.Reused() {
		t.Fatal("TryGet did not take the idle connection")
	}
	p.Put(c)
	up.CloseClientConnections() // the far side closes it
	time.Sleep(3 * stalePeekAfter)
	if c := p.TryGet(); c != nil {
		t.Fatal("TryGet took a connection the far side closed")
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections made, want the one exchange's", n)
	}
}
