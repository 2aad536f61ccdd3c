package netio

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http/httputil"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// bodyOver returns a Conn reading what write sends from the far end of a real loopback TCP
// connection. write runs in its own goroutine; the far end closes when it returns.
func bodyOver(t testing.TB, write func(net.Conn)) *Conn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		// The listener closes only after the accept: closing it earlier would reset a
		// connection still waiting in its backlog.
		c, err := ln.Accept()
		ln.Close()
		if err != nil {
			return
		}
		c.(*net.TCPConn).SetNoDelay(true)
		write(c)
		c.Close()
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	// As Pool.connect builds a plain TCP connection.
	c := newConn(conn, conn.(*net.TCPConn), true)
	c.rd.arm(time.Now().Add(5*time.Second), nil)
	return c
}

// writeSplit writes s whole, or one byte at a time when bytewise is set.
func writeSplit(s string, bytewise bool) func(net.Conn) {
	return func(c net.Conn) {
		if !bytewise {
			c.Write([]byte(s))
			return
		}
		for i := range len(s) {
			if _, err := c.Write([]byte{s[i]}); err != nil {
				return
			}
		}
	}
}

// readAll reads b to its end the way the sidecar does (Next, Consume).
func readAll(b *Body) ([]byte, error) {
	var out []byte
	for {
		p, err := b.Next()
		if len(p) == 0 {
			return out, err
		}
		out = append(out, p...)
		b.Consume(len(p))
	}
}

func response(status, contentLength int) *fasthttp.Response {
	var r fasthttp.Response
	r.SetStatusCode(status)
	r.Header.SetContentLength(contentLength)
	return &r
}

func TestUpBody(t *testing.T) {
	tests := []struct {
		name          string
		status        int
		contentLength int // -1 chunked, -2 until close
		head          bool
		wire          string
		want          string
		wantErr       error // nil: the body ends properly
		reusable      bool
	}{
		{"one chunk", 200, -1, false, "5\r\nhello\r\n0\r\n\r\n", "hello", nil, true},
		{"chunks, extensions, upper-case hex", 200, -1, false,
			"5;name=value\r\nhello\r\nA \r\n0123456789\r\n0\r\n\r\n", "hello0123456789", nil, true},
		{"trailer fields", 200, -1, false, "5\r\nhello\r\n0\r\nX-Trailer: 1\r\nX-Other: 2\r\n\r\n", "hello", nil, true},
		{"bare LF line ends", 200, -1, false, "5\nhello\n0\n\n", "hello", nil, true},
		{"an SSE stream in chunks", 200, -1, false,
			"f\r\ndata: {\"a\":1}\n\n\r\ne\r\ndata: [DONE]\n\n\r\n0\r\n\r\n", "data: {\"a\":1}\n\ndata: [DONE]\n\n", nil, true},
		{"cut inside a chunk", 200, -1, false, "5\r\nhel", "hel", io.ErrUnexpectedEOF, false},
		{"cut before the last chunk", 200, -1, false, "5\r\nhello\r\n", "hello", io.ErrUnexpectedEOF, false},
		{"cut inside the trailer", 200, -1, false, "5\r\nhello\r\n0\r\nX-T", "hello", io.ErrUnexpectedEOF, false},
		{"size that is not hex", 200, -1, false, "zz\r\nhello\r\n0\r\n\r\n", "", ErrBrokenChunk, false},
		{"empty size line", 200, -1, false, "\r\nhello", "", ErrBrokenChunk, false},
		{"garbage after the size", 200, -1, false, "5x\r\nhello\r\n0\r\n\r\n", "", ErrBrokenChunk, false},
		{"no CRLF after the data", 200, -1, false, "5\r\nhelloXY\r\n0\r\n\r\n", "hello", ErrBrokenChunk, false},
		{"size beyond any body", 200, -1, false, "fffffffffffffffff\r\n", "", ErrBrokenChunk, false},
		{"size line longer than the buffer", 200, -1, false, strings.Repeat("1", 5000) + "\r\n", "", ErrBrokenChunk, false},
		{"content-length", 200, 5, false, "hello", "hello", nil, true},
		{"content-length leaves what follows", 200, 5, false, "helloHTTP/1.1 200 OK\r\n", "hello", nil, true},
		{"content-length cut short", 200, 10, false, "hello", "hello", io.ErrUnexpectedEOF, false},
		{"empty content-length body", 200, 0, false, "", "", nil, true},
		{"until the upstream closes", 200, -2, false, "hello world", "hello world", nil, false},
		{"HEAD has no body", 200, 5, true, "", "", nil, true},
		{"204 has no body", 204, -2, false, "", "", nil, true},
	}
	for _, tc := range tests {
		for _, bytewise := range []bool{false, true} {
			name := tc.name
			if bytewise {
				name += ", one byte per write"
			}
			t.Run(name, func(t *testing.T) {
				c := bodyOver(t, writeSplit(tc.wire, bytewise))
				var b Body
				b.Reset(c, response(tc.status, tc.contentLength), tc.head)
				got, err := readAll(&b)
				if tc.wantErr == nil && err != io.EOF || tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
					t.Fatalf("ended with %v, want %v", err, tc.wantErr)
				}
				if string(got) != tc.want {
					t.Fatalf("body %q, want %q", got, tc.want)
				}
				if b.Reusable() != tc.reusable {
					t.Fatalf("reusable %v, want %v", b.Reusable(), tc.reusable)
				}
				if _, again := b.Next(); again != err {
					t.Fatalf("the end is not sticky: %v then %v", err, again)
				}
			})
		}
	}
}

