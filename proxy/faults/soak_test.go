package faults_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llm-failover/failover/proxy"
	"github.com/llm-failover/failover/proxy/internal/config"
	pt "github.com/llm-failover/failover/proxy/proxytest"
	"github.com/llm-failover/failover/proxy/proxytest/sidecar"
)

// The soak runs mixed streaming and non-streaming traffic at high concurrency against three
// targets, two of which fault at random (with a fixed seed), for about 10 s; set
// FAILOVER_SOAK to a Go duration to run it longer, e.g.
//
//	FAILOVER_SOAK=5m go test -race -run TestSoak -timeout 30m ./proxy/faults/
//
// (-short runs it for 5 s). Every request must get exactly one complete answer or a clean,
// explicit error, and exactly one ledger record; a request fails only when a fault hit it
// after its output began (the one failure no healthy target can repair), and then the client
// sees an interrupted stream. Every kind of fault must have been injected. Afterwards
// goroutines, open descriptors and the heap must be back near where they started.
const (
	soakDefault = 10 * time.Second // on two cores some 25,000 requests and 5,000 faults (half as many under -race), each kind of fault a dozen times at least
	soakWorkers = 64
	soakSeed    = 20260501
)

func soakDuration(t *testing.T) time.Duration {
	if v := os.Getenv("FAILOVER_SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("FAILOVER_SOAK=%q: want a Go duration like 5m", v)
		}
		return d
	}
	if testing.Short() {
		return 5 * time.Second
	}
	return soakDefault
}

// soakKinds are the requests the soak sends.
var soakKinds = []struct {
	path, body string
	fam        string
	stream     bool
}{
	{"/chat/completions", chatBody, "chat", false},
	{"/chat/completions", chatStreamBody, "chat", true},
	{"/messages", `{"model":"claude-test","max_tokens":64,"messages":[{"role":"user","content":"Say hello"}]}`, "messages", false},
	{"/messages", messagesStreamBody, "messages", true},
}

// soakAnswer is target who's healthy answer to a request of this family and mode.
func soakAnswer(fam string, stream bool, who string) pt.Step {
	switch {
	case fam == "chat" && stream:
		return pt.SSE(pt.ChatStream(time.Millisecond, "soak", " answer", " from", " "+who)...)
	case fam == "chat":
		return pt.JSON(200, pt.ChatCompletion("soak answer from "+who))
	case stream:
		return pt.SSE(pt.AnthropicStream(time.Millisecond, "soak", " answer", " from", " "+who)...)
	}
	return pt.JSON(200, `{"id":"msg_soak","type":"message","role":"assistant","model":"claude-test","content":[{"type":"text","text":"soak answer from `+
		who+`"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":9,"output_tokens":4}}`)
}

// soakMarkers: where a stream's opening ends and where its first content event ends.
func soakMarkers(fam string) (opening, content string) {
	if fam == "chat" {
		return pt.ChatRole, pt.ChatDelta("soak")
	}
	return "event: ping\ndata: {\"type\":\"ping\"}\n\n", `"text":"soak"}}` + "\n\n"
}

// soakFault is one way a flaky target fails.
type soakFault struct {
	name   string
	weight int
	stream int  // 0 both, 1 streams only, -1 non-streaming only
	after  bool // after output began: the request cannot succeed
	make   func(ok pt.Step, fam string) pt.Step
}

