package proxy_test

import (
	"strings"
	"testing"
	"time"

	pt "github.com/llm-failover/failover/proxy/proxytest"
)

// ledgerSteps renders a request record's ledger as "target:class:action" steps, for
// comparing whole sweeps.
func ledgerSteps(rec map[string]any) string {
	var steps []string
	for _, a := range rec["ledger"].([]any) {
		m := a.(map[string]any)
		steps = append(steps, m["target"].(string)+":"+m["class"].(string)+":"+m["action"].(string))
	}
	return strings.Join(steps, " ")
}

// With no policy variable set, a transient failure is retried once on the same target before
// the request is transferred (docs/decisions.md, How it decides: FAILOVER_SAME_TARGET_RETRIES defaults
// to 1). Failures that a second try cannot heal go to the next target at once.
func TestDefaultsRetryTransientFailuresOnce(t *testing.T) {
	t.Parallel()
	ok := pt.JSON(200, pt.ChatCompletion("from a"))
	quota := pt.JSON(429, pt.OpenAIError("You exceeded your current quota", "insufficient_quota", "insufficient_quota"))
	tests := []struct {
		name   string
		script []pt.Step
		refuse bool // the first target's port refuses connections
		want   string
	}{
		{name: "503 then success stays on the target", script: []pt.Step{busy, ok},
			want: "t0:server_error:retry t0:ok:commit"},
		{name: "503 twice transfers", script: []pt.Step{busy, busy},
			want: "t0:server_error:retry t0:server_error:transfer t1:ok:commit"},
		{name: "408 is retried", script: []pt.Step{pt.JSON(408, pt.OpenAIError("Request timed out", "timeout", "")), ok},
			want: "t0:timeout:retry t0:ok:commit"},
		{name: "a reset before any response is retried", script: []pt.Step{{Fault: pt.FaultReset}, ok},
			want: "t0:reset:retry t0:ok:commit"},
		{name: "a refused connection is retried, then transferred", refuse: true,
			want: "t0:refused:retry t0:refused:transfer t1:ok:commit"},
		{name: "429 with a short Retry-After is waited on and retried", script: []pt.Step{pt.RateLimited(pt.RetryAfterMs(300)), ok},
			want: "t0:rate_limited:retry t0:ok:commit"},
		{name: "429 with a quota code is never retried", script: []pt.Step{quota, ok},
			want: "t0:quota:transfer t1:ok:commit"},
		{name: "400 is the caller's: not retried, not transferred", script: []pt.Step{pt.JSON(400, pt.OpenAIError("bad", "invalid_request_error", "invalid_value"))},
			want: "t0:client_error:stop"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url := pt.RefusedURL()
			if !tc.refuse {
				url = upstream(t, tc.script...).URL
			}
			b := upstream(t, pt.JSON(200, pt.ChatCompletion("from b")))
			s := start(t, targets(url, b.URL)...) // the defaults, nothing else
			start := time.Now()
			s.Post("/chat/completions", chatBody)
			rec := s.WaitLedger(1)[0]
			if got := ledgerSteps(rec); got != tc.want {
				t.Fatalf("sweep %s, want %s", got, tc.want)
			}
			if strings.HasPrefix(tc.name, "429 with a short") && time.Since(start) < 250*time.Millisecond {
				t.Errorf("retried after %v: retry-after-ms asked for 300ms", time.Since(start))
			}
		})
	}
}

// A target that did not answer in time is never waited on twice, however many retries it
// has: a connect, first-byte or attempt timeout transfers at once. It still counts against the
// target's health, as a timeout (docs/decisions.md, Health).
func TestTimeoutsTransferAtOnce(t *testing.T) {
	t.Parallel()
	stall := pt.Step{Fault: pt.FaultStall}
	tests := []struct {
		name   string
		body   string
		first  func(t *testing.T) (url string, calls func() int)
		settle string
	}{
		{name: "first-byte timeout", body: `{"model":"m","stream":true,"messages":[]}`, settle: "FAILOVER_FIRST_BYTE_TIMEOUT=1s",
			first: func(t *testing.T) (string, func() int) { u := upstream(t, stall); return u.URL, u.Calls }},
		{name: "attempt timeout", body: chatBody, settle: "FAILOVER_ATTEMPT_TIMEOUT=1s",
			first: func(t *testing.T) (string, func() int) { u := upstream(t, stall); return u.URL, u.Calls }},
		{name: "connect timeout", body: chatBody, settle: "FAILOVER_CONNECT_TIMEOUT=1s",
			first: func(t *testing.T) (string, func() int) {
				l, err := pt.NewStalledListener()
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(l.Close)
				return l.URL, func() int { return 1 }
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url, calls := tc.first(t)
			b := upstream(t, pt.SSE(pt.ChatStream(0, "from ", "b")...))
			if tc.body == chatBody {
				b.Script(pt.JSON(200, pt.ChatCompletion("from b")))
			}
			s := start(t, env(targets(url, b.URL), []string{"FAILOVER_SAME_TARGET_RETRIES=3", "FAILOVER_EJECT_AFTER=1", tc.settle})...)
			r := s.Post("/chat/completions", tc.body)
			if r.Status != 200 || b.Calls() != 1 || calls() != 1 {
				t.Fatalf("got %d; calls t0=%d t1=%d, want t0 once and t1's answer", r.Status, calls(), b.Calls())
			}
			rec := s.WaitLedger(1)[0]
			if got := ledgerSteps(rec); got != "t0:timeout:transfer t1:ok:commit" {
				t.Fatalf("sweep %s", got)
			}
			ev := s.Records("target_ejected")
			if len(ev) != 1 || ev[0]["target"] != "t0" || ev[0]["reason"] != "timeout" {
				t.Fatalf("target_ejected events %v, want t0 ejected for a timeout", ev)
			}
		})
	}
}

