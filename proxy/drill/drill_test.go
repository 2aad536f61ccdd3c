package drill

import (
	"flag"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/llm-failover/failover/budget"
	"github.com/llm-failover/failover/proxy/internal/config"
	pt "github.com/llm-failover/failover/proxy/proxytest"
)

// TestMain lets the tests marked t.Parallel run 16 at once unless -parallel is given: a drill
// waits on loopback sockets and timers, not on a processor, and the default (GOMAXPROCS) would
// run only two at once on a two-core machine.
func TestMain(m *testing.M) {
	flag.Parse()
	pt.RaiseParallel(16)
	os.Exit(m.Run())
}

// entry is one ledger entry as the JSON log decodes it.
func entry(target, phase string) any {
	return map[string]any{"target": target, "phase": phase}
}

func repeat(e any, n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = e
	}
	return out
}

// answered is a ledger entry with the upstream's status.
func answered(target, phase string, status int) any {
	return map[string]any{"target": target, "phase": phase, "status": float64(status)}
}

func TestCheckInvariantsReportsEachViolation(t *testing.T) {
	names := []string{"primary", "secondary", "tertiary"}
	plain := &scenario{name: "plain"}
	cancelling := &scenario{name: "cancelling", cancelAfter: 1}
	policy := func(enabled bool, maxAttempts, retries int) *config.Config {
		return &config.Config{Budget: budget.Config{Enabled: enabled, MaxAttempts: maxAttempts, SameTargetRetries: retries}}
	}
	tests := []struct {
		name   string
		cfg    *config.Config
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
		{"attempts that timed out before reaching their targets", policy(true, 0, 0), plain,
			map[string]any{"attempts": 3.0, "outcome": "ok_after_failover", "ledger": []any{entry("primary", "before_headers"),
				entry("secondary", "before_headers"), answered("tertiary", "committed", 200)}},
			[]int{0, 0, 1}, ""},
		{"an answer from a target that saw no call", policy(true, 0, 0), plain,
			map[string]any{"attempts": 2.0, "outcome": "ok_after_failover", "ledger": []any{answered("primary", "before_content", 503), answered("secondary", "committed", 200)}},
			[]int{0, 1, 0}, "[ledger complete]"},
		{"a long ledger listed in part", policy(true, 0, 40), plain,
			map[string]any{"attempts": 36.0, "outcome": "exhausted", "ledger": append(repeat(answered("primary", "before_content", 503), 32), map[string]any{"more_attempts": 4.0})},
			[]int{36, 0, 0}, ""},
		{"a long ledger that misses attempts", policy(true, 0, 40), plain,
			map[string]any{"attempts": 36.0, "outcome": "exhausted", "ledger": append(repeat(answered("primary", "before_content", 503), 32), map[string]any{"more_attempts": 2.0})},
			[]int{36, 0, 0}, "[ledger complete]"},
		{"a record whose attempt count is not its ledger's", policy(true, 0, 0), plain,
			map[string]any{"attempts": 2.0, "outcome": "ok", "ledger": []any{answered("primary", "committed", 200)}},
			[]int{1, 0, 0}, "[ledger complete]"},
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
	t.Parallel()
	cfg, err := config.Load(nil, false)
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
			t.Parallel()
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
	t.Parallel()
	cfg, err := config.Load(nil, false)
	if err != nil {
		t.Fatal(err)
	}
	sc := &scenario{name: "scripted failure", path: chatPath, body: chatBody,
		script: func(i, n int) []pt.Step { return []pt.Step{chatOK("primary")} },
		check: func(*result) string {
			return "a target was called after output reached the client (replay after commit)"
		}}
	var out strings.Builder
	if code := run(cfg, &out, []*scenario{sc}, style{}); code != 1 {
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
	t.Parallel()
	cfg, err := config.Load([]string{"FAILOVER_ATTEMPT_TIMEOUT=80ms"}, false)
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
	if code := run(cfg, &out, []*scenario{cancel}, style{}); code != 0 {
		t.Fatalf("exit code %d:\n%s", code, out.String())
	}
}

// Under a policy with FAILOVER_INBOUND_TOKEN, the drill's client sends the token as the
// application would: every drill holds, none is rejected with 401.
func TestDrillWithAnInboundToken(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load([]string{"FAILOVER_INBOUND_TOKEN=drill-token-not-a-secret"}, false)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if code := Run(cfg, &out); code != 0 {
		t.Fatalf("exit code %d:\n%s", code, out.String())
	}
	checkPlainAndNarrow(t, out.String())
	if strings.Contains(out.String(), " 401 ") {
		t.Fatalf("a drill was rejected with 401:\n%s", out.String())
	}
}

// A request that ended before its client left (every attempt failed at once) is not a request
// the client left: nothing about cancelling is reported for it.
func TestCheckInvariantsAcceptsAnAnswerBeforeTheClientLeft(t *testing.T) {
	r := &result{sc: &scenario{name: "cancelling", cancelAfter: 1}, names: []string{"primary"}, clientOK: true, status: 504, calls: []int{0},
		record: map[string]any{"attempts": 1.0, "outcome": "exhausted", "ledger": []any{entry("primary", "before_headers")}}}
	r.checkInvariants(&config.Config{Budget: budget.Config{Enabled: true}})
	if len(r.problems) != 0 {
		t.Fatalf("problems %q, want none", r.problems)
	}
}

func scenarioNamed(t *testing.T, name string) *scenario {
	t.Helper()
	for _, sc := range scenarios() {
		if sc.name == name {
			return sc
		}
	}
	t.Fatalf("no scenario %q", name)
	return nil
}

// The replay check of "error after visible output" judges what reached the client: a target
// called after the primary's output is a replay; one called when the primary never got to
// its output (the policy moved on before commit) is an ordinary transfer.
func TestErrorAfterOutputCheck(t *testing.T) {
	sc := scenarioNamed(t, "error after visible output")
	primaryThen := func(phase string) map[string]any {
		return map[string]any{"attempts": 2.0, "ledger": []any{entry("primary", phase), answered("secondary", "committed", 200)}}
	}
	tests := []struct {
		name   string
		body   string
		record map[string]any
		calls  []int
		want   string // a substring of the problem, "" for none
	}{
		{"output, then an error", `data: {"choices":[{"delta":{"content":"partial "}}]}` + "\n\ndata: {\"error\":{\"code\":\"stream_interrupted\"}}\n\n",
			map[string]any{"attempts": 1.0, "ledger": []any{answered("primary", "committed", 200)}}, []int{1, 0}, ""},
		{"the primary timed out before its output", `{"error":{"code":"upstream_timeout"}}`, primaryThen("before_content"), []int{1, 1}, ""},
		{"a committed primary, then another target", "", primaryThen("committed"), []int{1, 1}, "replay after commit"},
		{"the primary's output, then another target", `data: {"choices":[{"delta":{"content":"partial "}}]}`, primaryThen("before_content"), []int{1, 1}, "replay after commit"},
		{"a committed primary whose output was lost", `data: {"error":{"code":"stream_interrupted"}}`,
			map[string]any{"attempts": 1.0, "ledger": []any{answered("primary", "committed", 200)}}, []int{1, 0}, "did not get the output"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &result{sc: sc, names: []string{"primary", "secondary"}, clientOK: true, status: 200, body: []byte(tc.body), record: tc.record, calls: tc.calls}
			got := sc.check(r)
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Fatalf("check: %q, want %q", got, tc.want)
			}
		})
	}
}

