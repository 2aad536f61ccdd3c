package proxy

import (
	"bufio"
	"bytes"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/llm-failover/failover/budget"
	"github.com/llm-failover/failover/proxy/internal/config"
	"github.com/llm-failover/failover/proxy/internal/netio"
	pt "github.com/llm-failover/failover/proxy/proxytest"
)

// The sidecar's own allocations per request, apart from the client's and the upstream's that
// share the process in the loopback benchmarks: the proxy handler (serveProxy) is called
// directly with a fasthttp.RequestCtx prepared the way fasthttp's server prepares it, against
// an upstream on a real loopback socket that answers from memory without allocating. What is
// counted is everything the request path does: reading the request, building and writing the
// upstream request, parsing the response, the decision, the answer, metrics and the log
// record (JSON, info level, as in production). fasthttp's own reading of the client's request
// and writing of the response are not counted (they are zero in its steady state).
//
//	go test -run xxx -bench BenchmarkServeProxy -benchmem -memprofile mem.out ./proxy
//	go tool pprof -sample_index=alloc_objects -top mem.out

// maxAllocsPerRequest is the goal for a proxied non-streaming request (the performance issue).
const maxAllocsPerRequest = 10

func TestProxyAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	h := newHandlerBench(t, false)
	n := h.allocsPerRequest(t)
	t.Logf("allocations per proxied non-streaming request in the sidecar: %.1f (goal <= %d)", n, maxAllocsPerRequest)
	if n > maxAllocsPerRequest {
		t.Errorf("a proxied non-streaming request allocates %.1f times in the sidecar, want at most %d; "+
			"see the top sites with: go test -run xxx -bench BenchmarkServeProxy -benchmem -memprofile mem.out ./proxy && "+
			"go tool pprof -sample_index=alloc_objects -top mem.out", n, maxAllocsPerRequest)
	}
}

// maxAllocsServerPath bounds a whole proxied request through the real server: fasthttp's
// reading of the client's request and writing of the answer, netio.ClientConn, the handler. fasthttp
// itself allocates one byte per keep-alive request (the one-byte read of ReduceMemoryUsage
// escapes); nothing else may.
const maxAllocsServerPath = 1

// TestServerPathAllocs counts every allocation in the process while a raw keep-alive client
// (which allocates nothing) sends requests through Server.Serve on loopback to an upstream that
// allocates nothing: what TestProxyAllocs leaves out (the server loop, the client connection)
// is counted too.
// rateLimitHeaders are the quota headers OpenAI sends on every answer, and Anthropic's, which
// a gateway in front of both may pass on together: every one is read on every answer.
var rateLimitHeaders = []string{
	"x-ratelimit-limit-requests: 10000", "x-ratelimit-remaining-requests: 9999", "x-ratelimit-reset-requests: 6ms",
	"x-ratelimit-limit-tokens: 30000000", "x-ratelimit-remaining-tokens: 29999975", "x-ratelimit-reset-tokens: 2m59.56s",
	"anthropic-ratelimit-requests-limit: 4000", "anthropic-ratelimit-requests-remaining: 3999",
	"anthropic-ratelimit-requests-reset: 2026-03-01T12:00:00Z",
	"anthropic-ratelimit-input-tokens-limit: 2000000", "anthropic-ratelimit-input-tokens-remaining: 1998000",
	"anthropic-ratelimit-input-tokens-reset: 2026-03-01T12:00:01Z",
	"anthropic-ratelimit-output-tokens-limit: 400000", "anthropic-ratelimit-output-tokens-remaining: 0",
	"anthropic-ratelimit-output-tokens-reset: 2099-03-01T12:00:09Z",
}

// Reading an answer's rate-limit headers (docs/decisions.md, Rate limits) allocates nothing either, also
// while the target is rate-limited (a spent output-token quota: the one target is tried
// anyway, and each answer renews the limit).
func TestProxyAllocsRateLimitHeaders(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	h := newHandlerBenchHeaders(t, false, rateLimitHeaders...)
	n := h.allocsPerRequest(t)
	f := h.srv.targets[0].health.RateLimit().Figures()
	if f[budget.QuotaRequests].Remaining != 9999 || f[budget.QuotaTokens].Remaining != 29999975 ||
		f[budget.QuotaInputTokens].Remaining != 1998000 || !f[budget.QuotaOutputTokens].HasRemaining {
		t.Fatalf("the answers' figures were not read: %+v", f)
	}
	if h.srv.targets[0].health.RateLimit().Usable(h.srv.clock.Now()) {
		t.Fatal("the spent output-token quota did not limit the target")
	}
	plain := newHandlerBench(t, false)
	base := plain.allocsPerRequest(t)
	t.Logf("allocations per proxied request whose answer carries rate-limit headers: %.1f (without them %.1f)", n, base)
	if n > base {
		t.Errorf("reading an answer's rate-limit headers allocates: %.1f allocations per request, %.1f without them", n, base)
	}
}

