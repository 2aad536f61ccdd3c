package proxy_test

import (
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/llm-failover/failover/proxy"
	"github.com/llm-failover/failover/proxy/internal/config"
	pt "github.com/llm-failover/failover/proxy/proxytest"
	"github.com/llm-failover/failover/proxy/proxytest/sidecar"
)

// targetTable reads GET /targets from the sidecar's metrics listener: its raw body and the
// table decoded from it.
func targetTable(t *testing.T, s *sidecar.Sidecar) (string, proxy.TargetTable) {
	t.Helper()
	resp, err := sidecar.Client.Get(s.Metrics + "/targets")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("GET /targets: %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	var table proxy.TargetTable
	if err := json.Unmarshal(b, &table); err != nil {
		t.Fatalf("GET /targets is not a table: %v\n%s", err, b)
	}
	return string(b), table
}

// byName returns the table's line for target name.
func byName(t *testing.T, table proxy.TargetTable, name string) proxy.TargetState {
	t.Helper()
	for _, ts := range table.Targets {
		if ts.Name == name {
			return ts
		}
	}
	t.Fatalf("no line for %s in %+v", name, table)
	return proxy.TargetState{}
}

// The table shows each state a target can be in, with when it ends, the counts, the last
// error, the latencies and the last rate-limit figures (docs/operations.md, The target table). Each target
// serves a model of its own, so that each request goes to the one target it is meant for. An
// ejected target shows the failures that ejected it; the latency of answers is what they took,
// where least-latency's figure charges each failure FAILOVER_CONNECT_TIMEOUT (5s), and a target
// that never answered has none.
func TestTargetTableShowsEveryState(t *testing.T) {
	t.Parallel()
	ejected := upstream(t, pt.JSON(503, pt.OpenAIError("busy", "server_error", "")))
	cooling := upstream(t, pt.RateLimited(pt.RetryAfterSeconds(60)))
	limited := upstream(t, okWith("x-ratelimit-limit-requests: 500", "x-ratelimit-remaining-requests: 0", "x-ratelimit-reset-requests: 30s",
		"x-ratelimit-limit-tokens: 30000", "x-ratelimit-remaining-tokens: 29000", "x-ratelimit-reset-tokens: 2s"))
	up := upstream(t)
	s, clock := startOnClock(t, env(targets(ejected.URL, cooling.URL, limited.URL, up.URL, pt.RefusedURL()), noRetries, []string{
		"FAILOVER_EJECT_AFTER=2", "FAILOVER_EJECT_BASE=40s", "FAILOVER_EJECT_MAX=40s",
		"FAILOVER_TARGET_0_MODELS=m-ejected", "FAILOVER_TARGET_1_MODELS=m-cooling", "FAILOVER_TARGET_2_MODELS=m-limited", "FAILOVER_TARGET_3_MODELS=m-up",
		"FAILOVER_TARGET_4_MODELS=m-refused"})...)
	start := clock.Now()
	post := func(model string) { s.Post("/chat/completions", `{"model":"`+model+`","messages":[]}`) }

	_, table := targetTable(t, s)
	for _, ts := range table.Targets {
		if ts.State != "up" || !ts.Until.IsZero() || ts.LastError != "" || ts.LatencyMS != 0 || ts.AnswerLatencyMS != 0 || ts.RateLimit != nil {
			t.Errorf("before any request: %+v", ts)
		}
	}

	post("m-ejected")
	post("m-ejected")
	post("m-cooling")
	post("m-limited")
	post("m-up")
	post("m-refused")
	_, table = targetTable(t, s)
	if !table.Time.Equal(start) {
		t.Errorf("table time %v, want the policy clock's %v", table.Time, start)
	}
	left := func(ts proxy.TargetState) time.Duration { return ts.Until.Sub(table.Time) }

	e := byName(t, table, "t0")
	if e.State != "ejected" || left(e) != 40*time.Second || e.Ejections != 1 || e.ConsecutiveFailures != 2 ||
		e.LastError != "server_error" || !e.LastErrorAt.Equal(start) || e.LatencyMS < 5000 || e.AnswerLatencyMS <= 0 || e.AnswerLatencyMS >= 5000 {
		t.Errorf("ejected: %+v", e)
	}
	c := byName(t, table, "t1")
	if c.State != "cooling" || left(c) != 60*time.Second || c.ConsecutiveFailures != 1 || c.Ejections != 0 || c.LastError != "rate_limited" {
		t.Errorf("cooling: %+v", c)
	}
	l := byName(t, table, "t2")
	wantQuota := map[string]proxy.QuotaState{
		"requests": {Remaining: 0, Limit: 500, Reset: start.Add(30 * time.Second)},
		"tokens":   {Remaining: 29000, Limit: 30000, Reset: start.Add(2 * time.Second)},
	}
	if l.State != "ratelimited" || left(l) != 30*time.Second || l.LastError != "" || !sameQuotas(l.RateLimit, wantQuota) {
		t.Errorf("ratelimited: %+v", l)
	}
	u := byName(t, table, "t3")
	if u.State != "up" || !u.Until.IsZero() || u.ConsecutiveFailures != 0 || u.LastError != "" || u.LatencyMS <= 0 || u.AnswerLatencyMS <= 0 ||
		u.RateLimit != nil {
		t.Errorf("up: %+v", u)
	}
	r := byName(t, table, "t4")
	if r.State != "up" || r.ConsecutiveFailures != 1 || r.LastError != "refused" || r.LatencyMS < 5000 || r.AnswerLatencyMS != 0 {
		t.Errorf("refused: %+v", r)
	}

	clock.Advance(41 * time.Second) // past the ejection and the rate limit, not the cooldown
	_, table = targetTable(t, s)
	if e := byName(t, table, "t0"); e.State != "probing" || !e.Until.IsZero() || e.ConsecutiveFailures != 2 {
		t.Errorf("probing: %+v", e)
	}
	if c := byName(t, table, "t1"); c.State != "cooling" || left(c) != 19*time.Second {
		t.Errorf("cooling after 41 s: %+v", c)
	}
	if l := byName(t, table, "t2"); l.State != "up" || !l.Until.IsZero() || !sameQuotas(l.RateLimit, wantQuota) {
		t.Errorf("after the reset the figures stay: %+v", l)
	}
}

func sameQuotas(got, want map[string]proxy.QuotaState) bool {
	if len(got) != len(want) {
		return false
	}
	for k, w := range want {
		g, ok := got[k]
		if !ok || g.Remaining != w.Remaining || g.Limit != w.Limit || !g.Reset.Equal(w.Reset) {
			return false
		}
	}
	return true
}

// The table shows no secret: no key, no header value, no password or query value of the URL
// (masked as -check masks it), whatever the target was configured with.
func TestTargetTableHasNoSecret(t *testing.T) {
	t.Parallel()
	a := upstream(t, pt.JSON(503, pt.OpenAIError("busy", "server_error", "")))
	b := upstream(t)
	cfg, err := config.Load(env(targets(a.URL, b.URL), []string{
		"FAILOVER_TARGET_0_API_KEY=sk-table-key-0001", "FAILOVER_TARGET_0_HEADERS=X-Org-Secret=hdr-table-value-0002;anthropic-version=2023-06-01",
		"FAILOVER_TARGET_1_API_KEY=sk-table-key-0003", "FAILOVER_TARGET_1_AUTH=x-api-key",
	}), true)
	if err != nil {
		t.Fatal(err)
	}
	// Load refuses credentials in a URL; a configuration built in code is not checked, and
	// the table masks them all the same.
	cfg.Targets[0].URL = strings.Replace(a.URL, "http://", "http://user-table-0004:pw-table-0005@", 1) + "?key=q-table-0006&api-version=2024-10-21"
	s := sidecar.StartConfig(t, cfg)
	if r := s.Post("/chat/completions", chatBody, "Authorization: Bearer sk-client-0007"); r.Status != 200 {
		t.Fatalf("status %d", r.Status)
	}
	body, table := targetTable(t, s)
	for _, secret := range []string{"sk-table", "hdr-table", "2023-06-01", "X-Org-Secret", "user-table", "pw-table", "q-table", "sk-client", "Bearer"} {
		if strings.Contains(body, secret) {
			t.Errorf("the table shows %q:\n%s", secret, body)
		}
	}
	host := strings.TrimPrefix(strings.TrimSuffix(a.URL, "/v1"), "http://")
	if got, want := byName(t, table, "t0").URL, "http://redacted@"+host+"/v1?api-version=2024-10-21&key=redacted"; got != want {
		t.Errorf("url %q, want %q", got, want)
	}
	if got := byName(t, table, "t1").URL; got != b.URL {
		t.Errorf("url %q, want %q", got, b.URL)
	}
}

// A table taken while requests change the targets' health is consistent: each line's state
// and its end agree (GET /targets is safe for concurrent use with the request path). The first
// target fails every request: it goes from ejected to probing and back as the clock moves.
func TestTargetTableUnderTraffic(t *testing.T) {
	t.Parallel()
	a := upstream(t, pt.JSON(503, pt.OpenAIError("busy", "server_error", "")))
	b := upstream(t)
	s, clock := startOnClock(t, env(targets(a.URL, b.URL), noRetries, []string{"FAILOVER_EJECT_AFTER=1"})...)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 40 {
			s.Post("/chat/completions", chatBody)
			clock.Advance(5 * time.Second)
		}
	}()
	for {
		select {
		case <-done:
			return
		default:
		}
		_, table := targetTable(t, s)
		for _, ts := range table.Targets {
			hasEnd := ts.State == "ejected" || ts.State == "cooling" || ts.State == "ratelimited"
			if hasEnd == ts.Until.IsZero() || hasEnd && !ts.Until.After(table.Time) {
				t.Fatalf("%+v at %v", ts, table.Time)
			}
		}
	}
}

// A committed stream that its upstream cuts counts against the target (docs/decisions.md, Health), and
// the table says so: its last error is interrupted, as the ledger's class is.
func TestTargetTableShowsAStreamCutAfterCommit(t *testing.T) {
	t.Parallel()
	cut := pt.SSE(pt.Events(0, chatWords("a", false, "Once upon a ti")...)...)
	cut.Fault = pt.FaultTruncate
	up := upstream(t, cut)
	s := start(t, targets(up.URL)...)
	if r := s.Post("/chat/completions", streamBody); r.Status != 200 || r.Err == nil {
		t.Fatalf("got %d err=%v, want the stream cut after commit", r.Status, r.Err)
	}
	s.WaitLedger(1)
	_, table := targetTable(t, s)
	if ts := byName(t, table, "t0"); ts.LastError != "interrupted" || ts.LastErrorAt.IsZero() || ts.ConsecutiveFailures != 1 {
		t.Fatalf("after a stream cut after commit: %+v", ts)
	}
}