const (
	contextError  = `{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130412 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`
	promptTooLong = `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"}}`
)

// A prompt that does not fit the model's context window goes only to a candidate that sends
// another model (docs/decisions.md, The decision order, rule 5b): a 128k primary, a 1M fallback.
func TestContextWindowGoesToABiggerModelOnly(t *testing.T) {
	t.Parallel()
	t.Run("the same model elsewhere is passed over for a bigger one", func(t *testing.T) {
		t.Parallel()
		a := upstream(t, pt.JSON(400, contextError))
		same := upstream(t, pt.JSON(200, pt.ChatCompletion("same model")))
		samePinned := upstream(t, pt.JSON(200, pt.ChatCompletion("same model, pinned")))
		big := upstream(t, pt.JSON(200, pt.ChatCompletion("from the 1M model")))
		s := start(t, env(targets(a.URL, same.URL, samePinned.URL, big.URL),
			[]string{"FAILOVER_TARGET_2_MODEL=gpt-4o-mini", "FAILOVER_TARGET_3_MODEL=gpt-4.1", "FAILOVER_EJECT_AFTER=1"})...)
		for range 3 {
			r := s.Post("/chat/completions", chatBody)
			if r.Status != 200 || string(r.Body) != pt.ChatCompletion("from the 1M model") || r.Header.Get("X-Failover-Model") != "gpt-4.1" {
				t.Fatalf("got %d %s %v", r.Status, r.Body, r.Header)
			}
		}
		if same.Calls() != 0 || samePinned.Calls() != 0 || a.Calls() != 3 {
			t.Fatalf("calls: primary %d, same model %d, pinned to the same model %d", a.Calls(), same.Calls(), samePinned.Calls())
		}
		if got := ledgerSteps(s.WaitLedger(3)[2]); got != "t0:context_window:transfer t3:ok:commit" {
			t.Fatalf("sweep %s", got)
		}
		if ev := s.Records("target_ejected"); len(ev) != 0 {
			t.Fatalf("a context-window error counted against the target: %v", ev)
		}
		if sent := string(big.Requests()[0].Body); !strings.Contains(sent, `"model":"gpt-4.1"`) {
			t.Fatalf("the bigger target was sent %s", sent)
		}
	})
	t.Run("with no bigger model the error goes back unchanged", func(t *testing.T) {
		t.Parallel()
		a := upstream(t, pt.JSON(400, promptTooLong))
		b := upstream(t, pt.JSON(200, `{"type":"message"}`))
		s := start(t, targets(a.URL, b.URL)...)
		r := s.Post("/messages", `{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[]}`)
		if r.Status != 400 || string(r.Body) != promptTooLong || b.Calls() != 0 {
			t.Fatalf("got %d %s, second target called %d times", r.Status, r.Body, b.Calls())
		}
		rec := s.WaitLedger(1)[0]
		if rec["outcome"] != "upstream_error" || ledgerSteps(rec) != "t0:context_window:stop" {
			t.Fatalf("outcome %v, sweep %s", rec["outcome"], ledgerSteps(rec))
		}
	})
	t.Run("a stop rule still wins", func(t *testing.T) {
		t.Parallel()
		a := upstream(t, pt.JSON(400, contextError))
		big := upstream(t, pt.JSON(200, pt.ChatCompletion("from the 1M model")))
		s := start(t, env(targets(a.URL, big.URL), []string{"FAILOVER_TARGET_1_MODEL=gpt-4.1", "FAILOVER_STOP_RULE_0_PATTERN=context_length_exceeded"})...)
		if r := s.Post("/chat/completions", chatBody); r.Status != 400 || big.Calls() != 0 {
			t.Fatalf("got %d, bigger target called %d times", r.Status, big.Calls())
		}
	})
}