// A request carrying W3C Trace Context costs nothing more: its trace id goes into the request
// record (docs/operations.md, The request record) without allocating.
func TestProxyAllocsTraceContext(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	plain := newHandlerBench(t, false)
	base := plain.allocsPerRequest(t)

	h := newHandlerBench(t, false)
	h.ctx.Request.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	h.ctx.Request.Header.Set("tracestate", "rojo=00f067aa0ba902b7")
	records := &countingWriter{needle: []byte(`"request_id":"`), also: []byte(`,"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736",`)}
	h.srv.log = slog.New(NewJSONHandler(records, slog.LevelInfo))
	n := h.allocsPerRequest(t)
	if records.n == 0 || records.with != records.n {
		t.Fatalf("%d of %d request records carry the trace id", records.with, records.n)
	}
	t.Logf("allocations per proxied request with a traceparent: %.1f (without one %.1f)", n, base)
	if n > base {
		t.Errorf("a request's traceparent allocates: %.1f allocations per request, %.1f without it", n, base)
	}
}

// countingWriter counts the writes that contain needle, and among them those that also
// contain also, allocating nothing.
type countingWriter struct {
	needle, also []byte
	n, with      int
}

func (w *countingWriter) Write(p []byte) (int, error) {
	if bytes.Contains(p, w.needle) {
		w.n++
		if bytes.Contains(p, w.also) {
			w.with++
		}
	}
	return len(p), nil
}

// noAllocsPortable: a request through the server allocates nothing on the raw socket path
// only; the portable one watches each upstream write from a goroutine (netio.Conn.Send).
const noAllocsPortable = "the portable socket path allocates a watch per upstream request"

func TestServerPathAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	if netio.Portable {
		t.Skip(noAllocsPortable)
	}
	srv, addr := startCannedServer(t)
	t.Cleanup(func() { srv.Shutdown(t.Context()) })
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hello in one word."}]}`
	roundTrip := rawRoundTrip(t, c, body)
	for range 10 { // warm the pools on both sides
		roundTrip()
	}
	n := testing.AllocsPerRun(500, roundTrip)
	t.Logf("allocations per proxied request through the server, whole process: %.2f (bound %d)", n, maxAllocsServerPath)
	if n > maxAllocsServerPath {
		t.Errorf("a proxied request through the server allocates %.2f times, want at most %d", n, maxAllocsServerPath)
	}
}

// rawRoundTrip returns a function that sends a chat request with body on c and reads its answer,
// a 200 with a Content-Length body, allocating nothing (a buffer for answers up to 64 KiB).
func rawRoundTrip(t *testing.T, c net.Conn, body string) func() {
	req := []byte("POST /v1/chat/completions HTTP/1.1\r\nHost: sidecar\r\nContent-Type: application/json\r\n" +
		"Authorization: Bearer sk-test-not-a-key\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
	buf := make([]byte, 64<<10)
	return func() {
		if _, err := c.Write(req); err != nil {
			t.Fatal(err)
		}
		n := 0
		for { // the answer's head, then its Content-Length body
			m, err := c.Read(buf[n:])
			if err != nil {
				t.Fatal(err)
			}
			n += m
			end := bytes.Index(buf[:n], cannedHeaderEnd)
			if end < 0 {
				continue
			}
			if !bytes.HasPrefix(buf, []byte("HTTP/1.1 200")) {
				t.Fatalf("answer %q", buf[:n])
			}
			i := bytes.Index(buf[:end+2], cannedContentLength)
			if i < 0 {
				t.Fatalf("no Content-Length in %q", buf[:end])
			}
			length := 0
			for _, d := range buf[i+len(cannedContentLength):] {
				if d < '0' || d > '9' {
					break
				}
				length = length*10 + int(d-'0')
			}
			if n >= end+4+length {
				return
			}
		}
	}
}

// TestMixedAnswersAllocs: answers of different sizes on the same server allocate no more than
// one size alone, also once fasthttp's pool of body buffers has learnt from tens of thousands
// of small answers to drop larger buffers (fasthttp recalibrates it every 42,000 answers of a
// size): a stream that arrives whole (3.7 KB) between chat completions (641 B) keeps its buffer
// (netio.ClientConn.LendBody).
func TestMixedAnswersAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	if netio.Portable {
		t.Skip(noAllocsPortable)
	}
	if testing.Short() {
		t.Skip("43,000 requests")
	}
	var sse strings.Builder
	for _, c := range pt.ChatStream(0, strings.Fields("Hello there! How can I help you today? I can answer questions, write, and explain things clearly")...) {
		sse.WriteString(c.Data)
	}
	up := startCannedUpstream(t, cannedResponse("application/json", benchCompletion(641)), cannedResponse("text/event-stream", sse.String()))
	srv, addr := startServer(t, "http://"+up+"/v1")
	t.Cleanup(func() { srv.Shutdown(t.Context()) })
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	chat := rawRoundTrip(t, c, `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hello in one word."}]}`)
	stream := rawRoundTrip(t, c, `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"Say hello in one word."}]}`)
	for range 43_000 {
		chat()
	}
	for range 10 {
		stream()
		chat()
	}
	n := testing.AllocsPerRun(500, func() { stream(); chat() })
	t.Logf("allocations per pair of a whole stream and a chat completion, whole process: %.2f (bound %d)", n, 2*maxAllocsServerPath)
	if n > 2*maxAllocsServerPath {
		t.Errorf("a whole stream and a chat completion allocate %.2f times, want at most %d", n, 2*maxAllocsServerPath)
	}
}

