// Package drill plays the sidecar's failure drills (README, Quick start): the real proxy code path,
// in-process, with the effective policy from the environment, against simulated upstreams on
// loopback. It prints what the policy did in each scenario and checks the invariants that hold
// under any policy. It needs no keys and no network.
package drill

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/llm-failover/failover/budget"
	"github.com/llm-failover/failover/classify"
	"github.com/llm-failover/failover/proxy"
	"github.com/llm-failover/failover/proxy/internal/config"
	pt "github.com/llm-failover/failover/proxy/proxytest"
)

// scenario is one drill: what each simulated target does, and what the client sends.
type scenario struct {
	name string
	// script returns the steps of the target at position i of n.
	script func(i, n int) []pt.Step
	path   string
	body   string
	stream bool
	// cancelAfter, when set, makes the client go away after this long.
	cancelAfter time.Duration
	// check is a scenario-specific invariant; "" when it holds.
	check func(r *result) string
	// successRule is a rule the drill adds when the environment configures none.
	successRule string
	// quickTimeouts, when set, caps the policy's connect, first-byte and attempt timeouts for
	// this scenario, so that a drill of a silent target does not wait a minute.
	quickTimeouts time.Duration
	// biggerModel, when set, is the last target's model substitution (FAILOVER_TARGET_<i>_MODEL)
	// when the environment gives it none: the bigger model a context-window error goes to.
	biggerModel string
	// recovery, when set, replaces the one request: the drill sends requests while the first
	// target fails fast, on a simulated clock, until it recovers (see playRecovery).
	recovery bool
	// quota, when set, sends requests until the first target has answered once (its answer
	// reports a quota spent) before the request the row shows (see playQuota).
	quota bool
	// resume, when set, turns FAILOVER_RESUME on with every target resumable by prefill (by
	// resumeForm, when set), when the environment does not turn it on with a target marked
	// (docs/streams.md, Resume a cut stream).
	resume     bool
	resumeForm string
	// respond, when set and not nil for the target at position i of n, chooses its every
	// answer from the request, instead of script.
	respond func(i, n int) func(*pt.Request) pt.Step
	// hedge, when set, is FAILOVER_HEDGE_AFTER when the environment does not turn hedging on
	// (docs/streams.md, Hedging).
	hedge time.Duration
}

// result is what happened in one scenario.
type result struct {
	sc       *scenario
	status   int
	body     []byte
	bodyErr  error
	clientOK bool
	record   map[string]any
	calls    []int // per target
	names    []string
	note     string
	story    string // what happened before the request the row shows (playRecovery, playQuota)
	problems []string
	// quotaSpent: the first target reported its quota spent before the row's request, and
	// the policy skips such a target (FAILOVER_RATELIMIT_AWARE).
	quotaSpent bool
}

const (
	chatPath   = "/chat/completions"
	chatBody   = `{"model":"drill-model","messages":[{"role":"user","content":"drill"}]}`
	streamBody = `{"model":"drill-model","stream":true,"messages":[{"role":"user","content":"drill"}]}`
)

func chatOK(who string) pt.Step { return pt.JSON(200, pt.ChatCompletion("answer from "+who)) }

// quotaReset is how long the target in "quota running out" says its spent quota takes to come
// back: a few seconds, far longer than the drill's requests take.
const quotaReset = 5 * time.Second

// quotaSpentOK is a good answer whose headers say that no request is left in the window
// (OpenAI's x-ratelimit-*: docs/decisions.md, Rate limits).
func quotaSpentOK(who string) pt.Step {
	return pt.JSON(200, pt.ChatCompletion("answer from "+who), "x-ratelimit-limit-requests: 500", "x-ratelimit-remaining-requests: 0",
		"x-ratelimit-reset-requests: "+quotaReset.String(), "x-ratelimit-limit-tokens: 30000", "x-ratelimit-remaining-tokens: 29950",
		"x-ratelimit-reset-tokens: 100ms")
}

func streamOK(who string) pt.Step {
	return pt.SSE(pt.ChatStream(5*time.Millisecond, "answer ", "from ", who)...)
}

