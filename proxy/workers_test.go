package proxy

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pt "github.com/llm-failover/failover/proxy/proxytest"
)

// setIdleFor sets idleFor under the lock retire reads it under.
func (w *workers[T]) setIdleFor(d time.Duration) {
	w.mu.Lock()
	w.idleFor = d
	w.mu.Unlock()
}

// waitingWorkers returns how many of w's workers wait for a job.
func waitingWorkers[T any](w *workers[T]) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.idle)
}

// untilWaiting waits until n of w's workers wait for a job.
func untilWaiting[T any](t *testing.T, w *workers[T], n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); waitingWorkers(w) != n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d workers wait, want %d", waitingWorkers(w), n)
		}
	}
}

// closed reports whether a worker's job channel was closed (its wait ended), without blocking.
func closed[T any](jobs chan T) bool {
	select {
	case _, ok := <-jobs:
		return !ok
	default:
		return false
	}
}

// twoWaiting returns workers two of which wait, the one that began to wait first (older) and
// the other (newer), by their job channels. They are stopped when the test ends.
func twoWaiting(t *testing.T) (w *workers[chan struct{}], older, newer chan chan struct{}) {
	t.Helper()
	w = newWorkers(func(done chan struct{}) { <-done })
	t.Cleanup(w.stop)
	first, second := make(chan struct{}), make(chan struct{})
	w.do(first)
	w.do(second)
	close(first)
	untilWaiting(t, w, 1)
	close(second)
	untilWaiting(t, w, 2)
	w.mu.Lock()
	defer w.mu.Unlock()
	return w, w.idle[0].jobs, w.idle[1].jobs
}

// A job handed out while a worker waits runs on that worker; one handed out while every worker
// is busy starts another.
func TestWorkersReuseTheOneThatWaits(t *testing.T) {
	w := newWorkers(func(done chan struct{}) { <-done })
	defer w.stop()
	for i := range 5 {
		done := make(chan struct{})
		close(done)
		w.do(done)
		untilWaiting(t, w, 1)
		if got := w.started.Load(); got != 1 {
			t.Fatalf("after %d jobs one after another, %d workers started, want 1", i+1, got)
		}
	}
	busy := make(chan struct{})
	w.do(busy) // the waiting worker takes it
	w.do(busy) // none waits: a second starts
	if got := w.started.Load(); got != 2 {
		t.Fatalf("two jobs at once: %d workers started, want 2", got)
	}
	close(busy)
	untilWaiting(t, w, 2)
}

// The worker that waited last gets the next job, and a worker that waited longer than idleFor
// ends when the next one begins to wait. The waits are aged by moving their start back, not by
// sleeping, so that a slow machine cannot age the wrong one.
func TestWorkersEndAfterWaitingLong(t *testing.T) {
	w, older, newer := twoWaiting(t)
	w.mu.Lock()
	for i := range w.idle {
		w.idle[i].since = w.idle[i].since.Add(-2 * w.idleFor) // both have waited past idleFor
	}
	w.mu.Unlock()

	done := make(chan struct{})
	close(done)
	w.do(done) // to the one that waited last, which then waits again
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		w.mu.Lock()
		back := len(w.idle) > 0 && w.idle[len(w.idle)-1].jobs == newer
		w.mu.Unlock()
		if back {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the job did not go to the worker that waited last, or it did not wait again")
		}
	}
	if n := waitingWorkers(w); n != 1 || !closed(older) {
		t.Fatalf("%d workers wait; want only the one that waited again, the one past idleFor ended", n)
	}
	if got := w.started.Load(); got != 2 {
		t.Fatalf("%d workers started, want 2", got)
	}
}

// stop ends the waiting workers at once and the busy ones after their job; a job handed out
// after stop still runs.
func TestWorkersStop(t *testing.T) {
	var ran atomic.Int64
	w := newWorkers(func(done chan struct{}) { <-done; ran.Add(1) })
	idle, busy := make(chan struct{}), make(chan struct{})
	w.do(busy)
	close(idle)
	w.do(idle) // on a second worker, which then waits
	untilWaiting(t, w, 1)
	w.mu.Lock()
	waiting := w.idle[0].jobs
	w.mu.Unlock()
	w.stop()
	if !closed(waiting) {
		t.Fatal("the waiting worker's wait was not ended by stop")
	}
	close(busy)
	late := make(chan struct{})
	close(late)
	w.do(late)
	for deadline := time.Now().Add(5 * time.Second); ran.Load() != 3; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d jobs ran, want 3", ran.Load())
		}
	}
	time.Sleep(10 * time.Millisecond)
	if n := waitingWorkers(w); n != 0 {
		t.Fatalf("%d workers wait after stop, want none", n)
	}
}

