// Package procs chooses how many processors the sidecar's goroutines run on (GOMAXPROCS) from
// the requests in flight: half the runtime's default while few are, all of it while many are
// (docs/reliability.md, GOMAXPROCS).
//
// A sidecar shares its node with the application, so the box is busy. With as many Ps as
// CPUs, a goroutine made runnable on one P waits whenever the kernel has put that P's thread
// aside for the application (a scheduler slice, milliseconds): at low concurrency that wait is
// the sidecar's tail latency. With half the Ps the hand-off mostly does not happen, at the
// same throughput; with many requests in flight half the Ps is the bottleneck. The control
// moves between the two with hysteresis, so that a burst's lull does not flap the setting.
//
// It owns the process's processor count and nothing else: it samples a count of requests in
// flight that its caller keeps, and stores the count it set where its caller reads it (the
// failover_gomaxprocs gauge). It never runs when GOMAXPROCS is set in the environment (its
// caller does not start it then), never reads a request, and never touches the network.
package procs

import (
	"runtime"
	"sync/atomic"
	"time"
)

const (
	every     = 100 * time.Millisecond // how often the requests in flight are sampled
	raiseAt   = 32                     // in flight at or above this, for raiseFor samples: all processors
	raiseFor  = 2
	lowerAt   = 16 // at or below this, for lowerFor samples: back to half
	lowerFor  = 50 // 5 s: a burst's lull does not flap the setting
	minToHalf = 2  // fewer processors than this: nothing to halve

	refreshEvery = 30 * time.Second // how often the runtime's default is read again (a CPU limit changed in place)
)

// control decides the processor count from the requests in flight, with hysteresis. Pure: the
// caller samples and applies. Not safe for concurrent use.
type control struct {
	low, high int // half and all
	cur       int
	run       int // consecutive samples past the threshold that would change cur
}

// newControl returns the control for a runtime default of all processors, or ok=false when
// there is nothing to control (one processor).
func newControl(all int) (c control, ok bool) {
	if all < minToHalf {
		return c, false
	}
	low := max(1, all/2)
	return control{low: low, high: all, cur: low}, true
}

// resize follows a new runtime default of all processors: half and all are taken from it, and
// the control stays on the side it was on (all while many requests are in flight). A default
// of one leaves nothing to halve: both are one until it grows again.
func (c *control) resize(all int) {
	all = max(1, all)
	high := c.cur == c.high && c.high != c.low
	c.low, c.high, c.run = max(1, all/2), all, 0
	if all < minToHalf {
		c.low = all
	}
	c.cur = c.low
	if high {
		c.cur = c.high
	}
}

// next takes one sample of the requests in flight and returns the processor count to run on.
func (c *control) next(inflight int64) int {
	switch {
	case c.cur == c.low && inflight >= raiseAt:
		if c.run++; c.run >= raiseFor {
			c.cur, c.run = c.high, 0
		}
	case c.cur == c.high && inflight <= lowerAt:
		if c.run++; c.run >= lowerFor {
			c.cur, c.run = c.low, 0
		}
	default:
		c.run = 0
	}
	return c.cur
}

// Adapt runs the processor control until quit is closed: half the runtime's default while
// few requests are in flight, all of it while many are. inflight is the count of requests in
// flight, sampled every 100 ms; current receives the processor count the control runs the
// process on. The caller calls it only when GOMAXPROCS is not set in the environment. It
// reports the count it started at, 0 when there is nothing to control (one processor).
//
// Setting GOMAXPROCS turns off the runtime's own following of the container's CPU limit, so
// every 30 s the control asks the runtime for its default again (refresh): a limit changed
// while the pod runs (an in-place resize) is followed within that time.
func Adapt(quit <-chan struct{}, inflight, current *atomic.Int64) int {
	c, ok := newControl(runtime.GOMAXPROCS(0))
	if !ok {
		return 0
	}
	runtime.GOMAXPROCS(c.cur)
	current.Store(int64(c.cur))
	go func(c control) { // its own copy: the c.cur returned below is read meanwhile
		tick := time.NewTicker(every)
		defer tick.Stop()
		for n := 1; ; n++ {
			select {
			case <-quit:
				return
			case <-tick.C:
			}
			if n%(int(refreshEvery/every)) == 0 {
				refresh(&c, runtimeDefault, current)
			}
			apply(c.next(inflight.Load()), current)
		}
	}(c)
	return c.cur
}

// apply runs the process on n processors, if it does not already, and stores n in current.
func apply(n int, current *atomic.Int64) {
	if int64(n) != current.Load() || runtime.GOMAXPROCS(0) != n {
		runtime.GOMAXPROCS(n)
		current.Store(int64(n))
	}
}

// refresh reads the runtime's default with defaultProcs and, when it moved, resizes the
// control to it, then runs the process on the control's count again (reading the default may
// have set it).
func refresh(c *control, defaultProcs func() int, current *atomic.Int64) {
	if all := defaultProcs(); all != c.high {
		c.resize(all)
	}
	apply(c.cur, current)
}

// runtimeDefault returns the runtime's default processor count as of now (the CPUs, or the
// container's CPU limit rounded up, at least 2), which setting it also makes the current one.
func runtimeDefault() int {
	runtime.SetDefaultGOMAXPROCS()
	return runtime.GOMAXPROCS(0)
}
