package proxy_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	pt "github.com/llm-failover/failover/proxy/proxytest"
	"github.com/llm-failover/failover/proxy/proxytest/sidecar"
)

var busy = pt.JSON(503, pt.OpenAIError("The server is overloaded", "server_error", ""))

func TestSameTargetRetry(t *testing.T) {
	t.Parallel()
	a := upstream(t, busy, pt.JSON(200, pt.ChatCompletion("from a")))
	b := upstream(t)
	s := start(t, env(targets(a.URL, b.URL), []string{"FAILOVER_SAME_TARGET_RETRIES=1", "FAILOVER_BACKOFF_BASE=10ms", "FAILOVER_BACKOFF_MAX=20ms"})...)
	r := s.Post("/chat/completions", chatBody)
	if r.Status != 200 || string(r.Body) != pt.ChatCompletion("from a") || b.Calls() != 0 || a.Calls() != 2 {
		t.Fatalf("got %d %s; calls a=%d b=%d", r.Status, r.Body, a.Calls(), b.Calls())
	}
	if r.Header.Get("X-Failover-Attempts") != "2" || r.Header.Get("X-Failover-Target") != "t0" {
		t.Errorf("headers %v", r.Header)
	}
	reqs := a.Requests()
	if reqs[0].Header["X-Request-Id"] != reqs[1].Header["X-Request-Id"] || reqs[1].Header["X-Failover-Attempt"] != "2" {
		t.Errorf("retry headers: %v / %v", reqs[0].Header, reqs[1].Header)
	}
	ledger := s.Ledger()[0]["ledger"].([]any)
	if ledger[0].(map[string]any)["action"] != "retry" {
		t.Errorf("ledger %v", ledger)
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	// retried sends one request to a target whose first answer is first, with one retry allowed
	// and no backoff to speak of, and returns how long the sidecar waited before the retry.
	retried := func(t *testing.T, first pt.Step) time.Duration {
		t.Helper()
		a := upstream(t, first, pt.JSON(200, pt.ChatCompletion("a")))
		s := start(t, env(targets(a.URL), []string{"FAILOVER_SAME_TARGET_RETRIES=1", "FAILOVER_BACKOFF_BASE=1ms", "FAILOVER_BACKOFF_MAX=1ms"})...)
		r := s.Post("/chat/completions", chatBody)
		reqs := a.Requests()
		if r.Status != 200 || len(reqs) != 2 {
			t.Fatalf("status %d, %d calls", r.Status, len(reqs))
		}
		return reqs[1].Received.Sub(reqs[0].Received)
	}
	t.Run("Retry-After: 1 is waited on before the same-target retry", func(t *testing.T) {
		t.Parallel()
		if gap := retried(t, pt.JSON(429, pt.OpenAIError("Rate limit", "requests", "rate_limit_exceeded"), "Retry-After: 1")); gap < 900*time.Millisecond {
			t.Fatalf("retried after %v, Retry-After asked for 1s", gap)
		}
	})
	t.Run("retry-after-ms is read too", func(t *testing.T) {
		t.Parallel()
		if gap := retried(t, pt.JSON(429, "{}", "Retry-After-Ms: 400")); gap < 350*time.Millisecond {
			t.Fatalf("retried after %v, Retry-After-Ms asked for 400ms", gap)
		}
	})
	t.Run("the first of two lines counts, in whatever case its name is sent", func(t *testing.T) {
		t.Parallel()
		// As a lookup by name would find it: the 60 that follows would transfer at once. The
		// delay makes the upstream write the lines as they are.
		twice := pt.JSON(429, "{}", "retry-after: 1", "Retry-After: 60", "RETRY-AFTER-MS: junk")
		twice.Delay = time.Millisecond
		if gap := retried(t, twice); gap < 900*time.Millisecond {
			t.Fatalf("retried after %v, the first Retry-After asked for 1s", gap)
		}
	})
	t.Run("Retry-After: 60 transfers at once and the next request skips the target", func(t *testing.T) {
		t.Parallel()
		a := upstream(t, pt.JSON(429, pt.OpenAIError("Rate limit", "requests", "rate_limit_exceeded"), "Retry-After: 60"))
		b := upstream(t)
		s := start(t, env(targets(a.URL, b.URL), []string{"FAILOVER_SAME_TARGET_RETRIES=3"})...)
		begin := time.Now()
		if r := s.Post("/chat/completions", chatBody); r.Status != 200 || r.Header.Get("X-Failover-Target") != "t1" {
			t.Fatalf("first request: %d %v", r.Status, r.Header)
		}
		if time.Since(begin) > 2*time.Second {
			t.Fatalf("the transfer waited %v", time.Since(begin))
		}
		if r := s.Post("/chat/completions", chatBody); r.Status != 200 || r.Header.Get("X-Failover-Attempts") != "1" {
			t.Fatalf("second request: %d %v", r.Status, r.Header)
		}
		if a.Calls() != 1 || b.Calls() != 2 {
			t.Fatalf("calls a=%d b=%d: a target cooling down must be skipped", a.Calls(), b.Calls())
		}
	})
	t.Run("each attempt's own Retry-After is read", func(t *testing.T) {
		t.Parallel()
		// The first 429 asks for 60 s (transfer and cool down); the second target's 429 asks
		// for nothing, so the sweep ends there without waiting a minute.
		a := upstream(t, pt.JSON(429, "{}", "Retry-After: 60"))
		b := upstream(t, pt.JSON(429, pt.OpenAIError("slow down", "requests", "rate_limit_exceeded")))
		s := start(t, targets(a.URL, b.URL)...)
		begin := time.Now()
		r := s.Post("/chat/completions", chatBody)
		if r.Status != 429 || time.Since(begin) > 2*time.Second {
			t.Fatalf("status %d after %v", r.Status, time.Since(begin))
		}
	})
}

func TestElapsedBudgetStopsTheSweep(t *testing.T) {
	t.Parallel()
	slow := pt.JSON(503, pt.OpenAIError("slow and down", "server_error", ""))
	slow.Delay = 400 * time.Millisecond
	a := upstream(t, slow)
	b := upstream(t, pt.JSON(502, "b is down too"))
	c := upstream(t)
	s := start(t, env(targets(a.URL, b.URL, c.URL), []string{"FAILOVER_MAX_ELAPSED=300ms"})...)
	r := s.Post("/chat/completions", chatBody)
	// The running attempt is never cut; after it, no new attempt starts.
	if r.Status != 503 || !strings.Contains(string(r.Body), "slow and down") || b.Calls() != 0 || c.Calls() != 0 {
		t.Fatalf("got %d %s; calls b=%d c=%d", r.Status, r.Body, b.Calls(), c.Calls())
	}
	if rec := s.Ledger()[0]; rec["outcome"] != "budget_exhausted" {
		t.Errorf("outcome %v", rec["outcome"])
	}
	ev := s.Records("routing_transfer_limit_reached")
	if len(ev) != 1 || ev[0]["budget"] != "max_elapsed" {
		t.Errorf("events %v", ev)
	}
	if !strings.Contains(s.ScrapeMetrics(), `failover_budget_exhausted_total{budget="max_elapsed"} 1`) {
		t.Error("budget metric not counted")
	}
}

// A retry whose wait FAILOVER_MAX_ELAPSED refuses becomes a transfer; when no candidate is
// left for it, the budget is what ended the request, and it is reported as such.
func TestElapsedBudgetRefusingTheLastRetry(t *testing.T) {
	t.Parallel()
	up := upstream(t, pt.JSON(503, pt.OpenAIError("busy", "server_error", ""), "Retry-After: 1"), pt.JSON(200, pt.ChatCompletion("later")))
	s := start(t, env(targets(up.URL), []string{"FAILOVER_SAME_TARGET_RETRIES=1", "FAILOVER_MAX_ELAPSED=500ms"})...)
	if r := s.Post("/chat/completions", chatBody); r.Status != 503 || up.Calls() != 1 {
		t.Fatalf("got %d after %d calls, want the 503 after 1", r.Status, up.Calls())
	}
	rec := s.Ledger()[0]
	if rec["outcome"] != "budget_exhausted" {
		t.Errorf("outcome %v, want budget_exhausted", rec["outcome"])
	}
	if l, _ := rec["ledger"].([]any); len(l) != 1 || l[0].(map[string]any)["reason"] != "elapsed_limit" {
		t.Errorf("ledger %v, want one attempt stopped by elapsed_limit", rec["ledger"])
	}
	if ev := s.Records("routing_transfer_limit_reached"); len(ev) != 1 || ev[0]["budget"] != "max_elapsed" {
		t.Errorf("events %v", ev)
	}
	if !strings.Contains(s.ScrapeMetrics(), `failover_budget_exhausted_total{budget="max_elapsed"} 1`) {
		t.Error("budget metric not counted")
	}
}

func TestBackoffThatWouldOverrunTransfersInstead(t *testing.T) {
	t.Parallel()
	// Each wait is certain to exceed what is left of a 1 s budget, so the retry must become a
	// transfer at once: without the check, the first target is called twice (after a 2 s wait),
	// or the request sleeps far past the client's deadline.
	tests := []struct {
		name  string
		first pt.Step
		extra []string
	}{
		{"a Retry-After longer than the budget left", pt.JSON(503, pt.OpenAIError("busy", "server_error", ""), "Retry-After: 2"),
			[]string{"FAILOVER_BACKOFF_BASE=1ms", "FAILOVER_BACKOFF_MAX=1ms"}},
		// Full jitter draws the wait from [0, 1000h]: under 1 s about once in 3.6 million runs.
		{"a backoff longer than the budget left", busy, []string{"FAILOVER_BACKOFF_BASE=1000h", "FAILOVER_BACKOFF_MAX=1000h"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := upstream(t, tc.first)
			b := upstream(t)
			s := start(t, env(targets(a.URL, b.URL), []string{"FAILOVER_SAME_TARGET_RETRIES=1", "FAILOVER_MAX_ELAPSED=1s"}, tc.extra)...)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "POST", s.URL+"/chat/completions", strings.NewReader(chatBody))
			r := s.Do(req)
			if r.Status != 200 || r.Header.Get("X-Failover-Target") != "t1" {
				t.Fatalf("got %d from %q", r.Status, r.Header.Get("X-Failover-Target"))
			}
			if a.Calls() != 1 || b.Calls() != 1 {
				t.Fatalf("calls a=%d b=%d: a wait that overruns the budget must transfer at once", a.Calls(), b.Calls())
			}
			if first := s.Ledger()[0]["ledger"].([]any)[0].(map[string]any); first["action"] != "transfer" {
				t.Errorf("first attempt %v", first)
			}
		})
	}
}