// TestProxyStreamAllocs reports (does not assert: the issue sets no goal for it) the
// allocations of a streaming request, committed and piped to its end.
func TestProxyStreamAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	h := newHandlerBench(t, true)
	n := h.allocsPerRequest(t)
	t.Logf("allocations per proxied streaming request (21 events) in the sidecar: %.1f", n)
}

// BenchmarkServeProxy is the sidecar's own work per request, without the client's and the
// fasthttp server's: what TestProxyAllocs counts, for CPU and memory profiles.
func BenchmarkServeProxy(b *testing.B) {
	hedging := []string{"FAILOVER_TARGET_1_URL=http://{up}/v1", "FAILOVER_TARGET_1_NAME=t1", "FAILOVER_HEDGE_AFTER=10s"}
	for _, bc := range []struct {
		name      string
		streaming bool
		header    []string
		env       []string
	}{
		{"non-streaming", false, nil, nil},
		{"streaming", true, nil, nil},
		{"non-streaming with rate-limit headers", false, rateLimitHeaders, nil},
		// Hedging on, two targets: the request is raced (its attempt on a leg) but commits long
		// before the delay, so it is never hedged.
		{"non-streaming, hedging on, not hedged", false, nil, hedging},
		{"streaming, hedging on, not hedged", true, nil, hedging},
	} {
		b.Run(bc.name, func(b *testing.B) {
			h := newHandlerBenchEnv(b, bc.streaming, bc.env, bc.header...)
			h.serve(b)
			b.ReportAllocs()
			for b.Loop() {
				h.serve(b)
			}
		})
	}
}

// handlerBench drives Server.serveProxy directly.
type handlerBench struct {
	srv       *Server
	ctx       *fasthttp.RequestCtx
	streaming bool
	out       *bufio.Writer // the client's side of a committed stream, discarded
	want      []byte        // the end of the body the client must get
}

func newHandlerBench(tb testing.TB, streaming bool) *handlerBench {
	tb.Helper()
	return newHandlerBenchHeaders(tb, streaming)
}

// newHandlerBenchHeaders is newHandlerBench whose upstream answers carry the header lines
// given ("Name: value").
func newHandlerBenchHeaders(tb testing.TB, streaming bool, header ...string) *handlerBench {
	tb.Helper()
	return newHandlerBenchEnv(tb, streaming, nil, header...)
}

