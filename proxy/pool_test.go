package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llm-failover/failover/proxy/internal/config"
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
	p := newPool(addr, nil, time.Second)
	t.Cleanup(p.closeIdle)
	fresh, _, err := p.get(time.Now(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	old, _, err := p.get(time.Now(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	p.put(fresh, time.Now())
	p.put(old, time.Now().Add(-idleConnTimeout)) // as if it went idle idleConnTimeout ago
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

// Shutdown stops every pool's janitor for good: none is pending afterwards, and a connection
// put back later (a request the shutdown timeout cut short) is closed, not pooled, so it
// cannot arm the janitor again.
func TestJanitorStopsAtShutdown(t *testing.T) {
	srv, addr := startCannedServer(t)
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	resp, err := client.Post("http://"+addr+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","messages":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	p := srv.targets[0].pool
	armed := func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.armed
	}
	if !armed() {
		t.Fatal("the pool holds an idle connection and its janitor is not armed")
	}
	srv.Shutdown(t.Context())
	if armed() || p.janitor.Stop() {
		t.Fatal("the janitor is still armed after Shutdown")
	}
	c, _, err := p.get(time.Now(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	p.put(c, time.Now())
	p.mu.Lock()
	pooled := len(p.idle)
	p.mu.Unlock()
	if pooled != 0 || armed() || p.janitor.Stop() {
		t.Fatalf("a connection put back after Shutdown was pooled (%d idle) or armed the janitor", pooled)
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

// A TLS 1.3 server sends its session tickets after the handshake, which the client has left by
// then: they are read with the first response, which they precede. The connection is then idle
// with nothing waiting on it and is reused after more than stalePeekAfter, not taken for one
// the server closed (upConn.spent). A Go server sends tickets only to a client that keeps them,
// so the target's pool here gets a session cache (the sidecar keeps none).
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
	cfg, err := config.Load([]string{"FAILOVER_TARGET_0_URL=" + up.URL + "/v1"}, true)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(cfg, Options{RootCAs: roots})
	if err != nil {
		t.Fatal(err)
	}
	tickets := &countingSessionCache{ClientSessionCache: tls.NewLRUClientSessionCache(8)}
	srv.targets[0].pool.tlsConfig.ClientSessionCache = tickets // before Serve: no request reads it yet
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln) // ends with Shutdown
	defer srv.Shutdown(t.Context())
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	for i := range 3 {
		if i > 0 {
			time.Sleep(3 * stalePeekAfter)
		}
		resp, err := client.Post("http://"+ln.Addr().String()+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"m","messages":[]}`))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("X-Failover-Attempts") != "1" {
			t.Fatalf("request %d: %d in %s attempts", i, resp.StatusCode, resp.Header.Get("X-Failover-Attempts"))
		}
		if i == 0 && tickets.puts.Load() == 0 {
			t.Fatal("the target sent no session ticket: the test shows nothing")
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d TLS connections for three requests, want 1 (kept alive)", n)
	}
}