func TestQuotaIsNotRetriedAndEjects(t *testing.T) {
	t.Parallel()
	a := upstream(t, pt.JSON(429, pt.OpenAIError("You exceeded your current quota", "insufficient_quota", "insufficient_quota")))
	b := upstream(t)
	s := start(t, env(targets(a.URL, b.URL), []string{"FAILOVER_SAME_TARGET_RETRIES=3", "FAILOVER_TARGET_0_API_KEY=sk-a"})...)
	if r := s.Post("/chat/completions", chatBody); r.Status != 200 {
		t.Fatalf("status %d", r.Status)
	}
	if a.Calls() != 1 {
		t.Fatalf("quota exhaustion retried on the same target: %d calls", a.Calls())
	}
	s.Post("/chat/completions", chatBody)
	if a.Calls() != 1 {
		t.Fatalf("an ejected target was used again")
	}
	if ev := s.Records("target_ejected"); len(ev) != 1 || ev[0]["reason"] != "quota" {
		t.Errorf("events %v", ev)
	}
}

func TestTargetRetriesUsedUp(t *testing.T) {
	t.Parallel()
	a := upstream(t, busy)
	b := upstream(t)
	s := start(t, env(targets(a.URL, b.URL), []string{"FAILOVER_TARGET_0_RETRIES=2", "FAILOVER_BACKOFF_BASE=1ms", "FAILOVER_BACKOFF_MAX=2ms"})...)
	if r := s.Post("/chat/completions", chatBody); r.Status != 200 || a.Calls() != 3 || b.Calls() != 1 {
		t.Fatalf("status %d, calls a=%d b=%d", r.Status, a.Calls(), b.Calls())
	}
	if len(s.Records("target_transfer_limit_reached")) != 1 {
		t.Error("target_transfer_limit_reached not logged")
	}
	// An ordinary transfer: it shows in failover_attempts_total, and no budget that ends a
	// request was exhausted (docs/operations.md, Metrics).
	page := s.ScrapeMetrics()
	if got := metric(page, `failover_attempts_total{target="t0",class="server_error",action="transfer"}`); got != 1 {
		t.Errorf("transfers counted %v, want 1", got)
	}
	for _, budget := range []string{"max_attempts", "max_elapsed", "retry_budget"} {
		if got := metric(page, `failover_budget_exhausted_total{budget="`+budget+`"}`); got != 0 {
			t.Errorf("failover_budget_exhausted_total{budget=%q} = %v, want 0", budget, got)
		}
	}
	if strings.Contains(page, "target_retries") {
		t.Error("a target's own retries running out is counted as an exhausted budget")
	}
}

