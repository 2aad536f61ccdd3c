package proxy

import (
	"testing"
	"time"
)

// TestNoRaceWithoutACandidate: with hedging on, an attempt that starts while no other target is
// up (here the only other one is ejected) is not raced: it runs on the handler's goroutine as
// with hedging off, and no leg starts. With the other target up, the same request is raced.
func TestNoRaceWithoutACandidate(t *testing.T) {
	hedging := []string{"FAILOVER_TARGET_1_URL=http://{up}/v1", "FAILOVER_TARGET_1_NAME=t1", "FAILOVER_HEDGE_AFTER=10s"}
	h := newHandlerBenchEnv(t, false, hedging)
	h.srv.targets[1].health.Eject(time.Now())
	h.serve(t)
	if n := h.srv.legs.started.Load(); n != 0 {
		t.Fatalf("%d legs started for a request with no hedge candidate", n)
	}
	h = newHandlerBenchEnv(t, false, hedging)
	h.serve(t)
	if n := h.srv.legs.started.Load(); n == 0 {
		t.Fatal("no leg started for a request that may be hedged: the test no longer sees a race")
	}
}
