package proxy

import (
	"testing"
)

// TestUnhedgedRequestRunsOnTheHandler: with hedging on and a candidate to hedge to, a request
// that commits before the hedge delay on a pooled connection runs its attempt on the handler's
// goroutine, as with hedging off: no leg runs (race yields to one only when the delay passes
// first, or before a dial, which cannot give way).
func TestUnhedgedRequestRunsOnTheHandler(t *testing.T) {
	for _, streaming := range []bool{false, true} {
		h := newHandlerBenchEnv(t, streaming, []string{"FAILOVER_TARGET_1_URL=http://{up}/v1", "FAILOVER_TARGET_1_NAME=t1", "FAILOVER_HEDGE_AFTER=10s"})
		h.serve(t) // dials: on a leg
		// No leg waits from now on: a leg job would start a goroutine, and count.
		h.srv.legs.stop()
		started := h.srv.legs.started.Load()
		for range 3 {
			h.serve(t)
		}
		if n := h.srv.legs.started.Load() - started; n != 0 {
			t.Fatalf("streaming %v: %d legs ran for requests that committed before the hedge delay", streaming, n)
		}
	}
}