func TestEjection(t *testing.T) {
	t.Parallel()
	a := upstream(t, busy)
	b := upstream(t, busy)
	s := start(t, env(targets(a.URL, b.URL), noRetries, []string{"FAILOVER_EJECT_AFTER=2", "FAILOVER_EJECT_BASE=1h", "FAILOVER_EJECT_MAX=2h"})...)
	ready := func() int {
		resp, err := http.Get(s.Metrics + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if ready() != 200 {
		t.Fatal("not ready at start")
	}
	s.Post("/chat/completions", chatBody)
	s.Post("/chat/completions", chatBody) // two consecutive failures each: both ejected
	if ev := s.Records("target_ejected"); len(ev) != 2 {
		t.Fatalf("%d ejections", len(ev))
	}
	if ready() != 503 {
		t.Fatal("ready although every target is ejected")
	}
	// Every candidate ejected: they are tried anyway, in order.
	before := a.Calls() + b.Calls()
	r := s.Post("/chat/completions", chatBody)
	if a.Calls()+b.Calls() != before+2 || r.Status != 503 {
		t.Fatalf("all-ejected fallback: %d calls, status %d", a.Calls()+b.Calls()-before, r.Status)
	}
	m := s.ScrapeMetrics()
	for _, want := range []string{`failover_target_up{target="t0"} 0`, `failover_target_ejections_total{target="t1"} 1`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// A success restores: the second target recovers and answers the fallback.
	b.Script(pt.JSON(200, pt.ChatCompletion("back")))
	a.Script(busy)
	if r := s.Post("/chat/completions", chatBody); r.Status != 200 {
		t.Fatalf("status %d", r.Status)
	}
	if len(s.Records("target_restored")) != 1 || ready() != 200 {
		t.Errorf("restore: events %d, ready %d", len(s.Records("target_restored")), ready())
	}
}

func TestReadyWhileOneTargetIsUp(t *testing.T) {
	t.Parallel()
	revoked := pt.JSON(401, pt.OpenAIError("Incorrect API key provided", "invalid_request_error", "invalid_api_key"))
	a := upstream(t, revoked)
	b := upstream(t)
	s := start(t, env(targets(a.URL, b.URL), []string{"FAILOVER_TARGET_0_API_KEY=sk-test-revoked", "FAILOVER_TARGET_1_API_KEY=sk-test-good",
		"FAILOVER_EJECT_BASE=1h", "FAILOVER_EJECT_MAX=1h"})...)
	ready := func(base string) int {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	proxyBase := strings.TrimSuffix(s.URL, "/v1")
	if r := s.Post("/chat/completions", chatBody); r.Status != 200 || r.Header.Get("X-Failover-Target") != "t1" {
		t.Fatalf("first request: %d from %q", r.Status, r.Header.Get("X-Failover-Target"))
	}
	if ev := s.Records("target_ejected"); len(ev) != 1 || ev[0]["target"] != "t0" {
		t.Fatalf("ejections %v", ev)
	}
	m := s.ScrapeMetrics()
	if !strings.Contains(m, `failover_target_up{target="t0"} 0`) || !strings.Contains(m, `failover_target_up{target="t1"} 1`) {
		t.Fatalf("target_up:\n%s", m)
	}
	for _, base := range []string{s.Metrics, proxyBase} {
		if got := ready(base); got != 200 {
			t.Errorf("%s/readyz = %d with one of two targets up", base, got)
		}
	}
	// The second key is revoked too: every target is ejected.
	b.Script(revoked)
	if r := s.Post("/chat/completions", chatBody); r.Status != 401 {
		t.Fatalf("second request: %d", r.Status)
	}
	if ev := s.Records("target_ejected"); len(ev) != 2 {
		t.Fatalf("ejections %v", ev)
	}
	for _, base := range []string{s.Metrics, proxyBase} {
		if got := ready(base); got != 503 {
			t.Errorf("%s/readyz = %d with every target ejected", base, got)
		}
	}
}

func TestRetryBudget(t *testing.T) {
	t.Parallel()
	a := upstream(t, busy)
	b := upstream(t)
	// A floor of 1 retry per second over 10 s: 10 transfers, then the budget is spent.
	s := start(t, env(targets(a.URL, b.URL), noRetries, []string{"FAILOVER_RETRY_BUDGET_RATIO=0.01", "FAILOVER_RETRY_BUDGET_MIN=1", "FAILOVER_EJECT_AFTER=0"})...)
	statuses := map[int]int{}
	for range 15 {
		statuses[s.Post("/chat/completions", chatBody).Status]++
	}
	if statuses[200] != 10 || statuses[503] != 5 {
		t.Fatalf("statuses %v: want 10 transfers admitted, 5 refused", statuses)
	}
	if len(s.Records("retry_budget_exhausted")) != 5 {
		t.Errorf("%d retry_budget_exhausted events", len(s.Records("retry_budget_exhausted")))
	}
}

// A sweep that runs out of candidates spends no retry-budget token and is not a budget stop:
// with every target failing, the requests end exhausted, and a budget they did not touch
// still admits the transfers of the requests that have somewhere to go.
func TestExhaustedSweepSpendsNoRetryBudget(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		fail    pt.Step
		extra   []string
		outcome string // of the sweeps with nowhere to go
	}{
		{"a transfer with no candidate left", busy, noRetries, "exhausted"},
		// The retry's 5 s wait does not fit FAILOVER_MAX_ELAPSED, so it becomes a transfer,
		// which (for gpt-3.5) has nowhere to go.
		{"a retry turned transfer with no candidate left", pt.JSON(503, pt.OpenAIError("busy", "server_error", ""), "Retry-After: 5"),
			[]string{"FAILOVER_SAME_TARGET_RETRIES=1", "FAILOVER_MAX_ELAPSED=1s"}, "budget_exhausted"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := upstream(t, tc.fail)
			b := upstream(t)
			// a serves every model, b only gpt-4o: a gpt-3.5 request has a alone, a gpt-4o one has a
			// then b. A floor of 1 per second over 10 s: 10 retry-budget tokens in all.
			s := start(t, env(targets(a.URL, b.URL), tc.extra, []string{"FAILOVER_TARGET_1_MODELS=gpt-4o",
				"FAILOVER_RETRY_BUDGET_RATIO=0.01", "FAILOVER_RETRY_BUDGET_MIN=1", "FAILOVER_EJECT_AFTER=0"})...)
			for i := range 10 {
				if r := s.Post("/chat/completions", `{"model":"gpt-3.5","messages":[]}`); r.Status != 503 {
					t.Fatalf("request %d to the failing target alone: %d, want its 503", i+1, r.Status)
				}
			}
			for _, rec := range s.WaitLedger(10) {
				if rec["outcome"] != tc.outcome {
					t.Fatalf("a sweep with no candidate left ended %v, want %s: %v", rec["outcome"], tc.outcome, rec)
				}
			}
			if n := len(s.Records("retry_budget_exhausted")); n != 0 {
				t.Fatalf("%d retry_budget_exhausted events for sweeps that had nowhere to transfer", n)
			}
			for i := range 10 {
				if r := s.Post("/chat/completions", `{"model":"gpt-4o","messages":[]}`); r.Status != 200 {
					t.Fatalf("transfer %d of 10 refused (%d): the exhausted sweeps spent the budget", i+1, r.Status)
				}
			}
		})
	}
}

func TestClientGoneStopsEverything(t *testing.T) {
	t.Parallel()
	t.Run("during a backoff", func(t *testing.T) {
		t.Parallel()
		// Retry-After makes the wait exactly 2 s (a jittered backoff could draw almost nothing).
		a := upstream(t, pt.JSON(503, pt.OpenAIError("busy", "server_error", ""), "Retry-After: 2"))
		b := upstream(t)
		s := start(t, env(targets(a.URL, b.URL), []string{"FAILOVER_SAME_TARGET_RETRIES=1"})...)
		// The first attempt is settled (logged) before its backoff starts: the client leaves in it.
		cancelWhen(t, s, func() bool { return len(s.Records("attempt")) == 1 })
		// The record is written when the exchange ends: after it, no attempt can start, and one
		// sent before it has reached its target a moment later.
		rec := s.WaitLedger(1)[0]
		time.Sleep(50 * time.Millisecond)
		if a.Calls() != 1 || b.Calls() != 0 {
			t.Fatalf("calls a=%d b=%d after the client left during a backoff", a.Calls(), b.Calls())
		}
		if rec["outcome"] != "cancelled" || rec["status"].(float64) != 499 {
			t.Errorf("ledger %v", rec)
		}
	})
	t.Run("during a slow non-streaming attempt", func(t *testing.T) {
		t.Parallel()
		a := upstream(t, pt.Step{Fault: pt.FaultStall})
		b := upstream(t)
		// One health failure would eject: a cancelled attempt must not be one.
		s := start(t, env(targets(a.URL, b.URL), []string{"FAILOVER_EJECT_AFTER=1", "FAILOVER_EJECT_BASE=1h", "FAILOVER_EJECT_MAX=1h"})...)
		left := cancelWhen(t, s, func() bool { return a.Calls() == 1 }) // the target holds the request
		select {
		case at := <-a.PeerClosed():
			if at.Sub(left) > time.Second {
				t.Errorf("upstream closed %v after the client left", at.Sub(left))
			}
		case <-time.After(3 * time.Second):
			t.Fatal("the upstream connection stayed open")
		}
		rec := s.WaitLedger(1)[0] // the exchange has ended: no attempt follows
		time.Sleep(50 * time.Millisecond)
		if b.Calls() != 0 {
			t.Fatalf("the second target was called after the client left")
		}
		if rec["outcome"] != "cancelled" {
			t.Errorf("ledger %v", rec)
		}
		if !strings.Contains(s.ScrapeMetrics(), `failover_target_up{target="t0"} 1`) || len(s.Records("target_ejected")) != 0 {
			t.Fatal("a cancelled attempt must not count against the target")
		}
		// Still the first choice: the next request goes to it, not around it.
		a.Script(pt.JSON(200, pt.ChatCompletion("a is fine")))
		if r := s.Post("/chat/completions", chatBody); r.Status != 200 || r.Header.Get("X-Failover-Target") != "t0" || b.Calls() != 0 {
			t.Errorf("next request: %d from %q, second target called %d times", r.Status, r.Header.Get("X-Failover-Target"), b.Calls())
		}
	})
}

// cancelWhen sends a request and abandons it once ready holds; it returns when the client left.
func cancelWhen(t *testing.T, s *sidecar.Sidecar, ready func() bool) time.Time {
	t.Helper()
	return s.Abandon("/chat/completions", chatBody, func() {
		if !waitFor(5*time.Second, ready) {
			t.Error("the request never reached the point where the client leaves")
		}
	})
}

func TestStrategies(t *testing.T) {
	t.Parallel()
	t.Run("round-robin follows the weights", func(t *testing.T) {
		t.Parallel()
		a, b := upstream(t), upstream(t)
		s := start(t, env(targets(a.URL, b.URL), []string{"FAILOVER_STRATEGY=round-robin", "FAILOVER_TARGET_0_WEIGHT=3", "FAILOVER_TARGET_1_WEIGHT=1"})...)
		for range 40 {
			s.Post("/chat/completions", chatBody)
		}
		if a.Calls() != 30 || b.Calls() != 10 {
			t.Fatalf("calls a=%d b=%d, want 30/10", a.Calls(), b.Calls())
		}
	})
	t.Run("sticky keeps a session on its target", func(t *testing.T) {
		t.Parallel()
		a, b, c := upstream(t), upstream(t), upstream(t)
		s := start(t, env(targets(a.URL, b.URL, c.URL), []string{"FAILOVER_STRATEGY=sticky"})...)
		seen := map[string]map[string]bool{}
		for i := range 60 {
			session := fmt.Sprintf("session-%d", i%6)
			r := s.Post("/chat/completions", chatBody, "X-Session-Id: "+session)
			if seen[session] == nil {
				seen[session] = map[string]bool{}
			}
			seen[session][r.Header.Get("X-Failover-Target")] = true
		}
		used := map[string]bool{}
		for session, ts := range seen {
			if len(ts) != 1 {
				t.Errorf("%s moved between targets: %v", session, ts)
			}
			for k := range ts {
				used[k] = true
			}
		}
		if len(used) < 2 {
			t.Errorf("six sessions all landed on %v", used)
		}
		// Without the header: declared order.
		if r := s.Post("/chat/completions", chatBody); r.Header.Get("X-Failover-Target") != "t0" {
			t.Errorf("no session header went to %s", r.Header.Get("X-Failover-Target"))
		}
	})
	t.Run("FAILOVER_STICKY_HEADER names the session header", func(t *testing.T) {
		t.Parallel()
		a, b, c := upstream(t), upstream(t), upstream(t)
		s := start(t, env(targets(a.URL, b.URL, c.URL), []string{"FAILOVER_STRATEGY=sticky", "FAILOVER_STICKY_HEADER=X-User"})...)
		used := map[string]bool{}
		for i := range 12 {
			user := fmt.Sprintf("user-%d", i)
			first := s.Post("/chat/completions", chatBody, "X-User: "+user).Header.Get("X-Failover-Target")
			if again := s.Post("/chat/completions", chatBody, "X-User: "+user).Header.Get("X-Failover-Target"); again != first {
				t.Fatalf("%s moved from %s to %s", user, first, again)
			}
			used[first] = true
		}
		if len(used) < 2 {
			t.Errorf("twelve users all landed on %v: the header is not hashed", used)
		}
		// The default header means nothing now: declared order.
		if r := s.Post("/chat/completions", chatBody, "X-Session-Id: s-9"); r.Header.Get("X-Failover-Target") != "t0" {
			t.Errorf("X-Session-Id was used although FAILOVER_STICKY_HEADER=X-User")
		}
	})
	t.Run("sticky session moves while its target is ejected", func(t *testing.T) {
		t.Parallel()
		a, b := upstream(t), upstream(t)
		s := start(t, env(targets(a.URL, b.URL), []string{"FAILOVER_STRATEGY=sticky", "FAILOVER_TARGET_0_API_KEY=k", "FAILOVER_TARGET_1_API_KEY=k"})...)
		var session, home string
		for i := range 20 {
			session = fmt.Sprintf("s%d", i)
			if home = s.Post("/chat/completions", chatBody, "X-Session-Id: "+session).Header.Get("X-Failover-Target"); home == "t0" {
				break
			}
		}
		a.Script(pt.JSON(401, pt.OpenAIError("bad key", "invalid_request_error", "invalid_api_key")))
		if r := s.Post("/chat/completions", chatBody, "X-Session-Id: "+session); r.Header.Get("X-Failover-Target") != "t1" {
			t.Fatalf("got %s", r.Header.Get("X-Failover-Target"))
		}
	})
	t.Run("least-latency prefers the faster target", func(t *testing.T) {
		t.Parallel()
		slow := pt.JSON(200, pt.ChatCompletion("slow"))
		slow.Delay = 150 * time.Millisecond
		a, b := upstream(t, slow), upstream(t)
		s := start(t, env(targets(a.URL, b.URL), []string{"FAILOVER_STRATEGY=least-latency"})...)
		for range 48 {
			s.Post("/chat/completions", chatBody)
		}
		if b.Calls() < 36 {
			t.Fatalf("calls slow=%d fast=%d: the fast target should take most", a.Calls(), b.Calls())
		}
		if a.Calls() < 2 {
			t.Fatalf("the slow target was never explored again (%d calls)", a.Calls())
		}
	})
}