func scenarios() []*scenario {
	rest := func(i int, ok pt.Step) []pt.Step { return []pt.Step{ok} }
	return []*scenario{
		{name: "primary down before headers", path: chatPath, body: chatBody,
			script: func(i, n int) []pt.Step {
				if i == 0 {
					return []pt.Step{{Fault: pt.FaultReset}}
				}
				return rest(i, chatOK(fmt.Sprint(i)))
			}},
		{name: "429 with Retry-After: 1", path: chatPath, body: chatBody,
			script: func(i, n int) []pt.Step {
				if i == 0 {
					return []pt.Step{pt.JSON(429, pt.OpenAIError("Rate limit reached", "requests", "rate_limit_exceeded"), "Retry-After: 1"), chatOK("0")}
				}
				return rest(i, chatOK(fmt.Sprint(i)))
			}},
		{name: "503 then success", path: chatPath, body: chatBody,
			script: func(i, n int) []pt.Step {
				if i == 0 {
					return []pt.Step{pt.JSON(503, pt.OpenAIError("The server is overloaded", "server_error", "")), chatOK("0")}
				}
				return rest(i, chatOK(fmt.Sprint(i)))
			}},
		{name: "in-stream error before content", path: chatPath, body: streamBody, stream: true,
			script: func(i, n int) []pt.Step {
				if i == 0 {
					return []pt.Step{pt.SSE(pt.Events(0, pt.ChatRole, pt.ChatError("The server had an error", "server_error", "server_error"))...)}
				}
				return rest(i, streamOK(fmt.Sprint(i)))
			},
			check: func(r *result) string {
				if r.status == 200 && bytes.Contains(r.body, []byte(`"role":"assistant"`)) && r.calls[0] > 0 && len(r.calls) > 1 && r.calls[1] > 0 &&
					bytes.Count(r.body, []byte(`"role":"assistant"`)) != 1 {
					return "the client saw opening events from more than one target"
				}
				if bytes.Contains(r.body, []byte("The server had an error")) && r.status == 200 && len(r.calls) > 1 && r.calls[1] > 0 {
					return "the client saw the first target's error and the second target's answer"
				}
				return ""
			}},
		{name: "error after visible output", path: chatPath, body: streamBody, stream: true,
			script: func(i, n int) []pt.Step {
				if i == 0 {
					s := pt.SSE(pt.Events(5*time.Millisecond, pt.ChatRole, pt.ChatDelta("partial "), pt.ChatDelta("answer"))...)
					s.Fault = pt.FaultTruncate
					return []pt.Step{s}
				}
				return rest(i, streamOK(fmt.Sprint(i)))
			},
			check: func(r *result) string {
				if r.resumed() { // the environment turns resume on
					return r.resumedCheck("")
				}
				return r.noReplayCheck("partial ")
			}},
		{name: "cut stream resumed", path: chatPath, body: streamBody, stream: true, resume: true,
			script: func(i, n int) []pt.Step {
				if i == 0 {
					s := pt.SSE(pt.Events(5*time.Millisecond, pt.ChatRole, pt.ChatDelta("The answer "), pt.ChatDelta("is forty"))...)
					s.Fault = pt.FaultTruncate
					return []pt.Step{s}
				}
				// Another target's continuation, with its own chunk id.
				s := pt.SSE(pt.ChatStream(5*time.Millisecond, "-two.")...)
				for j := range s.Chunks {
					s.Chunks[j].Data = strings.ReplaceAll(s.Chunks[j].Data, "chatcmpl-test", fmt.Sprintf("chatcmpl-drill-%d", i))
				}
				return rest(i, s)
			},
			check: func(r *result) string {
				if r.resumed() {
					return r.resumedCheck("The answer is forty-two.")
				}
				return r.noReplayCheck("is forty") // the policy does not resume: it ends as any cut stream
			}},
		{name: "cut stream resumed by instruction", path: chatPath, body: streamBody, stream: true, resume: true, resumeForm: "auto",
			script: func(i, n int) []pt.Step {
				s := pt.SSE(pt.Events(5*time.Millisecond, pt.ChatRole, pt.ChatDelta("The answer "), pt.ChatDelta("is forty"))...)
				s.Fault = pt.FaultTruncate
				return []pt.Step{s}
			},
			// The other targets serve a model that refuses a prefill (Claude 4.6 and later):
			// Anthropic's 400 for a prefill, and for an instruction a continuation that starts
			// by repeating the last words it was given.
			respond: func(i, n int) func(*pt.Request) pt.Step {
				if i == 0 {
					return nil
				}
				return pt.RefusesPrefill(func(*pt.Request) pt.Step {
					s := pt.SSE(pt.ChatStream(5*time.Millisecond, "answer is forty-two.")...)
					for j := range s.Chunks {
						s.Chunks[j].Data = strings.ReplaceAll(s.Chunks[j].Data, "chatcmpl-test", fmt.Sprintf("chatcmpl-drill-%d", i))
					}
					return s
				})
			},
			check: func(r *result) string {
				switch {
				case r.resumed() && r.bodyErr == nil:
					return r.resumedCheck("The answer is forty-two.")
				case r.resumed() && bytes.Contains(r.body, []byte("forty-two")):
					return "a resume that failed reached the client (replay after commit)"
				case r.resumed():
					return "" // the policy asks for a prefill only: the resume fails, the client gets the original error
				}
				return r.noReplayCheck("is forty")
			}},
		{name: "finished stream without [DONE]", path: chatPath, body: streamBody, stream: true,
			script: func(i, n int) []pt.Step {
				if i == 0 {
					return []pt.Step{pt.SSE(pt.Events(5*time.Millisecond, pt.ChatRole, pt.ChatDelta("whole "), pt.ChatDelta("answer"), pt.ChatFinish)...)}
				}
				return rest(i, streamOK(fmt.Sprint(i)))
			}},
		{name: "invalid request (400)", path: chatPath, body: chatBody,
			script: func(i, n int) []pt.Step {
				if i == 0 {
					return []pt.Step{pt.JSON(400, pt.OpenAIError("Invalid 'messages': empty array.", "invalid_request_error", "invalid_value"))}
				}
				return rest(i, chatOK(fmt.Sprint(i)))
			}},
		{name: "success rule on a 200", path: chatPath, body: chatBody, successRule: `"finish_reason":\s*"content_filter"`,
			script: func(i, n int) []pt.Step {
				if i == 0 {
					return []pt.Step{pt.JSON(200, `{"id":"chatcmpl-drill","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":""},"finish_reason":"content_filter"}]}`)}
				}
				return rest(i, chatOK(fmt.Sprint(i)))
			}},
		{name: "empty stream", path: chatPath, body: streamBody, stream: true,
			script: func(i, n int) []pt.Step {
				if i == 0 {
					return []pt.Step{pt.SSE(pt.Events(0, pt.ChatRole, pt.Done)...)}
				}
				return rest(i, streamOK(fmt.Sprint(i)))
			}},
		{name: "silent target", path: chatPath, body: streamBody, stream: true, quickTimeouts: time.Second,
			script: func(i, n int) []pt.Step {
				if i == 0 {
					return []pt.Step{{Fault: pt.FaultStall}}
				}
				return rest(i, streamOK(fmt.Sprint(i)))
			},
			check: func(r *result) string {
				if r.calls[0] > 1 {
					return fmt.Sprintf("the target that did not answer in time was waited on %d times (no attempt that cannot help)", r.calls[0])
				}
				return ""
			}},
		{name: "slow first token", path: chatPath, body: streamBody, stream: true, hedge: 200 * time.Millisecond,
			script: func(i, n int) []pt.Step {
				if i == 0 && n > 1 {
					slow := pt.ChatStream(0, "answer ", "from ", "0")
					slow[1].Delay = 5 * time.Second // its first content, long after the hedge won
					return []pt.Step{pt.SSE(slow...)}
				}
				return rest(i, streamOK(fmt.Sprint(i)))
			},
			check: func(r *result) string {
				if len(r.calls) > 1 && r.calls[1] > 1 {
					return fmt.Sprintf("the second target was called %d times: a hedge is one attempt (no attempt that cannot help)", r.calls[1])
				}
				return ""
			}},
		{name: "context window exceeded", path: chatPath, body: chatBody, biggerModel: "drill-model-1m",
			script: func(i, n int) []pt.Step {
				if i == 0 {
					return []pt.Step{pt.JSON(400, pt.OpenAIError("This model's maximum context length is 128000 tokens. However, your messages resulted in 130412 tokens.",
						"invalid_request_error", "context_length_exceeded"))}
				}
				return rest(i, chatOK(fmt.Sprint(i)))
			},
			check: func(r *result) string {
				for i := 1; i < len(r.calls)-1; i++ {
					if r.calls[i] > 0 {
						return "a target with the same model was tried after a context-window error (no attempt that cannot help)"
					}
				}
				return ""
			}},
		{name: "quota running out", path: chatPath, body: chatBody, quota: true,
			script: func(i, n int) []pt.Step {
				if i == 0 {
					return []pt.Step{quotaSpentOK("0")}
				}
				return rest(i, chatOK(fmt.Sprint(i)))
			},
			check: func(r *result) string {
				if r.quotaSpent && len(r.calls) > 1 && r.calls[0] > 0 {
					return "a target that reported its quota spent was called before its reset (no attempt that cannot help)"
				}
				return ""
			}},
		{name: "recovering primary", path: chatPath, body: chatBody, recovery: true,
			script: func(i, n int) []pt.Step {
				if i == 0 {
					return []pt.Step{pt.JSON(503, pt.OpenAIError("The server is overloaded", "server_error", ""))}
				}
				return rest(i, chatOK(fmt.Sprint(i)))
			}},
		{name: "every target failing", path: chatPath, body: chatBody,
			script: func(i, n int) []pt.Step {
				return []pt.Step{pt.JSON(503, pt.OpenAIError(fmt.Sprintf("target %d is down", i), "server_error", ""))}
			},
			check: func(r *result) string {
				if r.status < 500 {
					return fmt.Sprintf("every target failed but the client got %d", r.status)
				}
				return ""
			}},
		{name: "client cancels", path: chatPath, body: chatBody, cancelAfter: 300 * time.Millisecond,
			script: func(i, n int) []pt.Step {
				if i == 0 {
					return []pt.Step{{Fault: pt.FaultStall}}
				}
				return rest(i, chatOK(fmt.Sprint(i)))
			},
			check: func(r *result) string {
				if r.clientOK {
					return "" // the policy answered before the client left: nothing to check here
				}
				total := 0
				for _, c := range r.calls {
					total += c
				}
				switch {
				case total == 0:
					return "the first target was never called"
				case total != 1:
					return fmt.Sprintf("%d upstream calls after the client left, want none", total-1)
				}
				return ""
			}},
	}
}

