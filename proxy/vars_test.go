package proxy_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	pt "github.com/llm-failover/failover/proxy/proxytest"
	"github.com/llm-failover/failover/proxy/proxytest/sidecar"
)

// TestZeroDisablesALimit runs the sidecar with each limit that the README (Configuration
// reference) says 0 disables set to 0, and an answer that the limit's default would not stop but a small
// limit would, so a 0 taken as "nothing allowed" fails the row.
func TestZeroDisablesALimit(t *testing.T) {
	t.Parallel()
	stream := `{"model":"m","stream":true}`
	for _, row := range []struct {
		variable string
		a        []pt.Step // the first target's script; the second answers 200
		body     string    // request body for /chat/completions
		clients  int       // concurrent requests (default 1)
		want     string    // target that must answer, with 200
		partial  bool      // the answer is a committed stream that fails (ends with an error)
	}{
		// 0 = no limit on concurrent requests: none is shed.
		{"FAILOVER_MAX_INFLIGHT=0", []pt.Step{delayed(pt.JSON(200, pt.ChatCompletion("hi")), 100*time.Millisecond)}, chatBody, 8, "t0", false},
		// 0 = no limit on the wait for the first business content: a slow first event commits.
		{"FAILOVER_FIRST_BYTE_TIMEOUT=0", []pt.Step{delayed(pt.SSE(pt.ChatStream(0, "hello", "world")...), 150*time.Millisecond)}, stream, 1, "t0", false},
		// 0 = no limit on silences after commit: the stream ends cleanly.
		{"FAILOVER_IDLE_TIMEOUT=0", []pt.Step{pt.SSE(pt.ChatStream(50*time.Millisecond, "a", "b", "c")...)}, stream, 1, "t0", false},
		// 0 = no connect limit: dialing works.
		{"FAILOVER_CONNECT_TIMEOUT=0", []pt.Step{pt.JSON(200, pt.ChatCompletion("hi"))}, chatBody, 1, "t0", false},
		// 0 = no limit on a non-streaming attempt.
		{"FAILOVER_ATTEMPT_TIMEOUT=0", []pt.Step{delayed(pt.JSON(200, pt.ChatCompletion("hi")), 100*time.Millisecond)}, chatBody, 1, "t0", false},
		// 0 = buffer everything: a 503 is read whole and transferred from, not committed.
		{"FAILOVER_MAX_RESPONSE_BYTES=0", []pt.Step{pt.JSON(503, `{"error":{"message":"`+strings.Repeat("x", 64<<10)+`","type":"server_error"}}`)}, chatBody, 1, "t1", false},
		// 0 = commit at headers: an in-stream error is not judged, so no transfer; the client
		// gets the error event and a body that does not end cleanly (docs/streams.md, Streams: the pre-commit peek).
		{"FAILOVER_PEEK_BYTES=0", []pt.Step{pt.SSE(pt.Events(0, pt.ChatError("boom", "server_error", ""))...)}, stream, 1, "t0", true},
		// 0 = never wait on Retry-After: a 429 asking for 1 s transfers although retries are left.
		{"FAILOVER_RETRY_AFTER_MAX=0", []pt.Step{pt.RateLimited(pt.RetryAfterSeconds(1)), pt.JSON(200, pt.ChatCompletion("a"))}, chatBody, 1, "t1", false},
	} {
		t.Run(row.variable, func(t *testing.T) {
			t.Parallel()
			a, b := upstream(t, row.a...), upstream(t)
			s := start(t, env(targets(a.URL, b.URL), []string{row.variable, "FAILOVER_SAME_TARGET_RETRIES=2"})...)
			var wg sync.WaitGroup
			rs := make([]sidecar.Response, max(row.clients, 1))
			for i := range rs {
				wg.Add(1)
				go func() { defer wg.Done(); rs[i] = s.Post("/chat/completions", row.body) }()
			}
			wg.Wait()
			for _, r := range rs {
				if row.partial {
					if r.Status != 200 || r.Header.Get("X-Failover-Target") != row.want || !strings.Contains(string(r.Body), "boom") || b.Calls() != 0 {
						t.Errorf("status %d, target %q, second target called %d times, want the committed error from %s; body %.200q",
							r.Status, r.Header.Get("X-Failover-Target"), b.Calls(), row.want, r.Body)
					}
					continue
				}
				if r.Status != 200 || r.Err != nil || r.Header.Get("X-Failover-Target") != row.want || strings.Contains(string(r.Body), "stream_interrupted") {
					t.Errorf("status %d, target %q, err %v, want 200 from %s; body %.200q", r.Status, r.Header.Get("X-Failover-Target"), r.Err, row.want, r.Body)
				}
			}
		})
	}
}

