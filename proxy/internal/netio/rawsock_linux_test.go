//go:build linux && !failover_portable

package netio

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// rawPair returns a rawSocket on one end of a loopback connection, that end, and the peer.
func rawPair(t *testing.T) (*rawSocket, *net.TCPConn, *net.TCPConn) {
	t.Helper()
	a, b := loopbackPair(t, nil)
	tc := a.(*net.TCPConn)
	raw, err := tc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	s := new(rawSocket)
	s.init(raw)
	return s, tc, b.(*net.TCPConn)
}

// A write larger than both socket buffers waits on the poller while the peer does not read,
// and delivers every byte, in order, once it does.
func TestRawSocketWriteWaitsForTheReader(t *testing.T) {
	s, tc, peer := rawPair(t)
	tc.SetWriteBuffer(16 << 10)
	peer.SetReadBuffer(16 << 10)
	payload := make([]byte, 4<<20)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := s.write(payload)
		done <- result{n, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("4 MiB written to a peer that reads nothing: %d, %v", r.n, r.err)
	case <-time.After(100 * time.Millisecond):
	}
	got, err := io.ReadAll(io.LimitReader(peer, int64(len(payload))))
	if err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.n != len(payload) {
		t.Fatalf("write: %d, %v; want %d, nil", r.n, r.err, len(payload))
	}
	if !bytes.Equal(got, payload) {
		t.Fatal("the peer read other bytes than were written")
	}
}

// read returns what arrived, io.EOF at an orderly close, and a reset that the decision
// function sees as one; a write to a reset connection fails the same way.
func TestRawSocketEnds(t *testing.T) {
	s, _, peer := rawPair(t)
	peer.Write([]byte("hello"))
	peer.Close()
	buf := make([]byte, 64)
	n, err := s.read(buf)
	if err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("read: %q, %v", buf[:n], err)
	}
	if n, err := s.read(buf); n != 0 || err != io.EOF {
		t.Fatalf("read after the peer closed: %d, %v; want 0, EOF", n, err)
	}

	s, _, peer = rawPair(t)
	peer.SetLinger(0) // Close sends a reset
	peer.Close()
	_, err = s.read(buf)
	if !errors.Is(err, syscall.ECONNRESET) || FailureOf(err) != FailureReset {
		t.Fatalf("read after a reset: %v, want ECONNRESET", err)
	}
	_, err = s.write([]byte("after the reset"))
	if !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("write after a reset: %v, want EPIPE or ECONNRESET", err)
	}
	if FailureOf(err) != FailureReset {
		t.Fatalf("write after a reset named %v", FailureOf(err))
	}
}

// The connection's deadlines bound a read that waits and a write that waits.
func TestRawSocketDeadlines(t *testing.T) {
	s, tc, peer := rawPair(t)
	tc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := s.read(make([]byte, 16)); !IsTimeout(err) || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v, want a timeout", err)
	}
	tc.SetWriteBuffer(16 << 10)
	peer.SetReadBuffer(16 << 10)
	tc.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	payload := make([]byte, 4<<20)
	n, err := s.write(payload)
	if !IsTimeout(err) || n >= len(payload) {
		t.Fatalf("write past the deadline: %d, %v; want a short write and a timeout", n, err)
	}
}

// A read and a write through rawSocket allocate nothing.
func TestRawSocketAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	s, _, peer := rawPair(t)
	msg := []byte("data: {\"choices\":[]}\n\n")
	buf := make([]byte, 256)
	round := func() {
		if _, err := s.write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(peer, buf[:len(msg)]); err != nil {
			t.Fatal(err)
		}
		if _, err := peer.Write(msg); err != nil {
			t.Fatal(err)
		}
		for got := 0; got < len(msg); {
			n, err := s.read(buf[got:])
			if err != nil {
				t.Fatal(err)
			}
			got += n
		}
	}
	round()
	if n := testing.AllocsPerRun(200, round); n != 0 {
		t.Fatalf("a write and a read allocate %.1f times, want 0", n)
	}
}

