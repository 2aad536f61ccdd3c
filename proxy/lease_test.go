package proxy

import (
	"strings"

	"log/slog"
	"testing"
	"time"

	"github.com/llm-failover/failover/proxy/internal/config"
	"github.com/valyala/fasthttp"

	"github.com/llm-failover/failover/budget"
)

// expiredEjection returns a target's health whose ejection has run out, and the time at which
// its probe can be handed out.
func expiredEjection() (*budget.Health, time.Time) {
	h := budget.NewHealth(&budget.Config{EjectAfter: 1, EjectBase: time.Second, EjectMax: time.Second, EjectSilent: time.Second})
	start := time.Unix(1000, 0)
	h.Eject(start)
	return h, start.Add(2 * time.Second)
}

func probeFree(h *budget.Health, at time.Time) bool {
	ok, probe := h.Available(at)
	if ok && probe {
		h.Release()
	}
	return ok && probe
}

// TestSettleProbeEndsALeaseOnce: settleProbe gives back a probe the request learnt nothing from,
// keeps one leased for the attempt that follows on its target, forgets one a health report ended,
// and never frees a probe twice: a second settle must not free the probe another request holds.
func TestSettleProbeEndsALeaseOnce(t *testing.T) {
	h, at := expiredEjection()
	other, _ := expiredEjection()
	ex := &exchange{}
	next := &Target{health: h}

	h.Available(at)
	ex.lease.take(h)
	ex.settleProbe(next)
	if probeFree(h, at) || !ex.lease.held() {
		t.Fatal("a lease for the next attempt's target was not kept")
	}
	ex.settleProbe(&Target{health: other})
	if !probeFree(h, at) || ex.lease.held() {
		t.Fatal("a lease for a target no attempt goes to was not given back")
	}

	h.Available(at) // another request takes the probe
	ex.settleProbe(nil)
	if probeFree(h, at) {
		t.Fatal("a second settle freed the probe another request holds")
	}
	h.Release()

	h.Available(at)
	ex.lease.take(h)
	ex.lease.reported = true // a health report ended the probe (applyHealth)
	h.Available(at)          // so another request may hold it now
	ex.settleProbe(nil)
	if probeFree(h, at) || ex.lease.held() {
		t.Fatal("settling a reported lease freed the probe again")
	}
}

// TestFinishCatchesAHeldLease: an exchange that finishes with a probe still leased is counted
// (Server.LeakedProbes, which every test sidecar checks at its end) and logged, and the probe is
// given back so that the target is not skipped for ever.
func TestFinishCatchesAHeldLease(t *testing.T) {
	cfg, err := config.Load([]string{"FAILOVER_TARGET_0_URL=http://127.0.0.1:9/v1"}, true)
	if err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	s, err := New(cfg, Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	h, at := expiredEjection()
	ex := s.pool.Get().(*exchange)
	ex.begin(new(fasthttp.RequestCtx))
	s.active.Add(1)
	h.Available(at)
	ex.lease.take(h)
	ex.finish()
	if s.LeakedProbes() != 1 {
		t.Fatalf("LeakedProbes = %d, want 1", s.LeakedProbes())
	}
	if !strings.Contains(log.String(), "probe_lease_leaked") {
		t.Fatalf("no probe_lease_leaked in the log: %s", log.String())
	}
	if !probeFree(h, at) {
		t.Fatal("the leaked probe was not given back")
	}
}
