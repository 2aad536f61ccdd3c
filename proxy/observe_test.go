package proxy_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lmittmann/tint"

	"github.com/llm-failover/failover/proxy"
	"github.com/llm-failover/failover/proxy/internal/config"
	pt "github.com/llm-failover/failover/proxy/proxytest"
	"github.com/llm-failover/failover/proxy/proxytest/sidecar"
)

// metric returns the value of one series on the metrics page, or -1 when absent.
func metric(page, series string) float64 {
	for _, line := range strings.Split(page, "\n") {
		if strings.HasPrefix(line, series+" ") {
			v, err := strconv.ParseFloat(strings.TrimPrefix(line, series+" "), 64)
			if err == nil {
				return v
			}
		}
	}
	return -1
}

func TestMetricsMoveWithTraffic(t *testing.T) {
	t.Parallel()
	a := upstream(t, busy)
	b := upstream(t)
	s := start(t, env(targets(a.URL, b.URL), noRetries)...)
	for range 3 {
		s.Post("/chat/completions", chatBody)
	}
	s.Post("/messages", `{"model":"claude","max_tokens":1,"messages":[]}`)
	page := s.ScrapeMetrics()
	want := map[string]float64{
		`failover_requests_total{family="chat",outcome="ok_after_failover"}`:          3,
		`failover_requests_total{family="messages",outcome="ok_after_failover"}`:      1,
		`failover_requests_total{family="chat",outcome="ok"}`:                         0,
		`failover_attempts_total{target="t0",class="server_error",action="transfer"}`: 4,
		`failover_attempts_total{target="t1",class="ok",action="commit"}`:             4,
		`failover_request_duration_seconds_count{family="chat"}`:                      3,
		`failover_upstream_first_byte_seconds_count{target="t0"}`:                     4,
		`failover_overhead_seconds_count`:                                             4,
		`failover_inflight_requests`:                                                  0,
		`failover_target_up{target="t0"}`:                                             1,
		`failover_stream_commits_total{reason="content"}`:                             0,
		`failover_budget_exhausted_total{budget="retry_budget"}`:                      0,
		`failover_empty_responses_total{target="t0"}`:                                 0,
	}
	for series, v := range want {
		if got := metric(page, series); got != v {
			t.Errorf("%s = %v, want %v", series, got, v)
		}
	}
	for _, family := range []string{"process_resident_memory_bytes", "go_goroutines", `failover_overhead_seconds_bucket{le="0.0001"}`} {
		if metric(page, family) < 0 {
			t.Errorf("%s missing", family)
		}
	}
	if !regexp.MustCompile(`failover_request_duration_seconds_bucket\{family="chat",le="600"\} 3`).MatchString(page) {
		t.Error("duration buckets do not reach minutes")
	}
}

func TestLedgerOneRecordPerRequestAndNoSecrets(t *testing.T) {
	t.Parallel()
	a := upstream(t, pt.JSON(503, pt.OpenAIError("down: prompt was Say hello", "server_error", "")))
	b := upstream(t, pt.JSON(200, pt.ChatCompletion("the secret answer text")))
	s := start(t, env(targets(a.URL, b.URL), noRetries, []string{"FAILOVER_TARGET_0_API_KEY=sk-upstream-key-0001", "FAILOVER_TARGET_1_API_KEY=sk-upstream-key-0002",
		"FAILOVER_INBOUND_TOKEN=inbound-token-0003", "FAILOVER_TARGET_1_HEADERS=X-Org=org-secret-0004", "FAILOVER_EJECT_AFTER=0"})...)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.Post("/chat/completions", chatBody, "Authorization: Bearer inbound-token-0003", "X-Request-Id: req-"+strconv.Itoa(i))
		}()
	}
	wg.Wait()
	s.Post("/chat/completions", chatBody, "X-Request-Id: rejected-1") // no token: rejected, still one record
	recs := s.WaitLedger(21)
	if len(recs) != 21 {
		t.Fatalf("%d records for 21 requests", len(recs))
	}
	seen := map[string]int{}
	for _, rec := range recs {
		seen[rec["request_id"].(string)]++
		if rec["request_id"] == "rejected-1" {
			if rec["outcome"] != "rejected" || rec["status"].(float64) != 401 {
				t.Errorf("rejected record %v", rec)
			}
			continue
		}
		ledger := rec["ledger"].([]any)
		first, second := ledger[0].(map[string]any), ledger[1].(map[string]any)
		if len(ledger) != 2 || first["target"] != "t0" || first["status"].(float64) != 503 || first["action"] != "transfer" ||
			first["class"] != "server_error" || first["phase"] != "before_content" || second["action"] != "commit" || second["phase"] != "committed" {
			t.Errorf("ledger %v", ledger)
		}
		if rec["outcome"] != "ok_after_failover" || rec["target"] != "t1" || rec["family"] != "chat" || rec["model"] != "gpt-4o-mini" || rec["attempts"].(float64) != 2 {
			t.Errorf("record %v", rec)
		}
		if _, ok := first["duration_ms"].(float64); !ok {
			t.Errorf("no duration in %v", first)
		}
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("%s has %d records", id, n)
		}
	}
	for _, secret := range []string{"sk-upstream-key", "inbound-token-0003", "org-secret-0004", "Say hello", "the secret answer text", "prompt was"} {
		if strings.Contains(s.Log.String(), secret) {
			t.Errorf("the log contains %q", secret)
		}
	}
}

