package drill

import (
	"strings"
	"testing"

	"github.com/llm-failover/failover/budget"
	"github.com/llm-failover/failover/proxy"
	pt "github.com/llm-failover/failover/proxy/proxytest"
)

// entry is one ledger entry as the JSON log decodes it.
func entry(target, phase string) any {
	return map[string]any{"target": target, "phase": phase}
}

func TestCheckInvariantsReportsEachViolation(t *testing.T) {
	names := []string{"primary", "secondary", "tertiary"}
	plain := &scenario{name: "plain"}
	cancelling := &scenario{name: "cancelling", cancelAfter: 1}
	policy := func(enabled bool, maxAttempts, retries int) *proxy.Config {
		return &proxy.Config{Budget: budget.Config{Enabled: enabled, MaxAttempts: maxAttempts, SameTargetRetries: retries}}
	}
	tests := []struct {
		name   string
		cfg    *proxy.Config
		sc     *scenario
		record map[string]any // nil: no ledger record was written
		calls  []int
		want   string // the invariant reported, "" for none
	}{
		{"a clean transfer holds every invariant", policy(true, 0, 0), plain,
			map[string]any{"attempts": 2.0, "outcome": "ok_after_failover", "ledger": []any{entry("primary", "before_content"), entry("secondary", "committed")}},
			[]int{1, 1, 0}, ""},
		{"no ledger record", policy(true, 0, 0), plain, nil, []int{1, 0, 0}, "[ledger complete]"},
		{"a call the ledger does not list", policy(true, 0, 0), plain,
			map[string]any{"attempts": 1.0, "outcome": "ok", "ledger": []any{entry("secondary", "committed")}},
			[]int{1, 1, 0}, "[ledger complete]"},
		{"an attempt after a committed one", policy(true, 0, 0), plain,
			map[string]any{"attempts": 2.0, "outcome": "partial", "ledger": []any{entry("primary", "committed"), entry("secondary", "committed")}},
			[]int{1, 1, 0}, "[no replay after commit]"},
		{"more transfers than FAILOVER_MAX_ATTEMPTS", policy(true, 1, 0), plain,
			map[string]any{"attempts": 3.0, "outcome": "exhausted", "ledger": []any{entry("primary", "before_content"), entry("secondary", "before_content"), entry("tertiary", "before_content")}},
			[]int{1, 1, 1}, "[budgets respected]"},
		{"a second attempt with failover disabled", policy(false, 0, 0), plain,
			map[string]any{"attempts": 2.0, "outcome": "ok_after_failover", "ledger": []any{entry("primary", "before_content"), entry("secondary", "committed")}},
			[]int{1, 1, 0}, "[budgets respected]"},
		{"more retries than the target has", policy(true, 0, 1), plain,
			map[string]any{"attempts": 3.0, "outcome": "ok_after_failover", "ledger": []any{entry("primary", "before_content"), entry("primary", "before_content"), entry("primary", "committed")}},
			[]int{3, 0, 0}, "[budgets respected]"},
		{"a request the client left that did not end cancelled", policy(true, 0, 0), cancelling,
			map[string]any{"attempts": 1.0, "outcome": "ok", "ledger": []any{entry("primary", "committed")}},
			[]int{1, 0, 0}, "[no attempt after the client left]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &result{sc: tc.sc, names: names, record: tc.record, calls: tc.calls}
			r.checkInvariants(tc.cfg)
			if tc.want == "" {
				if len(r.problems) != 0 {
					t.Fatalf("problems %q, want none", r.problems)
				}
				return
			}
			found := false
			for _, p := range r.problems {
				found = found || strings.HasPrefix(p, tc.want)
			}
			if !found {
				t.Fatalf("problems %q, want one tagged %s", r.problems, tc.want)
			}
		})
	}
}

func TestPlayTagsAFailedScenarioCheckWithItsInvariant(t *testing.T) {
	cfg, err := proxy.Load(nil, false)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		problem string // what the scenario's check reports
		want    string
	}{
		{"a target was called after output reached the client (replay after commit)", "[no replay after commit]"},
		{"2 upstream calls after the client left, want none", "[no attempt after the client left]"},
		{"every target failed but the client got 200", "[one final answer per request]"},
	}
	for _, tc := range tests {
		t.Run(tc.want, func(t *testing.T) {
			sc := &scenario{name: "scripted failure", path: chatPath, body: chatBody,
				script: func(i, n int) []pt.Step { return []pt.Step{chatOK("primary")} },
				check:  func(*result) string { return tc.problem }}
			r := play(cfg, []string{"primary"}, sc, 1)
			if r.status != 200 || r.record == nil {
				t.Fatalf("the scenario did not run: status %d, record %v, problems %q", r.status, r.record, r.problems)
			}
			if len(r.problems) != 1 || r.problems[0] != tc.want+" "+tc.problem {
				t.Fatalf("problems %q, want only %q", r.problems, tc.want+" "+tc.problem)
			}
		})
	}
}

// A scenario whose check fails makes the run print FAIL on its invariant, list the failure,
// and return exit code 1; the invariants it did not touch stay ok.
func TestRunReportsAFailedInvariantAndExits1(t *testing.T) {
	cfg, err := proxy.Load(nil, false)
	if err != nil {
		t.Fatal(err)
	}
	sc := &scenario{name: "scripted failure", path: chatPath, body: chatBody,
		script: func(i, n int) []pt.Step { return []pt.Step{chatOK("primary")} },
		check: func(*result) string {
			return "a target was called after output reached the client (replay after commit)"
		}}
	var out strings.Builder
	if code := run(cfg, &out, []*scenario{sc}); code != 1 {
		t.Fatalf("exit code %d, want 1:\n%s", code, out.String())
	}
	for _, want := range []string{"  FAIL no replay after commit", "  ok   budgets respected", "failures:\n  - scripted failure: [no replay after commit]"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("no %q in:\n%s", want, out.String())
		}
	}
}

// The cancel drill holds under a FAILOVER_ATTEMPT_TIMEOUT shorter than its pause: the client
// leaves while the stalled attempt still runs, so no other target is called.
func TestCancelDrillUnderAShortAttemptTimeout(t *testing.T) {
	cfg, err := proxy.Load([]string{"FAILOVER_ATTEMPT_TIMEOUT=80ms"}, false)
	if err != nil {
		t.Fatal(err)
	}
	var cancel *scenario
	for _, sc := range scenarios() {
		if sc.cancelAfter > 0 {
			cancel = sc
		}
	}
	if cancel == nil {
		t.Fatal("no cancel scenario")
	}
	var out strings.Builder
	if code := run(cfg, &out, []*scenario{cancel}); code != 0 {
		t.Fatalf("exit code %d:\n%s", code, out.String())
	}
}

// Under a policy with FAILOVER_INBOUND_TOKEN, the drill's client sends the token as the
// application would: every drill holds, none is rejected with 401.
func TestDrillWithAnInboundToken(t *testing.T) {
	cfg, err := proxy.Load([]string{"FAILOVER_INBOUND_TOKEN=drill-token-not-a-secret"}, false)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if code := Run(cfg, &out); code != 0 {
		t.Fatalf("exit code %d:\n%s", code, out.String())
	}
	if strings.Contains(out.String(), " 401 ") {
		t.Fatalf("a drill was rejected with 401:\n%s", out.String())
	}
}