// newHandlerBenchEnv is newHandlerBenchHeaders with more configuration: in env, {up} is the
// canned upstream's address.
func newHandlerBenchEnv(tb testing.TB, streaming bool, env []string, header ...string) *handlerBench {
	tb.Helper()
	completion := benchCompletion(641)
	var sse strings.Builder
	for _, c := range pt.ChatStream(0, strings.Fields("Hello there! How can I help you today? I can answer questions, write, and explain things clearly")...) {
		sse.WriteString(c.Data)
	}
	upAddr := startCannedUpstream(tb, cannedResponse("application/json", completion, header...), cannedResponse("text/event-stream", sse.String(), header...))

	environ := []string{"FAILOVER_TARGET_0_URL=http://" + upAddr + "/v1", "FAILOVER_TARGET_0_NAME=t0"}
	for _, e := range env {
		environ = append(environ, strings.ReplaceAll(e, "{up}", upAddr))
	}
	cfg, err := config.Load(environ, true)
	if err != nil {
		tb.Fatal(err)
	}
	log := slog.New(NewJSONHandler(io.Discard, slog.LevelInfo))
	srv, err := New(cfg, Options{Logger: log})
	if err != nil {
		tb.Fatal(err)
	}

	// The client's connection is a real loopback socket, as fasthttp's server would hold it,
	// so the slow-path "client gone?" checks see a live peer.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { client.Close() })
	conn, err := ln.Accept()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })

	ctx := &fasthttp.RequestCtx{}
	ctx.Init2(conn, quietLogger{}, false) // as fasthttp.Server does with ReduceMemoryUsage off
	req := &ctx.Request
	req.SetRequestURI("/v1/chat/completions")
	req.Header.SetHost("127.0.0.1:4000")
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	req.Header.Set("Authorization", "Bearer sk-bench-not-a-key")
	req.Header.Set("User-Agent", "OpenAI/Python 1.54.0")
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hello in one word."}]}`
	want := completion[len(completion)-20:]
	if streaming {
		body = `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"Say hello in one word."}]}`
		req.Header.Set("Accept", "text/event-stream")
		want = pt.Done
	}
	req.SetBodyString(body)
	tb.Cleanup(func() { srv.Shutdown(tb.Context()) })
	return &handlerBench{srv: srv, ctx: ctx, streaming: streaming, out: bufio.NewWriterSize(io.Discard, 4096), want: []byte(want)}
}

// allocsPerRequest returns the allocations of one request through the handler, counted over
// 500 once two have warmed the pools (the exchange, the upstream connection, buffers, metrics
// series).
func (h *handlerBench) allocsPerRequest(tb testing.TB) float64 {
	h.serve(tb)
	h.serve(tb)
	return testing.AllocsPerRun(500, func() { h.serve(tb) })
}

// serve runs one request through the handler; a committed stream is then written out the way
// fasthttp's server writes it (reading the pipe to its end and closing it).
func (h *handlerBench) serve(tb testing.TB) {
	ctx := h.ctx
	ctx.Response.Reset()
	h.srv.serveProxy(ctx)
	if ctx.Response.StatusCode() != 200 {
		tb.Fatalf("status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
	if !ctx.Response.IsBodyStream() {
		// A non-streaming answer, or a stream that arrived whole (terminal event included)
		// before it committed: either is sent as one body.
		if !bytes.HasSuffix(ctx.Response.Body(), h.want) {
			tb.Fatalf("body %q", ctx.Response.Body())
		}
		return
	}
	if err := ctx.Response.Write(h.out); err != nil {
		tb.Fatal(err)
	}
	h.out.Flush() // io.Discard
}

// cannedResponse is an HTTP/1.1 keep-alive response with a Content-Length body, and the
// header lines given ("Name: value").
func cannedResponse(contentType, body string, header ...string) []byte {
	var extra strings.Builder
	for _, h := range header {
		extra.WriteString(h + "\r\n")
	}
	return []byte("HTTP/1.1 200 OK\r\nContent-Type: " + contentType + "\r\n" + extra.String() + "Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
}

// benchCompletion returns a chat completion of exactly size bytes (size >= 300).
func benchCompletion(size int) string {
	return pt.ChatCompletion(strings.Repeat("x", size-len(pt.ChatCompletion(""))))
}

// startCannedServer runs a Server, logging at info level as in production, whose one target
// (t0) is a canned upstream answering chat completions (startCannedUpstream). It returns the
// server and its proxy listener's address; the caller shuts it down.
func startCannedServer(t *testing.T) (*Server, string) {
	t.Helper()
	up := startCannedUpstream(t, cannedResponse("application/json", benchCompletion(641)), nil)
	return startServer(t, "http://"+up+"/v1")
}

// startServer runs a Server, logging at info level as in production, whose one target (t0) is
// at url. It returns the server and its proxy listener's address; the caller shuts it down.
func startServer(t *testing.T, url string) (*Server, string) {
	t.Helper()
	cfg, err := config.Load([]string{"FAILOVER_TARGET_0_URL=" + url, "FAILOVER_TARGET_0_NAME=t0"}, true)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(cfg, Options{Logger: slog.New(NewJSONHandler(io.Discard, slog.LevelInfo))})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln) // ends with Shutdown
	return srv, ln.Addr().String()
}

// startCannedUpstream serves keep-alive HTTP/1.1 on loopback from memory, without allocating
// per request (so that testing.AllocsPerRun counts only the sidecar): each request, read up
// to its Content-Length body, is answered with sse when its body asks for a stream, else with
// json. It returns the listener's address.
func startCannedUpstream(tb testing.TB, json, sse []byte) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serveCanned(c, json, sse)
		}
	}()
	return ln.Addr().String()
}

