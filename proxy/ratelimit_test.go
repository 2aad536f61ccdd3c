package proxy_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/llm-failover/failover/budget"
	"github.com/llm-failover/failover/proxy/internal/config"
	pt "github.com/llm-failover/failover/proxy/proxytest"
	"github.com/llm-failover/failover/proxy/proxytest/sidecar"
)

// startOnClock runs a sidecar configured by env whose policy time is a ManualClock starting
// now: a test moves past a rate limit's reset without waiting for it.
func startOnClock(t *testing.T, env ...string) (*sidecar.Sidecar, *budget.ManualClock) {
	t.Helper()
	cfg, err := config.Load(env, true)
	if err != nil {
		t.Fatal(err)
	}
	clock := budget.NewManualClock(time.Now())
	return sidecar.StartWith(t, cfg, sidecar.Options{Clock: clock}), clock
}

// answeredBy posts a chat request and returns the X-Failover-Target of its answer, failing
// the test on any status but 200.
func answeredBy(t *testing.T, s *sidecar.Sidecar) string {
	t.Helper()
	r := s.Post("/chat/completions", chatBody)
	if r.Status != 200 {
		t.Fatalf("status %d: %s", r.Status, r.Body)
	}
	return r.Header.Get("X-Failover-Target")
}

// lines returns its arguments, for tables of header lines made when a subtest runs.
func lines(l ...string) func() []string { return func() []string { return l } }

// okWith is a 200 chat completion carrying the given header lines.
func okWith(header ...string) pt.Step { return pt.JSON(200, pt.ChatCompletion("hello"), header...) }

// rfc3339In is an Anthropic reset header value: the wall-clock time d from now.
func rfc3339In(d time.Duration) string { return time.Now().Add(d).UTC().Format(time.RFC3339) }

// Each provider's headers, sent by a scripted upstream on a 200: a target that reports a quota
// spent is skipped, without an attempt, until the reset it gave, then used again (docs/decisions.md,
// Rate limits).
func TestRateLimitedTargetIsSkippedUntilItsReset(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		header func() []string // made when the subtest runs: Anthropic's resets are wall-clock times
		quota  string          // the quota reported spent
		reset  time.Duration   // how long the target is skipped
	}{
		{"OpenAI requests spent", lines("x-ratelimit-limit-requests: 500", "x-ratelimit-remaining-requests: 0",
			"x-ratelimit-reset-requests: 2m59.56s", "x-ratelimit-limit-tokens: 30000", "x-ratelimit-remaining-tokens: 29950",
			"x-ratelimit-reset-tokens: 100ms"), "requests", 2*time.Minute + 59560*time.Millisecond},
		{"OpenAI tokens spent", lines("x-ratelimit-limit-requests: 500", "x-ratelimit-remaining-requests: 499",
			"x-ratelimit-reset-requests: 120ms", "x-ratelimit-limit-tokens: 30000", "x-ratelimit-remaining-tokens: 0",
			"x-ratelimit-reset-tokens: 6m0s"), "tokens", 6 * time.Minute},
		{"Azure, reset in whole seconds", lines("x-ratelimit-remaining-requests: 19", "x-ratelimit-remaining-tokens: 0",
			"x-ratelimit-reset-tokens: 8"), "tokens", 8 * time.Second},
		{"Azure, no reset: a one-second guess", lines("x-ratelimit-remaining-requests: 0", "x-ratelimit-remaining-tokens: 19913"),
			"requests", time.Second},
		{"Anthropic output tokens spent", func() []string {
			return []string{"anthropic-ratelimit-requests-limit: 50", "anthropic-ratelimit-requests-remaining: 41",
				"anthropic-ratelimit-requests-reset: " + rfc3339In(7*time.Second), "anthropic-ratelimit-output-tokens-limit: 8000",
				"anthropic-ratelimit-output-tokens-remaining: 0", "anthropic-ratelimit-output-tokens-reset: " + rfc3339In(45*time.Second)}
		}, "output_tokens", 45 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := upstream(t)
			a := upstream(t, okWith(tc.header()...), okWith())
			s, clock := startOnClock(t, targets(a.URL, b.URL)...)
			if got := answeredBy(t, s); got != "t0" {
				t.Fatalf("first request answered by %s", got)
			}
			if got := answeredBy(t, s); got != "t1" || a.Calls() != 1 {
				t.Fatalf("second request answered by %s, t0 called %d times: the spent target was not skipped", got, a.Calls())
			}
			if st, up := targetState(s, "t0"); st != "ratelimited" || up != 0 {
				t.Fatalf("t0 is %q (up %v), want ratelimited", st, up)
			}
			page := s.ScrapeMetrics()
			if got := metric(page, `failover_ratelimit_avoided_total{target="t0"}`); got != 1 {
				t.Errorf("failover_ratelimit_avoided_total = %v, want 1", got)
			}
			if got := metric(page, fmt.Sprintf(`failover_ratelimit_remaining{target="t0",quota=%q}`, tc.quota)); got != 0 {
				t.Errorf("failover_ratelimit_remaining{quota=%q} = %v, want 0", tc.quota, got)
			}
			events := s.Records("target_ratelimited")
			if len(events) != 1 || events[0]["target"] != "t0" {
				t.Fatalf("target_ratelimited events %v", events)
			}
			// An RFC 3339 reset has whole seconds, and the wall clock moved on since it was
			// written: it ends up to a second and a half before the wait it was made from.
			if secs, _ := events[0]["seconds"].(float64); secs > tc.reset.Seconds()+0.01 || secs < tc.reset.Seconds()-1.5 {
				t.Errorf("target_ratelimited seconds %v, want about %v", secs, tc.reset.Seconds())
			}
			clock.Advance(tc.reset * 9 / 10)
			if got := answeredBy(t, s); got != "t1" {
				t.Fatalf("before the reset answered by %s", got)
			}
			clock.Advance(tc.reset/10 + 10*time.Millisecond)
			if got := answeredBy(t, s); got != "t0" || a.Calls() != 2 {
				t.Fatalf("after the reset answered by %s (t0 called %d times)", got, a.Calls())
			}
			if st, _ := targetState(s, "t0"); st != "up" {
				t.Fatalf("t0 is %q after its reset", st)
			}
			for _, rec := range s.WaitLedger(4) {
				if n, _ := rec["attempts"].(float64); n != 1 {
					t.Fatalf("a request made %v attempts: %s", n, ledgerSteps(rec))
				}
			}
		})
	}
}