// Jobs handed out from many goroutines at once each run exactly once (run with -race).
func TestWorkersUnderLoad(t *testing.T) {
	const senders, each = 16, 200
	var mu sync.Mutex
	seen := make(map[int]int)
	w := newWorkers(func(job int) {
		mu.Lock()
		seen[job]++
		mu.Unlock()
	})
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for i := range each {
				w.do(s*each + i)
			}
		})
	}
	wg.Wait()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n == senders*each {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d jobs ran, want %d", n, senders*each)
		}
	}
	w.stop()
	mu.Lock()
	defer mu.Unlock()
	for job, n := range seen {
		if n != 1 {
			t.Fatalf("job %d ran %d times", job, n)
		}
	}
}

// A keep-alive client that asks for one stream after another is served by the same workers
// throughout: one runs each stream, the other serves the connection between them. A
// goroutine started anew for each grew its stack by copying, every time (BENCHMARKS.md, The
// tail and the stream path, seventh step).
func TestStreamsOneAfterAnotherReuseTheirWorkers(t *testing.T) {
	const streams = 10
	srv, addr := startScripted(t, waitTick, pt.SSE(pt.ChatStream(2*time.Millisecond, "Hello", " world")...))
	c := pt.DialRaw(t, addr)
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	for i := range streams {
		io.WriteString(c.Conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
		resp, err := http.ReadResponse(c.Br, nil)
		if err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		got, err := io.ReadAll(resp.Body)
		if err != nil || !strings.Contains(string(got), " world") || !strings.Contains(string(got), "[DONE]") {
			t.Fatalf("stream %d: %v %q", i, err, got)
		}
		untilWaiting(t, srv.streams, 1) // the stream's worker is done with it
	}
	// The connection's worker returns to wait once the next stream hijacked the connection,
	// a moment after the request: a slow machine may have it still on its way when that stream
	// ends, and start a second.
	if s, h := srv.streams.started.Load(), srv.handedBack.started.Load(); s != 1 || h < 1 || h > 2 {
		t.Fatalf("%d streams on one connection started %d stream workers and %d connection workers, want 1, and 1 or 2", streams, s, h)
	}
}

// retire ends the waits of the workers that waited longer than idleFor, and only theirs.
func TestWorkersRetire(t *testing.T) {
	w, older, newer := twoWaiting(t)
	w.mu.Lock()
	w.idle[0].since = w.idle[0].since.Add(-2 * w.idleFor)
	w.mu.Unlock()
	w.retire(time.Now())
	if !closed(older) || closed(newer) || waitingWorkers(w) != 1 {
		t.Fatalf("after retire: the old wait ended %v, the new one %v, %d waiting; want true, false, 1", closed(older), closed(newer), waitingWorkers(w))
	}
}

// Without traffic, the workers kept for a stream end once they have waited idleFor: the
// server's periodic look retires them.
func TestIdleWorkersEndWithoutTraffic(t *testing.T) {
	srv, addr := startScripted(t, 10*time.Millisecond, pt.SSE(pt.ChatStream(2*time.Millisecond, "Hello", " world")...))
	for _, w := range []interface{ setIdleFor(time.Duration) }{srv.streams, srv.handedBack} {
		w.setIdleFor(time.Second) // long enough to see them wait first, on a slow machine too
	}
	c := pt.DialRaw(t, addr)
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	io.WriteString(c.Conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
	resp, err := http.ReadResponse(c.Br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(resp.Body); err != nil || !strings.Contains(string(got), "[DONE]") {
		t.Fatalf("%v %q", err, got)
	}
	c.Conn.Close() // the connection's worker returns to wait too
	untilWaiting(t, srv.streams, 1)
	untilWaiting(t, srv.handedBack, 1)
	srv.streams.mu.Lock()
	streamWait := srv.streams.idle[0].jobs
	srv.streams.mu.Unlock()
	srv.handedBack.mu.Lock()
	connWait := srv.handedBack.idle[0].jobs
	srv.handedBack.mu.Unlock()
	// No request comes: the periodic look ends both waits.
	for deadline := time.Now().Add(10 * time.Second); !closed(streamWait) || !closed(connWait); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s without traffic: the stream worker's wait ended %v, the connection worker's %v", closed(streamWait), closed(connWait))
		}
	}
	if n, m := waitingWorkers(srv.streams), waitingWorkers(srv.handedBack); n != 0 || m != 0 {
		t.Fatalf("%d stream workers and %d connection workers still wait", n, m)
	}
}