func TestLoadShedding(t *testing.T) {
	t.Parallel()
	slow := pt.JSON(200, pt.ChatCompletion("slow"))
	slow.Delay = 500 * time.Millisecond
	up := upstream(t, slow)
	s := start(t, env(targets(up.URL), []string{"FAILOVER_MAX_INFLIGHT=2"})...)
	var wg sync.WaitGroup
	results := make(chan sidecar.Response, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results <- s.Post("/chat/completions", chatBody)
		}()
		time.Sleep(30 * time.Millisecond)
	}
	wg.Wait()
	close(results)
	shed := 0
	for r := range results {
		if r.Status == 503 {
			shed++
			if r.Header.Get("Retry-After") != "1" || !strings.Contains(string(r.Body), `"code":"overloaded"`) {
				t.Errorf("shed answer %v %s", r.Header, r.Body)
			}
		}
	}
	if shed != 2 || up.Calls() != 2 {
		t.Fatalf("%d shed, %d upstream calls", shed, up.Calls())
	}
	rejected := 0
	for _, rec := range s.WaitLedger(4) {
		if rec["outcome"] == "rejected" {
			rejected++
		}
	}
	if rejected != 2 {
		t.Errorf("%d rejected records", rejected)
	}
}

func TestGracefulShutdownLetsAStreamFinish(t *testing.T) {
	t.Parallel()
	// About 1 s of stream: the checks below run well inside the drain.
	up := upstream(t, pt.SSE(pt.ChatStream(100*time.Millisecond, "one", "two", "three", "four", "five", "six", "seven", "eight")...))
	s := start(t, targets(up.URL)...)
	req, _ := http.NewRequest("POST", s.URL+"/chat/completions", strings.NewReader(streamBody))
	resp, err := sidecar.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Srv.Shutdown(ctx)
		close(done)
	}()
	// The probe listener answers until the drain is over, and says not ready; the proxy
	// listener takes nothing new. Both are polled briefly (Shutdown runs on its own goroutine),
	// for far less than the drain lasts.
	deadline := time.Now().Add(300 * time.Millisecond)
	for {
		ready, err := http.Get(s.Metrics + "/readyz")
		if err != nil {
			t.Fatalf("/readyz during the drain: %v", err)
		}
		ready.Body.Close()
		if ready.StatusCode == 503 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz = %d during shutdown, want 503", ready.StatusCode)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for {
		c, err := net.DialTimeout("tcp", s.Addr, time.Second)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("the proxy listener still accepts connections during the drain")
		}
		time.Sleep(10 * time.Millisecond)
	}
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 2 * time.Second}
	if r, err := fresh.Post(s.URL+"/chat/completions", "application/json", strings.NewReader(chatBody)); err == nil {
		r.Body.Close()
		t.Errorf("a new request during the drain was answered %d", r.StatusCode)
	}
	if up.Calls() != 1 {
		t.Errorf("%d upstream calls: a request that arrived during the drain was served", up.Calls())
	}
	body, err := readAll(resp)
	if err != nil || !strings.HasSuffix(body, pt.Done) {
		t.Fatalf("the stream did not finish cleanly: %v %q", err, body)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("shutdown did not return after the stream finished")
	}
}