// Headers that are absent or malformed say nothing: they neither limit the target nor count
// in the gauge (docs/decisions.md, Rate limits).
func TestRateLimitMalformedHeadersChangeNothing(t *testing.T) {
	t.Parallel()
	for _, header := range [][]string{
		nil,
		{"x-ratelimit-remaining-requests: -1", "x-ratelimit-remaining-tokens: -1"}, // Azure's "unknown"
		{"x-ratelimit-remaining-requests: none", "x-ratelimit-reset-requests: soon"},
		{"x-ratelimit-remaining-requests: 0.0", "x-ratelimit-remaining-tokens: 1e3"},
		{"x-ratelimit-remaining-requests: 99999999999999999999999"},
		{"x-ratelimit-remaining-requests:", "anthropic-ratelimit-requests-remaining: "},
		{"anthropic-ratelimit-tokens-remaining: zero", "anthropic-ratelimit-tokens-reset: 2026-13-01T00:00:00Z"},
		{"x-ratelimit-limit-requests: 500", "x-ratelimit-reset-requests: 20s"}, // no remaining figure
	} {
		t.Run(strings.Join(header, "; "), func(t *testing.T) {
			t.Parallel()
			a := upstream(t, okWith(header...))
			b := upstream(t)
			s, _ := startOnClock(t, targets(a.URL, b.URL)...)
			for i := range 3 {
				if got := answeredBy(t, s); got != "t0" {
					t.Fatalf("request %d answered by %s", i+1, got)
				}
			}
			page := s.ScrapeMetrics()
			if strings.Contains(page, "failover_ratelimit_remaining{") {
				t.Errorf("a remaining quota is shown:\n%s", grepLines(page, "failover_ratelimit"))
			}
			if st, _ := targetState(s, "t0"); st != "up" || len(s.Records("target_ratelimited")) != 0 {
				t.Errorf("t0 is %q", st)
			}
		})
	}
}

