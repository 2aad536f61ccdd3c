package netio

import (
	"io"
	"net"
	"testing"
	"time"
)

// The looks at a socket that must not wait, on either socket path (rawsock_linux.go, and
// rawsock_portable.go elsewhere and with the tag failover_portable): both must see the same.

// waitFor asks cond every few milliseconds until it holds, or fails after 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 5 s: %s", what)
		}
	}
}

// The client's connection is seen closed once the client closed or reset it, and not before,
// without waiting; bytes it sent before (a pipelined request) are no close, and the reads
// that follow still get every byte, in order.
func TestClientPeerSeesTheClientLeave(t *testing.T) {
	cc, peer := clientPair(t)
	if (Peer{}).Known() || (Peer{}).Closed() {
		t.Fatal("the zero Peer is known, or seen closed")
	}
	p := PeerOf(cc)
	if !p.Known() {
		t.Fatal("PeerOf returned a Peer not known")
	}
	begun := time.Now()
	if p.Closed() {
		t.Fatal("an open, quiet connection is seen closed")
	}
	if d := time.Since(begun); d > 500*time.Millisecond {
		t.Fatalf("a look at a quiet connection took %v", d)
	}

	// A request sent early, then the close: the bytes come first.
	const early = "POST /v1/chat/completions HTTP/1.1\r\n"
	if _, err := io.WriteString(peer, early); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	peer.Close()
	time.Sleep(20 * time.Millisecond)
	for range 3 {
		if p.Closed() {
			t.Fatal("a connection with bytes waiting to be read is seen closed")
		}
	}
	cc.SetReadDeadline(time.Now().Add(5 * time.Second))
	got := make([]byte, 0, len(early))
	buf := make([]byte, 1) // a request's first byte is read alone, as fasthttp reads it
	for len(got) < len(early) {
		n, err := cc.Read(buf)
		if err != nil {
			t.Fatalf("read after %q: %v", got, err)
		}
		got = append(got, buf[:n]...)
		buf = make([]byte, 64)
	}
	if string(got) != early {
		t.Fatalf("read %q, want %q", got, early)
	}
	if string(cc.RequestTarget()) != "/v1/chat/completions" {
		t.Errorf("the request line's target was not taken from the bytes read first: %q", cc.RequestTarget())
	}
	waitFor(t, "the client's close is not seen once its bytes were read", p.Closed)
	if _, err := cc.Read(buf); err != io.EOF {
		t.Fatalf("read after the close: %v, want EOF", err)
	}

	// A reset.
	cc, peer = clientPair(t)
	p = PeerOf(cc)
	peer.(*net.TCPConn).SetLinger(0)
	peer.Close()
	waitFor(t, "a reset connection is not seen closed", p.Closed)
}

// A look leaves the read deadline the connection had: a read after it still ends there, not
// at the look's own.
func TestClientPeerKeepsTheReadDeadline(t *testing.T) {
	cc, peer := clientPair(t)
	p := PeerOf(cc)
	cc.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if p.Closed() {
		t.Fatal("an open connection is seen closed")
	}
	go func() {
		time.Sleep(100 * time.Millisecond)
		io.WriteString(peer, "GET / HTTP/1.1\r\n\r\n")
	}()
	buf := make([]byte, 64)
	if _, err := cc.Read(buf); err != nil {
		t.Fatalf("a read within the deadline after a look: %v", err)
	}
	if _, err := cc.Read(buf); !IsTimeout(err) {
		t.Fatalf("a read past the deadline after a look: %v, want a timeout", err)
	}
}

// A connection that is not a ClientConn has nothing to look at: it is never seen closed.
func TestClientPeerOfAnotherConnection(t *testing.T) {
	c, peer := loopbackPair(t, nil)
	p := PeerOf(struct{ net.Conn }{c})
	peer.Close()
	time.Sleep(20 * time.Millisecond)
	if p.Closed() {
		t.Fatal("a connection without a socket to look at is seen closed")
	}
}

// An idle upstream connection has something to read once its server sent bytes, closed or
// reset it, and not before; a look at a quiet one does not wait, and the read after it ends
// at its own deadline, not at the look's.
func TestIdleInputOnAnUpstreamConnection(t *testing.T) {
	for _, tc := range []struct {
		name string
		do   func(net.Conn)
	}{
		{"bytes", func(c net.Conn) { io.WriteString(c, "HTTP/1.1 408 Request Timeout\r\n\r\n") }},
		{"close", func(c net.Conn) { c.Close() }},
		{"reset", func(c net.Conn) { c.(*net.TCPConn).SetLinger(0); c.Close() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			server, client := loopbackPair(t, nil)
			c := newConn(client, client.(*net.TCPConn), true)
			begun := time.Now()
			if c.idleInput() {
				t.Fatal("a quiet connection has something to read")
			}
			if d := time.Since(begun); d > 500*time.Millisecond {
				t.Fatalf("a look at a quiet connection took %v", d)
			}
			tc.do(server)
			waitFor(t, "the server's "+tc.name+" is not seen", c.idleInput)
		})
	}

	server, client := loopbackPair(t, nil)
	c := newConn(client, client.(*net.TCPConn), true)
	c.idleInput()
	c.rd.arm(time.Now().Add(5*time.Second), nil)
	go func() {
		time.Sleep(50 * time.Millisecond)
		io.WriteString(server, "HTTP/1.1 200 OK\r\n")
	}()
	if _, err := c.reader().ReadString('\n'); err != nil {
		t.Fatalf("a read after a look: %v", err)
	}
	c.releaseReader()
}
