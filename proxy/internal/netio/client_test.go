package netio

import (
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// loopbackPair returns both ends of a loopback TCP connection: the accepted one (accepted
// through wrap's listener when wrap is set) and the dialled one. Both close when the test ends.
func loopbackPair(t testing.TB, wrap func(net.Listener) net.Listener) (accepted, dialled net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dialled, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dialled.Close() })
	if wrap != nil {
		ln = wrap(ln)
	}
	accepted, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { accepted.Close() })
	return accepted, dialled
}

// clientPair returns a ClientConn accepted through Listener and the peer's end.
func clientPair(t *testing.T) (*ClientConn, net.Conn) {
	t.Helper()
	c, peer := loopbackPair(t, func(ln net.Listener) net.Listener { return Listener{Listener: ln} })
	cc, ok := c.(*ClientConn)
	if !ok {
		t.Fatalf("Accept returned %T, want *ClientConn", c)
	}
	return cc, peer
}

// readN reads from c, size bytes at a time, until want bytes have arrived.
func readN(t *testing.T, c net.Conn, size, want int) string {
	t.Helper()
	var got []byte
	buf := make([]byte, size)
	for len(got) < want {
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("after %d bytes: %v", len(got), err)
		}
		got = append(got, buf[:n]...)
	}
	return string(got)
}

// The one-byte read returns the first byte and keeps what else arrived; the next read gets it
// and the buffer goes back.
func TestClientConnReadAhead(t *testing.T) {
	c, peer := clientPair(t)
	msg := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
	if _, err := peer.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	first := readN(t, c, 1, 1)
	if c.ahead == nil {
		// The whole message is one segment on loopback, normally there in full by now; if it
		// arrived in parts, the rest is still read correctly below.
		t.Log("nothing was read ahead")
	}
	rest := readN(t, c, 16<<10, len(msg)-1)
	if first+rest != msg {
		t.Fatalf("read %q, want %q", first+rest, msg)
	}
	if c.ahead != nil {
		t.Fatal("the read-ahead buffer is still held after it was drained")
	}

	// A request larger than the buffer: the part past it is read from the socket.
	big := "POST / HTTP/1.1\r\nContent-Length: 20000\r\n\r\n" + strings.Repeat("a", 20000)
	go peer.Write([]byte(big)) // checked by what arrives
	if got := readN(t, c, 1, 1) + readN(t, c, 16<<10, len(big)-1); got != big {
		t.Fatalf("a %d-byte request came back as %d bytes", len(big), len(got))
	}

	// Small reads in a row (a pipelined request after the first): each is served in order.
	if _, err := peer.Write([]byte("abc")); err != nil {
		t.Fatal(err)
	}
	if got := readN(t, c, 1, 1) + readN(t, c, 1, 1) + readN(t, c, 1, 1); got != "abc" {
		t.Fatalf("one-byte reads gave %q", got)
	}
}

// A one-byte read keeps the read deadline and reports the end of the connection as EOF.
func TestClientConnDeadlineAndEOF(t *testing.T) {
	c, peer := clientPair(t)
	c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	var b [1]byte
	_, err := c.Read(b[:])
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v, want a timeout", err)
	}
	if c.ahead != nil {
		t.Fatal("a read that timed out holds a buffer")
	}
	c.SetReadDeadline(time.Time{})
	peer.Close()
	if _, err := c.Read(b[:]); err != io.EOF {
		t.Fatalf("read after the peer closed: %v, want EOF", err)
	}
}

// A deadline is kept when the one asked is less than the slack later; a sooner one, a much
// later one, or clearing it is always applied.
func TestKeepDeadline(t *testing.T) {
	now := time.Now()
	var zero time.Time
	for _, tc := range []struct {
		set, want time.Time
		keep      bool
	}{
		{zero, zero, true},
		{zero, now, false},
		{now, zero, false},
		{now, now, true},
		{now, now.Add(deadlineSlack / 2), true},
		{now, now.Add(deadlineSlack), false},
		{now, now.Add(-time.Millisecond), false}, // sooner: always set
	} {
		if got := keepDeadline(tc.set, tc.want, deadlineSlack); got != tc.keep {
			t.Errorf("keepDeadline(%v, %v) = %v, want %v", tc.set.Sub(now), tc.want.Sub(now), got, tc.keep)
		}
	}
}

// ClientConn skips a read deadline a little later than the one set, and a read still ends at
// a sooner one.
func TestClientConnReadDeadline(t *testing.T) {
	c, _ := clientPair(t)
	first := time.Now().Add(time.Minute)
	c.SetReadDeadline(first)
	c.SetReadDeadline(first.Add(deadlineSlack / 2))
	if !c.rset.Equal(first) {
		t.Fatalf("a deadline %v later replaced the one set", deadlineSlack/2)
	}
	c.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
	start := time.Now()
	var b [1]byte
	if _, err := c.Read(b[:]); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read: %v, want the sooner deadline's timeout", err)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Fatalf("the sooner deadline was not applied: the read waited %v", waited)
	}
}

// A request's reads through ClientConn (the one-byte read, then the rest) allocate nothing.
func TestClientConnReadAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	c, peer := clientPair(t)
	msg := []byte("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
	buf := make([]byte, 16<<10)
	var one [1]byte
	read := func() {
		if _, err := peer.Write(msg); err != nil {
			t.Fatal(err)
		}
		got := 0
		for got < len(msg) {
			p := buf
			if got == 0 {
				p = one[:]
			}
			n, err := c.Read(p)
			if err != nil {
				t.Fatal(err)
			}
			got += n
		}
	}
	read() // the pool's first buffer
	if n := testing.AllocsPerRun(200, read); n != 0 {
		t.Fatalf("a request's reads allocate %.1f times, want 0", n)
	}
}

// A head with a bare LF: the request's first byte is read, then every read fails with
// ErrBareLF, so that fasthttp answers 400 without parsing what came.
func TestClientConnRefusesABareLF(t *testing.T) {
	c, peer := clientPair(t)
	if _, err := peer.Write([]byte("GET /v1/models HTTP/1.1\nHost: x\n\n")); err != nil {
		t.Fatal(err)
	}
	if got := readN(t, c, 1, 1); got != "G" {
		t.Fatalf("first byte %q", got)
	}
	buf := make([]byte, 16<<10)
	for range 2 {
		if n, err := c.Read(buf); n != 0 || err != ErrBareLF {
			t.Fatalf("read after the first byte: %d bytes, %v; want ErrBareLF", n, err)
		}
	}
}