var (
	cannedHeaderEnd     = []byte("\r\n\r\n")
	cannedContentLength = []byte("\r\nContent-Length: ")
	cannedStream        = []byte(`"stream":true`)
)

func serveCanned(c net.Conn, json, sse []byte) {
	defer c.Close()
	buf := make([]byte, 64<<10)
	n := 0
	for {
		m, err := c.Read(buf[n:])
		if err != nil {
			return
		}
		n += m
		for {
			end := bytes.Index(buf[:n], cannedHeaderEnd)
			if end < 0 {
				break
			}
			head := buf[:end+2]
			bodyLen := 0
			if i := bytes.Index(head, cannedContentLength); i >= 0 {
				for _, d := range head[i+len(cannedContentLength):] {
					if d < '0' || d > '9' {
						break
					}
					bodyLen = bodyLen*10 + int(d-'0')
				}
			}
			total := end + 4 + bodyLen
			if total > len(buf) {
				return // larger than this upstream serves
			}
			if n < total {
				break
			}
			resp := json
			if bytes.Contains(buf[end+4:total], cannedStream) {
				resp = sse
			}
			if _, err := c.Write(resp); err != nil {
				return
			}
			n = copy(buf, buf[total:n])
		}
	}
}

// Merging the client's query decodes its keys while comparing them: nothing is allocated.
func TestUpstreamURIAllocs(t *testing.T) {
	tg := &Target{basePath: []byte("/v1"), query: []byte("api-version=2024-10-21"), queryKey: [][]byte{[]byte("api-version")}}
	path, query := []byte("/v1/chat/completions"), []byte("api%2Dversion=evil&x+y=1&api-versio%6E=evil&b=%20x")
	dst := appendUpstreamURI(nil, tg, path, query)
	if want := "/v1/chat/completions?api-version=2024-10-21&x+y=1&b=%20x"; string(dst) != want {
		t.Fatalf("got %s, want %s", dst, want)
	}
	if n := testing.AllocsPerRun(200, func() { dst = appendUpstreamURI(dst[:0], tg, path, query) }); n != 0 {
		t.Errorf("%v allocations per upstream URI, want 0", n)
	}
}

// A target's _PATHS are matched against the request path without a copy: nothing is allocated.
func TestServesAllocs(t *testing.T) {
	tg := &Target{paths: [][]byte{[]byte("/v1/embeddings"), []byte("/v1/chat")}}
	path, other := []byte("/v1/chat/completions"), []byte("/v1/chatter")
	if !tg.serves(path, nil) || tg.serves(other, nil) {
		t.Fatal("the path prefix does not match on whole segments")
	}
	if n := testing.AllocsPerRun(200, func() { tg.serves(path, nil); tg.serves(other, nil) }); n != 0 {
		t.Errorf("%v allocations per path match, want 0", n)
	}
}

// With hedging on, a request that commits before the hedge delay is raced (its attempt runs on a
// leg while the handler watches the delay) but never hedged: it allocates no more than with
// hedging off. A hedge itself may allocate.
func TestUnhedgedRequestAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	for _, streaming := range []bool{false, true} {
		// Against the same request with hedging off: none on the raw socket path, the portable
		// path's own watch per upstream request there.
		off := newHandlerBenchEnv(t, streaming, []string{"FAILOVER_TARGET_1_URL=http://{up}/v1", "FAILOVER_TARGET_1_NAME=t1"}).allocsPerRequest(t)
		h := newHandlerBenchEnv(t, streaming, []string{"FAILOVER_TARGET_1_URL=http://{up}/v1", "FAILOVER_TARGET_1_NAME=t1",
			"FAILOVER_HEDGE_AFTER=10s"})
		if n := h.allocsPerRequest(t); n > off || !netio.Portable && n != 0 {
			t.Errorf("streaming %v: a request hedging could have raced allocates %.1f times, with hedging off %.1f", streaming, n, off)
		}
	}
}