var soakFaults = func() []soakFault {
	head := func(s pt.Step) int { return pt.RawOffset(s, "\r\n\r\n", 0) }
	at := func(f pt.Fault, n func(pt.Step, string) int) func(pt.Step, string) pt.Step {
		return func(ok pt.Step, fam string) pt.Step { return fault(ok, f, n(ok, fam)) }
	}
	midBody := func(s pt.Step, _ string) int { return head(s) + len(s.Body)/2 }
	afterOpening := func(s pt.Step, fam string) int { o, _ := soakMarkers(fam); return pt.RawOffset(s, o, 2) }
	afterContent := func(s pt.Step, fam string) int { _, c := soakMarkers(fam); return pt.RawOffset(s, c, 2) }
	fixed := func(st pt.Step) func(pt.Step, string) pt.Step { return func(pt.Step, string) pt.Step { return st } }
	return []soakFault{
		{name: "reset", weight: 10, make: fixed(pt.Step{Fault: pt.FaultReset})},
		{name: "close", weight: 5, make: fixed(pt.Step{Fault: pt.FaultClose})},
		{name: "garbage", weight: 5, make: fixed(pt.Step{Fault: pt.FaultGarbage})},
		{name: "503", weight: 10, make: fixed(pt.JSON(503, pt.OpenAIError("The server is overloaded", "server_error", "")))},
		{name: "529", weight: 5, make: fixed(pt.Overloaded())},
		{name: "429", weight: 8, make: fixed(pt.RateLimited())},
		{name: "reset mid headers", weight: 5, make: at(pt.FaultResetAfter, func(s pt.Step, _ string) int { return head(s) / 2 })},
		{name: "stall", weight: 1, make: fixed(pt.Step{Fault: pt.FaultStall})},
		{name: "reset mid body", weight: 5, stream: -1, make: at(pt.FaultResetAfter, midBody)},
		{name: "close mid body", weight: 5, stream: -1, make: at(pt.FaultCloseAfter, midBody)},
		{name: "stall mid body", weight: 1, stream: -1, make: at(pt.FaultStallAfter, midBody)},
		{name: "200 empty", weight: 3, stream: -1, make: fixed(pt.JSON(200, ""))},
		{name: "200 error body", weight: 3, stream: -1, make: fixed(pt.JSON(200, `{"error":{"message":"upstream error","type":"server_error","code":500}}`))},
		{name: "reset after opening", weight: 8, stream: 1, make: at(pt.FaultResetAfter, afterOpening)},
		{name: "garbage after opening", weight: 3, stream: 1, make: at(pt.FaultGarbageAfter, afterOpening)},
		{name: "stall after opening", weight: 1, stream: 1, make: at(pt.FaultStallAfter, afterOpening)},
		{name: "empty stream", weight: 3, stream: 1, make: func(ok pt.Step, fam string) pt.Step {
			if fam == "chat" {
				return pt.SSE(pt.Events(0, pt.ChatRole, pt.Done)...)
			}
			return fault(ok, pt.FaultCloseAfter, afterOpening(ok, fam)) // and not a byte of content
		}},
		{name: "error event before content", weight: 5, stream: 1, make: func(ok pt.Step, fam string) pt.Step {
			if fam == "chat" {
				return pt.SSE(pt.Events(0, pt.ChatRole, pt.ChatError("The server had an error", "server_error", "server_error"))...)
			}
			return pt.SSE(pt.Events(0, pt.AnthropicStream(0)[0].Data, pt.AnthropicStreamError("overloaded_error", "Overloaded"))...)
		}},
		{name: "reset after content", weight: 6, stream: 1, after: true, make: at(pt.FaultResetAfter, afterContent)},
		{name: "close after content", weight: 3, stream: 1, after: true, make: at(pt.FaultCloseAfter, afterContent)},
		{name: "garbage after content", weight: 2, stream: 1, after: true, make: at(pt.FaultGarbageAfter, afterContent)},
		{name: "stall after content", weight: 1, stream: 1, after: true, make: at(pt.FaultStallAfter, afterContent)},
	}
}()

// flakyTarget answers like target who, failing a share of its calls with a fault drawn from
// soakFaults, reproducibly: the draw depends only on the seed and the call number. It notes
// the request ids that got a fault after output began, and counts the faults of each kind
// (injected is indexed as soakFaults).
func flakyTarget(who string, share float64, seed uint64, after *sync.Map, injected []atomic.Int64) func(*pt.Request) pt.Step {
	return func(r *pt.Request) pt.Step {
		fam, stream := "chat", bytes.Contains(r.Body, []byte(`"stream":true`))
		if strings.HasSuffix(r.URI, "/messages") {
			fam = "messages"
		}
		ok := soakAnswer(fam, stream, who)
		rng := rand.New(rand.NewPCG(seed, uint64(r.N)))
		if rng.Float64() >= share {
			return ok
		}
		total := 0
		for _, f := range soakFaults {
			if f.stream == 0 || (f.stream == 1) == stream {
				total += f.weight
			}
		}
		n := rng.IntN(total)
		for i, f := range soakFaults {
			if f.stream != 0 && (f.stream == 1) != stream {
				continue
			}
			if n -= f.weight; n < 0 {
				injected[i].Add(1)
				if f.after {
					after.Store(r.Header["X-Request-Id"], f.name)
				}
				return f.make(ok, fam)
			}
		}
		panic("unreachable")
	}
}

