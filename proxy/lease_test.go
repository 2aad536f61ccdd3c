package proxy

import (
	"testing"
	"time"

	"github.com/llm-failover/failover/budget"
)

// TestProbeLeaseEndsOnce: a probe lease ends its probe once however often it is released. A
// second release must not free the probe that another request has taken since: that request's
// outcome would then no longer be the one the target waits for, and a third request would
// probe the target at the same time.
func TestProbeLeaseEndsOnce(t *testing.T) {
	h := budget.NewHealth(&budget.Config{EjectAfter: 1, EjectBase: time.Second, EjectMax: time.Second, EjectSilent: time.Second})
	start := time.Unix(1000, 0)
	h.Eject(start)
	expired := start.Add(2 * time.Second)
	probe := func() bool {
		ok, probe := h.Available(expired)
		return ok && probe
	}
	if !probe() {
		t.Fatal("an expired ejection hands out no probe")
	}
	var first probeLease
	first.take(h)
	first.release()
	if !probe() {
		t.Fatal("the released probe was not handed out again")
	}
	var second probeLease
	second.take(h)
	first.release()
	if ok, _ := h.Available(expired); ok {
		t.Fatal("a second release freed the probe another request holds")
	}
	second.reported()
	second.release()
	if ok, _ := h.Available(expired); ok {
		t.Fatal("a release after the health report ended the probe freed it again")
	}
}

// TestProbeLeaseTakeReleasesHeld: taking a probe while one is still held gives the held one
// back, so a lease can never drop a probe unreleased (the target would be skipped for ever).
func TestProbeLeaseTakeReleasesHeld(t *testing.T) {
	cfg := &budget.Config{EjectAfter: 1, EjectBase: time.Second, EjectMax: time.Second, EjectSilent: time.Second}
	a, b := budget.NewHealth(cfg), budget.NewHealth(cfg)
	start := time.Unix(1000, 0)
	a.Eject(start)
	b.Eject(start)
	expired := start.Add(2 * time.Second)
	a.Available(expired)
	b.Available(expired)
	var l probeLease
	l.take(a)
	l.take(b)
	if ok, probe := a.Available(expired); !ok || !probe {
		t.Fatal("the first probe was dropped without being released")
	}
	if !l.held() {
		t.Fatal("the lease holds nothing after take")
	}
	l.release()
	if ok, probe := b.Available(expired); !ok || !probe {
		t.Fatal("the second probe was not released")
	}
}