// Policies that give up on an attempt faster than the simulated targets answer do what they
// say (time out and move on); the drill reports that, and no invariant fails for it.
func TestDrillUnderPoliciesFasterThanItsTargets(t *testing.T) {
	t.Parallel()
	for _, env := range []string{"FAILOVER_FIRST_BYTE_TIMEOUT=1ms", "FAILOVER_CONNECT_TIMEOUT=1ns"} {
		t.Run(env, func(t *testing.T) {
			t.Parallel()
			cfg, err := config.Load([]string{env}, false)
			if err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			if code := Run(cfg, &out); code != 0 {
				t.Fatalf("exit code %d:\n%s", code, out.String())
			}
			checkPlainAndNarrow(t, out.String())
		})
	}
}

// The checks of the scenarios that show attempts which cannot help: a silent target waited on
// twice, and a context-window error sent to a target with the same model.
func TestNoAttemptThatCannotHelpChecks(t *testing.T) {
	names := []string{"primary", "secondary", "tertiary"}
	tests := []struct {
		scenario string
		calls    []int
		want     string
	}{
		{"silent target", []int{1, 1, 0}, ""},
		{"silent target", []int{2, 1, 0}, "waited on 2 times"},
		{"context window exceeded", []int{1, 0, 1}, ""},
		{"context window exceeded", []int{1, 1, 1}, "same model"},
	}
	for _, tc := range tests {
		t.Run(tc.scenario+" "+tc.want, func(t *testing.T) {
			sc := scenarioNamed(t, tc.scenario)
			got := sc.check(&result{sc: sc, names: names, calls: tc.calls})
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Fatalf("check: %q, want %q", got, tc.want)
			}
			if tc.want != "" && !strings.Contains(got, "no attempt that cannot help") {
				t.Fatalf("check %q does not name its invariant", got)
			}
		})
	}
}

// "recovering primary" under the default policy: the primary is ejected after a few requests,
// costs at most one attempt per ejection while down, and serves again one ejection after it
// recovers; with ejection off, the row says the primary was never ejected.
func TestRecoveringPrimaryDrill(t *testing.T) {
	t.Parallel()
	playUnder(t, scenarioNamed(t, "recovering primary"), []policyRow{
		{nil, "out after 3 requests, 1 attempt per 10s while down, back 10s after recovering: primary 200→commit"},
		{[]string{"FAILOVER_EJECT_AFTER=0"}, "(never ejected)"},
	})
}