// Run plays every drill with cfg's policy and prints the table to w, coloured when w is a
// terminal and NO_COLOR is not set. It returns the exit code: 0 when every invariant held, 1
// otherwise.
func Run(cfg *config.Config, w io.Writer) int { return run(cfg, w, scenarios(), outputStyle(w)) }

// invariantNames are the invariants that hold under any policy, in the order they print.
var invariantNames = []string{"no replay after commit", "no attempt after the client left", "no attempt that cannot help",
	"budgets respected", "one final answer per request", "ledger complete", "every probe settled"}

func run(cfg *config.Config, w io.Writer, list []*scenario, st style) int {
	n := len(cfg.Targets)
	names := make([]string, 0, max(n, 3))
	for _, t := range cfg.Targets {
		names = append(names, t.Name)
	}
	if n == 0 {
		names = []string{"primary", "secondary", "tertiary"}
	}
	plural := "s"
	if len(names) == 1 {
		plural = ""
	}
	rep := &report{intro: []string{
		fmt.Sprintf("failover drill: %d simulated target%s on loopback (%s)", len(names), plural, strings.Join(names, ", ")),
		fmt.Sprintf("policy: strategy %s, retries %d, max attempts %d", cfg.Server.Strategy, cfg.Budget.SameTargetRetries, cfg.Budget.MaxAttempts),
	}}
	start := time.Now()
	for i, sc := range list {
		r := play(cfg, names, sc, i+1)
		rep.rows = append(rep.rows, row{scenario: sc.name + r.note, attempts: field(r.record, "attempts"), status: r.statusText(),
			servedBy: r.servedBy(), did: r.describe()})
		for _, p := range r.problems {
			rep.failures = append(rep.failures, sc.name+": "+p)
		}
	}
	rep.elapsed = time.Since(start)
	for _, name := range invariantNames {
		held := true
		for _, f := range rep.failures {
			held = held && !strings.Contains(f, "["+name+"]")
		}
		rep.invariants = append(rep.invariants, invariant{name: name, held: held})
	}
	rep.print(w, st)
	if len(rep.failures) > 0 {
		return 1
	}
	return 0
}

