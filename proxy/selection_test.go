package proxy_test

import (
	"strings"
	"testing"
	"time"

	pt "github.com/llm-failover/failover/proxy/proxytest"
)

var revokedKey = pt.JSON(401, pt.OpenAIError("Incorrect API key provided", "invalid_request_error", "invalid_api_key"))

// TestStrategiesAroundEjectedTargets: the strategy's first pick is made among the targets a
// request may use now, so an ejected target's share is spread by the weights (round-robin)
// or goes to the next fastest (least-latency), instead of all landing on whichever target is
// declared after it.
func TestStrategiesAroundEjectedTargets(t *testing.T) {
	t.Parallel()
	keys := []string{"FAILOVER_TARGET_0_API_KEY=k", "FAILOVER_TARGET_1_API_KEY=k", "FAILOVER_TARGET_2_API_KEY=k",
		"FAILOVER_EJECT_BASE=1h", "FAILOVER_EJECT_MAX=1h"}
	t.Run("round-robin spreads an ejected target's share by the weights", func(t *testing.T) {
		t.Parallel()
		a, b, c := upstream(t), upstream(t), upstream(t, revokedKey)
		s := start(t, env(targets(a.URL, b.URL, c.URL), keys, []string{"FAILOVER_STRATEGY=round-robin"})...)
		for range 3 { // the third request picks t2 first, which ejects itself
			s.Post("/chat/completions", chatBody)
		}
		if ev := s.Records("target_ejected"); len(ev) != 1 || ev[0]["target"] != "t2" {
			t.Fatalf("ejections %v", ev)
		}
		a0, b0 := a.Calls(), b.Calls()
		for range 40 {
			if r := s.Post("/chat/completions", chatBody); r.Status != 200 || r.Header.Get("X-Failover-Attempts") != "1" {
				t.Fatalf("status %d after %s attempts", r.Status, r.Header.Get("X-Failover-Attempts"))
			}
		}
		if da, db := a.Calls()-a0, b.Calls()-b0; da != 20 || db != 20 {
			t.Fatalf("calls t0=%d t1=%d with t2 ejected, want 20/20", da, db)
		}
	})
	t.Run("least-latency picks the fastest target it may use", func(t *testing.T) {
		t.Parallel()
		slow := pt.JSON(200, pt.ChatCompletion("slow"))
		slow.Delay = 300 * time.Millisecond
		medium := pt.JSON(200, pt.ChatCompletion("medium"))
		medium.Delay = 100 * time.Millisecond
		a, b, c := upstream(t, slow), upstream(t, medium), upstream(t)
		s := start(t, env(targets(a.URL, b.URL, c.URL), keys, []string{"FAILOVER_STRATEGY=least-latency"})...)
		for range 3 { // each target measured once
			s.Post("/chat/completions", chatBody)
		}
		c.Script(revokedKey)
		s.Post("/chat/completions", chatBody) // t2 (fastest) ejects itself
		if ev := s.Records("target_ejected"); len(ev) != 1 || ev[0]["target"] != "t2" {
			t.Fatalf("ejections %v", ev)
		}
		a0, b0 := a.Calls(), b.Calls()
		for range 16 {
			s.Post("/chat/completions", chatBody)
		}
		if da, db := a.Calls()-a0, b.Calls()-b0; db < 12 {
			t.Fatalf("calls slow=%d medium=%d with the fastest ejected: the medium one should take most", da, db)
		}
	})
}

// TestLeastLatencyDoesNotFavourAFastError: a target that refuses connections, or answers 503
// (or anything the sweep must transfer from), does so at once and has no useful time to first
// byte; as a sample it would make a failing target the favourite, and every request would try
// it first and transfer.
func TestLeastLatencyDoesNotFavourAFastError(t *testing.T) {
	t.Parallel()
	answering := func(step pt.Step) func(t *testing.T) string {
		return func(t *testing.T) string { return upstream(t, step).URL }
	}
	for _, tc := range []struct {
		name string
		fail func(t *testing.T) string // the failing target's URL
	}{
		{"refused connection", func(*testing.T) string { return pt.RefusedURL() }},
		{"503", answering(busy)},
		{"429", answering(pt.JSON(429, pt.OpenAIError("Rate limit reached", "requests", "rate_limit_exceeded")))},
		{"404 model not found", answering(pt.JSON(404, pt.OpenAIError("The model `gpt-4o-mini` does not exist", "invalid_request_error", "model_not_found")))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ok := pt.JSON(200, pt.ChatCompletion("answered"))
			ok.Delay = 30 * time.Millisecond
			a := upstream(t, ok)
			s := start(t, env(targets(a.URL, tc.fail(t)), []string{"FAILOVER_STRATEGY=least-latency", "FAILOVER_EJECT_AFTER=0"})...)
			transfers := 0
			for range 32 {
				r := s.Post("/chat/completions", chatBody)
				if r.Status != 200 {
					t.Fatalf("status %d", r.Status)
				}
				if r.Header.Get("X-Failover-Attempts") != "1" {
					transfers++
				}
			}
			// The failing target is tried once unmeasured and then only when explored (1 in 16).
			if transfers > 4 {
				t.Fatalf("%d of 32 requests went to the failing target first", transfers)
			}
		})
	}
}

