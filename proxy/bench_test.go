package proxy_test

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llm-failover/failover/proxy/internal/config"
	pt "github.com/llm-failover/failover/proxy/proxytest"
	"github.com/llm-failover/failover/proxy/proxytest/sidecar"
)

// The whole proxied request, over real loopback sockets: a fasthttp client with keep-alive,
// the sidecar, and upstreams. The upstream that serves answers from memory with keep-alive
// (like the nginx mock of testdata/bench/run.sh); the failing first targets of the transfer
// cases are proxytest scripts. Client, sidecar and upstreams share the process, so ns/op and
// allocs/op are the whole round trip's; TestProxyAllocs isolates the sidecar's own share.
//
//	go test -run xxx -bench BenchmarkProxy -benchmem ./proxy

// benchChatBody is the request every case sends (a short chat request, like an SDK's).
const benchChatBody = `{"model":"gpt-4o-mini","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Say hello in one word."}]}`

// benchStreamBody is the same request asking for a stream.
const benchStreamBody = `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Say hello in one word."}]}`

// benchCompletionSize is the size of the mock's chat completion in PERFORMANCE.md.
const benchCompletionSize = 641

// benchCompletion returns a chat completion of exactly size bytes (size >= 300).
func benchCompletion(size int) string {
	base := len(pt.ChatCompletion(""))
	return pt.ChatCompletion(strings.Repeat("x", size-base))
}

// benchSSE is a 21-event chat stream: the role, 18 content deltas, the finish, [DONE].
func benchSSE() string {
	var b strings.Builder
	for _, c := range pt.ChatStream(0, strings.Fields("Hello there! How can I help you today? I can answer questions, write, and explain things clearly .")[:18]...) {
		b.WriteString(c.Data)
	}
	return b.String()
}

// benchUpstream is a provider that answers every request from memory, with keep-alive: the
// chat completion, or the SSE body when the request asks for a stream. It records nothing
// (proxytest's upstream keeps a copy of every request, which would grow with b.N, and closes
// the connection after every stream).
type benchUpstream struct {
	URL string
	srv *fasthttp.Server
}

func newBenchUpstream(tb testing.TB, completion, sse string) *benchUpstream {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	json, events := []byte(completion), []byte(sse)
	ctJSON, ctSSE := []byte("application/json"), []byte("text/event-stream")
	streamKey := []byte(`"stream":true`)
	u := &benchUpstream{URL: "http://" + ln.Addr().String() + "/v1"}
	u.srv = &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			if bytes.Contains(ctx.PostBody(), streamKey) {
				ctx.Response.Header.SetContentTypeBytes(ctSSE)
				ctx.Response.SetBodyRaw(events)
				return
			}
			ctx.Response.Header.SetContentTypeBytes(ctJSON)
			ctx.Response.SetBodyRaw(json)
		},
		NoDefaultServerHeader: true,
		NoDefaultDate:         true,
		MaxRequestBodySize:    64 << 20,
		Logger:                quietBench{},
	}
	go u.srv.Serve(ln)                      // ends at Shutdown
	tb.Cleanup(func() { u.srv.Shutdown() }) // test helper
	return u
}

type quietBench struct{}

func (quietBench) Printf(string, ...any) {}

// benchSidecar runs the sidecar as the binary does in production: the JSON log at info level
// (one record per request), here written to io.Discard.
func benchSidecar(tb testing.TB, environ ...string) string {
	tb.Helper()
	cfg, err := config.Load(environ, true)
	if err != nil {
		tb.Fatal(err)
	}
	return sidecar.StartWith(tb, cfg, sidecar.Options{Log: io.Discard, Level: slog.LevelInfo}).Addr
}

// benchClient is a keep-alive client for one sidecar.
func benchClient(addr string) *fasthttp.HostClient {
	return &fasthttp.HostClient{Addr: addr, MaxConns: 64, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second,
		MaxResponseBodySize: 64 << 20, NoDefaultUserAgentHeader: true}
}

// benchRequest prepares a POST to path with body.
func benchRequest(addr, path string, body []byte, stream bool) *fasthttp.Request {
	req := fasthttp.AcquireRequest()
	req.SetRequestURI("http://" + addr + "/v1" + path)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	req.Header.Set("Authorization", "Bearer sk-bench-not-a-key")
	if stream {
		req.Header.Set("Accept", "text/event-stream")
	}
	req.SetBodyRaw(body)
	return req
}