// A connection a clean stream gave back to the server and that now waits for its next request
// is closed at shutdown like any idle keep-alive connection: the drain does not wait for
// fasthttp's 5 s grace for connections it was handed.
func TestShutdownClosesAnIdleConnectionAfterAStream(t *testing.T) {
	t.Parallel()
	up := upstream(t, pt.SSE(pt.ChatStream(0, "one", "two")...))
	s := start(t, targets(up.URL)...)
	c, err := net.Dial("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
		fmt.Sprint(len(streamBody)) + "\r\n\r\n" + streamBody
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if body, err := io.ReadAll(resp.Body); err != nil || !strings.HasSuffix(string(body), pt.Done) {
		t.Fatalf("stream: %v %q", err, body)
	}
	s.WaitLedger(1) // the stream has ended: the connection is back with the server, idle
	// fasthttp alone would take 5 s.
	shutdownClosesWaiting(t, s, c, br, "one idle connection after a stream")
}

// shutdownClosesWaiting shuts s down, once the client's connection c (read through br) waits
// for its next request, and checks that the drain did not wait for it and that it was closed.
func shutdownClosesWaiting(t *testing.T, s *sidecar.Sidecar, c net.Conn, br *bufio.Reader, what string) {
	t.Helper()
	time.Sleep(50 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	begin := time.Now()
	s.Srv.Shutdown(ctx)
	// This bound leaves room for a slow machine.
	if took := time.Since(begin); took > 3*time.Second {
		t.Fatalf("shutdown took %v with %s", took, what)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err == nil {
		t.Fatalf("shutdown left open %s", what)
	}
}

// /metrics types every family once (# TYPE), as the README's metrics table lists them.
func TestMetricsPageTypesEveryFamily(t *testing.T) {
	t.Parallel()
	s := start(t, targets(upstream(t).URL)...)
	page := s.ScrapeMetrics()
	types := map[string]string{}
	for _, line := range strings.Split(page, "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			if _, dup := types[f[2]]; dup {
				t.Errorf("%s is typed twice", f[2])
			}
			types[f[2]] = f[3]
		}
	}
	for name, want := range map[string]string{
		"failover_requests_total": "counter", "failover_attempts_total": "counter",
		"failover_upstream_first_byte_seconds": "histogram", "failover_request_duration_seconds": "histogram",
		"failover_overhead_seconds": "histogram", "failover_inflight_requests": "gauge", "failover_target_up": "gauge",
		"failover_target_ejections_total": "counter", "failover_stream_commits_total": "counter",
		"failover_budget_exhausted_total": "counter", "failover_empty_responses_total": "counter",
		"failover_dropped_headers_total": "counter", "failover_build_info": "gauge",
	} {
		if types[name] != want {
			t.Errorf("%s: # TYPE %q, want %q", name, types[name], want)
		}
	}
}

func TestOverheadExcludesUpstreamTime(t *testing.T) {
	t.Parallel()
	const upstreamTime = 300 * time.Millisecond
	slow := pt.JSON(200, pt.ChatCompletion("slow"))
	slow.Delay = upstreamTime
	answering := func(step pt.Step) func(t *testing.T) []string {
		return func(t *testing.T) []string { return targets(upstream(t, step).URL) }
	}
	tests := []struct {
		name    string
		targets func(t *testing.T) []string // the targets' environment
		path    string
		body    string
	}{
		{"non-streaming answer after a delay", answering(slow), "/chat/completions", chatBody},
		// role at 0, then content every 100 ms: finish at 300 ms, [DONE] at 400 ms.
		{"stream spread over time", answering(pt.SSE(pt.ChatStream(100*time.Millisecond, "one", "two")...)), "/chat/completions", streamBody},
		// Connecting is waiting on the target too: a connect that stalls until
		// FAILOVER_CONNECT_TIMEOUT, then the next target.
		{"connect stall, then a transfer", func(t *testing.T) []string {
			stalled, err := pt.NewStalledListener()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(stalled.Close)
			return env(targets(stalled.URL, upstream(t).URL), []string{"FAILOVER_CONNECT_TIMEOUT=" + upstreamTime.String()})
		}, "/chat/completions", chatBody},
		// A body too large for the socket buffers is written as fast as the target reads it
		// (not JSON, as an audio upload: the sidecar only forwards it).
		{"large body the target is slow to read", func(t *testing.T) []string {
			return targets(slowReader(t, upstreamTime))
		}, "/audio/transcriptions", strings.Repeat("x", 16<<20)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := start(t, tc.targets(t)...)
			const n = 1
			for range n {
				if r := s.Post(tc.path, tc.body); r.Status != 200 || r.Err != nil {
					t.Fatalf("status %d err %v", r.Status, r.Err)
				}
			}
			s.WaitLedger(n)
			page := s.ScrapeMetrics()
			if c := metric(page, `failover_overhead_seconds_count`); c != n {
				t.Fatalf("overhead count %v, want %d", c, n)
			}
			total := 0.0
			for _, family := range []string{"chat", "other"} {
				total += metric(page, `failover_request_duration_seconds_sum{family="`+family+`"}`)
			}
			overhead := metric(page, `failover_overhead_seconds_sum`)
			if total < n*upstreamTime.Seconds() {
				t.Fatalf("request duration sum %vs for %d requests of at least %v each", total, n, upstreamTime)
			}
			// Far below the upstream's time: the sidecar's own share is milliseconds, and a third
			// of the upstream time still leaves room for a slow machine.
			if overhead < 0 || overhead/n > upstreamTime.Seconds()/3 {
				t.Errorf("overhead %vs per request (of %vs in all): the upstream's time is counted as the sidecar's", overhead/n, total/n)
			}
		})
	}
}

