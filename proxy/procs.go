package proxy

import (
	"runtime"
	"time"
)

// How many processors the sidecar's goroutines run on (README, Performance: GOMAXPROCS).
//
// A sidecar shares its node with the application, so the box is busy: with as many Ps as CPUs,
// a goroutine made runnable on one P waits whenever the kernel has put that P's thread aside
// for the application (a scheduler slice, milliseconds), and at 10 connections on 2 busy cores
// the sidecar's p99 was 2.6 times nginx's. With half the Ps, that hand-off mostly does not
// happen and p99 fell under nginx's, at the same throughput; but at 64 connections one P is
// the bottleneck, and throughput fell by a tenth. So the sidecar runs on half the processors
// while few requests are in flight, and on all of them while many are: procsControl moves
// between the two. An explicit GOMAXPROCS is respected: the control then never runs. The
// runtime's default (the CPUs, or the container's CPU limit rounded up, at least 2) is "all".

const (
	procsEvery     = 100 * time.Millisecond // how often the requests in flight are sampled
	procsRaiseAt   = 32                     // in flight at or above this, for procsRaiseFor samples: all processors
	procsRaiseFor  = 2
	procsLowerAt   = 16 // at or below this, for procsLowerFor samples: back to half
	procsLowerFor  = 50 // 5 s: a burst's lull does not flap the setting
	procsMinToHalf = 2  // fewer processors than this: nothing to halve

	procsRefreshEvery = 30 * time.Second // how often the runtime's default is read again (a CPU limit changed in place)
)

// procsControl decides the processor count from the requests in flight, with hysteresis. Pure:
// the caller samples and applies. Not safe for concurrent use.
type procsControl struct {
	low, high int // half and all
	cur       int
	run       int // consecutive samples past the threshold that would change cur
}

// newProcsControl returns the control for a runtime default of all processors, or ok=false
// when there is nothing to control (one processor).
func newProcsControl(all int) (c procsControl, ok bool) {
	if all < procsMinToHalf {
		return c, false
	}
	low := max(1, all/2)
	return procsControl{low: low, high: all, cur: low}, true
}

// resize follows a new runtime default of all processors: half and all are taken from it, and
// the control stays on the side it was on (all while many requests are in flight). A default
// of one leaves nothing to halve: both are one until it grows again.
func (c *procsControl) resize(all int) {
	all = max(1, all)
	high := c.cur == c.high && c.high != c.low
	c.low, c.high, c.run = max(1, all/2), all, 0
	if all < procsMinToHalf {
		c.low = all
	}
	c.cur = c.low
	if high {
		c.cur = c.high
	}
}

// next takes one sample of the requests in flight and returns the processor count to run on.
func (c *procsControl) next(inflight int64) int {
	switch {
	case c.cur == c.low && inflight >= procsRaiseAt:
		if c.run++; c.run >= procsRaiseFor {
			c.cur, c.run = c.high, 0
		}
	case c.cur == c.high && inflight <= procsLowerAt:
		if c.run++; c.run >= procsLowerFor {
			c.cur, c.run = c.low, 0
		}
	default:
		c.run = 0
	}
	return c.cur
}

// AdaptProcs runs the processor control until Shutdown: half the runtime's default while few
// requests are in flight, all of it while many are. The caller (main) calls it only when
// GOMAXPROCS is not set in the environment. It reports the count it started at, 0 when there
// is nothing to control.
//
// Setting GOMAXPROCS turns off the runtime's own following of the container's CPU limit, so
// every procsRefreshEvery the control asks the runtime for its default again (refreshProcs):
// a limit changed while the pod runs (an in-place resize) is followed within that time.
func (s *Server) AdaptProcs() int {
	c, ok := newProcsControl(runtime.GOMAXPROCS(0))
	if !ok {
		return 0
	}
	runtime.GOMAXPROCS(c.cur)
	s.metrics.procs.Store(int64(c.cur))
	go func(c procsControl) { // its own copy: the c.cur returned below is read meanwhile
		tick := time.NewTicker(procsEvery)
		defer tick.Stop()
		for n := 1; ; n++ {
			select {
			case <-s.quit:
				return
			case <-tick.C:
			}
			if n%(int(procsRefreshEvery/procsEvery)) == 0 {
				s.refreshProcs(&c, runtimeDefaultProcs)
			}
			s.applyProcs(c.next(s.metrics.inflight.Load()))
		}
	}(c)
	return c.cur
}

// applyProcs runs the sidecar on n processors, if it does not already.
func (s *Server) applyProcs(n int) {
	if int64(n) != s.metrics.procs.Load() || runtime.GOMAXPROCS(0) != n {
		runtime.GOMAXPROCS(n)
		s.metrics.procs.Store(int64(n))
	}
}

// refreshProcs reads the runtime's default with defaultProcs and, when it moved, resizes the
// control to it, then runs the sidecar on the control's count again (reading the default may
// have set it).
func (s *Server) refreshProcs(c *procsControl, defaultProcs func() int) {
	if all := defaultProcs(); all != c.high {
		c.resize(all)
	}
	s.applyProcs(c.cur)
}

// runtimeDefaultProcs returns the runtime's default processor count as of now (the CPUs, or the
// container's CPU limit rounded up, at least 2), which setting it also makes the current one.
func runtimeDefaultProcs() int {
	runtime.SetDefaultGOMAXPROCS()
	return runtime.GOMAXPROCS(0)
}
