package proxy

import (
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llm-failover/failover/stream"
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

// clientPair returns a clientConn accepted through clientListener and the peer's end.
func clientPair(t *testing.T) (*clientConn, net.Conn) {
	t.Helper()
	c, peer := loopbackPair(t, func(ln net.Listener) net.Listener { return clientListener{Listener: ln} })
	cc, ok := c.(*clientConn)
	if !ok {
		t.Fatalf("Accept returned %T, want *clientConn", c)
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

// clientConn skips a read deadline a little later than the one set, and a read still ends at
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

// A request's reads through clientConn (the one-byte read, then the rest) allocate nothing.
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

func TestRequestLineFamily(t *testing.T) {
	for line, want := range map[string]stream.Family{
		"POST /v1/messages HTTP/1.1\r\nHost: x\r\n":            stream.Messages,
		"POST /v1/chat/completions?api-version=1 HTTP/1.1\r\n": stream.Chat,
		"GET /v1/models HTTP/1.1\r\n":                          stream.Other,
		"POST /v1/messages":                                    stream.Other, // no end of the target yet
		"P":                                                    stream.Other,
	} {
		if got := requestLineFamily([]byte(line)); got != want {
			t.Errorf("%q: %v, want %v", line, got, want)
		}
	}
}

// headScan finds a bare LF in a request head however the head is cut into reads, stops at
// the head's end (a body's LFs are not line ends), and skips empty lines before the request line.
func TestHeadScan(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		bare     bool
		ended    bool // the head's end was seen
		body     int  // bytes after the head's end (its size is the rest)
	}{
		{"CRLF head", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", false, true, 0},
		{"CRLF head, a body with bare LFs", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\n\r\n{\n\n}\n\n", false, true, 6},
		{"request line alone", "GET / HTTP/1.0\r\n\r\n", false, true, 0},
		{"empty lines before the request line", "\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n", false, true, 0},
		{"folded header", "GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n", false, true, 0},
		{"a CR before the CRLF is no empty line", "GET / HTTP/1.1\r\nX: a\r\r\n\r\n", false, true, 0},
		{"head not ended", "GET / HTTP/1.1\r\nHost: x\r\n", false, false, 0},
		{"LF only", "GET / HTTP/1.1\nHost: x\n\n", true, false, 0},
		{"CRLF request line, LF headers", "GET / HTTP/1.1\r\nHost: x\n\n", true, false, 0},
		{"LF terminator", "GET / HTTP/1.1\r\nHost: x\r\n\n", true, false, 0},
		{"LF request line", "GET / HTTP/1.1\nHost: x\r\n\r\n", true, false, 0},
		{"LF before the request line", "\nGET / HTTP/1.1\r\n\r\n", true, false, 0},
		{"bare LF after a CR that is not its own", "GET / HTTP/1.1\r\nX: a\r\r\n\n", true, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Whole, then cut in two at every byte, then one byte at a time.
			cuts := [][]string{{tc.in}}
			for i := 1; i < len(tc.in); i++ {
				cuts = append(cuts, []string{tc.in[:i], tc.in[i:]})
			}
			cuts = append(cuts, strings.Split(tc.in, ""))
			for _, parts := range cuts {
				h := headScan{on: true}
				bare := false
				for _, p := range parts {
					if h.on && h.bare([]byte(p)) {
						bare = true
						break
					}
				}
				if bare != tc.bare || !bare && h.on == tc.ended {
					t.Fatalf("read as %q: bare %v, ended %v; want bare %v, ended %v", parts, bare, !h.on, tc.bare, tc.ended)
				}
				// The head's size: to its empty line, the body not counted; all that was
				// scanned while it has not ended.
				if want := len(tc.in) - tc.body; !bare && h.size != want {
					t.Fatalf("read as %q: head size %d, want %d", parts, h.size, want)
				}
			}
		})
	}
}

// A head with a bare LF: the request's first byte is read, then every read fails with
// errBareLF, so that fasthttp answers 400 without parsing what came.
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
		if n, err := c.Read(buf); n != 0 || err != errBareLF {
			t.Fatalf("read after the first byte: %d bytes, %v; want errBareLF", n, err)
		}
	}
}

// BenchmarkHeadScan is the bare-LF scan of an SDK's request head (OpenAI Python's headers).
func BenchmarkHeadScan(b *testing.B) {
	head := []byte("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:4000\r\nAccept-Encoding: gzip, deflate\r\n" +
		"Connection: keep-alive\r\nAccept: application/json\r\nContent-Type: application/json\r\nUser-Agent: OpenAI/Python 1.54.0\r\n" +
		"X-Stainless-Lang: python\r\nX-Stainless-Package-Version: 1.54.0\r\nX-Stainless-OS: Linux\r\nX-Stainless-Arch: x64\r\n" +
		"X-Stainless-Runtime: CPython\r\nX-Stainless-Runtime-Version: 3.12.7\r\nAuthorization: Bearer sk-not-a-key\r\n" +
		"X-Stainless-Async: false\r\nX-Stainless-Retry-Count: 0\r\nContent-Length: 96\r\n\r\n")
	b.SetBytes(int64(len(head)))
	b.ReportAllocs()
	for b.Loop() {
		h := headScan{on: true}
		if h.bare(head) || h.on {
			b.Fatal("misread")
		}
	}
}

// takeLent empties bodyBuffers (other tests' servers put theirs there too) and counts the
// buffers in it that are body, empty.
func takeLent(body []byte) int {
	n := 0
	for {
		h, _ := bodyBuffers.Get().(*[]byte)
		if h == nil {
			return n
		}
		if len(*h) == 0 && cap(*h) == cap(body) && &(*h)[:1][0] == &body[0] {
			n++
		}
	}
}

// A body lent to fasthttp (lendBody) comes back to bodyBuffers when the connection reads again
// or closes, whichever comes first, and only once.
func TestLentBodyComesBack(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops puts at random under the race detector")
	}
	for _, end := range []string{"read", "close"} {
		t.Run(end, func(t *testing.T) {
			c, peer := clientPair(t)
			var resp fasthttp.Response
			body := make([]byte, 5, 4096)
			copy(body, "hello")
			c.lendBody(&resp, body)
			if string(resp.Body()) != "hello" {
				t.Fatalf("answer body %q", resp.Body())
			}
			if end == "read" {
				peer.Write([]byte("G"))
				if _, err := c.Read(make([]byte, 1)); err != nil {
					t.Fatal(err)
				}
			} else {
				c.Close()
			}
			if n := takeLent(body); n != 1 {
				t.Fatalf("the lent buffer is in bodyBuffers %d times, want once", n)
			}
			c.Close() // after a read, or a second time: nothing more to put
			if n := takeLent(body); n != 0 {
				t.Fatalf("the lent buffer came back again (%d)", n)
			}
		})
	}
}