// play runs one scenario against a fresh sidecar and fresh simulated targets.
func play(base *config.Config, names []string, sc *scenario, num int) *result {
	r := &result{sc: sc, names: names, calls: make([]int, len(names))}
	ups := make([]*pt.Upstream, len(names))
	for i := range names {
		u, err := pt.New(sc.script(i, len(names))...)
		if err != nil {
			r.problems = append(r.problems, "[one final answer per request] cannot start a simulated target: "+err.Error())
			return r
		}
		ups[i] = u
		defer u.Close()
		if sc.respond != nil {
			if f := sc.respond(i, len(names)); f != nil {
				u.Respond(f)
			}
		}
	}
	cfg := *base
	cfg.Targets = make([]config.TargetConfig, len(names))
	resumable := false
	for i, name := range names {
		t := config.TargetConfig{URL: ups[i].URL, Name: name, Auth: "bearer", Weight: 1, Retries: base.Budget.SameTargetRetries}
		if i < len(base.Targets) {
			t.Weight, t.Retries, t.Resume = base.Targets[i].Weight, base.Targets[i].Retries, base.Targets[i].Resume
			resumable = resumable || t.Resume != ""
		}
		cfg.Targets[i] = t
	}
	if sc.resume && !(cfg.Resume.On() && resumable) {
		cfg.Resume = config.ResumeConfig{Mode: "on", Max: max(cfg.Resume.Max, 1), Instruction: cfg.Resume.Instruction}
		form := "prefill"
		if sc.resumeForm != "" {
			form = sc.resumeForm
		}
		for i := range cfg.Targets {
			cfg.Targets[i].Resume = form
		}
		r.note = " (drill resume)"
		if form != "prefill" {
			r.note = " (drill resume " + form + ")"
		}
	}
	if sc.successRule != "" && len(cfg.SuccessRules) == 0 {
		cfg.SuccessRules = []classify.Rule{{Pattern: regexp.MustCompile(sc.successRule)}}
		r.note = " (drill rule)"
	}
	if q := sc.quickTimeouts; q > 0 {
		s := &cfg.Server
		for _, d := range []*time.Duration{&s.ConnectTimeout, &s.FirstByteTimeout, &s.AttemptTimeout} {
			if *d == 0 || *d > q {
				*d = q
			}
		}
		r.note = fmt.Sprintf(" (timeouts %s)", q)
	}
	if sc.hedge > 0 && !cfg.Hedge.After.On() {
		cfg.Hedge.After.Fixed = sc.hedge
		r.note = fmt.Sprintf(" (hedged after %s)", sc.hedge)
	}
	if last := &cfg.Targets[len(cfg.Targets)-1]; sc.biggerModel != "" && len(cfg.Targets) > 1 && last.Model == "" {
		last.Model = sc.biggerModel
		r.note = " (drill model on " + last.Name + ")"
	}
	var logBuf pt.SyncBuffer
	opts := proxy.Options{Logger: slog.New(proxy.NewJSONHandler(&logBuf, slog.LevelInfo))}
	var clock *budget.ManualClock
	if sc.recovery {
		clock = budget.NewManualClock(time.Now())
		opts.Clock = clock
	}
	srv, err := proxy.New(&cfg, opts)
	if err != nil {
		r.problems = append(r.problems, "[one final answer per request] "+err.Error())
		return r
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		r.problems = append(r.problems, "[one final answer per request] "+err.Error())
		return r
	}
	go srv.Serve(ln) // ends at Shutdown
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		if n := srv.LeakedProbes(); n > 0 {
			r.problems = append(r.problems, fmt.Sprintf("[every probe settled] %d request(s) ended with a target's probe still leased", n))
		}
	}()

	id := fmt.Sprintf("drill-%d", num)
	if sc.recovery {
		id = playRecovery(r, ln.Addr().String(), &cfg, ups, clock, &logBuf, id)
		if id == "" {
			return r
		}
	}
	if sc.quota {
		id = playQuota(r, ln.Addr().String(), &cfg, ups, &logBuf, id)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+ln.Addr().String()+"/v1"+sc.path, strings.NewReader(sc.body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", id)
	if tok := cfg.Server.InboundToken; tok != "" {
		// The drill's client is the application: it holds the sidecar's token like any other.
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if after := sc.cancelAfter; after > 0 {
		// The client must leave while the stalled first attempt is still running: under a
		// FAILOVER_ATTEMPT_TIMEOUT shorter than the drill's pause, the attempt would end on its
		// own and the next target would answer before the client left.
		if t := base.Server.AttemptTimeout; t > 0 && after > t/2 {
			after = t / 2
		}
		time.AfterFunc(after, cancel)
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, DisableCompression: true}, Timeout: 60 * time.Second}
	resp, err := client.Do(req)
	if err == nil {
		r.status, r.clientOK = resp.StatusCode, true
		r.body, r.bodyErr = io.ReadAll(resp.Body)
		resp.Body.Close()
	} else if sc.cancelAfter == 0 {
		r.problems = append(r.problems, "[one final answer per request] the client got no answer: "+err.Error())
	}
	if sc.cancelAfter > 0 {
		time.Sleep(time.Second) // anything the sidecar would still try happens in here
	}
	r.record = waitRecord(&logBuf, id)
	for i, u := range ups {
		r.calls[i] = u.Calls() - r.calls[i] // calls before this request (playRecovery's) are not its own
	}
	r.checkInvariants(base)
	if sc.check != nil {
		if p := sc.check(r); p != "" {
			inv := "one final answer per request"
			switch {
			case strings.Contains(p, "replay") || strings.Contains(p, "more than one target") || strings.Contains(p, "and the second"):
				inv = "no replay after commit"
			case strings.Contains(p, "after the client left"):
				inv = "no attempt after the client left"
			case strings.Contains(p, "no attempt that cannot help"):
				inv = "no attempt that cannot help"
			}
			r.problems = append(r.problems, "["+inv+"] "+p)
		}
	}
	return r
}

// playRecovery plays the first part of "recovering primary" on the simulated clock: requests
// while the first target answers 503 until the policy ejects it, then one request each time an
// ejection runs out while it stays down (each may cost it one failed attempt, never more), then
// the target recovers and the clock moves on by its last ejection. It returns the request id
// the caller sends next, the one the row shows, and leaves in r.calls the calls made so far;
// "" when the scenario cannot go on (r.problems says why).
func playRecovery(r *result, addr string, cfg *config.Config, ups []*pt.Upstream, clock *budget.ManualClock, log *pt.SyncBuffer, id string) string {
	send := func(n int) string { return r.sendBefore(addr, cfg, log, id, n) }
	ejection := func() (time.Duration, bool) {
		var d time.Duration
		found := false
		sc := bufio.NewScanner(strings.NewReader(log.String()))
		for sc.Scan() {
			var rec map[string]any
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec["msg"] == "target_ejected" && rec["target"] == r.names[0] {
				secs, _ := rec["seconds"].(float64)
				d, found = time.Duration(secs*float64(time.Second)), true
			}
		}
		return d, found
	}
	n, d, out := 0, time.Duration(0), false
	for n < 20 && !out {
		n++
		send(n)
		d, out = ejection()
	}
	snapshot := func() {
		for i, u := range ups {
			r.calls[i] = u.Calls()
		}
	}
	if !out {
		r.note = " (never ejected)"
		snapshot()
		return fmt.Sprintf("%s-%d", id, n+1)
	}
	requests := n
	for range 3 { // still down: one request each time the ejection runs out
		clock.Advance(d)
		before := ups[0].Calls()
		n++
		send(n)
		if c := ups[0].Calls() - before; c > 1 {
			r.problems = append(r.problems, fmt.Sprintf("[no attempt that cannot help] a request cost the ejected target %d failed attempts", c))
		}
		d, _ = ejection()
	}
	ups[0].Script(chatOK("0"))
	clock.Advance(d)
	snapshot()
	r.note = " (simulated clock)"
	r.story = fmt.Sprintf("out after %d requests, 1 attempt per %s while down, back %s after recovering: ", requests, d, d)
	return fmt.Sprintf("%s-%d", id, n+1)
}

// sendBefore sends request n of those that come before the one the row shows, as the
// scenario's client, and waits for its ledger record; it returns the request's id.
func (r *result) sendBefore(addr string, cfg *config.Config, log *pt.SyncBuffer, id string, n int) string {
	rid := fmt.Sprintf("%s-%d", id, n)
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1"+r.sc.path, strings.NewReader(r.sc.body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", rid)
	if tok := cfg.Server.InboundToken; tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if resp, err := http.DefaultClient.Do(req); err == nil {
		io.Copy(io.Discard, resp.Body) // only the ledger matters here
		resp.Body.Close()
	}
	waitRecord(log, rid)
	return rid
}

