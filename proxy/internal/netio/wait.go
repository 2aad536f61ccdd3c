package netio

import (
	"time"
)

// Stop tells a wait whether to go on: nil, or why it must end, ErrClientGone (the client left)
// or ErrShutdown (the sidecar's shutdown timeout passed); it returns no other error. A nil Stop
// never ends a wait.
//
// Every wait asks it at least once per PollInterval: a read from an upstream between the slices
// it is cut into (Conn.Wait, and the reads of the head and the body that follow it), a dial or
// a request's write, which cannot be cut into slices, from a goroutine of its own (a watch)
// while the caller is blocked. The caller gets its answer as the wait's error.
//
// A Stop runs on the waiting goroutine, or on a watch's while the waiting goroutine is blocked
// in the watched call (Pool.Get, Conn.Send): it may write its owner's state, which the owner
// reads again only after that call returned (the watch has exited by then). Make it once, as a
// method value, and pass it to every wait: a func value made for each call would allocate.
type Stop func() error

// PollInterval is how often a wait asks its Stop: fasthttp gives no signal that a client left
// while a handler waits, so a wait on an upstream is cut into slices this long.
const PollInterval = 250 * time.Millisecond

// Wait blocks until the connection has something to read (bytes of the answer, its end or an
// error, which the read that follows returns), until deadline passes (ErrDeadline; zero: no
// deadline), or until stop says why not (ErrClientGone, ErrShutdown). It leaves the reads that
// follow (the head, the body, a chunk's framing split across packets) bound by the same
// deadline and stop, so none of them can outlive either. waited is how long it waited: zero
// when bytes were already buffered.
//
// How it waits is the connection's business. Until ExpectLongWaits, it reads what arrives into
// the connection's buffer in the same call. After it, a wait with nothing buffered gives the
// buffer back first and holds none while it waits, where the socket can wait without one (a
// plain TCP connection on Linux: rawsock_linux.go); elsewhere it reads into the buffer.
//
// When the wait reaches the time set with YieldAt, with nothing to read, it returns ErrYield:
// the reads that follow a Wait (the head, the body) never yield, so a yield leaves the answer
// where it was, for a later Wait to go on with.
func (c *Conn) Wait(deadline time.Time, stop Stop) (waited time.Duration, err error) {
	c.rd.arm(deadline, stop)
	if c.buffered() > 0 {
		return 0, nil
	}
	start := time.Now()
	if c.rd.yieldDue(start) {
		// Its Stop first: a wait that must end says so, rather than give way.
		if err := c.rd.expired(start); err != nil {
			return 0, err
		}
		c.rd.why = ErrYield
		return 0, ErrYield
	}
	c.rd.yielding = !c.rd.yieldAt.IsZero()
	var done bool
	if done, err = c.waitWithoutBuffer(); !done {
		err = c.fill()
	}
	c.rd.yielding = false
	return time.Since(start), err
}

// YieldAt sets when a Wait on c that has found nothing to read yet returns ErrYield instead of
// waiting on (zero: never). The slices of a wait, and the wait for the answer that Send begins,
// end no later than it. A connection from Pool.Get has none.
func (c *Conn) YieldAt(t time.Time) { c.rd.yieldAt = t }

// fill reads what arrives into the connection's buffer, waiting in slices until something
// does. It returns the pollReader's reason when the read gave up; another read error is left
// for the read that follows to find.
func (c *Conn) fill() error {
	if _, err := c.reader().Peek(1); err != nil && c.rd.why != nil {
		return c.rd.why
	}
	return nil
}

// pollReader is what an upstream connection's buffered reader reads through. It cuts every
// blocking read into slices of PollInterval, so a read blocked anywhere (waiting for the
// status line, halfway through the headers, inside a chunk's framing) still ends at the
// deadline it was armed with, or when its Stop says so. The Stop is also asked once per
// PollInterval of reads that do find data: an upstream that keeps sending (keep-alive
// comments, whitespace, a slow body) never lets a slice end empty, and must not keep a
// request whose client left going until it is done. A slice that ends without data is never
// seen by fasthttp's parsers, only those endings are; the reader records which one it was in
// why, because the parsers wrap the error they get (fasthttp.ErrBrokenChunk does not unwrap).
// Owned by the one goroutine using the connection; its Stop runs on it.
type pollReader struct {
	c        *Conn
	deadline time.Time // zero: no deadline
	stop     Stop      // nil: nothing to watch
	why      error     // ErrDeadline, ErrClientGone, ErrShutdown or ErrYield once a read gave up
	set      time.Time // the read deadline last set on the connection
	watched  time.Time // when stop was last asked (or the connection was taken for a request: Pool.Get)
	yieldAt  time.Time // Conn.YieldAt: zero, none
	yielding bool      // a Wait runs that may yield: only its reads do
}

