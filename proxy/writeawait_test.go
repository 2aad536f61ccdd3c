package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// The write that ends an answer waits for the client's next request: the read of that
// request's first byte finds it, rather than looking once for nothing and then waiting. A
// request whose body came chunked is read with more bytes than its body holds, so its answer
// does not wait, and the read after it looks once for nothing: the count this test reads
// counts what it should.
func TestAnswerWaitsForTheNextRequestInItsLastWrite(t *testing.T) {
	srv, addr := startCannedServer(t)
	t.Cleanup(func() { srv.Shutdown(t.Context()) })
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hello"}]}`
	plain := "POST /v1/chat/completions HTTP/1.1\r\nHost: sidecar\r\nContent-Type: application/json\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	chunked := "POST /v1/chat/completions HTTP/1.1\r\nHost: sidecar\r\nContent-Type: application/json\r\n" +
		"Transfer-Encoding: chunked\r\n\r\n" + strconv.FormatInt(int64(len(body)), 16) + "\r\n" + body + "\r\n0\r\n\r\n"
	roundTrip := func(req string) {
		t.Helper()
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil || resp.StatusCode != 200 {
			t.Fatalf("answer: %d, %v", resp.StatusCode, err)
		}
		// The server is in its wait (or its read) well before the next request is sent.
		time.Sleep(20 * time.Millisecond)
	}
	roundTrip(plain)
	cc := onlyClientConn(t, srv)
	base := cc.empty.Load() // the first request's read may have come before the request
	for range 4 {
		roundTrip(plain)
	}
	if n := cc.empty.Load() - base; n != 0 {
		t.Fatalf("%d reads of a next request found nothing after answers that wait for it", n)
	}
	roundTrip(chunked) // its answer does not wait
	roundTrip(plain)
	if n := cc.empty.Load() - base; n != 1 {
		t.Fatalf("%d reads found nothing after an answer that does not wait, want 1", n)
	}
}

// onlyClientConn returns the one client connection srv has open.
func onlyClientConn(t *testing.T, srv *Server) *clientConn {
	t.Helper()
	srv.conns.mu.Lock()
	defer srv.conns.mu.Unlock()
	if len(srv.conns.m) != 1 {
		t.Fatalf("%d client connections listed, want 1", len(srv.conns.m))
	}
	for c := range srv.conns.m {
		return c
	}
	return nil
}

// A connection is listed while open and leaves the list when closed, by the client or by the
// server.
func TestClientConnectionsAreListedWhileOpen(t *testing.T) {
	srv, addr := startCannedServer(t)
	t.Cleanup(func() { srv.Shutdown(t.Context()) })
	listed := func() int {
		srv.conns.mu.Lock()
		defer srv.conns.mu.Unlock()
		return len(srv.conns.m)
	}
	waitListed := func(want int) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); listed() != want; {
			if time.Now().After(deadline) {
				t.Fatalf("%d connections listed, want %d", listed(), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	var conns []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	waitListed(3)
	conns[0].Close()
	waitListed(2)
	// A request that closes its connection: the server closes it after the answer.
	req := "GET /v1/models HTTP/1.1\r\nHost: sidecar\r\nConnection: close\r\n\r\n"
	if _, err := io.WriteString(conns[1], req); err != nil {
		t.Fatal(err)
	}
	conns[1].SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.Copy(io.Discard, conns[1]); err != nil {
		t.Fatalf("reading to the connection's end: %v", err)
	}
	waitListed(1)
}

// A connection whose client sends nothing after an answer does not keep waiting in the
// answer's write, which holds fasthttp's write buffer: endLongWaits ends the wait, the
// connection waits for its next request as it did before (a read that looks once first), and
// serves it: the past read deadline that ended the wait is not left on the socket.
func TestALongWaitAfterAnAnswerIsEnded(t *testing.T) {
	defer func(d time.Duration) { waitTick = d }(waitTick)
	waitTick = 20 * time.Millisecond
	srv, addr := startCannedServer(t)
	t.Cleanup(func() { srv.Shutdown(t.Context()) })
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hello"}]}`
	req := "POST /v1/chat/completions HTTP/1.1\r\nHost: sidecar\r\nContent-Type: application/json\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	var cc *clientConn
	for i := range 3 {
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil || resp.StatusCode != 200 {
			t.Fatalf("request %d: %d, %v", i, resp.StatusCode, err)
		}
		if cc == nil {
			cc = onlyClientConn(t, srv)
		}
		before := cc.empty.Load()
		// Ended within two ticks; then the read for the next request looks once and waits.
		for deadline := time.Now().Add(5 * time.Second); cc.empty.Load() == before; {
			if time.Now().After(deadline) {
				t.Fatalf("after answer %d the connection still waits in the answer's write", i)
			}
			time.Sleep(5 * time.Millisecond)
		}
		cc.waitMu.Lock()
		awaiting := cc.awaiting
		cc.waitMu.Unlock()
		if awaiting {
			t.Fatalf("after answer %d: a wait in the answer's write goes on", i)
		}
	}
}