// TestRoundRobinPerCandidateSet: the rotation of one set of candidates is not steered by
// requests for another. An application that calls a small model, then a large one, for every
// turn must still see the large model's traffic split by the weights of the targets serving it.
func TestRoundRobinPerCandidateSet(t *testing.T) {
	t.Parallel()
	a, b := upstream(t), upstream(t)
	s := start(t, env(targets(a.URL, b.URL), []string{"FAILOVER_STRATEGY=round-robin", "FAILOVER_TARGET_1_MODELS=gpt-4o"})...)
	large := map[string]int{}
	for range 20 {
		if r := s.Post("/chat/completions", `{"model":"gpt-4o-mini","messages":[]}`); r.Header.Get("X-Failover-Target") != "t0" {
			t.Fatalf("gpt-4o-mini served by %q, which does not serve it", r.Header.Get("X-Failover-Target"))
		}
		large[s.Post("/chat/completions", `{"model":"gpt-4o","messages":[]}`).Header.Get("X-Failover-Target")]++
	}
	if large["t0"] != 10 || large["t1"] != 10 {
		t.Fatalf("gpt-4o served %v, want 10 each", large)
	}
}

// TestOneProbeWhenAnEjectionEnds: when a target's ejection ends, one request probes it and
// the requests that arrive while the probe runs go around it; the probe's success restores it.
func TestOneProbeWhenAnEjectionEnds(t *testing.T) {
	t.Parallel()
	a, b := upstream(t, revokedKey), upstream(t)
	s := start(t, env(targets(a.URL, b.URL), []string{"FAILOVER_TARGET_0_API_KEY=k", "FAILOVER_EJECT_BASE=200ms", "FAILOVER_EJECT_MAX=1s"})...)
	if r := s.Post("/chat/completions", chatBody); r.Header.Get("X-Failover-Target") != "t1" || len(s.Records("target_ejected")) != 1 {
		t.Fatalf("first request: %d from %q", r.Status, r.Header.Get("X-Failover-Target"))
	}
	slow := pt.JSON(200, pt.ChatCompletion("a is back"))
	slow.Delay = 600 * time.Millisecond
	a.Script(slow)
	time.Sleep(400 * time.Millisecond) // the ejection is over
	done := make(chan string, 16)
	for range 16 {
		go func() { done <- s.Post("/chat/completions", chatBody).Header.Get("X-Failover-Target") }()
	}
	served := map[string]int{}
	for range 16 {
		served[<-done]++
	}
	if a.Calls() != 2 || served["t0"] != 1 || served["t1"] != 15 {
		t.Fatalf("served %v, t0 called %d times: want one probe, the rest around it", served, a.Calls())
	}
	if len(s.Records("target_restored")) != 1 {
		t.Fatalf("restored %d times", len(s.Records("target_restored")))
	}
	if r := s.Post("/chat/completions", chatBody); r.Header.Get("X-Failover-Target") != "t0" {
		t.Fatalf("after the probe: served by %q", r.Header.Get("X-Failover-Target"))
	}
}

// TestMaxAttemptsIgnoresRetriesAndSkippedTargets: an ejected target skipped and a retry on the
// same target are no transfers; the budget stops the sweep with the last attempt's answer.
func TestMaxAttemptsIgnoresRetriesAndSkippedTargets(t *testing.T) {
	t.Parallel()
	a := upstream(t, revokedKey)
	b := upstream(t, pt.JSON(200, pt.ChatCompletion("b")), pt.JSON(503, pt.OpenAIError("b is down", "server_error", "")))
	c := upstream(t, pt.JSON(502, pt.OpenAIError("c is down", "server_error", "")))
	d := upstream(t)
	s := start(t, env(targets(a.URL, b.URL, c.URL, d.URL), []string{"FAILOVER_TARGET_0_API_KEY=k", "FAILOVER_EJECT_BASE=1h",
		"FAILOVER_EJECT_MAX=1h", "FAILOVER_MAX_ATTEMPTS=1", "FAILOVER_SAME_TARGET_RETRIES=1", "FAILOVER_BACKOFF_BASE=1ms", "FAILOVER_BACKOFF_MAX=1ms"})...)
	s.Post("/chat/completions", `{"model":"other"}`) // a ejects itself (and b answers)
	a0, b0 := a.Calls(), b.Calls()
	r := s.Post("/chat/completions", chatBody)
	if a.Calls() != a0 || b.Calls()-b0 != 2 || c.Calls() != 2 || d.Calls() != 0 {
		t.Fatalf("calls a=%d b=%d c=%d d=%d, want 0/2/2/0", a.Calls()-a0, b.Calls()-b0, c.Calls(), d.Calls())
	}
	if r.Status != 502 || !strings.Contains(string(r.Body), "c is down") || r.Header.Get("X-Failover-Attempts") != "4" {
		t.Fatalf("got %d %s after %s attempts", r.Status, r.Body, r.Header.Get("X-Failover-Attempts"))
	}
	if rec := s.WaitLedger(2)[1]; rec["outcome"] != "budget_exhausted" {
		t.Errorf("outcome %v", rec["outcome"])
	}
	if ev := s.Records("routing_transfer_limit_reached"); len(ev) != 1 || ev[0]["budget"] != "max_attempts" {
		t.Errorf("events %v", ev)
	}
}