// playQuota plays the first part of "quota running out": requests until the first target has
// answered once, with a good answer that says no request is left in its window for quotaReset.
// Under the failover strategy that is the first request; a strategy that starts elsewhere may
// take a few. It returns the request id the caller sends next, the one the row shows, and
// leaves in r.calls the calls made so far.
func playQuota(r *result, addr string, cfg *config.Config, ups []*pt.Upstream, log *pt.SyncBuffer, id string) string {
	n := 0
	for n < 2*len(ups) && ups[0].Calls() == 0 {
		n++
		r.sendBefore(addr, cfg, log, id, n)
	}
	for i, u := range ups {
		r.calls[i] = u.Calls()
	}
	if ups[0].Calls() == 0 {
		r.note = " (" + r.names[0] + " never called)"
		return fmt.Sprintf("%s-%d", id, n+1)
	}
	r.quotaSpent = cfg.Budget.RateLimitAware
	r.story = fmt.Sprintf("%s 200 with 0 requests left for %s, next request: ", r.names[0], quotaReset)
	return fmt.Sprintf("%s-%d", id, n+1)
}

// checkInvariants checks what holds under any policy.
func (r *result) checkInvariants(cfg *config.Config) {
	if r.record == nil {
		r.problems = append(r.problems, "[ledger complete] no ledger record for the request")
		return
	}
	ledger, _ := r.record["ledger"].([]any)
	// A long ledger lists its first attempts, then {"more_attempts": N} for the rest.
	more := 0
	if n := len(ledger); n > 0 {
		if m, _ := ledger[n-1].(map[string]any); m["more_attempts"] != nil {
			f, _ := m["more_attempts"].(float64)
			more, ledger = int(f), ledger[:n-1]
		}
	}
	if attempts, _ := r.record["attempts"].(float64); int(attempts) != len(ledger)+more {
		r.problems = append(r.problems, fmt.Sprintf("[ledger complete] the record counts %d attempts, its ledger lists %d", int(attempts), len(ledger)+more))
	}
	// Every call a target received is in the ledger, and every answer the ledger lists came
	// from a call. An attempt that ended before its request reached the target (a connect or
	// attempt timeout) is listed without a status, and that target saw no call for it.
	listed, answered := make([]int, len(r.names)), make([]int, len(r.names))
	for _, e := range ledger {
		m, _ := e.(map[string]any)
		for i, name := range r.names {
			if m["target"] == name {
				listed[i]++
				if _, ok := m["status"].(float64); ok {
					answered[i]++
				}
			}
		}
	}
	for i, name := range r.names {
		if i < len(r.calls) && (r.calls[i] > listed[i]+more || answered[i] > r.calls[i]) {
			r.problems = append(r.problems, fmt.Sprintf("[ledger complete] the ledger lists %d attempts on %s (%d answered), the target saw %d calls",
				listed[i], name, answered[i], r.calls[i]))
		}
	}
	transfers, committed := 0, false
	perTarget := map[string]int{}
	prev, instructs := "", false
	for _, e := range ledger {
		m, _ := e.(map[string]any)
		target, _ := m["target"].(string)
		if committed {
			r.problems = append(r.problems, "[no replay after commit] an attempt followed a committed one")
		}
		if m["phase"] == "committed" {
			committed = true
		}
		if prev != "" && target != prev {
			transfers++
		}
		// A resume's instruction after a refused prefill is no retry of FAILOVER_SAME_TARGET_RETRIES.
		if target == prev && !instructs {
			perTarget[target]++
		}
		prev, instructs = target, m["reason"] == "prefill_refused"
	}
	if cfg.Budget.MaxAttempts > 0 && transfers > cfg.Budget.MaxAttempts {
		r.problems = append(r.problems, fmt.Sprintf("[budgets respected] %d transfers, FAILOVER_MAX_ATTEMPTS=%d", transfers, cfg.Budget.MaxAttempts))
	}
	calls := 0
	for _, c := range r.calls {
		calls += c
	}
	total := max(len(ledger)+more, calls)
	if !cfg.Budget.Enabled && total > 1 {
		r.problems = append(r.problems, fmt.Sprintf("[budgets respected] %d attempts with FAILOVER_ENABLED=false", total))
	}
	for i, name := range r.names {
		limit := cfg.Budget.SameTargetRetries
		if i < len(cfg.Targets) {
			limit = cfg.Targets[i].Retries
		}
		if perTarget[name] > limit {
			r.problems = append(r.problems, fmt.Sprintf("[budgets respected] %d retries on %s, its limit is %d", perTarget[name], name, limit))
		}
	}
	if r.sc.cancelAfter > 0 && !r.clientOK && r.record["outcome"] != "cancelled" {
		r.problems = append(r.problems, fmt.Sprintf("[no attempt after the client left] outcome %v, want cancelled", r.record["outcome"]))
	}
}

