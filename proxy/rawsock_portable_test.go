//go:build !linux || failover_portable

package proxy

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/llm-failover/failover/classify"
)

// portableSockets: this build uses the portable socket path (rawsock_portable.go).
const portableSockets = true

// portablePair returns a rawSocket on one end of a loopback connection, that end, and the peer.
func portablePair(t *testing.T) (*rawSocket, *net.TCPConn, *net.TCPConn) {
	t.Helper()
	a, b := loopbackPair(t, nil)
	s := new(rawSocket)
	s.init(a.(*net.TCPConn))
	return s, a.(*net.TCPConn), b.(*net.TCPConn)
}

// awaitInput returns at once when something has arrived, waits until something does, and
// ends at the read deadline when nothing does; the reads after it get every byte, in order.
func TestPortableSocketAwaitInput(t *testing.T) {
	s, tc, peer := portablePair(t)
	tc.SetReadDeadline(time.Now().Add(5 * time.Second))
	peer.Write([]byte("early"))
	time.Sleep(20 * time.Millisecond)
	if err := s.awaitInput(); err != nil {
		t.Fatalf("awaitInput with data waiting: %v", err)
	}
	if err := s.awaitInput(); err != nil { // again: what it found is still there
		t.Fatalf("awaitInput again: %v", err)
	}
	if got := readSocket(t, s, len("early")); got != "early" {
		t.Fatalf("read after awaitInput: %q", got)
	}

	const later = 100 * time.Millisecond
	go func() {
		time.Sleep(later)
		peer.Write([]byte("later"))
	}()
	begun := time.Now()
	if err := s.awaitInput(); err != nil {
		t.Fatalf("awaitInput: %v", err)
	}
	if d := time.Since(begun); d < later*2/3 {
		t.Fatalf("awaitInput returned after %v, before anything was sent (%v)", d, later)
	}
	if got := readSocket(t, s, len("later")); got != "later" {
		t.Fatalf("read after awaitInput: %q", got)
	}

	tc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if err := s.awaitInput(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("awaitInput with nothing sent: %v, want the deadline", err)
	}
}

// readSocket reads n bytes through s.
func readSocket(t *testing.T, s *rawSocket, n int) string {
	t.Helper()
	buf := make([]byte, n)
	for got := 0; got < n; {
		m, err := s.read(buf[got:])
		if err != nil {
			t.Fatalf("read after %q: %v", buf[:got], err)
		}
		got += m
	}
	return string(buf)
}

// The end or a reset that awaitInput finds is what the next read returns, as the decision
// function must see it.
func TestPortableSocketAwaitInputEnds(t *testing.T) {
	s, tc, peer := portablePair(t)
	tc.SetReadDeadline(time.Now().Add(5 * time.Second))
	peer.Close()
	if err := s.awaitInput(); err != nil {
		t.Fatalf("awaitInput at the end: %v", err)
	}
	if n, err := s.read(make([]byte, 8)); n != 0 || err != io.EOF {
		t.Fatalf("read at the end: %d, %v; want 0, EOF", n, err)
	}

	s, tc, peer = portablePair(t)
	tc.SetReadDeadline(time.Now().Add(5 * time.Second))
	peer.SetLinger(0)
	peer.Close()
	if err := s.awaitInput(); err != nil {
		t.Fatalf("awaitInput after a reset: %v", err)
	}
	_, err := s.read(make([]byte, 8))
	if !errors.Is(err, syscall.ECONNRESET) || transportOf(err) != classify.TransportReset {
		t.Fatalf("read after a reset: %v, want ECONNRESET", err)
	}
}

// sendAwait writes nothing: the caller writes all of the request, watched.
func TestPortableSocketSendAwaitWritesNothing(t *testing.T) {
	s, _, _ := portablePair(t)
	if n, sent, err := s.sendAwait([]byte("request"), time.Now()); n != 0 || !sent.IsZero() || err != nil {
		t.Fatalf("sendAwait: %d, %v, %v; want nothing written", n, sent, err)
	}
}