// FAILOVER_MAX_REQUEST_BYTES: a body of exactly the limit passes, one byte more is refused,
// and 0 lets through a body larger than fasthttp's own 4 MiB default.
func TestMaxRequestBytesEdges(t *testing.T) {
	t.Parallel()
	body := func(n int) string { // a JSON body of exactly n bytes
		const head, tail = `{"model":"m","input":"`, `"}`
		return head + strings.Repeat("x", n-len(head)-len(tail)) + tail
	}
	for _, row := range []struct {
		value string
		size  int
		want  int
	}{
		{"1KiB", 1024, 200},
		{"1KiB", 1025, 413},
		{"1024", 1025, 413},
		{"0", 5 << 20, 200},
	} {
		t.Run(fmt.Sprintf("%s/%d", row.value, row.size), func(t *testing.T) {
			t.Parallel()
			s := start(t, env(targets(upstream(t).URL), []string{"FAILOVER_MAX_REQUEST_BYTES=" + row.value})...)
			if r := s.Post("/embeddings", body(row.size)); r.Status != row.want {
				t.Errorf("status %d, want %d: %.200q", r.Status, row.want, r.Body)
			}
		})
	}
}

// TestTargetFilterEdges: _MODELS and _PATHS with spaces, wildcards, a bare "*", trailing
// slashes and /v1 itself, as the README writes them. Target 0 carries the filter; target 1
// serves everything, so the answering target tells whether target 0 served the request.
func TestTargetFilterEdges(t *testing.T) {
	t.Parallel()
	for _, row := range []struct {
		name, variable, path, model, want string
	}{
		{"models with spaces, exact", "FAILOVER_TARGET_0_MODELS= gpt-4o* , claude-x ", "/chat/completions", "claude-x", "t0"},
		{"models with spaces, wildcard", "FAILOVER_TARGET_0_MODELS= gpt-4o* , claude-x ", "/chat/completions", "gpt-4o-mini", "t0"},
		{"models with spaces, no match", "FAILOVER_TARGET_0_MODELS= gpt-4o* , claude-x ", "/chat/completions", "gpt-5", "t1"},
		{"models are case-sensitive", "FAILOVER_TARGET_0_MODELS=GPT-4o", "/chat/completions", "gpt-4o", "t1"},
		{"models * alone is every model", "FAILOVER_TARGET_0_MODELS=*", "/chat/completions", "anything", "t0"},
		{"models * in a list is every model", "FAILOVER_TARGET_0_MODELS=x,*", "/chat/completions", "anything", "t0"},
		{"paths with spaces", "FAILOVER_TARGET_0_PATHS= /v1/messages , /v1/chat ", "/chat/completions", "m", "t0"},
		{"paths trailing slash", "FAILOVER_TARGET_0_PATHS=/v1/chat/", "/chat/completions", "m", "t0"},
		{"paths whole segments", "FAILOVER_TARGET_0_PATHS=/v1/chat", "/chatter", "m", "t1"},
		{"paths /v1 is everything", "FAILOVER_TARGET_0_PATHS=/v1", "/embeddings", "m", "t0"},
		{"paths /v1/ is everything", "FAILOVER_TARGET_0_PATHS=/v1/", "/embeddings", "m", "t0"},
	} {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			a, b := upstream(t), upstream(t)
			s := start(t, env(targets(a.URL, b.URL), []string{row.variable})...)
			r := s.Post(row.path, fmt.Sprintf(`{"model":%q}`, row.model))
			if got := r.Header.Get("X-Failover-Target"); r.Status != 200 || got != row.want {
				t.Errorf("status %d from %q, want 200 from %q", r.Status, got, row.want)
			}
		})
	}
}