// policyRow is a policy (FAILOVER_* assignments) and what a scenario's row shows under it.
type policyRow struct {
	env  []string
	want string
}

// playUnder runs sc under each row's policy: every invariant holds, and the row shows want.
func playUnder(t *testing.T, sc *scenario, rows []policyRow) {
	t.Helper()
	for _, tc := range rows {
		cfg, err := config.Load(tc.env, false)
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		// What the policy did wraps under its row: "\n    " continues it.
		if code := run(cfg, &out, []*scenario{sc}, style{}); code != 0 || !strings.Contains(strings.ReplaceAll(out.String(), "\n    ", " "), tc.want) {
			t.Fatalf("%v: exit code %d, want %q in:\n%s", tc.env, code, tc.want, out.String())
		}
	}
}

// "quota running out": the primary's good answer says no request is left for a few seconds, and
// the next request goes to the secondary without calling the primary; with the awareness off
// it goes to the primary, as the policy says, and no invariant fails for it.
func TestQuotaRunningOutDrill(t *testing.T) {
	t.Parallel()
	sc := scenarioNamed(t, "quota running out")
	playUnder(t, sc, []policyRow{
		{nil, "primary 200 with 0 requests left for 5s, next request: secondary 200→commit"},
		{[]string{"FAILOVER_STRATEGY=round-robin"}, "next request: secondary 200→commit"},
		{[]string{"FAILOVER_RATELIMIT_AWARE=false"}, "primary 200 with 0 requests left for 5s, next request: primary 200→commit"},
	})
	// The check: a call to the spent target fails it when the policy skips such targets.
	for _, tc := range []struct {
		spent bool
		calls []int
		want  string
	}{
		{true, []int{0, 1, 0}, ""},
		{true, []int{1, 0, 0}, "no attempt that cannot help"},
		{false, []int{1, 0, 0}, ""},
	} {
		got := sc.check(&result{sc: sc, names: []string{"primary", "secondary", "tertiary"}, calls: tc.calls, quotaSpent: tc.spent})
		if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
			t.Errorf("spent %v, calls %v: check %q, want %q", tc.spent, tc.calls, got, tc.want)
		}
	}
}

// "cut stream resumed" under the default policy: the drill turns resume on for it and says so,
// and the row shows the continuation from the secondary.
func TestCutStreamResumedDrill(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load(nil, false)
	if err != nil {
		t.Fatal(err)
	}
	sc := scenarioNamed(t, "cut stream resumed")
	r := play(cfg, []string{"primary", "secondary"}, sc, 1)
	if len(r.problems) > 0 || r.note != " (drill resume)" || r.servedBy() != "primary→secondary" || r.statusText() != "200" {
		t.Fatalf("problems %q, note %q, served by %q, status %s", r.problems, r.note, r.servedBy(), r.statusText())
	}
	if d := r.describe(); d != "primary 200 interrupted→resumed, secondary 200→commit" {
		t.Fatalf("described as %q", d)
	}
}

// The check of a resumed stream judges what the client read: one stream with one id and one
// [DONE], a clean end, and the text without anything sent twice.
func TestResumedCheck(t *testing.T) {
	chunk := func(id, text string) string {
		return `data: {"id":"` + id + `","choices":[{"delta":{"content":"` + text + `"}}]}` + "\n\n"
	}
	resumed := map[string]any{"ledger": []any{entry("primary", "resumed"), entry("secondary", "resumed")}}
	for _, tc := range []struct {
		name string
		body string
		err  error
		want string // a substring of the problem, "" for none
	}{
		{"one stream", chunk("a", "The answer ") + chunk("a", "is forty") + ": failover resumed on secondary\n\n" + chunk("a", "-two.") + "data: [DONE]\n\n", nil, ""},
		{"two ids", chunk("a", "The answer is forty") + chunk("b", "-two.") + "data: [DONE]\n\n", nil, "2 chunk ids"},
		{"the delivered text again", chunk("a", "The answer is forty") + chunk("a", "The answer is forty-two.") + "data: [DONE]\n\n", nil, "replay after commit"},
		{"no [DONE]", chunk("a", "The answer is forty-two."), nil, "0 [DONE]"},
		{"an error event", chunk("a", "The answer is forty") + `data: {"error":{"code":"stream_interrupted"}}` + "\n\n", nil, "error"},
		{"an aborted body", chunk("a", "The answer is forty-two.") + "data: [DONE]\n\n", io.ErrUnexpectedEOF, "did not end cleanly"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &result{body: []byte(tc.body), bodyErr: tc.err, record: resumed}
			got := r.resumedCheck("The answer is forty-two.")
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Fatalf("check: %q, want %q", got, tc.want)
			}
		})
	}
}