// noReplayCheck checks a stream cut after output (the primary's, which has shown) that was not
// resumed. Output reached the client when it got the primary's bytes or the ledger says the
// first attempt committed. A policy that gives up on the primary before its first token
// (FAILOVER_FIRST_BYTE_TIMEOUT shorter than the drill's pauses) moves on before anything is
// committed, and the next target answering is no replay.
func (r *result) noReplayCheck(shown string) string {
	reached := bytes.Contains(r.body, []byte(shown))
	if !reached && !r.firstCommitted() {
		return ""
	}
	for i := 1; i < len(r.calls); i++ {
		if r.calls[i] > 0 {
			return "a target was called after output reached the client (replay after commit)"
		}
	}
	if !reached {
		return "the client did not get the output that was produced"
	}
	if r.bodyErr == nil && !bytes.Contains(r.body, []byte("stream_interrupted")) {
		return "the client saw a clean end of an interrupted stream"
	}
	return ""
}

// resumed reports whether the ledger shows a resumed stream.
func (r *result) resumed() bool {
	ledger, _ := r.record["ledger"].([]any)
	for _, e := range ledger {
		if m, _ := e.(map[string]any); m["phase"] == "resumed" {
			return true
		}
	}
	return false
}

// resumedCheck checks what the client read of a resumed chat stream: one stream (every chunk
// with the first one's id, one [DONE], last), no error, a clean end, and, when text is set,
// exactly that text: nothing the client had was sent again.
func (r *result) resumedCheck(text string) string {
	var got strings.Builder
	ids := map[string]bool{}
	done, last := 0, ""
	for _, ev := range strings.Split(string(r.body), "\n\n") {
		data, ok := strings.CutPrefix(ev, "data: ")
		if !ok {
			continue
		}
		last = data
		if data == "[DONE]" {
			done++
			continue
		}
		var chunk struct {
			ID      string `json:"id"`
			Error   any    `json:"error"`
			Choices []struct {
				Delta struct{ Content string } `json:"delta"`
			} `json:"choices"`
		}
		if json.Unmarshal([]byte(data), &chunk) != nil || chunk.Error != nil {
			return "the resumed stream carried an error or an event that is not JSON"
		}
		ids[chunk.ID] = true
		for _, c := range chunk.Choices {
			got.WriteString(c.Delta.Content)
		}
	}
	switch {
	case r.bodyErr != nil:
		return "the resumed stream did not end cleanly"
	case len(ids) != 1 || done != 1 || last != "[DONE]":
		return fmt.Sprintf("the client did not read one stream: %d chunk ids, %d [DONE]", len(ids), done)
	case text != "" && got.String() != text:
		return fmt.Sprintf("the client read %q, want %q (replay after commit)", got.String(), text)
	}
	return ""
}