// yieldDue reports whether a Wait must yield at now.
func (r *pollReader) yieldDue(now time.Time) bool {
	return !r.yieldAt.IsZero() && !now.Before(r.yieldAt)
}

// yielded is called when a slice ended without data, at now: ErrYield when the Wait that reads
// must yield, else nil.
func (r *pollReader) yielded(now time.Time) error {
	if r.yielding && r.yieldDue(now) {
		r.why = ErrYield
		return ErrYield
	}
	return nil
}

// arm sets the deadline and the Stop for the reads that follow.
func (r *pollReader) arm(deadline time.Time, stop Stop) {
	r.deadline, r.stop, r.why = deadline, stop, nil
}

func (r *pollReader) Read(p []byte) (int, error) {
	now := time.Now()
	for {
		if err := r.slice(now); err != nil {
			return 0, err
		}
		n, err := r.c.readSocket(p)
		if n > 0 || err == nil || !IsTimeout(err) {
			return n, err
		}
		now = time.Now()
		if err := r.expired(now); err != nil {
			return 0, err
		}
		if err := r.yielded(now); err != nil {
			return 0, err
		}
	}
}

// slice sets the read deadline for the next slice of a wait, which starts now, or reports
// ErrDeadline.
func (r *pollReader) slice(now time.Time) error {
	if !r.deadline.IsZero() && !now.Before(r.deadline) {
		r.why = ErrDeadline
		return ErrDeadline
	}
	if now.Sub(r.watched) >= PollInterval {
		if err := r.expired(now); err != nil {
			return err
		}
	}
	// The deadline already set serves while it leaves at least half a slice and does not
	// pass the wait's own deadline: a read that finds its data at once (the common case)
	// then costs no deadline update, which takes a lock and moves a runtime timer.
	yield := !r.yieldAt.IsZero() && r.yieldAt.After(now) // a yield still to come ends the slice
	if r.set.Sub(now) >= PollInterval/2 && (r.deadline.IsZero() || !r.set.After(r.deadline)) &&
		(!yield || !r.set.After(r.yieldAt)) {
		return nil
	}
	end := now.Add(PollInterval)
	if !r.deadline.IsZero() && r.deadline.Before(end) {
		end = r.deadline
	}
	if yield && r.yieldAt.Before(end) {
		end = r.yieldAt
	}
	r.c.conn.SetReadDeadline(end)
	r.set = end
	return nil
}

// expired is called when a slice ended without data, and once per PollInterval of reads that
// found some, at now: the reason to stop waiting, or nil.
func (r *pollReader) expired(now time.Time) error {
	r.watched = now
	if r.stop == nil {
		return nil
	}
	if why := r.stop(); why != nil {
		r.why = why
		return why
	}
	return nil
}

// watch asks a Stop every PollInterval, from a goroutine of its own, while a call that cannot
// wait in slices as reads do is blocked: a dial, a TLS handshake, a request's write (a tls.Conn
// whose write timed out is broken for good). When the Stop gives a reason, it calls abort
// once. It starts a goroutine: only for calls that already cost far more (a dial) or that
// already wait.
//
// The Stop runs on the watch's goroutine and may write its owner's state: the owner must not
// touch that state between startWatch and end, and end, which waits for the goroutine to exit,
// orders those writes before what follows it.
type watch struct {
	quit chan struct{}
	done chan struct{}
	why  error // the Stop's reason once abort was called
}

// startWatch starts asking stop (nil: a watch that never aborts) for a call abort ends.
func startWatch(stop Stop, abort func()) *watch {
	w := &watch{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(PollInterval)
		defer tick.Stop()
		for {
			select {
			case <-w.quit:
				return
			case <-tick.C:
			}
			if stop == nil {
				continue
			}
			if w.why = stop(); w.why != nil {
				abort()
				return
			}
		}
	}()
	return w
}

// end stops the watch and reports why it ended the call (nil: it did not). After end, what
// the Stop touched is the caller's again.
func (w *watch) end() error {
	close(w.quit)
	<-w.done
	return w.why
}
