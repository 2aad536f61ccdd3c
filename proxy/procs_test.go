package proxy

import "testing"

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