// When every candidate is rate-limited they are tried anyway, in order: the sidecar never
// fails closed; the figures of every answer still count.
func TestRateLimitedEverywhereIsTriedAnyway(t *testing.T) {
	t.Parallel()
	spent := okWith("x-ratelimit-remaining-requests: 0", "x-ratelimit-reset-requests: 1m")
	a := upstream(t, spent)
	s, _ := startOnClock(t, targets(a.URL)...)
	for i := range 3 {
		if got := answeredBy(t, s); got != "t0" {
			t.Fatalf("request %d answered by %s", i+1, got)
		}
	}
	if a.Calls() != 3 {
		t.Fatalf("t0 called %d times", a.Calls())
	}
	if n := len(s.Records("target_ratelimited")); n != 1 {
		t.Fatalf("%d target_ratelimited events for one running limit", n)
	}
}

// A 429 with the figures is a failed attempt as before, and its figures limit the target too,
// so the next request does not pay for another 429.
func TestRateLimitFromA429(t *testing.T) {
	t.Parallel()
	a := upstream(t, pt.RateLimited("x-ratelimit-remaining-requests: 0", "x-ratelimit-reset-requests: 30s"))
	b := upstream(t)
	s, _ := startOnClock(t, env(targets(a.URL, b.URL), noRetries)...)
	if got := answeredBy(t, s); got != "t1" {
		t.Fatalf("first request answered by %s", got)
	}
	if got := answeredBy(t, s); got != "t1" || a.Calls() != 1 {
		t.Fatalf("second request answered by %s, t0 called %d times", got, a.Calls())
	}
}

// An answer that shows the quota back ends the limit before its reset. The target is the only
// candidate, so it is tried anyway while limited, and its next answer shows quota again.
func TestRateLimitEndsWhenQuotaShowsAgain(t *testing.T) {
	t.Parallel()
	a := upstream(t, okWith("x-ratelimit-remaining-requests: 0", "x-ratelimit-reset-requests: 1h"),
		okWith("x-ratelimit-remaining-requests: 120", "x-ratelimit-reset-requests: 1s"))
	s, _ := startOnClock(t, targets(a.URL)...)
	answeredBy(t, s)
	if st, _ := targetState(s, "t0"); st != "ratelimited" {
		t.Fatalf("t0 is %q after its quota was spent", st)
	}
	answeredBy(t, s)
	if st, _ := targetState(s, "t0"); st != "up" {
		t.Fatalf("t0 is %q after an answer showing its quota back", st)
	}
}

// FAILOVER_RATELIMIT_AWARE=false: no target is skipped for its quota, but the figures are
// still shown.
func TestRateLimitAwarenessOff(t *testing.T) {
	t.Parallel()
	a := upstream(t, okWith("x-ratelimit-remaining-requests: 0", "x-ratelimit-reset-requests: 1m", "x-ratelimit-remaining-tokens: 1234"))
	b := upstream(t)
	s, _ := startOnClock(t, env(targets(a.URL, b.URL), []string{"FAILOVER_RATELIMIT_AWARE=false"})...)
	for i := range 3 {
		if got := answeredBy(t, s); got != "t0" {
			t.Fatalf("request %d answered by %s", i+1, got)
		}
	}
	page := s.ScrapeMetrics()
	if got := metric(page, `failover_ratelimit_remaining{target="t0",quota="tokens"}`); got != 1234 {
		t.Errorf("remaining tokens %v, want 1234", got)
	}
	if got := metric(page, `failover_ratelimit_avoided_total{target="t0"}`); got != 0 {
		t.Errorf("avoided %v, want 0", got)
	}
}

// FAILOVER_RATELIMIT_FLOOR counts a quota below that fraction of its limit as spent.
func TestRateLimitFloor(t *testing.T) {
	t.Parallel()
	low := okWith("x-ratelimit-limit-tokens: 10000", "x-ratelimit-remaining-tokens: 400", "x-ratelimit-reset-tokens: 30s")
	for floor, wantSecond := range map[string]string{"0": "t0", "0.05": "t1"} {
		t.Run("floor "+floor, func(t *testing.T) {
			t.Parallel()
			a := upstream(t, low)
			b := upstream(t)
			s, _ := startOnClock(t, env(targets(a.URL, b.URL), []string{"FAILOVER_RATELIMIT_FLOOR=" + floor})...)
			answeredBy(t, s)
			if got := answeredBy(t, s); got != wantSecond {
				t.Fatalf("second request answered by %s, want %s", got, wantSecond)
			}
		})
	}
}

// grepLines returns the lines of page that contain sub.
func grepLines(page, sub string) string {
	var out []string
	for _, l := range strings.Split(page, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
