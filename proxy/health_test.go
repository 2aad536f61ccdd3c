package proxy_test

import (
	"fmt"
	"testing"
	"time"

	pt "github.com/llm-failover/failover/proxy/proxytest"
	"github.com/llm-failover/failover/proxy/proxytest/sidecar"
)

// targetState returns which failover_target_state series is 1 for target, and the value of
// failover_target_up.
func targetState(s *sidecar.Sidecar, target string) (state string, up float64) {
	page := s.ScrapeMetrics()
	for _, st := range []string{"up", "cooling", "probing", "ejected", "ratelimited"} {
		if metric(page, fmt.Sprintf(`failover_target_state{target=%q,state=%q}`, target, st)) == 1 {
			if state != "" {
				return state + "+" + st, -1
			}
			state = st
		}
	}
	return state, metric(page, fmt.Sprintf(`failover_target_up{target=%q}`, target))
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// failover_target_up and failover_target_state follow the real state: an ejection that has
// run out is probing, not up, until a request shows the target healthy; a cooldown is not up
// either (docs/decisions.md, Health).
func TestTargetStateFollowsHealth(t *testing.T) {
	t.Parallel()
	a := upstream(t, busy)
	b := upstream(t, pt.JSON(200, pt.ChatCompletion("from b")))
	s := start(t, env(targets(a.URL, b.URL), noRetries, []string{"FAILOVER_EJECT_AFTER=1", "FAILOVER_EJECT_BASE=300ms", "FAILOVER_EJECT_MAX=300ms"})...)
	check := func(when, want string, wantUp float64) {
		t.Helper()
		if st, up := targetState(s, "t0"); st != want || up != wantUp {
			t.Fatalf("%s: state %q, target_up %v; want %q, %v", when, st, up, want, wantUp)
		}
	}
	check("at start", "up", 1)
	s.Post("/chat/completions", chatBody)
	check("after the failure that ejected it", "ejected", 0)
	time.Sleep(350 * time.Millisecond)
	check("after the ejection ran out, before any request", "probing", 0)
	a.Script(pt.JSON(200, pt.ChatCompletion("from a")))
	if r := s.Post("/chat/completions", chatBody); string(r.Body) != pt.ChatCompletion("from a") {
		t.Fatalf("the probe went to %s", r.Body)
	}
	check("after the probe succeeded", "up", 1)

	c := upstream(t, pt.RateLimited(pt.RetryAfterSeconds(60)))
	s = start(t, env(targets(c.URL, b.URL), []string{"FAILOVER_EJECT_AFTER=0"})...)
	s.Post("/chat/completions", chatBody)
	check("after a Retry-After of 60 s", "cooling", 0)
}

// A target that keeps failing fast costs one failed attempt per ejection: the request that
// probes it is not retried on it, and goes on to the next target (docs/decisions.md, Health).
func TestFastFailingTargetIsProbedOncePerEjection(t *testing.T) {
	t.Parallel()
	a := upstream(t, busy)
	b := upstream(t, pt.JSON(200, pt.ChatCompletion("from b")))
	s := start(t, env(targets(a.URL, b.URL), []string{"FAILOVER_EJECT_AFTER=1", "FAILOVER_EJECT_BASE=200ms", "FAILOVER_EJECT_MAX=200ms",
		"FAILOVER_BACKOFF_BASE=1ms", "FAILOVER_BACKOFF_MAX=1ms"})...)
	s.Post("/chat/completions", chatBody) // ejected by its first failure: no retry on it
	for range 3 {
		time.Sleep(250 * time.Millisecond)
		if r := s.Post("/chat/completions", chatBody); r.Status != 200 {
			t.Fatalf("status %d", r.Status)
		}
	}
	recs := s.WaitLedger(4)
	for i, rec := range recs {
		if got := ledgerSteps(rec); got != "t0:server_error:transfer t1:ok:commit" {
			t.Fatalf("request %d: %s, want one attempt on t0", i+1, got)
		}
	}
	if a.Calls() != 4 {
		t.Fatalf("t0 called %d times, want once per ejection", a.Calls())
	}
	// Recovered: it carries traffic again as soon as the ejection runs out.
	a.Script(pt.JSON(200, pt.ChatCompletion("from a")))
	time.Sleep(250 * time.Millisecond)
	if r := s.Post("/chat/completions", chatBody); string(r.Body) != pt.ChatCompletion("from a") {
		t.Fatalf("a recovered target was not used: %s", r.Body)
	}
	if len(s.Records("target_restored")) != 1 {
		t.Fatal("target_restored not logged")
	}
}

// A target ejected for timing out is kept from live requests for FAILOVER_EJECT_SILENT (here
// an hour), but the background probe sees it answer again within FAILOVER_PROBE_INTERVAL:
// the next request probes it, and it is back (docs/decisions.md, Health).
func TestSilentTargetComesBackThroughTheBackgroundProbe(t *testing.T) {
	t.Parallel()
	a := upstream(t, pt.Step{Fault: pt.FaultStall})
	b := upstream(t, pt.JSON(200, pt.ChatCompletion("from b")))
	s := start(t, env(targets(a.URL, b.URL), []string{"FAILOVER_EJECT_AFTER=1", "FAILOVER_EJECT_SILENT=1h", "FAILOVER_PROBE_INTERVAL=100ms",
		"FAILOVER_ATTEMPT_TIMEOUT=1s", "FAILOVER_TARGET_0_API_KEY=sk-target-key-0001"})...)
	if r := s.Post("/chat/completions", chatBody, "Authorization: Bearer sk-client-key"); r.Status != 200 {
		t.Fatalf("status %d", r.Status)
	}
	if st, _ := targetState(s, "t0"); st != "ejected" {
		t.Fatalf("t0 is %q after timing out", st)
	}
	// Still silent: probes go unanswered, the target stays out.
	silent := func() float64 {
		return metric(s.ScrapeMetrics(), `failover_background_probes_total{target="t0",result="silent"}`)
	}
	if !waitFor(5*time.Second, func() bool { return silent() >= 1 }) {
		t.Fatalf("%v silent probes counted", silent())
	}
	if st, _ := targetState(s, "t0"); st != "ejected" || len(s.Records("target_probe_answered")) != 0 {
		t.Fatalf("t0 is %q while it does not answer", st)
	}
	a.Script(pt.JSON(400, pt.OpenAIError("you must provide a model parameter", "invalid_request_error", "")))
	if !waitFor(3*time.Second, func() bool { return len(s.Records("target_probe_answered")) == 1 }) {
		t.Fatal("the background probe did not see the target answer")
	}
	if st, up := targetState(s, "t0"); st != "probing" || up != 0 {
		t.Fatalf("after the probe's answer t0 is %q (up %v), want probing", st, up)
	}
	// What the probe sent: the request's own path, an empty object, the target's key, marked.
	var probe *pt.Request
	for _, r := range a.Requests() {
		if r.Header["X-Failover-Probe"] == "1" {
			probe = &r
			break
		}
	}
	if probe == nil || probe.URI != "/v1/chat/completions" || string(probe.Body) != "{}" || probe.Header["Authorization"] != "Bearer sk-target-key-0001" {
		t.Fatalf("probe request %+v", probe)
	}
	a.Script(pt.JSON(200, pt.ChatCompletion("from a")))
	if r := s.Post("/chat/completions", chatBody); string(r.Body) != pt.ChatCompletion("from a") {
		t.Fatalf("the recovered target was not probed by the next request: %s", r.Body)
	}
	if st, up := targetState(s, "t0"); st != "up" || up != 1 {
		t.Fatalf("t0 is %q (up %v) after a successful request", st, up)
	}
}

// A background probe that the target answers while it still times out real requests is
// believed once: after that live probe times out, live requests probe the target only every
// FAILOVER_EJECT_SILENT, however often the background probe is answered (docs/decisions.md, Health).
func TestLyingBackgroundProbeIsBelievedOnce(t *testing.T) {
	t.Parallel()
	a, err := pt.NewResponder(func(r *pt.Request) pt.Step {
		if r.Header["X-Failover-Probe"] == "1" {
			return pt.JSON(400, pt.OpenAIError("you must provide a model parameter", "invalid_request_error", ""))
		}
		return pt.Step{Fault: pt.FaultStall}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	b := upstream(t, pt.JSON(200, pt.ChatCompletion("from b")))
	// The attempt timeout also bounds b's answers: a second leaves a loaded -race run room.
	s := start(t, env(targets(a.URL, b.URL), []string{"FAILOVER_EJECT_AFTER=1", "FAILOVER_EJECT_SILENT=3s", "FAILOVER_PROBE_INTERVAL=50ms",
		"FAILOVER_ATTEMPT_TIMEOUT=1s"})...)
	begin := time.Now()
	for time.Since(begin) < 5*time.Second {
		if r := s.Post("/chat/completions", chatBody); r.Status != 200 {
			t.Fatalf("status %d %s\nledger %v", r.Status, r.Body, s.Ledger())
		}
		time.Sleep(20 * time.Millisecond)
	}
	live := 0
	for _, r := range a.Requests() {
		if r.Header["X-Failover-Probe"] != "1" {
			live++
		}
	}
	// The first timeout, the one live probe the background's answer let through, and at
	// most one more after FAILOVER_EJECT_SILENT. Believing every answer would make it about five.
	if live > 3 {
		t.Fatalf("%d real requests waited on a target that only answers probes", live)
	}
}

// A retry never goes to a target that its own failure took out while another target could
// take the request; when none could, the retry is the request's only chance and stays.
func TestRetryAfterEjectionGoesElsewhereIfItCan(t *testing.T) {
	t.Parallel()
	ejectAtOnce := []string{"FAILOVER_EJECT_AFTER=1", "FAILOVER_BACKOFF_BASE=1ms", "FAILOVER_BACKOFF_MAX=1ms"}
	t.Run("another target is up: transfer", func(t *testing.T) {
		t.Parallel()
		a := upstream(t, busy, pt.JSON(200, pt.ChatCompletion("from a")))
		b := upstream(t, pt.JSON(200, pt.ChatCompletion("from b")))
		s := start(t, env(targets(a.URL, b.URL), ejectAtOnce)...)
		s.Post("/chat/completions", chatBody)
		if got := ledgerSteps(s.WaitLedger(1)[0]); got != "t0:server_error:transfer t1:ok:commit" {
			t.Fatalf("sweep %s", got)
		}
	})
	t.Run("no other target: the retry stays", func(t *testing.T) {
		t.Parallel()
		a := upstream(t, busy, pt.JSON(200, pt.ChatCompletion("from a")))
		s := start(t, env(targets(a.URL), ejectAtOnce)...)
		s.Post("/chat/completions", chatBody)
		if got := ledgerSteps(s.WaitLedger(1)[0]); got != "t0:server_error:retry t0:ok:commit" {
			t.Fatalf("sweep %s", got)
		}
	})
}