// firstCommitted reports whether the first attempt's ledger entry committed.
func (r *result) firstCommitted() bool {
	if r.record == nil {
		return false
	}
	ledger, _ := r.record["ledger"].([]any)
	if len(ledger) == 0 {
		return false
	}
	m, _ := ledger[0].(map[string]any)
	return m["phase"] == "committed"
}

// describe summarises the ledger: "primary reset→transfer, secondary 200→commit".
func (r *result) describe() string {
	if r.record == nil {
		return "(no record)"
	}
	ledger, _ := r.record["ledger"].([]any)
	var parts []string
	for _, e := range ledger {
		m, _ := e.(map[string]any)
		what := fmt.Sprint(m["class"])
		if st, ok := m["status"].(float64); ok {
			what = fmt.Sprintf("%d", int(st))
			c := fmt.Sprint(m["class"])
			implied := c == "ok" || st >= 500 && c == "server_error" || st >= 400 && st < 500 && (c == "client_error" || c == "rate_limited")
			if !implied {
				what += " " + c
			}
		}
		action := m["action"]
		switch {
		case m["phase"] == "resumed" && m["class"] == "interrupted":
			action = "resumed"
		case m["reason"] == "prefill_refused":
			action = "instruct" // the same target, asked again by instruction
		case m["hedge"] == "lost":
			what, action = "slow", "lost" // cut: the other attempt of its race committed first
		}
		parts = append(parts, fmt.Sprintf("%v %s→%v", m["target"], what, action))
	}
	out := r.story + strings.Join(parts, ", ")
	if o := fmt.Sprint(r.record["outcome"]); o != "ok" && o != "ok_after_failover" {
		out += " [" + o + "]"
	}
	return out
}