// A model that did not take the prompt stays passed over for the rest of the request (docs/decisions.md,
// The decision order, rule 5b: "the same model cannot take the prompt anywhere"), not only for
// the transfer that follows its context-window error: when the bigger model then fails in its
// own way, the request does not go back to a candidate that sends a model already too small.
func TestContextWindowModelTooSmallStaysPassedOver(t *testing.T) {
	t.Parallel()
	overloaded := pt.JSON(503, pt.OpenAIError("overloaded", "server_error", ""))
	t.Run("the bigger model fails: its own answer goes back", func(t *testing.T) {
		t.Parallel()
		a := upstream(t, pt.JSON(400, contextError))
		big := upstream(t, overloaded)
		same := upstream(t, pt.JSON(400, contextError))
		s := start(t, env(targets(a.URL, big.URL, same.URL), noRetries, []string{"FAILOVER_TARGET_1_MODEL=gpt-4.1"})...)
		r := s.Post("/chat/completions", chatBody)
		if r.Status != 503 || same.Calls() != 0 {
			t.Fatalf("got %d %s; the candidate with the model too small was called %d times", r.Status, r.Body, same.Calls())
		}
		if got := ledgerSteps(s.WaitLedger(1)[0]); got != "t0:context_window:transfer t1:server_error:stop" {
			t.Fatalf("sweep %s", got)
		}
	})
	t.Run("every model found too small is passed over", func(t *testing.T) {
		t.Parallel()
		a := upstream(t, pt.JSON(400, contextError))
		mid := upstream(t, pt.JSON(400, contextError))
		same := upstream(t, pt.JSON(400, contextError))
		big := upstream(t, pt.JSON(200, pt.ChatCompletion("from the 1M model")))
		s := start(t, env(targets(a.URL, mid.URL, same.URL, big.URL), noRetries,
			[]string{"FAILOVER_TARGET_1_MODEL=gpt-4o-256k", "FAILOVER_TARGET_3_MODEL=gpt-4.1"})...)
		r := s.Post("/chat/completions", chatBody)
		if r.Status != 200 || string(r.Body) != pt.ChatCompletion("from the 1M model") || same.Calls() != 0 {
			t.Fatalf("got %d %s; the candidate with the model too small was called %d times", r.Status, r.Body, same.Calls())
		}
		if got := ledgerSteps(s.WaitLedger(1)[0]); got != "t0:context_window:transfer t1:context_window:transfer t3:ok:commit" {
			t.Fatalf("sweep %s", got)
		}
	})
}

// An upstream 101 nobody asked for is a failed attempt, never the client's answer.
func TestUnaskedFor101IsABadResponse(t *testing.T) {
	t.Parallel()
	switched := pt.Step{Status: 101, Header: []string{"Upgrade: websocket", "Connection: Upgrade"}, Fault: pt.FaultStallAfter}
	switched.FaultBytes = len(switched.Raw())
	t.Run("the next target answers", func(t *testing.T) {
		t.Parallel()
		a := upstream(t, switched)
		b := upstream(t, pt.JSON(200, pt.ChatCompletion("from b")))
		s := start(t, targets(a.URL, b.URL)...)
		r := s.Post("/chat/completions", chatBody)
		if r.Status != 200 || string(r.Body) != pt.ChatCompletion("from b") {
			t.Fatalf("got %d %s", r.Status, r.Body)
		}
		if got := ledgerSteps(s.WaitLedger(1)[0]); got != "t0:bad_response:retry t0:bad_response:transfer t1:ok:commit" {
			t.Fatalf("sweep %s", got)
		}
	})
	t.Run("so is a status HTTP does not have", func(t *testing.T) {
		t.Parallel()
		a := upstream(t, pt.JSON(999, pt.OpenAIError("odd", "server_error", "")))
		b := upstream(t, pt.JSON(200, pt.ChatCompletion("from b")))
		s := start(t, env(targets(a.URL, b.URL), noRetries)...)
		if r := s.Post("/chat/completions", chatBody); r.Status != 200 || string(r.Body) != pt.ChatCompletion("from b") {
			t.Fatalf("got %d %s", r.Status, r.Body)
		}
		if got := ledgerSteps(s.WaitLedger(1)[0]); got != "t0:bad_response:transfer t1:ok:commit" {
			t.Fatalf("sweep %s", got)
		}
	})
	t.Run("alone it gives a 502 of the sidecar's", func(t *testing.T) {
		t.Parallel()
		a := upstream(t, switched)
		s := start(t, targets(a.URL)...)
		r := s.Post("/chat/completions", chatBody)
		if r.Status != 502 || !strings.Contains(string(r.Body), `"code":"bad_response"`) || r.Header.Get("Upgrade") != "" {
			t.Fatalf("got %d %v %s", r.Status, r.Header, r.Body)
		}
	})
}
