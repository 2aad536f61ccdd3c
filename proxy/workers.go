package proxy

import (
	"sync"
	"sync/atomic"
	"time"
)

// workers are goroutines kept for one kind of job, for the stream path: a goroutine that has
// run a job waits for the next one instead of ending, for workerIdle at most (retire), or until
// Shutdown.
//
// A new goroutine starts with a small stack and grows it by copying it whole. The stream
// path would make two per stream: the stream's own (hijacked), and, after a clean end, the one
// that goes on serving the client's connection, whose next request (fasthttp's reading of it,
// the exchange, the gate's scans) needs several times the stack a stream does; growing them is
// a share of a paced stream's CPU worth keeping (BENCHMARKS.md, The tail and the stream path).
// The two kinds are kept apart so that a stream, which may stay idle for minutes, waits on a
// stack of a stream's depth, not on one grown by serving requests.
type workers[T any] struct {
	run func(T)
	// after, when set, runs after run once the worker is listed as waiting again: a job that
	// reports its end from here is never followed by a next job that finds no worker waiting
	// (which would start a goroutine, and allocate).
	after   func(T)
	idleFor time.Duration // workerIdle; shorter in tests
	mu      sync.Mutex
	idle    []idleWorker[T] // waiting, oldest first (near enough: since is read before the lock); the last gets the next job
	stopped bool            // Shutdown began: no worker waits again
	started atomic.Int64    // workers started, for tests
}

// idleWorker is a waiting worker: the channel it receives its next job from (closed: end), and
// since when it waits.
type idleWorker[T any] struct {
	jobs  chan T
	since time.Time
}

func newWorkers[T any](run func(T)) *workers[T] { return &workers[T]{run: run, idleFor: workerIdle} }

// do runs job on the worker that waited last (its stack and data the likeliest to be in cache),
// or on a new one when none waits.
func (w *workers[T]) do(job T) {
	w.mu.Lock()
	if n := len(w.idle); n > 0 {
		jobs := w.idle[n-1].jobs
		w.idle[n-1] = idleWorker[T]{}
		w.idle = w.idle[:n-1]
		w.mu.Unlock()
		jobs <- job // buffered for one: a worker's channel is handed one job per wait
		return
	}
	w.mu.Unlock()
	w.started.Add(1)
	go w.loop(job)
}

// loop runs job, then each job handed to it, until its wait is ended (wait).
func (w *workers[T]) loop(job T) {
	jobs := make(chan T, 1)
	for ok := true; ok; job, ok = <-jobs {
		w.run(job)
		waits := w.wait(jobs)
		if w.after != nil {
			w.after(job)
		}
		if !waits {
			return
		}
	}
}

// wait lists a worker that receives its next job from jobs as waiting, and ends the waits of
// those that have waited longer than idleFor. It reports false after stop: the worker ends.
func (w *workers[T]) wait(jobs chan T) bool {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return false
	}
	w.retireLocked(now)
	w.idle = append(w.idle, idleWorker[T]{jobs, now})
	return true
}

// retire ends the waits of the workers that, at now, have waited longer than idleFor. Besides
// each worker that begins to wait, the server's periodic look (tend) calls it at every tick, so
// that workers kept for a burst of streams end once it is over, traffic or not.
func (w *workers[T]) retire(now time.Time) {
	w.mu.Lock()
	w.retireLocked(now)
	w.mu.Unlock()
}

func (w *workers[T]) retireLocked(now time.Time) {
	old := 0
	for old < len(w.idle) && now.Sub(w.idle[old].since) > w.idleFor {
		close(w.idle[old].jobs)
		old++
	}
	if old > 0 {
		n := copy(w.idle, w.idle[old:])
		clear(w.idle[n:])
		w.idle = w.idle[:n]
	}
}

// stop ends the waiting workers' waits, and makes the others end once their job is done.
func (w *workers[T]) stop() {
	w.mu.Lock()
	w.stopped = true
	for _, iw := range w.idle {
		close(iw.jobs)
	}
	w.idle = nil
	w.mu.Unlock()
}

// workerIdle is how long a worker may wait for its next job (a goroutine and its stack), as
// long as fasthttp's own idle workers wait (MaxIdleWorkerDuration's default).
const workerIdle = 10 * time.Second
