package proxy

import (
	"testing"
	"time"
)

// A pollReader keeps the read deadline it set while it is good for half a slice and within
// the wait's deadline, and sets a new one when a wait's deadline comes sooner: a connection
// reused by an attempt with a short deadline must not wait out the previous slice.
func TestPollReaderReusesDeadline(t *testing.T) {
	_, c := loopbackPair(t, nil) // the accepted end stays silent: every read waits

	r := &pollReader{conn: c}
	r.arm(time.Now().Add(time.Minute), nil, nil)
	if err := r.slice(time.Now()); err != nil {
		t.Fatal(err)
	}
	first := r.set
	if d := time.Until(first); d <= pollInterval/2 || d > pollInterval {
		t.Fatalf("the first slice's deadline is %v away, want about %v", d, pollInterval)
	}
	if err := r.slice(time.Now()); err != nil || !r.set.Equal(first) {
		t.Fatalf("a second slice at once set a new deadline (%v, was %v, err %v)", r.set, first, err)
	}

	r.arm(time.Now().Add(30*time.Millisecond), nil, nil)
	start := time.Now()
	_, err := r.Read(make([]byte, 16))
	if err != errDeadline {
		t.Fatalf("read past a short deadline: %v, want errDeadline", err)
	}
	if waited := time.Since(start); waited >= pollInterval/2 {
		t.Fatalf("a 30ms deadline ended the read after %v: the previous slice's deadline was kept", waited)
	}
}

// A read's first slice starts from the reading its owner hands it (pollReader.now); every
// later slice reads the clock. A reading that came too early (its owner did something that
// waited after taking it) can make a slice end early, never let the read outlive its own
// deadline: it ends with errDeadline when the deadline passes, as any read does.
func TestPollReaderStaleReadingEndsAtTheDeadline(t *testing.T) {
	_, c := loopbackPair(t, nil) // the accepted end stays silent: every read waits

	r := &pollReader{conn: c}
	const wait = 300 * time.Millisecond
	start := time.Now()
	r.arm(start.Add(wait), nil, nil)
	r.now = start.Add(-time.Minute) // a minute stale
	done := make(chan error, 1)
	go func() {
		_, err := r.Read(make([]byte, 16))
		done <- err
	}()
	select {
	case err := <-done:
		if err != errDeadline {
			t.Fatalf("read on a silent connection: %v, want errDeadline", err)
		}
	case <-time.After(5 * time.Second):
		c.Close()
		t.Fatal("a read that started from a stale reading outlived its deadline by seconds")
	}
	if waited := time.Since(start); waited < wait || waited > wait+pollInterval {
		t.Errorf("the read ended after %v, want its deadline, %v", waited, wait)
	}
	if !r.now.IsZero() {
		t.Error("the reading handed to the read was not taken by its first slice")
	}
}