// soakRecord is what the soak keeps of a ledger record.
type soakRecord struct {
	n       int
	outcome string
	status  int
	target  string
}

// soakLedger reads the sidecar's JSON log as it is written and keeps one summary per request
// id, so a long soak does not hold its whole log. Safe for concurrent use.
type soakLedger struct {
	mu      sync.Mutex
	partial []byte
	recs    map[string]*soakRecord
	bad     []string
}

func (l *soakLedger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := l.partial[:i]
		var rec struct {
			Msg       string `json:"msg"`
			RequestID string `json:"request_id"`
			Outcome   string `json:"outcome"`
			Status    int    `json:"status"`
			Target    string `json:"target"`
		}
		if err := json.Unmarshal(line, &rec); err != nil {
			l.bad = append(l.bad, string(line))
		} else if rec.Msg == "request" {
			r := l.recs[rec.RequestID]
			if r == nil {
				r = &soakRecord{}
				l.recs[rec.RequestID] = r
			}
			r.n++
			r.outcome, r.status, r.target = rec.Outcome, rec.Status, rec.Target
		}
		l.partial = append(l.partial[:0], l.partial[i+1:]...)
	}
}

// soakView is what one client saw.
type soakView struct {
	kind   string // complete, interrupted, error, cancelled, or what went wrong
	target string
	detail string
}

// resources are the process's goroutines, open descriptors and live heap.
type resources struct {
	goroutines, fds int
	heap            uint64
}

func measure() resources {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	ents, _ := os.ReadDir("/proc/self/fd")
	return resources{goroutines: runtime.NumGoroutine(), fds: len(ents), heap: ms.HeapAlloc}
}

// quiesce waits until the goroutine count has not changed for a second (or limit passes)
// and returns that measure: the baseline.
func quiesce(limit time.Duration) resources {
	sidecar.Client.CloseIdleConnections()
	deadline := time.Now().Add(limit)
	last := measure()
	for time.Now().Before(deadline) {
		time.Sleep(time.Second)
		m := measure()
		if m.goroutines == last.goroutines && m.fds == last.fds {
			return m
		}
		last = m
	}
	return last
}

