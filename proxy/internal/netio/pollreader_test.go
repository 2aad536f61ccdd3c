package netio

import (
	"net"
	"testing"
	"time"
)

// A pollReader keeps the read deadline it set while it is good for half a slice and within
// the wait's deadline, and sets a new one when a wait's deadline comes sooner: a connection
// reused by an attempt with a short deadline must not wait out the previous slice.
func TestPollReaderReusesDeadline(t *testing.T) {
	_, c := loopbackPair(t, nil) // the accepted end stays silent: every read waits

	r := &newConn(c, c.(*net.TCPConn), true).rd
	r.arm(time.Now().Add(time.Minute), nil)
	if err := r.slice(time.Now()); err != nil {
		t.Fatal(err)
	}
	first := r.set
	if d := time.Until(first); d <= PollInterval/2 || d > PollInterval {
		t.Fatalf("the first slice's deadline is %v away, want about %v", d, PollInterval)
	}
	if err := r.slice(time.Now()); err != nil || !r.set.Equal(first) {
		t.Fatalf("a second slice at once set a new deadline (%v, was %v, err %v)", r.set, first, err)
	}

	r.arm(time.Now().Add(30*time.Millisecond), nil)
	start := time.Now()
	_, err := r.Read(make([]byte, 16))
	if err != ErrDeadline {
		t.Fatalf("read past a short deadline: %v, want ErrDeadline", err)
	}
	if waited := time.Since(start); waited >= PollInterval/2 {
		t.Fatalf("a 30ms deadline ended the read after %v: the previous slice's deadline was kept", waited)
	}
}