// slowReader starts a target that reads nothing of a request for d, then reads it whole and
// answers a small chat completion; it returns its base URL.
func slowReader(t *testing.T, d time.Duration) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				time.Sleep(d)
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				io.Copy(io.Discard, req.Body) // the answer follows either way
				body := pt.ChatCompletion("ok")
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			}()
		}
	}()
	return "http://" + ln.Addr().String() + "/v1"
}

func TestShutdownTimeoutInterruptsAStream(t *testing.T) {
	t.Parallel()
	up := upstream(t, pt.SSE(pt.ChatStream(400*time.Millisecond, "one", "two", "three", "four", "five", "six")...))
	// One failure would eject: the sidecar cutting the stream must not count as one.
	s := start(t, env(targets(up.URL), []string{"FAILOVER_EJECT_AFTER=1"})...)
	req, _ := http.NewRequest("POST", s.URL+"/chat/completions", strings.NewReader(streamBody))
	resp, err := sidecar.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	go s.Srv.Shutdown(ctx)
	body, err := readAll(resp)
	if err == nil || !strings.Contains(body, `"code":"stream_interrupted"`) || !strings.Contains(body, "shutting down") {
		t.Fatalf("err=%v body=%q", err, body)
	}
	if rec := s.WaitLedger(1)[0]; rec["outcome"] != "partial" {
		t.Errorf("record %v", rec)
	}
	if ev := s.Records("target_ejected"); len(ev) != 0 {
		t.Errorf("the target was ejected for a stream the sidecar cut at shutdown: %v", ev)
	}
}