// A committed stream waiting for its next chunk holds no read buffer: the chunk's CRLF is
// taken with its data, so nothing stays buffered and the reader goes back to its pool, and the
// wait that follows (ExpectLongWaits) lets the rest be read.
func TestUpBodyWaitsWithoutABuffer(t *testing.T) {
	next := make(chan struct{})
	c := bodyOver(t, func(w net.Conn) {
		w.Write([]byte("5\r\nhello\r\n"))
		<-next
		w.Write([]byte("6\r\n world\r\n0\r\n\r\n"))
	})
	var b Body
	b.Reset(c, response(200, -1), false)
	p, err := b.Next()
	if string(p) != "hello" || err != nil {
		t.Fatalf("first chunk %q, %v", p, err)
	}
	b.Consume(len(p))
	if c.buffered() != 0 {
		t.Fatalf("%d bytes left buffered after the chunk", c.buffered())
	}
	c.releaseReader()
	if c.br != nil {
		t.Fatal("the reader was not given back")
	}
	close(next)
	c.ExpectLongWaits()
	if _, err := c.Wait(time.Now().Add(5*time.Second), nil); err != nil {
		t.Fatal(err)
	}
	rest, err := readAll(&b)
	if string(rest) != " world" || err != io.EOF {
		t.Fatalf("rest %q, %v", rest, err)
	}
}

func TestBrokenChunksAreResets(t *testing.T) {
	for _, err := range []error{ErrBrokenChunk, io.ErrUnexpectedEOF} {
		if got := FailureOf(err); got != FailureReset {
			t.Errorf("%v: %v, want reset", err, got)
		}
	}
}

// FuzzBody feeds arbitrary bytes as a chunked body through a real socket. The decoder must
// end (never hang or panic), and whenever it accepts a body, Go's own chunked reader must read
// the same bytes from it.
func FuzzBody(f *testing.F) {
	for _, s := range []string{
		"5\r\nhello\r\n0\r\n\r\n",
		"5;x=y\r\nhello\r\n0\r\nT: 1\r\n\r\n",
		"5\nhello\n0\n\n",
		"3\r\nab",
		"zz\r\n",
		"ffffffffffffffffffff\r\n",
		"1\r\na\r\n1\r\nb\r\n0\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, wire []byte) {
		c := bodyOver(t, writeSplit(string(wire), false))
		var b Body
		b.Reset(c, response(200, -1), false)
		got, err := readAll(&b)
		if err != io.EOF {
			return
		}
		want, werr := io.ReadAll(httputil.NewChunkedReader(bytes.NewReader(wire)))
		if werr == nil && !bytes.Equal(got, want) {
			t.Fatalf("decoded %q, Go's chunked reader %q", got, want)
		}
	})
}