// settle measures until the goroutine and descriptor counts are within tolerance of base,
// or limit passes, and returns the last measure.
func settle(base resources, goroutines, fds int, limit time.Duration) resources {
	deadline := time.Now().Add(limit)
	for {
		m := measure()
		if m.goroutines <= base.goroutines+goroutines && m.fds <= base.fds+fds || time.Now().After(deadline) {
			return m
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Not parallel: it counts the process's goroutines and open descriptors, so it runs alone,
// before the parallel tests start.
func TestSoak(t *testing.T) {
	d := soakDuration(t)
	base := quiesce(15 * time.Second) // earlier tests' servers and connections wind down first
	t.Logf("soak: %v, %d workers, seed %d; baseline %d goroutines, %d fds, %d KiB heap", d, soakWorkers, soakSeed, base.goroutines, base.fds, base.heap>>10)

	var after sync.Map // request id → the after-commit fault it got
	injected := make([]atomic.Int64, len(soakFaults))
	ups := make([]*pt.Upstream, 3)
	shares := []float64{0.3, 0.2, 0}
	var urls []string
	for i := range ups {
		u, err := pt.NewResponder(flakyTarget(fmt.Sprintf("t%d", i), shares[i], soakSeed+uint64(i), &after, injected))
		if err != nil {
			t.Fatal(err)
		}
		u.KeepRequests(false)
		ups[i] = u
		urls = append(urls, u.URL)
	}
	closeUpstreams := sync.OnceFunc(func() {
		for _, u := range ups {
			u.Close()
		}
	})
	defer closeUpstreams()

	cfg, err := config.Load(env(targets(urls...), []string{
		"FAILOVER_STRATEGY=round-robin",
		"FAILOVER_CONNECT_TIMEOUT=1s",
		"FAILOVER_FIRST_BYTE_TIMEOUT=2s",
		"FAILOVER_IDLE_TIMEOUT=2s",
		"FAILOVER_ATTEMPT_TIMEOUT=5s",
		"FAILOVER_SAME_TARGET_RETRIES=1",
		"FAILOVER_BACKOFF_BASE=5ms",
		"FAILOVER_BACKOFF_MAX=20ms",
		"FAILOVER_RETRY_BUDGET_RATIO=0",
		"FAILOVER_EJECT_BASE=500ms",
		"FAILOVER_EJECT_MAX=1s",
	}), true)
	if err != nil {
		t.Fatal(err)
	}
	ledger := &soakLedger{recs: map[string]*soakRecord{}}
	srv, err := proxy.New(cfg, proxy.Options{Logger: slog.New(slog.NewJSONHandler(ledger, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(ln) // ends at Shutdown
	}()
	shutdown := sync.OnceFunc(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-served
	})
	defer shutdown()
	baseURL := "http://" + ln.Addr().String() + "/v1"

	transport := &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: soakWorkers}
	client := &http.Client{Transport: transport, Timeout: 30 * time.Second}

	var mu sync.Mutex
	views := map[string]soakView{}
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := range soakWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(soakSeed, uint64(w)))
			for n := 0; time.Now().Before(stop); n++ {
				id := fmt.Sprintf("soak-%d-%d", w, n)
				kind := soakKinds[rng.IntN(len(soakKinds))]
				var leaveAfter time.Duration
				if rng.IntN(50) == 0 {
					leaveAfter = time.Duration(rng.IntN(200)) * time.Millisecond // the client gives up
				}
				v := soakRequest(client, baseURL, id, kind.path, kind.body, kind.fam, kind.stream, leaveAfter)
				mu.Lock()
				views[id] = v
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	transport.CloseIdleConnections()

	// While the sidecar still runs: no per-request leak (pools hold at most a few connections
	// per worker and target).
	live := settle(base, 8*soakWorkers, 8*soakWorkers, 10*time.Second)
	t.Logf("after load, sidecar still running: %d goroutines, %d fds, %d KiB heap", live.goroutines, live.fds, live.heap>>10)
	if live.goroutines > base.goroutines+8*soakWorkers || live.fds > base.fds+8*soakWorkers {
		t.Errorf("resources grew with the load: %d goroutines (baseline %d), %d fds (baseline %d)", live.goroutines, base.goroutines, live.fds, base.fds)
	}

	shutdown()
	closeUpstreams()

	// Every request: one answer, judged against what was injected, and one ledger record.
	counts := map[string]int{}
	var problems []string
	problem := func(format string, args ...any) {
		if len(problems) < 30 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	ledger.mu.Lock()
	for id, v := range views {
		counts[v.kind]++
		rec := ledger.recs[id]
		_, hit := after.Load(id)
		switch {
		case rec == nil:
			problem("%s: no ledger record (client saw %s)", id, v.kind)
			continue
		case rec.n != 1:
			problem("%s: %d ledger records", id, rec.n)
		}
		switch v.kind {
		case "cancelled":
			// The client left; whatever the sidecar recorded, it recorded it once.
		case "complete":
			if rec.outcome != "ok" && rec.outcome != "ok_after_failover" || rec.target != v.target {
				problem("%s: client got a complete answer from %s, ledger says %s from %s", id, v.target, rec.outcome, rec.target)
			}
			if hit {
				problem("%s: a complete answer although a fault hit after output began", id)
			}
		case "interrupted":
			if !hit {
				problem("%s: interrupted without a fault after output began (%s from %s): %s", id, rec.outcome, v.target, v.detail)
			}
			if rec.outcome != "partial" {
				problem("%s: interrupted stream recorded as %s", id, rec.outcome)
			}
		default:
			problem("%s: %s (%s): ledger %s %d from %s", id, v.kind, v.detail, rec.outcome, rec.status, rec.target)
		}
	}
	for id, rec := range ledger.recs {
		if _, ok := views[id]; !ok {
			problem("ledger record for a request nobody sent: %s %+v", id, *rec)
		}
	}
	for _, l := range ledger.bad {
		problem("log line is not JSON: %.200s", l)
	}
	ledger.mu.Unlock()
	total, faults := len(views), int64(0)
	kinds := make([]string, 0, len(soakFaults))
	for i, f := range soakFaults {
		faults += injected[i].Load()
		kinds = append(kinds, fmt.Sprintf("%s=%d", f.name, injected[i].Load()))
	}
	t.Logf("%d requests (%.0f/s), %d faults injected: %v; %s", total, float64(total)/d.Seconds(), faults, counts, strings.Join(kinds, ", "))
	if total < soakWorkers {
		t.Errorf("only %d requests in %v", total, d)
	}
	for i, f := range soakFaults {
		if injected[i].Load() == 0 {
			t.Errorf("no %q fault was injected in %v: the soak did not try every kind", f.name, d)
		}
	}
	for _, p := range problems {
		t.Error(p)
	}

	// After the sidecar and the targets are gone, so is everything they held.
	views, ledger = nil, nil
	end := settle(base, 10, 5, 15*time.Second)
	t.Logf("after shutdown: %d goroutines, %d fds, %d KiB heap", end.goroutines, end.fds, end.heap>>10)
	if end.goroutines > base.goroutines+10 {
		buf := make([]byte, 1<<20)
		t.Errorf("goroutines: %d, baseline %d\n%s", end.goroutines, base.goroutines, buf[:runtime.Stack(buf, true)])
	}
	if end.fds > base.fds+5 {
		t.Errorf("open descriptors: %d, baseline %d", end.fds, base.fds)
	}
	if end.heap > base.heap+64<<20 {
		t.Errorf("heap: %d KiB, baseline %d KiB", end.heap>>10, base.heap>>10)
	}
}

// soakRequest sends one request and judges what came back, without failing the test (it
// runs on a worker goroutine).
func soakRequest(client *http.Client, baseURL, id, path, body, fam string, stream bool, leaveAfter time.Duration) soakView {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if leaveAfter > 0 {
		// The client leaves once the request is out (leaving earlier would be not sending one).
		var timer *time.Timer
		var mu sync.Mutex
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) {
			mu.Lock()
			timer = time.AfterFunc(leaveAfter, cancel)
			mu.Unlock()
		}})
		defer func() {
			mu.Lock()
			if timer != nil {
				timer.Stop()
			}
			mu.Unlock()
		}()
	}
	req, err := http.NewRequestWithContext(ctx, "POST", baseURL+path, strings.NewReader(body))
	if err != nil {
		return soakView{kind: "client error", detail: err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", id)
	resp, err := client.Do(req)
	if err != nil {
		if leaveAfter > 0 {
			return soakView{kind: "cancelled"}
		}
		return soakView{kind: "no answer", detail: err.Error()}
	}
	defer resp.Body.Close()
	got, readErr := io.ReadAll(resp.Body)
	if leaveAfter > 0 && ctx.Err() != nil {
		return soakView{kind: "cancelled"}
	}
	who := resp.Header.Get("X-Failover-Target")
	v := soakView{target: who, detail: fmt.Sprintf("%d err=%v body=%.300q", resp.StatusCode, readErr, got)}
	if resp.StatusCode != 200 {
		v.kind = "error status"
		if !isErrorDocument(got) || readErr != nil {
			v.kind = "broken error"
		}
		return v
	}
	full := soakAnswer(fam, stream, who).BodyBytes()
	switch i := interruptedTail(got, fam); {
	case readErr == nil && bytes.Equal(got, full):
		v.kind = "complete"
	case stream && readErr != nil && i >= 0 && bytes.HasPrefix(full, got[:i]):
		_, content := soakMarkers(fam)
		if !bytes.Contains(got[:i], []byte(content)) {
			v.kind = "interrupted before its content"
		} else {
			v.kind = "interrupted"
		}
	default:
		v.kind = "broken answer" // a truncated or foreign "success": the one thing never allowed
	}
	return v
}