// A request still waiting when FAILOVER_SHUTDOWN_TIMEOUT ends, on an upstream or in a backoff,
// gets 503 shutting_down (the client is still there: it is no cancellation), and the wait the
// sidecar cut says nothing about the target: no failure, no ejection.
func TestShutdownTimeoutAnswersWaitingRequests(t *testing.T) {
	t.Parallel()
	busyFor3s := pt.JSON(503, pt.OpenAIError("busy", "server_error", ""), "Retry-After: 3")
	tests := []struct {
		name     string
		second   pt.Step // t0 answers 503 first
		extra    []string
		attempts string
	}{
		// Retry-After makes the wait 3 s, far past the shutdown timeout.
		{"in a backoff", busyFor3s, []string{"FAILOVER_SAME_TARGET_RETRIES=1"}, "1"},
		// One failure ejects: the wait the sidecar cut on t1 must not count as one.
		{"on an upstream that does not answer", pt.Step{Fault: pt.FaultStall}, []string{"FAILOVER_EJECT_AFTER=1"}, "2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := upstream(t, busyFor3s)
			b := upstream(t, tc.second)
			s := start(t, env(targets(a.URL, b.URL), noRetries, tc.extra)...)
			got := make(chan sidecar.Response, 1)
			go func() { got <- s.Post("/chat/completions", chatBody) }()
			// Waiting: t0 has answered (its attempt is logged), and the request waits for the
			// retry or on t1. (Reading the log also orders the request's start before Shutdown.)
			for deadline := time.Now().Add(5 * time.Second); len(s.Records("attempt")) == 0; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the first attempt was never logged")
				}
			}
			time.Sleep(100 * time.Millisecond)
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			s.Srv.Shutdown(ctx)
			r := <-got
			if r.Status != 503 || !strings.Contains(string(r.Body), `"code":"shutting_down"`) {
				t.Fatalf("got %d %s, want 503 shutting_down", r.Status, r.Body)
			}
			if r.Header.Get("X-Failover-Attempts") != tc.attempts || r.Header.Get("X-Request-Id") == "" {
				t.Errorf("headers %v, want X-Failover-Attempts %s", r.Header, tc.attempts)
			}
			if rec := s.WaitLedger(1)[0]; rec["outcome"] != "rejected" || rec["status"].(float64) != 503 {
				t.Errorf("record %v", rec)
			}
			for _, ev := range s.Records("target_ejected") {
				if ev["target"] != "t0" {
					t.Errorf("%v ejected: a wait the sidecar cut is no failure", ev["target"])
				}
			}
		})
	}
}

func readAll(resp *http.Response) (string, error) {
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			if err.Error() == "EOF" {
				return b.String(), nil
			}
			return b.String(), err
		}
	}
}

// TestTextLogCarriesNoTerminalEscapes: the path and the model are the client's, and the text
// log on a terminal (tint with colours) must not pass them to the terminal as escape
// sequences: raw, or written as the four characters \x1b after a backslash, which tint turns
// back into ESC when it quotes a value.
func TestTextLogCarriesNoTerminalEscapes(t *testing.T) {
	t.Parallel()
	up := upstream(t, pt.JSON(200, pt.ChatCompletion("hi")))
	cfg, err := config.Load(targets(up.URL), true)
	if err != nil {
		t.Fatal(err)
	}
	var out sidecar.SyncBuffer
	srv, err := proxy.New(cfg, proxy.Options{Logger: slog.New(tint.NewTextHandler(&out, &tint.Options{NoColor: false}))})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln) // ends with Shutdown
	t.Cleanup(func() { srv.Shutdown(context.Background()) })

	body := `{"model":"gpt-4o\u001b]0;owned\u001b\\\u001b[2J","messages":[]}`
	req := "POST /v1/chat/completions/%1b[1A%1b[2K%20\\x1b[1A\\x1b[2K HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, req)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var line string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if line = out.String(); strings.Contains(line, " request ") {
			break
		}
	}
	if !strings.Contains(line, "model=") || !strings.Contains(line, "path=") {
		t.Fatalf("no request record: %q", line)
	}
	// tint's own colours are SGR sequences (ESC [ digits m); any other ESC is the client's.
	if rest := regexp.MustCompile(`\x1b\[[0-9;]*m`).ReplaceAllString(line, ""); strings.Contains(rest, "\x1b") {
		t.Errorf("a client's escape sequence reached the terminal: %q", line)
	}
}

// A keep-alive connection whose answer's last write waits for the next request
// (netio.ClientConn) is idle to Shutdown: closed at once, not left to its read timeout.
// The second answer is the one that waits: by the first request's answer the client has not
// yet shown that it waits for its answers.
func TestShutdownClosesAConnectionWaitingAfterAnAnswer(t *testing.T) {
	t.Parallel()
	s := start(t, targets(upstream(t).URL)...)
	c, err := net.Dial("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
		fmt.Sprint(len(chatBody)) + "\r\n\r\n" + chatBody
	br := bufio.NewReader(c)
	for i := range 2 {
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadAll(resp.Body); err != nil || resp.StatusCode != 200 {
			t.Fatalf("answer %d: %d, %v", i, resp.StatusCode, err)
		}
		time.Sleep(20 * time.Millisecond) // the next request comes after the answer
	}
	// Without the connection list, the drain would wait for the shutdown's 30 s.
	shutdownClosesWaiting(t, s, c, br, "one connection waiting after an answer")
}
