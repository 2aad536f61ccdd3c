package proxy

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
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
				io.Copy(io.Discard, c) //nolint:errcheck // ends when the sidecar closes
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
	io.Copy(io.Discard, resp.Body) //nolint:errcheck
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
