package procs

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// control: half the processors while few requests are in flight, all of them after two
// samples at or above raiseAt, and half again only after lowerFor samples at or below
// lowerAt, so a burst's lull does not flap the setting.
func TestControl(t *testing.T) {
	if _, ok := newControl(1); ok {
		t.Fatal("one processor: nothing to halve, yet a control was made")
	}
	for _, tc := range []struct{ all, low int }{{2, 1}, {3, 1}, {4, 2}, {16, 8}} {
		c, ok := newControl(tc.all)
		if !ok || c.cur != tc.low || c.low != tc.low || c.high != tc.all {
			t.Fatalf("newControl(%d) = %+v, %v; want to start at %d", tc.all, c, ok, tc.low)
		}
	}
	c, _ := newControl(4)
	step := func(inflight int64, want int) {
		t.Helper()
		if got := c.next(inflight); got != want {
			t.Fatalf("next(%d) = %d, want %d (control %+v)", inflight, got, want, c)
		}
	}
	step(10, 2)
	step(raiseAt, 2) // one sample at the threshold is not enough
	step(raiseAt-1, 2)
	step(raiseAt, 2) // the run starts again
	step(100, 4)
	for range lowerFor - 1 {
		step(lowerAt, 4)
	}
	step(lowerAt+1, 4) // between the thresholds: the run of low samples is broken
	for range lowerFor - 1 {
		step(0, 4)
	}
	step(0, 2)
}

// A new runtime default (a CPU limit changed while the pod runs) resizes the control, which
// stays on the side it was on.
func TestControlResize(t *testing.T) {
	c, _ := newControl(2)
	c.resize(8)
	if c.low != 4 || c.high != 8 || c.cur != 4 {
		t.Fatalf("idle, resized to 8: %+v, want to run on 4 of 8", c)
	}
	for range raiseFor {
		c.next(raiseAt)
	}
	c.resize(6)
	if c.cur != 6 || c.low != 3 {
		t.Fatalf("under load, resized to 6: %+v, want to run on all 6", c)
	}
	c.resize(1)
	if c.cur != 1 || c.low != 1 || c.high != 1 || c.next(raiseAt) != 1 || c.next(0) != 1 {
		t.Fatalf("resized to 1: %+v, want 1 whatever the load", c)
	}
	c.resize(4)
	if c.cur != 2 {
		t.Fatalf("grown back to 4 from 1: %+v, want to run on half", c)
	}
}

// refresh reads the runtime's default again and runs the process on the control's new
// count, the gauge with it; a default that did not move changes nothing but re-applies the
// count (reading the default sets it).
func TestRefresh(t *testing.T) {
	keepProcs(t, runtime.GOMAXPROCS(0))
	var current atomic.Int64
	c, _ := newControl(2)
	apply(c.cur, &current)
	def := 6
	readDefault := func() int {
		runtime.GOMAXPROCS(def) // as the runtime's SetDefaultGOMAXPROCS does
		return def
	}
	refresh(&c, readDefault, &current)
	if got, gauge := runtime.GOMAXPROCS(0), current.Load(); got != 3 || gauge != 3 {
		t.Fatalf("default 2 -> 6 while idle: running on %d (gauge %d), want 3", got, gauge)
	}
	refresh(&c, readDefault, &current)
	if got := runtime.GOMAXPROCS(0); got != 3 {
		t.Fatalf("default unchanged: running on %d, want 3 again after the read set 6", got)
	}
}

// Adapt reports the count it started at while the control it hands to its goroutine already
// runs: the report must not read the control the goroutine moves (under -race, a data race
// once the load raises the count).
func TestAdaptUnderLoad(t *testing.T) {
	keepProcs(t, 4)
	var inflight, current atomic.Int64
	inflight.Store(raiseAt) // as many requests in flight as raise the count
	quit := make(chan struct{})
	defer close(quit)
	if got := Adapt(quit, &inflight, &current); got != 2 {
		t.Fatalf("Adapt started at %d, want half of 4", got)
	}
	deadline := time.Now().Add(10 * time.Second)
	for current.Load() != 4 {
		if time.Now().After(deadline) {
			t.Fatalf("under load the process runs on %d processors, want 4", current.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// keepProcs runs the process on procs processors until the test ends (the control sets the
// process's count).
func keepProcs(t *testing.T, procs int) {
	t.Helper()
	orig := runtime.GOMAXPROCS(procs)
	t.Cleanup(func() { runtime.GOMAXPROCS(orig) })
}
