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

// Run plays every drill with cfg's policy and prints the table to w, coloured when w is a
// terminal and NO_COLOR is not set. It returns the exit code: 0 when every invariant held, 1
// otherwise.
func Run(cfg *config.Config, w io.Writer) int { return run(cfg, w, scenarios(), outputStyle(w)) }

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
		// own and the next target would answer before the client left. The pause runs from
		// when the first target has the request, not from the send: on a busy machine the
		// request could take longer than the pause to get there.
		if t := base.Server.AttemptTimeout; t > 0 && after > t/2 {
			after = t / 2
		}
		first, before := ups[0], ups[0].Calls()
		go func() {
			for deadline := time.Now().Add(10 * time.Second); first.Calls() == before && ctx.Err() == nil && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
			time.Sleep(after)
			cancel()
		}()
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
