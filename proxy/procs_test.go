package proxy

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/llm-failover/failover/proxy/internal/config"
)

// procsControl: half the processors while few requests are in flight, all of them after two
// samples at or above procsRaiseAt, and half again only after procsLowerFor samples at or below
// procsLowerAt, so a burst's lull does not flap the setting.
func TestProcsControl(t *testing.T) {
	if _, ok := newProcsControl(1); ok {
		t.Fatal("one processor: nothing to halve, yet a control was made")
	}
	for _, tc := range []struct{ all, low int }{{2, 1}, {3, 1}, {4, 2}, {16, 8}} {
		c, ok := newProcsControl(tc.all)
		if !ok || c.cur != tc.low || c.low != tc.low || c.high != tc.all {
			t.Fatalf("newProcsControl(%d) = %+v, %v; want to start at %d", tc.all, c, ok, tc.low)
		}
	}
	c, _ := newProcsControl(4)
	step := func(inflight int64, want int) {
		t.Helper()
		if got := c.next(inflight); got != want {
			t.Fatalf("next(%d) = %d, want %d (control %+v)", inflight, got, want, c)
		}
	}
	step(10, 2)
	step(procsRaiseAt, 2) // one sample at the threshold is not enough
	step(procsRaiseAt-1, 2)
	step(procsRaiseAt, 2) // the run starts again
	step(100, 4)
	for range procsLowerFor - 1 {
		step(procsLowerAt, 4)
	}
	step(procsLowerAt+1, 4) // between the thresholds: the run of low samples is broken
	for range procsLowerFor - 1 {
		step(0, 4)
	}
	step(0, 2)
}

// A new runtime default (a CPU limit changed while the pod runs) resizes the control, which
// stays on the side it was on.
func TestProcsControlResize(t *testing.T) {
	c, _ := newProcsControl(2)
	c.resize(8)
	if c.low != 4 || c.high != 8 || c.cur != 4 {
		t.Fatalf("idle, resized to 8: %+v, want to run on 4 of 8", c)
	}
	for range procsRaiseFor {
		c.next(procsRaiseAt)
	}
	c.resize(6)
	if c.cur != 6 || c.low != 3 {
		t.Fatalf("under load, resized to 6: %+v, want to run on all 6", c)
	}
	c.resize(1)
	if c.cur != 1 || c.low != 1 || c.high != 1 || c.next(procsRaiseAt) != 1 || c.next(0) != 1 {
		t.Fatalf("resized to 1: %+v, want 1 whatever the load", c)
	}
	c.resize(4)
	if c.cur != 2 {
		t.Fatalf("grown back to 4 from 1: %+v, want to run on half", c)
	}
}

// refreshProcs reads the runtime's default again and runs the sidecar on the control's new
// count, the gauge with it; a default that did not move changes nothing but re-applies the
// count (reading the default sets it).
func TestRefreshProcs(t *testing.T) {
	s := procsServer(t, runtime.GOMAXPROCS(0))
	c, _ := newProcsControl(2)
	s.applyProcs(c.cur)
	def := 6
	readDefault := func() int {
		runtime.GOMAXPROCS(def) // as the runtime's SetDefaultGOMAXPROCS does
		return def
	}
	s.refreshProcs(&c, readDefault)
	if got, gauge := runtime.GOMAXPROCS(0), s.metrics.procs.Load(); got != 3 || gauge != 3 {
		t.Fatalf("default 2 -> 6 while idle: running on %d (gauge %d), want 3", got, gauge)
	}
	s.refreshProcs(&c, readDefault)
	if got := runtime.GOMAXPROCS(0); got != 3 {
		t.Fatalf("default unchanged: running on %d, want 3 again after the read set 6", got)
	}
}

// AdaptProcs reports the count it started at while the control it hands to its goroutine
// already runs: the report must not read the control the goroutine moves (under -race, a
// data race once the load raises the count).
func TestAdaptProcsUnderLoad(t *testing.T) {
	s := procsServer(t, 4)
	s.metrics.inflight.Store(procsRaiseAt) // as many requests in flight as raise the count
	if got := s.AdaptProcs(); got != 2 {
		t.Fatalf("AdaptProcs started at %d, want half of 4", got)
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.metrics.procs.Load() != 4 {
		if time.Now().After(deadline) {
			t.Fatalf("under load the sidecar runs on %d processors, want 4", s.metrics.procs.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.metrics.inflight.Store(0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	s.Shutdown(ctx)
}

// procsServer is a server for the processor control's tests, the process running on procs
// processors until the test ends (the control sets the process's count).
func procsServer(t *testing.T, procs int) *Server {
	t.Helper()
	orig := runtime.GOMAXPROCS(procs)
	t.Cleanup(func() { runtime.GOMAXPROCS(orig) })
	cfg, err := config.Load([]string{"FAILOVER_TARGET_0_URL=http://127.0.0.1:9/v1"}, true)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}
