package netio

import (
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// Send, Wait and ReadHead on either socket path (rawsock_linux.go, and rawsock_portable.go
// elsewhere and with the tag failover_portable): where the wait for the answer begins is the
// connection's business, and both must look the same to their caller.

// upstream returns a Conn to a loopback server that runs serve on the connection it accepted,
// and closes it when serve returns.
func upstream(t *testing.T, serve func(net.Conn)) *Conn {
	t.Helper()
	server, client := loopbackPair(t, nil)
	go func() {
		serve(server)
		server.Close()
	}()
	return newConn(client, client.(*net.TCPConn), true)
}

const getRequest = "GET /v1/models HTTP/1.1\r\nHost: target\r\n\r\n"

// The answer to a request comes after a delay: the time waited for it is counted once, by
// Send or by Wait, wherever the wait began; sent is when the request went out, not when the
// answer came; and the head and body read after it are the answer's.
func TestSendWaitReadHead(t *testing.T) {
	const delay = 150 * time.Millisecond
	c := upstream(t, func(s net.Conn) {
		buf := make([]byte, 4096)
		if _, err := s.Read(buf); err != nil {
			return
		}
		time.Sleep(delay)
		io.WriteString(s, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
		io.Copy(io.Discard, s)
	})
	begun := time.Now()
	deadline := begun.Add(5 * time.Second)
	sent, sendWaited, err := c.Send([]byte(getRequest), nil, deadline, deadline, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sent.Before(begun) || sent.Sub(begun) > delay/2 {
		t.Fatalf("sent %v after Send began, want the moment of the write, before the answer", sent.Sub(begun))
	}
	waited, err := c.Wait(deadline, nil)
	if err != nil {
		t.Fatal(err)
	}
	if total := sendWaited + waited; total < delay*2/3 || total > time.Since(begun) {
		t.Fatalf("waited %v in Send and %v in Wait, want the answer's %v once", sendWaited, waited, delay)
	}
	var resp fasthttp.Response
	if silent, err := c.ReadHead(&resp); err != nil || silent || resp.StatusCode() != 200 {
		t.Fatalf("ReadHead: %d, silent %v, %v", resp.StatusCode(), silent, err)
	}
	var b Body
	b.Reset(c, &resp, false)
	if body, err := readAll(&b); string(body) != "{}" || err != io.EOF || !b.Reusable() {
		t.Fatalf("body %q, %v, reusable %v", body, err, b.Reusable())
	}
}

// A target that closes or resets the connection without a byte of answer: Wait ends at once,
// and ReadHead says that the connection ended silent, with a failure named a reset.
func TestReadHeadOfAConnectionThatEnded(t *testing.T) {
	for _, reset := range []bool{false, true} {
		c := upstream(t, func(s net.Conn) {
			s.Read(make([]byte, 4096))
			if reset {
				s.(*net.TCPConn).SetLinger(0)
			}
		})
		deadline := time.Now().Add(5 * time.Second)
		if _, _, err := c.Send([]byte(getRequest), nil, deadline, deadline, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Wait(deadline, nil); err != nil {
			t.Fatalf("reset %v: Wait: %v", reset, err)
		}
		var resp fasthttp.Response
		silent, err := c.ReadHead(&resp)
		if !silent || err == nil || FailureOf(err) != FailureReset {
			t.Fatalf("reset %v: ReadHead: silent %v, %v (%v); want a silent reset", reset, silent, err, FailureOf(err))
		}
	}
}

// A target that says nothing: Wait ends at its deadline with ErrDeadline, and a Stop that gives
// a reason ends it within a PollInterval with that reason, on either path.
func TestWaitEndsAtItsDeadlineOrItsStop(t *testing.T) {
	silent := func(s net.Conn) { io.Copy(io.Discard, s) }
	c := upstream(t, silent)
	far := time.Now().Add(time.Minute)
	if _, _, err := c.Send([]byte(getRequest), nil, far, far, nil); err != nil {
		t.Fatal(err)
	}
	begun := time.Now()
	if _, err := c.Wait(begun.Add(100*time.Millisecond), nil); err != ErrDeadline {
		t.Fatalf("Wait past its deadline: %v, want ErrDeadline", err)
	}
	if d := time.Since(begun); d < 100*time.Millisecond || d > 3*time.Second {
		t.Fatalf("Wait ended after %v, want its 100 ms deadline", d)
	}

	for _, long := range []bool{false, true} {
		c := upstream(t, silent)
		if _, _, err := c.Send([]byte(getRequest), nil, far, far, nil); err != nil {
			t.Fatal(err)
		}
		if long {
			c.ExpectLongWaits()
		}
		var gone atomic.Bool
		stop := Stop(func() error {
			if gone.Load() {
				return ErrClientGone
			}
			return nil
		})
		time.AfterFunc(100*time.Millisecond, func() { gone.Store(true) })
		begun := time.Now()
		if _, err := c.Wait(far, stop); err != ErrClientGone {
			t.Fatalf("long waits %v: Wait when the client left: %v, want ErrClientGone", long, err)
		}
		if d := time.Since(begun); d > 100*time.Millisecond+2*PollInterval {
			t.Fatalf("long waits %v: Wait ended %v after it began, want within a PollInterval of the client leaving", long, d)
		}
	}
}

// A request the target does not read (a large body, and a target that stopped reading) waits
// in Send for room, and a Stop that gives a reason ends the write with it.
func TestStopEndsAWriteThatWaits(t *testing.T) {
	release := make(chan struct{})
	c := upstream(t, func(s net.Conn) { <-release })
	defer close(release)
	c.conn.(*net.TCPConn).SetWriteBuffer(16 << 10)
	var ending atomic.Bool
	stop := Stop(func() error {
		if ending.Load() {
			return ErrShutdown
		}
		return nil
	})
	time.AfterFunc(100*time.Millisecond, func() { ending.Store(true) })
	far := time.Now().Add(time.Minute)
	begun := time.Now()
	_, waited, err := c.Send([]byte("POST / HTTP/1.1\r\nContent-Length: 4194304\r\n\r\n"), make([]byte, 4<<20), far, far, stop)
	if !errors.Is(err, ErrShutdown) {
		t.Fatalf("Send to a target that does not read, stopped: %v, want ErrShutdown", err)
	}
	if d := time.Since(begun); d > 5*PollInterval || waited <= 0 || waited > d {
		t.Fatalf("Send ended after %v (waited %v), want within a few PollIntervals, all of it waiting", d, waited)
	}
}

// A Wait that reaches the time set with YieldAt, with nothing to read, yields (ErrYield) at that
// time, not at the end of its slice; a Wait called again, without a yield, goes on and finds the
// answer, whose head and body read as if no yield had come between. For the wait for the head
// (begun in Send), and for the body's, with and without a buffer held while it waits.
func TestWaitYields(t *testing.T) {
	const answerAfter, yieldAfter = 600 * time.Millisecond, 100 * time.Millisecond
	for _, long := range []bool{false, true} {
		c := upstream(t, func(s net.Conn) {
			if _, err := s.Read(make([]byte, 4096)); err != nil {
				return
			}
			time.Sleep(answerAfter)
			io.WriteString(s, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 4\r\n\r\n{")
			time.Sleep(answerAfter)
			io.WriteString(s, "  }")
			io.Copy(io.Discard, s)
		})
		far := time.Now().Add(time.Minute)
		yield := func(what string) {
			t.Helper()
			begun := time.Now()
			c.YieldAt(begun.Add(yieldAfter))
			if _, err := c.Wait(far, nil); err != ErrYield {
				t.Fatalf("long waits %v: %s: Wait %v, want ErrYield", long, what, err)
			}
			if d := time.Since(begun); d < yieldAfter || d > answerAfter-yieldAfter {
				t.Fatalf("long waits %v: %s: yielded after %v, want %v", long, what, d, yieldAfter)
			}
			// Due already: yields at once, without waiting.
			if _, err := c.Wait(far, nil); err != ErrYield {
				t.Fatalf("long waits %v: %s: Wait with its yield past: %v, want ErrYield", long, what, err)
			}
			c.YieldAt(time.Time{})
			if _, err := c.Wait(far, nil); err != nil {
				t.Fatalf("long waits %v: %s: Wait after the yield: %v", long, what, err)
			}
		}
		// Set before Send, a yield bounds the wait for the answer that Send begins.
		y := time.Now().Add(yieldAfter)
		c.YieldAt(y)
		if _, _, err := c.Send([]byte(getRequest), nil, far, far, nil); err != nil || !c.rd.set.Equal(y) {
			t.Fatalf("Send's wait ends at %v (%v), want the yield at %v", c.rd.set, err, y)
		}
		yield("the head")
		var resp fasthttp.Response
		if silent, err := c.ReadHead(&resp); err != nil || silent || resp.StatusCode() != 200 {
			t.Fatalf("ReadHead: %d, silent %v, %v", resp.StatusCode(), silent, err)
		}
		var b Body
		b.Reset(c, &resp, false)
		p, err := b.Next()
		if string(p) != "{" || err != nil {
			t.Fatalf("body's start %q, %v", p, err)
		}
		b.Consume(len(p))
		if long {
			c.ExpectLongWaits()
		}
		yield("the body")
		if rest, err := readAll(&b); string(rest) != "  }" || err != io.EOF || !b.Reusable() {
			t.Fatalf("long waits %v: body's rest %q, %v, reusable %v", long, rest, err, b.Reusable())
		}
	}
}