// benchDo sends req and checks the answer: status 200, the attempts made (nil: not checked,
// the direct baseline has no sidecar), and the body's end.
func benchDo(b *testing.B, c *fasthttp.HostClient, req *fasthttp.Request, resp *fasthttp.Response, attempts, wantSuffix []byte) {
	if err := c.Do(req, resp); err != nil {
		b.Fatal(err)
	}
	if resp.StatusCode() != 200 || attempts != nil && !bytes.Equal(resp.Header.Peek("X-Failover-Attempts"), attempts) || !bytes.HasSuffix(resp.Body(), wantSuffix) {
		b.Fatalf("got %d attempts=%q body ...%q", resp.StatusCode(), resp.Header.Peek("X-Failover-Attempts"), tail(resp.Body(), 80))
	}
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// benchPolicy keeps a failing first target failing on every request of a benchmark: no
// ejection (it would be skipped after five failures), no retry budget (transfers past it
// would stop), and one attempt per target (one-transfer measures a transfer, not a retry
// with its backoff).
var benchPolicy = []string{"FAILOVER_EJECT_AFTER=0", "FAILOVER_RETRY_BUDGET_RATIO=0", "FAILOVER_LOG_LEVEL=info", "FAILOVER_SAME_TARGET_RETRIES=0"}

func BenchmarkProxy(b *testing.B) {
	completion, sse := benchCompletion(benchCompletionSize), benchSSE()
	good := newBenchUpstream(b, completion, sse)
	overloaded := upstream(b, pt.JSON(503, pt.OpenAIError("The server is overloaded. Please try again later.", "server_error", "")))
	streamFails := upstream(b, pt.SSE(pt.Events(0, pt.ChatRole, pt.ChatError("The server had an error while processing your request.", "server_error", ""))...))

	one, two := []byte("1"), []byte("2")
	cases := []struct {
		name     string
		urls     []string // nil: the client talks to the serving upstream directly
		body     string
		stream   bool
		attempts []byte
		suffix   string
	}{
		// The baseline: the same client and upstream without the sidecar between them.
		{"direct/non-streaming", nil, benchChatBody, false, nil, completion[len(completion)-20:]},
		{"direct/streaming", nil, benchStreamBody, true, nil, pt.Done},
		{"non-streaming/success", []string{good.URL}, benchChatBody, false, one, completion[len(completion)-20:]},
		{"non-streaming/one-transfer", []string{overloaded.URL, good.URL}, benchChatBody, false, two, completion[len(completion)-20:]},
		{"streaming/success", []string{good.URL}, benchStreamBody, true, one, pt.Done},
		{"streaming/one-transfer", []string{streamFails.URL, good.URL}, benchStreamBody, true, two, pt.Done},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			addr := strings.TrimSuffix(strings.TrimPrefix(good.URL, "http://"), "/v1")
			if c.urls != nil {
				addr = benchSidecar(b, env(targets(c.urls...), benchPolicy)...)
			}
			client := benchClient(addr)
			req := benchRequest(addr, "/chat/completions", []byte(c.body), c.stream)
			resp := fasthttp.AcquireResponse()
			suffix := []byte(c.suffix)
			benchDo(b, client, req, resp, c.attempts, suffix) // warm the pools
			b.ReportAllocs()
			for b.Loop() {
				benchDo(b, client, req, resp, c.attempts, suffix)
			}
		})
	}
}

// BenchmarkProxyLargeBody is the 32 MiB worst case at the default limits
// (FAILOVER_MAX_REQUEST_BYTES and FAILOVER_MAX_RESPONSE_BYTES are 32MiB): a request body of
// 32 MiB is scanned for model and stream and forwarded; a response of 32 MiB is held whole and
// classified before it is sent.
func BenchmarkProxyLargeBody(b *testing.B) {
	const size = 32 << 20
	completion := benchCompletion(benchCompletionSize)
	big := benchCompletion(size)
	prefix := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"`
	suffix := `"}]}`
	bigRequest := []byte(prefix + strings.Repeat("a", size-len(prefix)-len(suffix)) + suffix)

	cases := []struct {
		name       string
		completion string
		body       []byte
	}{
		{"request-32MiB", completion, bigRequest},
		{"response-32MiB", big, []byte(benchChatBody)},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			up := newBenchUpstream(b, c.completion, "")
			addr := benchSidecar(b, env(targets(up.URL), benchPolicy)...)
			client := benchClient(addr)
			req := benchRequest(addr, "/chat/completions", c.body, false)
			resp := fasthttp.AcquireResponse()
			want := []byte(c.completion[len(c.completion)-20:])
			benchDo(b, client, req, resp, []byte("1"), want)
			b.SetBytes(size)
			b.ReportAllocs()
			for b.Loop() {
				benchDo(b, client, req, resp, []byte("1"), want)
			}
		})
	}
}

// BenchmarkProxy128Targets is the largest configuration: 128 targets on the request path.
// round-robin spreads requests over all of them (128 connection pools); only-last-serves has
// 127 targets that do not serve the requested model, walked by every request.
func BenchmarkProxy128Targets(b *testing.B) {
	const n = 128
	completion := benchCompletion(benchCompletionSize)
	good := newBenchUpstream(b, completion, benchSSE())
	urls := make([]string, n)
	for i := range urls {
		urls[i] = good.URL
	}
	var onlyLast []string
	for i := 0; i < n-1; i++ {
		onlyLast = append(onlyLast, "FAILOVER_TARGET_"+strconv.Itoa(i)+"_MODELS=claude-*,gemini-*")
	}
	cases := []struct {
		name  string
		extra []string
	}{
		{"round-robin", []string{"FAILOVER_STRATEGY=round-robin"}},
		{"least-latency", []string{"FAILOVER_STRATEGY=least-latency"}},
		{"only-last-serves", onlyLast},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			addr := benchSidecar(b, env(targets(urls...), benchPolicy, c.extra)...)
			client := benchClient(addr)
			req := benchRequest(addr, "/chat/completions", []byte(benchChatBody), false)
			resp := fasthttp.AcquireResponse()
			want := []byte(completion[len(completion)-20:])
			for range 2 * n { // a connection in every pool
				benchDo(b, client, req, resp, []byte("1"), want)
			}
			b.ReportAllocs()
			for b.Loop() {
				benchDo(b, client, req, resp, []byte("1"), want)
			}
		})
	}
}

// TestBenchFixtures keeps the benchmark's shapes honest: the completion is the size
// PERFORMANCE.md measured with, and the stream has 21 events.
func TestBenchFixtures(t *testing.T) {
	if n := len(benchCompletion(benchCompletionSize)); n != benchCompletionSize {
		t.Errorf("completion is %d bytes, want %d", n, benchCompletionSize)
	}
	if n := strings.Count(benchSSE(), "\n\n"); n != 21 {
		t.Errorf("stream has %d events, want 21", n)
	}
	if !strings.HasSuffix(benchSSE(), pt.Done) {
		t.Errorf("stream does not end with [DONE]")
	}
}