// FAILOVER_STICKY_HEADER names a header in any case, and a request sends it in any case.
// FAILOVER_TARGET_<i>_WEIGHT=0 keeps a target out of the rotation.
func TestStickyHeaderCaseAndZeroWeight(t *testing.T) {
	t.Parallel()
	for _, hdr := range []string{"x-user", "X-USER"} {
		t.Run("FAILOVER_STICKY_HEADER="+hdr, func(t *testing.T) {
			t.Parallel()
			ups := []string{upstream(t).URL, upstream(t).URL, upstream(t).URL, upstream(t).URL}
			s := start(t, env(targets(ups...), []string{"FAILOVER_STRATEGY=sticky", "FAILOVER_STICKY_HEADER=" + hdr})...)
			seen := map[string]bool{}
			for i := 0; i < 16; i++ {
				r1 := s.Post("/chat/completions", chatBody, fmt.Sprintf("x-user: session-%d", i))
				r2 := s.Post("/chat/completions", chatBody, fmt.Sprintf("X-User: session-%d", i))
				if r1.Header.Get("X-Failover-Target") != r2.Header.Get("X-Failover-Target") {
					t.Errorf("session %d moved from %s to %s with the header's case", i, r1.Header.Get("X-Failover-Target"), r2.Header.Get("X-Failover-Target"))
				}
				seen[r1.Header.Get("X-Failover-Target")] = true
			}
			if len(seen) < 2 {
				t.Errorf("16 sessions all went to %v: the header is not hashed", seen)
			}
		})
	}
	t.Run("FAILOVER_TARGET_0_WEIGHT=0", func(t *testing.T) {
		t.Parallel()
		s := start(t, env(targets(upstream(t).URL, upstream(t).URL), []string{"FAILOVER_STRATEGY=round-robin", "FAILOVER_TARGET_0_WEIGHT=0"})...)
		for i := 0; i < 6; i++ {
			if got := s.Post("/chat/completions", chatBody).Header.Get("X-Failover-Target"); got != "t1" {
				t.Errorf("request %d went first to %s, which has weight 0", i, got)
			}
		}
	})
}

// FAILOVER_INBOUND_TOKEN in both header forms, the scheme in any case, and the wrong forms.
func TestInboundTokenForms(t *testing.T) {
	t.Parallel()
	s := start(t, env(targets(upstream(t).URL), []string{"FAILOVER_INBOUND_TOKEN=tok"})...)
	for _, row := range []struct {
		headers []string
		want    int
	}{
		{nil, 401},
		{[]string{"Authorization: Bearer tok"}, 200},
		{[]string{"authorization: BEARER tok"}, 200},
		{[]string{"x-api-key: tok"}, 200},
		{[]string{"Authorization: tok"}, 401},
		{[]string{"Authorization: Bearer tok2"}, 401},
		{[]string{"x-api-key: Bearer tok"}, 401},
		{[]string{"Authorization: Bearer wrong", "x-api-key: tok"}, 200},
	} {
		if r := s.Post("/chat/completions", chatBody, row.headers...); r.Status != row.want {
			t.Errorf("%q: status %d, want %d", row.headers, r.Status, row.want)
		}
	}
}

func delayed(s pt.Step, d time.Duration) pt.Step {
	s.Delay = d
	return s
}