func (r *result) statusText() string {
	switch {
	case !r.clientOK:
		return "(left)"
	case r.bodyErr != nil:
		return fmt.Sprintf("%d+error", r.status)
	case bytes.Contains(r.body, []byte("stream_interrupted")):
		return fmt.Sprintf("%d+error", r.status)
	}
	return fmt.Sprint(r.status)
}

// servedBy names the target that answered (X-Failover-Target), and the one that continued a
// resumed stream: "primary→secondary".
func (r *result) servedBy() string {
	by := field(r.record, "target")
	if !r.resumed() {
		return by
	}
	ledger, _ := r.record["ledger"].([]any)
	if m, _ := ledger[len(ledger)-1].(map[string]any); m["phase"] == "resumed" && m["target"] != nil {
		by += fmt.Sprintf("→%v", m["target"])
	}
	return by
}

func field(rec map[string]any, k string) string {
	if rec == nil || rec[k] == nil {
		return "-"
	}
	if f, ok := rec[k].(float64); ok {
		return fmt.Sprint(int(f))
	}
	return fmt.Sprint(rec[k])
}

// waitRecord waits for the request's ledger record (a stream's is written when it ends).
func waitRecord(log *pt.SyncBuffer, id string) map[string]any {
	deadline := time.Now().Add(3 * time.Second)
	for {
		sc := bufio.NewScanner(strings.NewReader(log.String()))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var rec map[string]any
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec["msg"] == "request" && rec["request_id"] == id {
				return rec
			}
		}
		if time.Now().After(deadline) {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
}