// writeThenPark writes a request the socket takes whole and waits, in the same call, until the
// answer arrives: the read that follows finds it. With nothing coming, the wait ends at the
// connection's read deadline, the request written all the same.
func TestRawSocketWriteThenPark(t *testing.T) {
	s, tc, peer := rawPair(t)
	const answerAfter = 150 * time.Millisecond
	go func() {
		buf := make([]byte, 64)
		if _, err := io.ReadFull(peer, buf[:7]); err != nil || string(buf[:7]) != "request" {
			return
		}
		time.Sleep(answerAfter)
		peer.Write([]byte("answer"))
	}()
	tc.SetReadDeadline(time.Now().Add(5 * time.Second))
	begun := time.Now()
	n, sent, err := s.writeThenPark([]byte("request"))
	waited := time.Since(begun)
	if err != nil || n != len("request") || !s.woke {
		t.Fatalf("writeThenPark: %d, %v, woke %v; want all of it written, and the answer seen", n, err, s.woke)
	}
	if sent.Before(begun) || sent.Sub(begun) > answerAfter/2 {
		t.Fatalf("sent %v after the call began, want the moment of the write, before the answer", sent.Sub(begun))
	}
	if waited < answerAfter*2/3 {
		t.Fatalf("writeThenPark returned after %v, before the answer (sent %v later)", waited, answerAfter)
	}
	buf := make([]byte, 64)
	if n, err := sysRead(rawFD(t, tc), buf); err != 0 || string(buf[:n]) != "answer" {
		t.Fatalf("the read after the wait: %q, %v; want the answer at once", buf[:n], err)
	}

	// No answer: the wait ends at the read deadline.
	tc.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	begun = time.Now()
	n, sent, err = s.writeThenPark([]byte("request"))
	if err != nil || n != len("request") || sent.IsZero() || s.woke {
		t.Fatalf("writeThenPark without an answer: %d, %v, sent %v, woke %v; want all of it written", n, err, sent, s.woke)
	}
	if d := time.Since(begun); d < 80*time.Millisecond || d > 3*time.Second {
		t.Fatalf("writeThenPark without an answer returned after %v, want about the 100 ms read deadline", d)
	}
}

// A request the socket does not take whole (a peer that reads nothing) is not waited for:
// writeThenPark returns at once with what was written, and the rest is the caller's.
func TestRawSocketWriteThenParkPartial(t *testing.T) {
	s, tc, peer := rawPair(t)
	tc.SetWriteBuffer(16 << 10)
	peer.SetReadBuffer(16 << 10)
	tc.SetReadDeadline(time.Now().Add(5 * time.Second))
	payload := make([]byte, 4<<20)
	begun := time.Now()
	n, sent, err := s.writeThenPark(payload)
	if err != nil || n <= 0 || n >= len(payload) || !sent.IsZero() {
		t.Fatalf("writeThenPark of 4 MiB to a peer that reads nothing: %d, %v, sent %v; want part of it, no wait", n, err, sent)
	}
	if d := time.Since(begun); d > 2*time.Second {
		t.Fatalf("writeThenPark waited %v for a request the socket did not take whole", d)
	}
}

// rawFD is c's descriptor.
func rawFD(t *testing.T, c *net.TCPConn) uintptr {
	t.Helper()
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var fd uintptr
	raw.Control(func(f uintptr) { fd = f })
	return fd
}

// parkUntilReadable returns at once when something has arrived already, waits until something
// arrives otherwise, and ends at the read deadline when nothing does; it reads nothing.
func TestRawSocketParkUntilReadable(t *testing.T) {
	s, tc, peer := rawPair(t)
	tc.SetReadDeadline(time.Now().Add(5 * time.Second))
	peer.Write([]byte("early"))
	time.Sleep(20 * time.Millisecond) // delivered, and any readiness the poller saw is past
	if err := s.parkUntilReadable(); err != nil {
		t.Fatalf("parkUntilReadable with data waiting: %v", err)
	}
	buf := make([]byte, 64)
	if n, err := s.read(buf); err != nil || string(buf[:n]) != "early" {
		t.Fatalf("read after parkUntilReadable: %q, %v", buf[:n], err)
	}

	const later = 100 * time.Millisecond
	go func() {
		time.Sleep(later)
		peer.Write([]byte("later"))
	}()
	begun := time.Now()
	if err := s.parkUntilReadable(); err != nil {
		t.Fatalf("parkUntilReadable: %v", err)
	}
	if d := time.Since(begun); d < later*2/3 {
		t.Fatalf("parkUntilReadable returned after %v, before anything was sent (%v)", d, later)
	}
	if n, err := s.read(buf); err != nil || string(buf[:n]) != "later" {
		t.Fatalf("read after parkUntilReadable: %q, %v", buf[:n], err)
	}

	tc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if err := s.parkUntilReadable(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("parkUntilReadable with nothing sent: %v, want the deadline", err)
	}
}
