package faults_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llm-failover/failover/proxy/internal/config"
	pt "github.com/llm-failover/failover/proxy/proxytest"
	"github.com/llm-failover/failover/proxy/proxytest/sidecar"
)

// The sidecar's own limits on clients (server.go): a request's headers and body must arrive
// within 120 s (the read timeout), an idle keep-alive connection is closed after 120 s, and a
// header block over 16 KiB is refused with 431.
const (
	serverReadTimeout = 120 * time.Second
	// compression shrinks the sidecar's socket deadlines in the slow-client tests, so its
	// 120 s read timeout takes 2 s here (see compressListener).
	compression = 60
)

// compressListener hands the server connections whose deadlines come compression times
// sooner than asked: the server's own read and idle timeouts then take seconds instead of
// minutes, and nothing else changes (the sidecar sets no other deadline on client
// connections). The connection is still a *net.TCPConn underneath, so the sidecar's
// client-liveness peek works as in production.
type compressListener struct {
	net.Listener
	factor time.Duration
}

func (l compressListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &compressConn{TCPConn: c.(*net.TCPConn), factor: l.factor}, nil
}

type compressConn struct {
	*net.TCPConn
	factor time.Duration
}

func (c *compressConn) scale(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	now := time.Now()
	return now.Add(t.Sub(now) / c.factor)
}

func (c *compressConn) SetDeadline(t time.Time) error { return c.TCPConn.SetDeadline(c.scale(t)) }
func (c *compressConn) SetReadDeadline(t time.Time) error {
	return c.TCPConn.SetReadDeadline(c.scale(t))
}
func (c *compressConn) SetWriteDeadline(t time.Time) error {
	return c.TCPConn.SetWriteDeadline(c.scale(t))
}

// startHostile runs a sidecar like sidecar.Start, on a compressListener.
func startHostile(t *testing.T, env ...string) *sidecar.Sidecar {
	t.Helper()
	cfg, err := config.Load(env, true)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return sidecar.StartWith(t, cfg, sidecar.Options{Wrap: func(ln net.Listener) net.Listener { return compressListener{ln, compression} }})
}

// rawAnswer is what a client that wrote raw bytes got back.
type rawAnswer struct {
	status int // 0 when the connection closed without a response
	body   []byte
	closed bool // the connection was closed after the answer (or instead of one)
	err    error
}

// rawRoundTrip writes payload on a fresh connection and reads one response (or the close).
// A write cut short by the server closing (a refused oversized request) is not an error.
func rawRoundTrip(addr string, payload []byte, wait time.Duration) rawAnswer {
	return rawExchange(addr, payload, wait, false, false)
}

// rawExchange is rawRoundTrip that, with closeWrite, half-closes the connection after the
// payload (the client is done sending, whatever it promised), and with checkClose finds out
// whether the server closed the connection after its answer.
func rawExchange(addr string, payload []byte, wait time.Duration, closeWrite, checkClose bool) rawAnswer {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return rawAnswer{err: err}
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(wait))
	c.Write(payload) // the server may refuse before reading it all
	if closeWrite {
		c.(*net.TCPConn).CloseWrite()
	}
	br := bufio.NewReader(c)
	a := readAnswer(br)
	if checkClose && a.status != 0 && !a.closed {
		c.SetReadDeadline(time.Now().Add(time.Second))
		if _, err := br.ReadByte(); err != nil && !isTimeoutErr(err) {
			a.closed = true
		}
	}
	return a
}

// readAnswer reads one response from br: its status and body, and closed when it announces
// the connection's close; a connection closed before any answer is closed with status 0, and
// a read that timed out is err.
func readAnswer(br *bufio.Reader) rawAnswer {
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		if isTimeoutErr(err) {
			return rawAnswer{err: err}
		}
		return rawAnswer{closed: true}
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return rawAnswer{status: resp.StatusCode, body: body, closed: resp.Close}
}

func isTimeoutErr(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// refusedCleanly reports whether a is a clear 4xx or a close without an answer.
func refusedCleanly(a rawAnswer) bool {
	return a.err == nil && (a.status == 0 && a.closed || a.status >= 400 && a.status < 500)
}

// basedUpstream starts an upstream and returns it with a target base URL that has a path of
// its own, so that escaping it would show.
func basedUpstream(t *testing.T, steps ...pt.Step) (*pt.Upstream, string) {
	up := upstream(t, steps...)
	return up, strings.TrimSuffix(up.URL, "/v1") + "/api/base/v1"
}

// checkContained fails for any request the upstream got outside the base path, raw or once
// decoded and normalised (as a server that decodes %2e%2e and cleans the path would see it).
func checkContained(t *testing.T, up *pt.Upstream) {
	t.Helper()
	for _, r := range up.Requests() {
		p, _, _ := strings.Cut(r.URI, "?")
		decoded, err := url.PathUnescape(p)
		if err != nil {
			decoded = p
		}
		if !strings.HasPrefix(p, "/api/base/v1/") || !strings.HasPrefix(path.Clean(decoded)+"/", "/api/base/v1/") ||
			strings.Contains("/"+p+"/", "/../") || strings.Contains(decoded, "/../") {
			t.Errorf("a request left the target's base path: %s %q", r.Method, r.URI)
		}
		if r.Host != strings.TrimPrefix(strings.TrimSuffix(up.URL, "/v1"), "http://") {
			t.Errorf("a request went out with Host %q", r.Host)
		}
	}
}

// checkStillServing: after the hostile input, the sidecar answers as before.
func checkStillServing(t *testing.T, s *sidecar.Sidecar) {
	t.Helper()
	if r, err := post(s, "/chat/completions", chatBody); err != nil || r.Status != 200 || r.Err != nil {
		t.Fatalf("the sidecar no longer serves: %v %d %v %s", err, r.Status, r.Err, r.Body)
	}
	resp, err := sidecar.Client.Get(strings.TrimSuffix(s.URL, "/v1") + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz: %v %v", err, resp)
	}
	resp.Body.Close()
}

// TestMalformedRequests: each malformed request gets a clear 4xx or a clean close, never
// reaches a target, and the sidecar keeps serving.
func TestMalformedRequests(t *testing.T) {
	t.Parallel()
	up, base := basedUpstream(t)
	s := startHostile(t, env([]string{"FAILOVER_TARGET_0_URL=" + base, "FAILOVER_TARGET_0_NAME=t0"}, timeouts)...)
	const cl2 = "Content-Length: 2\r\n\r\n{}"
	type row struct{ name, payload string }
	tests := []row{
		{"not HTTP", "GARBAGE\r\n\r\n"},
		{"binary junk", "\x00\x01\x02\x03\xff\xfe\r\n\r\n"},
		{"TLS handshake on the plain port", "\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + strings.Repeat("\x00", 40)},
		{"method only", "GET\r\n\r\n"},
		{"no version", "POST /v1/chat/completions\r\n\r\n"},
		{"header without a colon", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nNoColonHere\r\n" + cl2},
		{"NUL in a header value", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n" + cl2},
		{"space before a header colon", "POST /v1/chat/completions HTTP/1.1\r\nHost : x\r\n" + cl2},
		{"negative Content-Length", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n{}"},
		{"Content-Length not a number", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2abc\r\n\r\n{}"},
		{"two different Content-Lengths", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}x"},
		{"bad chunk size", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"},
		{"unknown transfer coding", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n{}"},
		{"body shorter than Content-Length, then close", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{}"},
		{"request line over 16 KiB", "GET /v1/" + strings.Repeat("a", 70000) + " HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"bare LF line ends", "POST /v1/chat/completions HTTP/1.1\nHost: x\nContent-Length: 2\n\n{}"},
		{"CONNECT", "CONNECT evil.example:443 HTTP/1.1\r\nHost: evil.example:443\r\n\r\n"},
		{"asterisk form", "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n"},
		// Header and request-line syntax.
		{"tab before a header colon", "POST /v1/chat/completions HTTP/1.1\r\nHost\t: x\r\n" + cl2},
		{"header name with a slash", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX/Y: a\r\n" + cl2},
		{"header name with UTF-8", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-\xc3\xa9: a\r\n" + cl2},
		{"empty header name", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n: a\r\n" + cl2},
		{"CR alone in a header value", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-A: a\rb\r\n" + cl2},
		{"first header line folded", "POST /v1/chat/completions HTTP/1.1\r\n Host: x\r\n" + cl2},
		{"two spaces in the request line", "GET  /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"space in the request target", "GET /v1/mo dels HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"tab in the request target", "GET /v1/mo\tdels HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"HTTP/0.9 request line", "GET /v1/models\r\n\r\n"},
		{"HTTP/2 preface on the HTTP/1.1 port", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"},
	}
	// The rows run at once (some wait out the compressed read timeout): none reaches the target,
	// so a row that did shows in its own count of calls.
	runConcurrently(t, tests, func(r row) string { return r.name }, func(t *testing.T, tc row) {
		before := up.Calls()
		a := rawExchange(s.Addr, []byte(tc.payload), 3*serverReadTimeout/compression, strings.HasSuffix(tc.name, "then close"), false)
		if !refusedCleanly(a) {
			t.Errorf("want a clear 4xx or a clean close, got status %d closed=%v err=%v body %q", a.status, a.closed, a.err, a.body)
		}
		if a.status >= 400 && !isErrorDocument(a.body) {
			t.Errorf("the %d is not a JSON error document: %q", a.status, a.body)
		}
		if up.Calls() != before {
			t.Errorf("a malformed request reached the target")
		}
	})
	// Request framing that is legal, or that the sidecar reads in one well-defined way: it
	// may be answered, and then only by the target, inside its base path.
	answered := []row{
		{"unknown HTTP minor version", "POST /v1/chat/completions HTTP/1.9\r\nHost: x\r\n" + cl2},
		{"absolute-form URI naming another host", "GET http://evil.example/v1/models HTTP/1.1\r\nHost: evil.example\r\n\r\n"},
		{"Content-Length and Transfer-Encoding (the chunked body wins, then close)", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"},
		{"folded header value (read with a space)", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Folded: a\r\n b\r\n" + cl2},
		{"UTF-8 in a header value", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Name: \xc3\xa9\r\n" + cl2},
		{"request target with a fragment", "GET /v1/models#fragment HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"unknown method", "FROB /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"HTTP/2.0 in an HTTP/1 request line", "GET /v1/models HTTP/2.0\r\nHost: x\r\n\r\n"},
	}
	runConcurrently(t, answered, func(r row) string { return r.name }, func(t *testing.T, tc row) {
		a := rawExchange(s.Addr, []byte(tc.payload), 3*serverReadTimeout/compression, false, true)
		if a.err != nil || a.status == 0 && !a.closed || a.status >= 500 {
			t.Errorf("got status %d closed=%v err=%v body %q", a.status, a.closed, a.err, a.body)
		}
		if strings.Contains(tc.name, "then close") && !a.closed {
			t.Errorf("a request with both Content-Length and Transfer-Encoding must close the connection after the answer (RFC 9112 section 6.3)")
		}
	})
	checkContained(t, up)
	checkStillServing(t, s)
}

// TestHugeHeaders: header blocks over 16 KiB get 431 (or a close for a block far too large
// to read), with a ledger record; just under the limit is served, with the header intact.
func TestHugeHeaders(t *testing.T) {
	t.Parallel()
	up, base := basedUpstream(t)
	s := startHostile(t, env([]string{"FAILOVER_TARGET_0_URL=" + base, "FAILOVER_TARGET_0_NAME=t0"}, timeouts)...)
	request := func(headers string) []byte {
		return []byte("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + headers +
			"Content-Length: " + itoa(len(chatBody)) + "\r\n\r\n" + chatBody)
	}
	var many strings.Builder
	for i := range 300 {
		many.WriteString("X-Filler-" + itoa(i) + ": " + strings.Repeat("v", 60) + "\r\n")
	}
	tests := []struct {
		name    string
		headers string
		want431 bool // else a 431 or a close
	}{
		{"one header of 20 KiB", "X-Big: " + strings.Repeat("a", 20<<10) + "\r\n", true},
		{"300 headers, 20 KiB in all", many.String(), true},
		{"one header of 1 MiB", "X-Huge: " + strings.Repeat("a", 1<<20) + "\r\n", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := up.Calls()
			a := rawRoundTrip(s.Addr, request(tc.headers), 3*serverReadTimeout/compression)
			if a.status != 431 && (tc.want431 || !(a.status == 0 && a.closed)) {
				t.Errorf("want 431, got status %d closed=%v err=%v body %q", a.status, a.closed, a.err, a.body)
			}
			if a.status == 431 && !isErrorDocument(a.body) {
				t.Errorf("the 431 is not a JSON error document: %q", a.body)
			}
			if up.Calls() != before {
				t.Errorf("an oversized request reached the target")
			}
		})
	}
	t.Run("just under the limit is served", func(t *testing.T) {
		before := up.Calls()
		a := rawRoundTrip(s.Addr, request("X-Big: "+strings.Repeat("b", 14<<10)+"\r\n"), 5*time.Second)
		if a.status != 200 || up.Calls() != before+1 || len(up.Requests()[before].Header["X-Big"]) != 14<<10 {
			t.Fatalf("status %d, upstream calls %d", a.status, up.Calls()-before)
		}
	})
	rejected := 0
	for _, rec := range s.Ledger() {
		if rec["status"] == float64(431) && rec["outcome"] == "rejected" {
			rejected++
		}
	}
	if rejected < 2 {
		t.Errorf("%d ledger records for the 431s, want one each", rejected)
	}
	checkStillServing(t, s)
}

// TestPathTraversal: no path, however encoded, reaches the target outside its base path.
func TestPathTraversal(t *testing.T) {
	t.Parallel()
	up, base := basedUpstream(t)
	s := startHostile(t, env([]string{"FAILOVER_TARGET_0_URL=" + base, "FAILOVER_TARGET_0_NAME=t0"}, timeouts)...)
	paths := []string{
		"/v1/../../etc/passwd",
		"/v1/../admin",
		"/v1/chat/completions/../../../admin",
		"/v1/%2e%2e/%2e%2e/admin",
		"/v1/%2E%2E/admin",
		"/v1/models/..%2f..%2f..%2fadmin",
		"/v1/models/..%2F..%2Fadmin",
		"/v1/models/%252e%252e/%252e%252e/admin",
		"/v1/models/%2e%2e%5c%2e%2e%5cadmin",
		"/v1/models\\..\\..\\admin",
		"/v1//../admin",
		"/v1/./../admin",
		"/v1/models/%00/../x",
		"/v1/models/\xff\xfe/../../admin",
		"/v1/models?path=../../admin",
		"/v1/models/.%2e/.%2e/admin",
		"//v1/../admin",
		"/v1/models/%c0%ae%c0%ae/admin",
	}
	for _, p := range paths {
		before := up.Calls()
		a := rawRoundTrip(s.Addr, []byte("GET "+p+" HTTP/1.1\r\nHost: x\r\n\r\n"), 5*time.Second)
		switch {
		case a.err != nil, a.status == 0 && !a.closed, a.status >= 500:
			t.Errorf("%q: got status %d closed=%v err=%v", p, a.status, a.closed, a.err)
		case up.Calls() == before && a.status != 0 && a.status != 404 && a.status != 400:
			t.Errorf("%q: answered %d without the target", p, a.status)
		}
	}
	checkContained(t, up)
	checkStillServing(t, s)
}

// TestUnknownPaths: what is not /v1/... gets a family-shaped 404 (probes answer as probes).
func TestUnknownPaths(t *testing.T) {
	t.Parallel()
	up, base := basedUpstream(t)
	s := startHostile(t, env([]string{"FAILOVER_TARGET_0_URL=" + base, "FAILOVER_TARGET_0_NAME=t0"}, timeouts)...)
	root := strings.TrimSuffix(s.URL, "/v1")
	for _, p := range []string{"/", "/v1", "/v2/chat/completions", "/V1/chat/completions", "/metrics", "/admin", "/favicon.ico", "/v1beta/models"} {
		for _, method := range []string{"GET", "POST", "DELETE"} {
			req, _ := http.NewRequest(method, root+p, strings.NewReader(chatBody))
			r, err := sidecar.Client.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", method, p, err)
			}
			body, _ := io.ReadAll(r.Body)
			r.Body.Close()
			if r.StatusCode != 404 || !isErrorDocument(body) {
				t.Errorf("%s %s: %d %q, want a 404 error document", method, p, r.StatusCode, body)
			}
		}
	}
	if up.Calls() != 0 {
		t.Errorf("an unknown path reached the target")
	}
	checkStillServing(t, s)
}

// TestHostileBodies: bodies that are not what an SDK sends are forwarded untouched (the
// target answers for itself) or refused with a clear 4xx; the scanner never misreads them.
func TestHostileBodies(t *testing.T) {
	t.Parallel()
	invalid := pt.OpenAIError("We could not parse the JSON body of your request.", "invalid_request_error", "")
	up, base := basedUpstream(t, pt.JSON(400, invalid))
	s := startHostile(t, env([]string{"FAILOVER_TARGET_0_URL=" + base, "FAILOVER_TARGET_0_NAME=t0", "FAILOVER_MAX_REQUEST_BYTES=4MiB"}, timeouts)...)
	hugeModel := strings.Repeat("m", 1<<20)
	tests := []struct {
		name   string
		body   string
		stream bool // how the sidecar must read it
	}{
		{"invalid JSON", `{"model":"gpt-4o-mini","messages":[`, false},
		{"not an object", `["model","gpt-4o-mini"]`, false},
		{"trailing garbage", `{"model":"gpt-4o-mini","stream":true} trailing`, false},
		{"deep nesting", `{"model":"gpt-4o-mini","messages":` + strings.Repeat("[", 1<<20) + strings.Repeat("]", 1<<20) + `}`, false},
		{"unterminated deep nesting", `{"model":"gpt-4o-mini","x":` + strings.Repeat(`{"a":[`, 100000), false},
		{"a model of 1 MiB", `{"model":"` + hugeModel + `","messages":[]}`, false},
		{"stream as a string", `{"model":"gpt-4o-mini","stream":"true","messages":[]}`, false},
		{"stream as a number", `{"model":"gpt-4o-mini","stream":1,"messages":[]}`, false},
		{"stream null", `{"model":"gpt-4o-mini","stream":null,"messages":[]}`, false},
		{"stream in a nested object", `{"model":"gpt-4o-mini","messages":[{"stream":true}]}`, false},
		{"model as an object", `{"model":{"name":"gpt-4o-mini"},"messages":[]}`, false},
		{"empty body", ``, false},
		{"binary body", "\x00\x01\x02{\"stream\":true}", false},
		{"duplicate stream keys, the last wins", `{"stream":false,"model":"gpt-4o-mini","stream":true}`, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := up.Calls()
			r, err := post(s, "/chat/completions", tc.body)
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != 400 || string(r.Body) != invalid {
				t.Fatalf("want the target's 400 unchanged, got %d %q", r.Status, r.Body)
			}
			if up.Calls() != before+1 || !bytes.Equal(up.Requests()[before].Body, []byte(tc.body)) {
				t.Fatalf("the body was not forwarded untouched")
			}
			recs := s.Ledger()
			rec := recs[len(recs)-1]
			if rec["stream"] != tc.stream {
				t.Errorf("read as stream=%v, want %v", rec["stream"], tc.stream)
			}
			if m, _ := rec["model"].(string); len(m) > 128 {
				t.Errorf("the ledger holds a model of %d bytes", len(m))
			}
		})
	}
	t.Run("a body over FAILOVER_MAX_REQUEST_BYTES gets 413", func(t *testing.T) {
		before := up.Calls()
		r, err := post(s, "/messages", `{"model":"claude","messages":[{"role":"user","content":"`+strings.Repeat("x", 5<<20)+`"}]}`)
		if err != nil {
			// The sidecar may answer and close before reading the whole body.
			t.Logf("client: %v", err)
		} else if r.Status != 413 || !isErrorDocument(r.Body) {
			t.Errorf("got %d %q", r.Status, r.Body)
		}
		if up.Calls() != before {
			t.Errorf("an oversized body reached the target")
		}
	})
	t.Run("a model of 1 MiB no target serves gets 404 no_target", func(t *testing.T) {
		s := startHostile(t, env([]string{"FAILOVER_TARGET_0_URL=" + base, "FAILOVER_TARGET_0_NAME=t0", "FAILOVER_TARGET_0_MODELS=gpt-4o*"}, timeouts)...)
		before := up.Calls()
		r, err := post(s, "/chat/completions", `{"model":"`+hugeModel+`","messages":[]}`)
		if err != nil || r.Status != 404 || !bytes.Contains(r.Body, []byte("no_target")) || up.Calls() != before {
			t.Fatalf("got %v %d %q", err, r.Status, r.Body)
		}
	})
	checkContained(t, up)
	up.Script(pt.JSON(200, pt.ChatCompletion("fine")))
	checkStillServing(t, s)
}

// TestSlowClients: clients that send their request slowly (slowloris headers, a dribbled
// body, a request that never ends) hold no target and block nobody, and are cut by the
// server's read timeout (120 s, compressed here to 2 s) with a 408 or a close. A slow client
// that finishes within the timeout is served.
func TestSlowClients(t *testing.T) {
	t.Parallel()
	up, base := basedUpstream(t)
	s := startHostile(t, env([]string{"FAILOVER_TARGET_0_URL=" + base, "FAILOVER_TARGET_0_NAME=t0"}, timeouts)...)
	timeout := serverReadTimeout / compression
	head := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
	slow := []struct {
		name  string
		first string // sent at once
		drip  string // then one byte every 100 ms, repeated
	}{
		{"slow headers", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n", "X-Slow: aaaaaaaaaaaaaaaaaaaa"},
		{"slow request line", "POST /v1/chat/comp", "letions"},
		{"slow body", head + "Content-Length: 100000\r\n\r\n{\"model\":\"gpt-4o-mini\",\"messages\":[", `{"role":"user","content":"x"},`},
		{"silent after connecting", "", ""},
		{"headers never finished", head, ""},
	}
	const perKind = 10
	var wg sync.WaitGroup
	results := make(chan string, len(slow)*perKind)
	for _, sc := range slow {
		for range perKind {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results <- dripUntilCut(s.Addr, sc.first, sc.drip, 4*timeout) + " (" + sc.name + ")"
			}()
		}
	}
	// While they hold their connections, everyone else is served.
	time.Sleep(200 * time.Millisecond)
	for i := range 20 {
		r, err := post(s, "/chat/completions", chatBody)
		if err != nil || r.Status != 200 || r.Err != nil {
			t.Fatalf("request %d while slow clients hold connections: %v %d", i, err, r.Status)
		}
	}
	// A slow client that finishes in time is served.
	a := dripRequest(s.Addr, []byte(head+"Content-Length: "+itoa(len(chatBody))+"\r\n\r\n"+chatBody), timeout/4)
	if a.status != 200 {
		t.Errorf("a slow client within the read timeout: status %d err %v", a.status, a.err)
	}
	wg.Wait()
	close(results)
	for r := range results {
		if !strings.HasPrefix(r, "cut") {
			t.Errorf("a slow client was not cut by the read timeout: %s", r)
		}
	}
	if up.Calls() != 21 {
		t.Errorf("upstream calls %d, want 21: a slow client's partial request reached the target", up.Calls())
	}
	checkStillServing(t, s)
}

// dripUntilCut sends first, then drip one byte every 100 ms (cycling), until the server ends
// the connection or limit passes. It reports "cut: <how>" or "not cut".
func dripUntilCut(addr, first, drip string, limit time.Duration) string {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return "dial: " + err.Error()
	}
	defer c.Close()
	end := time.Now().Add(limit)
	c.SetDeadline(end)
	if _, err := c.Write([]byte(first)); err != nil {
		return "cut: " + err.Error()
	}
	got := make(chan string, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		switch {
		case err == nil:
			resp.Body.Close()
			if resp.StatusCode == 408 || resp.StatusCode == 400 {
				got <- "cut: " + resp.Status
				return
			}
			got <- "answered " + resp.Status
		case isTimeoutErr(err):
			got <- "not cut"
		default:
			got <- "cut: " + err.Error()
		}
	}()
	for i := 0; ; i++ {
		select {
		case r := <-got:
			return r
		case <-time.After(100 * time.Millisecond):
		}
		if drip != "" {
			c.Write([]byte{drip[i%len(drip)]}) // the read side reports the end
		}
	}
}

// dripRequest sends a whole request one byte at a time over about d, then reads the answer.
// Each byte has its time (a fixed gap after each would add every sleep's overshoot, and on a
// loaded machine run past the server's read timeout).
func dripRequest(addr string, req []byte, d time.Duration) rawAnswer {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return rawAnswer{err: err}
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(d + 10*time.Second))
	begin := time.Now()
	for i := range req {
		if _, err := c.Write(req[i : i+1]); err != nil {
			return rawAnswer{err: err}
		}
		time.Sleep(time.Until(begin.Add(d * time.Duration(i+1) / time.Duration(len(req)))))
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return rawAnswer{err: err}
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return rawAnswer{status: resp.StatusCode, body: body}
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestBareLFIsRefusedAtOnce: a request head with a line that ends in LF alone gets 400 and a
// closed connection at once, not after the 120 s read timeout (the sidecar runs with its real
// timeouts here: a wait shows as the client's own deadline passing). Nothing reaches the target.
func TestBareLFIsRefusedAtOnce(t *testing.T) {
	t.Parallel()
	up, base := basedUpstream(t)
	s := start(t, env([]string{"FAILOVER_TARGET_0_URL=" + base, "FAILOVER_TARGET_0_NAME=t0"}, timeouts)...)
	const wait = 10 * time.Second // far below the read timeout, far above a loaded machine's answer
	post := func(eol, term string) string {
		return "POST /v1/chat/completions HTTP/1.1" + eol + "Host: x" + eol + "Content-Type: application/json" + eol +
			"Content-Length: 2" + term + "{}"
	}
	tests := []struct {
		name  string
		parts []string // written one after another, 50 ms apart (separate TCP segments)
	}{
		{"LF only", []string{"GET /v1/models HTTP/1.1\nHost: x\n\n"}},
		{"LF only, with a body", []string{post("\n", "\n\n")}},
		{"CRLF request line, LF header lines", []string{"GET /v1/models HTTP/1.1\r\nHost: x\n\n"}},
		{"CRLF lines, LF terminator", []string{"GET /v1/models HTTP/1.1\r\nHost: x\r\n\n"}},
		{"CRLF lines, LF then CRLF terminator", []string{"GET /v1/models HTTP/1.1\r\nHost: x\n\r\n"}},
		// fasthttp takes these (the block ends in CRLFCRLF) but reads a bare LF as a line end
		// where another server may not: refused too.
		{"LF request line, CRLF header lines", []string{"GET /v1/models HTTP/1.1\nHost: x\r\n\r\n"}},
		{"one LF header line among CRLF ones", []string{post("\r\n", "\r\nX-A: b\n\r\n")}},
		{"bare LF in a later segment", []string{"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n", "Content-Length: 2\n\n{}"}},
		{"bare LF alone in a later segment", []string{"GET /v1/models HTTP/1.1\r\nHost: x", "\n", "\n"}},
		{"CR in one segment, bare LF after the next", []string{"GET /v1/models HTTP/1.1\r", "\nHost: x\r\n\n"}},
		{"head longer than one read", []string{"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Pad: " + strings.Repeat("p", 6000) + "\r\nX-A: b\n\n"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := up.Calls()
			a := rawParts(s.Addr, tc.parts, wait)
			if a.err != nil || a.status != 400 || !a.closed || !isErrorDocument(a.body) {
				t.Errorf("got status %d closed=%v err=%v body %q; want a 400 error document and a close, at once", a.status, a.closed, a.err, a.body)
			}
			if up.Calls() != before {
				t.Errorf("the request reached the target")
			}
		})
	}
	t.Run("after a request on the same connection", func(t *testing.T) {
		// The second request is sent once the first is answered: one sent before would be
		// pipelined, read by fasthttp from its own buffer, and not scanned (headScan).
		c, err := net.Dial("tcp", s.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(wait))
		br := bufio.NewReader(c)
		io.WriteString(c, "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
		if a := readAnswer(br); a.status != 200 || a.closed {
			t.Fatalf("the first request: status %d closed=%v err=%v", a.status, a.closed, a.err)
		}
		io.WriteString(c, "GET /v1/models HTTP/1.1\nHost: x\n\n")
		a := readAnswer(br)
		if _, err := br.ReadByte(); err == nil || isTimeoutErr(err) {
			a.closed = false // the connection is still open
		}
		if a.err != nil || a.status != 400 || !a.closed {
			t.Errorf("the second request: status %d closed=%v err=%v; want 400 and a close, at once", a.status, a.closed, a.err)
		}
	})
	checkStillServing(t, s)
}

// TestSplitRequestsAreServed: a well-formed request split at any byte (two TCP segments, the
// second 2 ms after the first) is served, on one keep-alive connection; a body's own bare LFs
// are the body's, not line ends.
func TestSplitRequestsAreServed(t *testing.T) {
	t.Parallel()
	up, base := basedUpstream(t)
	s := start(t, env([]string{"FAILOVER_TARGET_0_URL=" + base, "FAILOVER_TARGET_0_NAME=t0"}, timeouts)...)
	body := "{\n\"model\": \"gpt-4o-mini\",\n\n\"messages\": []\n}\n\n"
	req := "\r\nPOST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Folded: a\r\n b\r\n" +
		"Content-Length: " + itoa(len(body)) + "\r\n\r\n" + body
	c, err := net.Dial("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for i := 1; i < len(req); i++ {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		before := up.Calls()
		c.Write([]byte(req[:i])) // the read below reports a failure
		time.Sleep(2 * time.Millisecond)
		c.Write([]byte(req[i:]))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("split at %d (%q|%q): %v", i, req[max(i-8, 0):i], req[i:min(i+8, len(req))], err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || up.Calls() != before+1 || string(up.Requests()[before].Body) != body {
			t.Fatalf("split at %d (%q|%q): status %d", i, req[max(i-8, 0):i], req[i:min(i+8, len(req))], resp.StatusCode)
		}
	}
}

// rawAnswers is what a client that wrote raw bytes got back for its first request and the
// one after it on the same connection.
type rawAnswers struct {
	rawAnswer
	next rawAnswer
}

// rawParts writes parts on a fresh connection, 50 ms apart (so that each is its own TCP
// segment and read), and reads the answer to each request on it (at most two), and whether
// the server closed the connection after them.
func rawParts(addr string, parts []string, wait time.Duration) rawAnswers {
	var out rawAnswers
	c, err := net.Dial("tcp", addr)
	if err != nil {
		out.err = err
		return out
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(wait))
	for i, p := range parts {
		if i > 0 {
			time.Sleep(50 * time.Millisecond)
		}
		c.Write([]byte(p)) // the server may refuse before reading it all
	}
	br := bufio.NewReader(c)
	read := func() rawAnswer {
		a := readAnswer(br)
		if a.status != 0 && a.closed {
			// Closed indeed: nothing more arrives, and the read ends at once.
			if _, err := br.ReadByte(); err == nil || isTimeoutErr(err) {
				a.closed = false
			}
		}
		return a
	}
	out.rawAnswer = read()
	if out.err == nil && out.status != 0 && !out.closed {
		out.next = read()
	}
	return out
}

// TestRequestFraming: every Content-Length and Transfer-Encoding variant is read one way only.
// Each request is followed on its connection by a second one (the smuggling marker): a
// refused framing closes the connection, so neither reaches the target; a framing that is
// read sends the target exactly its body, and then the marker arrives as a request of its own,
// with nothing of the first one's bytes (or the connection is closed after the answer, where
// RFC 9112 section 6.3 asks for it).
func TestRequestFraming(t *testing.T) {
	t.Parallel()
	up, base := basedUpstream(t)
	s := start(t, env([]string{"FAILOVER_TARGET_0_URL=" + base, "FAILOVER_TARGET_0_NAME=t0"}, timeouts)...)
	const marker = "GET /v1/models?smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
	post := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
	chunked := post + "Transfer-Encoding: chunked\r\n\r\n"
	const refused = "refused"
	tests := []struct {
		name    string
		payload string
		body    string // what the target gets, or refused
		close   bool   // the connection closes after the answer
	}{
		// Content-Length.
		{"Content-Length with a plus sign", post + "Content-Length: +2\r\n\r\n{}", refused, false},
		{"Content-Length as a list", post + "Content-Length: 2, 2\r\n\r\n{}", refused, false},
		{"two equal Content-Lengths", post + "Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}", refused, false},
		{"Content-Length in hex", post + "Content-Length: 0x2\r\n\r\n{}", refused, false},
		{"Content-Length with a fraction", post + "Content-Length: 2.0\r\n\r\n{}", refused, false},
		{"empty Content-Length", post + "Content-Length:\r\n\r\n{}", refused, false},
		{"Content-Length past 64 bits", post + "Content-Length: 99999999999999999999\r\n\r\n{}", refused, false},
		{"space before the Content-Length colon", post + "Content-Length : 2\r\n\r\n{}", refused, false},
		{"Content-Length with a vertical tab", post + "Content-Length: \x0b2\r\n\r\n{}", refused, false},
		{"Content-Length in lower case", post + "content-length: 2\r\n\r\n{}", "{}", false},
		{"Content-Length with leading zeros", post + "Content-Length: 002\r\n\r\n{}", "{}", false},
		{"Content-Length with spaces and tabs around", post + "Content-Length:\t2 \r\n\r\n{}", "{}", false},
		{"Content-Length folded onto the next line", post + "Content-Length:\r\n 2\r\n\r\n{}", "{}", false},
		{"Content-Length: 0", post + "Content-Length: 0\r\n\r\n", "", false},
		{"no length on a POST", post + "\r\n", "", false},
		{"GET with a Content-Length body", "GET /v1/models HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", "{}", false},
		{"Content_Length is no framing", post + "Content_Length: 40\r\nContent-Length: 2\r\n\r\n{}", "{}", false},
		// Transfer-Encoding.
		{"chunked, chunked", post + "Transfer-Encoding: chunked, chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", refused, false},
		{"gzip, chunked", post + "Transfer-Encoding: gzip, chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", refused, false},
		{"chunked, gzip", post + "Transfer-Encoding: chunked, gzip\r\n\r\n2\r\n{}\r\n0\r\n\r\n", refused, false},
		{"xchunked", post + "Transfer-Encoding: xchunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", refused, false},
		{"space before the Transfer-Encoding colon", post + "Transfer-Encoding : chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", refused, false},
		{"two Transfer-Encoding lines", post + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", refused, false},
		{"Transfer-Encoding with a vertical tab", post + "Transfer-Encoding: \x0bchunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", refused, false},
		{"Transfer-Encoding with a NUL", post + "Transfer-Encoding: chunked\x00\r\n\r\n2\r\n{}\r\n0\r\n\r\n", refused, false},
		{"empty Transfer-Encoding", post + "Transfer-Encoding:\r\nContent-Length: 2\r\n\r\n{}", refused, false},
		{"Transfer-Encoding: identity", post + "Transfer-Encoding: identity\r\n\r\n{}", refused, false},
		{"Transfer-Encoding in HTTP/1.0", "POST /v1/chat/completions HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", refused, false},
		{"Chunked in capitals", post + "Transfer-Encoding: Chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", "{}", false},
		{"chunked after a tab", post + "Transfer-Encoding:\tchunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", "{}", false},
		{"chunked folded onto the next line", post + "Transfer-Encoding:\r\n chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", "{}", false},
		{"GET with a chunked body", "GET /v1/models HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", "{}", false},
		{"Transfer_Encoding is no framing", post + "Transfer_Encoding: chunked\r\nContent-Length: 2\r\n\r\n{}", "{}", false},
		// Both: the chunked body wins, and the connection closes (RFC 9112 section 6.3).
		{"Content-Length then Transfer-Encoding", post + "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", "{}", true},
		{"Transfer-Encoding then Content-Length", post + "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n2\r\n{}\r\n0\r\n\r\n", "{}", true},
		{"Transfer-Encoding: identity with a Content-Length", post + "Transfer-Encoding: identity\r\nContent-Length: 2\r\n\r\n{}", "{}", true},
		// Chunk framing.
		{"chunk size in 0x form", chunked + "0x2\r\n{}\r\n0\r\n\r\n", refused, false},
		{"chunk size with a plus sign", chunked + "+2\r\n{}\r\n0\r\n\r\n", refused, false},
		{"chunk size after a space", chunked + " 2\r\n{}\r\n0\r\n\r\n", refused, false},
		{"chunk size past 64 bits", chunked + "ffffffffffffffffff\r\n{}\r\n0\r\n\r\n", refused, false},
		{"chunk lines ending in bare LF", chunked + "2\n{}\n0\n\n", refused, false},
		{"chunk longer than its size", chunked + "2\r\n{}xx\r\n0\r\n\r\n", refused, false},
		{"Content-Length in the trailer", chunked + "2\r\n{}\r\n0\r\nContent-Length: 50\r\n\r\n", refused, false},
		{"no last chunk", chunked + "2\r\n{}\r\n", refused, false},
		{"chunk extension", chunked + "2;name=value\r\n{}\r\n0\r\n\r\n", "{}", false},
		{"chunk size with leading zeros", chunked + "0002\r\n{}\r\n0000\r\n\r\n", "{}", false},
		{"chunk size in capitals", chunked + "A\r\n{\"a\":\"bc\"}\r\n0\r\n\r\n", `{"a":"bc"}`, false},
		{"trailer field", chunked + "2\r\n{}\r\n0\r\nX-Trailer: 1\r\n\r\n", "{}", false},
		{"empty chunked body", chunked + "0\r\n\r\n", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := up.Calls()
			a := rawParts(s.Addr, []string{tc.payload + marker}, 10*time.Second)
			reqs := up.Requests()[before:]
			if tc.body == refused {
				if !refusedCleanly(a.rawAnswer) || a.status != 0 && !a.closed || len(reqs) > 0 {
					t.Errorf("want a 4xx and a close, nothing at the target; got status %d closed=%v err=%v, %d upstream requests", a.status, a.closed, a.err, len(reqs))
				}
				return
			}
			if a.err != nil || a.status != 200 || len(reqs) == 0 || string(reqs[0].Body) != tc.body {
				t.Fatalf("want the target's 200 for a body of %q; got status %d err=%v, upstream %v", tc.body, a.status, a.err, describe(reqs))
			}
			switch {
			case tc.close:
				if !a.closed || len(reqs) != 1 {
					t.Errorf("want the connection closed after the answer; closed=%v, upstream %v", a.closed, describe(reqs))
				}
			case a.next.status != 200 || len(reqs) != 2 || reqs[1].URI != "/api/base/v1/models?smuggled" || len(reqs[1].Body) != 0:
				t.Errorf("the next request on the connection: status %d, upstream %v; want it whole and on its own", a.next.status, describe(reqs))
			}
		})
	}
	checkContained(t, up)
	checkStillServing(t, s)
}

// describe lists upstream requests for a failure message: method, URI and body size.
func describe(reqs []pt.Request) []string {
	var out []string
	for _, r := range reqs {
		out = append(out, r.Method+" "+r.URI+" ("+itoa(len(r.Body))+" bytes)")
	}
	return out
}

// TestHostTricks: the target always gets its own Host, whatever the client says its host is;
// a Host that makes the request ambiguous (two, none, a list, a path) is refused.
func TestHostTricks(t *testing.T) {
	t.Parallel()
	up, base := basedUpstream(t)
	s := start(t, env([]string{"FAILOVER_TARGET_0_URL=" + base, "FAILOVER_TARGET_0_NAME=t0"}, timeouts)...)
	get := "GET /v1/models HTTP/1.1\r\n"
	tests := []struct {
		name    string
		payload string
		served  bool
	}{
		{"another host", get + "Host: evil.example\r\n\r\n", true},
		{"a host with user info", get + "Host: user@evil.example\r\n\r\n", true},
		{"an IPv6 host with a port", get + "Host: [::1]:4000\r\n\r\n", true},
		{"a host between tabs", get + "Host:\tevil.example\t\r\n\r\n", true},
		{"X-Forwarded-Host beside it", get + "Host: x\r\nX-Forwarded-Host: evil.example\r\nForwarded: host=evil.example\r\n\r\n", true},
		{"absolute URI naming another host", "GET http://evil.example/v1/models HTTP/1.1\r\nHost: x\r\n\r\n", true},
		{"absolute https URI with user info", "GET https://user:pw@evil.example:8443/v1/models HTTP/1.1\r\nHost: evil.example\r\n\r\n", true},
		{"HTTP/1.0 without Host", "GET /v1/models HTTP/1.0\r\n\r\n", true},
		{"two Host lines", get + "Host: x\r\nHost: evil.example\r\n\r\n", false},
		{"empty Host", get + "Host:\r\n\r\n", false},
		{"HTTP/1.1 without Host", get + "\r\n", false},
		{"Host as a list", get + "Host: x, evil.example\r\n\r\n", false},
		{"Host with a path", get + "Host: evil.example/v1\r\n\r\n", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := up.Calls()
			a := rawRoundTrip(s.Addr, []byte(tc.payload), 10*time.Second)
			switch {
			case tc.served && (a.status != 200 || up.Calls() != before+1):
				t.Errorf("want it served by the target; got status %d err=%v, %d upstream calls", a.status, a.err, up.Calls()-before)
			case !tc.served && (!refusedCleanly(a) || up.Calls() != before):
				t.Errorf("want a clear 4xx or a close, nothing at the target; got status %d err=%v, %d upstream calls", a.status, a.err, up.Calls()-before)
			}
		})
	}
	checkContained(t, up) // the target's Host on every request, inside its base path
	checkStillServing(t, s)
}

// TestCredentialTricks: FAILOVER_INBOUND_TOKEN is accepted only where the README says
// (Authorization: Bearer, X-Api-Key), and nowhere near it; a client's credentials never reach a
// target that sends its own key, however they are spelt; the sidecar's own headers are not
// read from their underscore forms; and no credential is ever written to the log.
func TestCredentialTricks(t *testing.T) {
	t.Parallel()
	const token, targetKey, clientKey = "tok-inbound-not-a-key", "sk-target-not-a-key", "sk-client-not-a-key"
	up, base := basedUpstream(t)
	s := start(t, env([]string{"FAILOVER_TARGET_0_URL=" + base, "FAILOVER_TARGET_0_NAME=t0", "FAILOVER_TARGET_0_API_KEY=" + targetKey,
		"FAILOVER_INBOUND_TOKEN=" + token}, timeouts)...)
	get := "GET /v1/models HTTP/1.1\r\nHost: x\r\n"
	bearer := "Authorization: Bearer " + token + "\r\n"
	refused := []struct{ name, headers string }{
		{"no token", ""},
		{"token as X_Api_Key", "X_Api_Key: " + token + "\r\n"},
		{"token as Api-Key", "Api-Key: " + token + "\r\n"},
		{"token as Proxy-Authorization", "Proxy-Authorization: Bearer " + token + "\r\n"},
		{"token as Basic credentials", "Authorization: Basic dG9rLWluYm91bmQtbm90LWEta2V5\r\n"},
		{"token after Bearer without a space", "Authorization: Bearer" + token + "\r\n"},
		{"token with a suffix", "Authorization: Bearer " + token + "x\r\n"},
		{"token's prefix", "Authorization: Bearer " + token[:len(token)-1] + "\r\n"},
		{"token in a second Authorization line", "Authorization: Bearer wrong\r\n" + bearer},
		{"token in two Authorization values", "Authorization: Bearer wrong, Bearer " + token + "\r\n"},
		{"token in the query", ""}, // sent as ?api_key= below
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			req := get + tc.headers + "\r\n"
			if tc.name == "token in the query" {
				req = strings.Replace(req, "/v1/models", "/v1/models?api_key="+token+"&key="+token, 1)
			}
			before := up.Calls()
			if a := rawRoundTrip(s.Addr, []byte(req), 10*time.Second); a.status != 401 || up.Calls() != before {
				t.Errorf("want 401 and nothing at the target; got status %d err=%v", a.status, a.err)
			}
		})
	}
	accepted := []struct{ name, headers string }{
		{"the client's key in every spelling", bearer + "X-Api-Key: " + clientKey + "\r\nx-api-key: " + clientKey + "\r\nX-API-KEY: " + clientKey +
			"\r\nApi-Key: " + clientKey + "\r\nX-Goog-Api-Key: " + clientKey + "\r\nX_Api_Key: " + clientKey + "\r\nApi_Key: " + clientKey +
			"\r\nauthorization_: Bearer " + clientKey + "\r\nOpenAI-Organization: org-client\r\nOpenAI_Project: proj-client\r\n"},
		{"the client's key after the token", bearer + "Authorization: Bearer " + clientKey + "\r\n"},
		{"the target's key header named in Connection", bearer + "Connection: Authorization, X-Api-Key\r\n"},
		{"the token as X-Api-Key in capitals", "X-API-KEY: " + token + "\r\n"},
		{"underscore forms of the sidecar's headers", bearer + "X_Request_Id: spoofed-id\r\nX_Session_Id: s1\r\nX_Failover_Attempt: 9\r\n"},
	}
	for _, tc := range accepted {
		t.Run(tc.name, func(t *testing.T) {
			before := up.Calls()
			a := rawRoundTrip(s.Addr, []byte(get+tc.headers+"\r\n"), 10*time.Second)
			if a.status != 200 || up.Calls() != before+1 {
				t.Fatalf("want the target's 200; got status %d err=%v", a.status, a.err)
			}
			h := up.Requests()[before].Header
			for k, v := range h {
				if strings.Contains(v, clientKey) || strings.Contains(v, token) || strings.Contains(v, "-client") {
					t.Errorf("a client credential reached the target in %s", k)
				}
				if strings.Contains(k, "_") {
					t.Errorf("%s reached the target", k)
				}
			}
			if h["Authorization"] != "Bearer "+targetKey {
				t.Errorf("the target did not get its own key as Authorization")
			}
			if h["X-Request-Id"] == "spoofed-id" || h["X-Failover-Attempt"] != "1" {
				t.Errorf("X-Request-Id %q, X-Failover-Attempt %q: an underscore form was read as the sidecar's header", h["X-Request-Id"], h["X-Failover-Attempt"])
			}
		})
	}
	for _, secret := range []string{token, targetKey, clientKey} {
		if strings.Contains(s.Log.String(), secret) {
			t.Errorf("a credential (%d bytes) is in the log", len(secret))
		}
	}
	if r, err := post(s, "/chat/completions", chatBody, "Authorization: Bearer "+token); err != nil || r.Status != 200 {
		t.Fatalf("the sidecar no longer serves: %v %d", err, r.Status)
	}
}

// TestStickyIgnoresTheUnderscoreForm: with FAILOVER_STRATEGY=sticky, X_Session_Id is not
// X-Session-Id: sessions sent that way all go in declared order, as without the header.
func TestStickyIgnoresTheUnderscoreForm(t *testing.T) {
	t.Parallel()
	a, b := upstream(t), upstream(t)
	s := start(t, env(targets(a.URL, b.URL), []string{"FAILOVER_STRATEGY=sticky"}, timeouts)...)
	for i := range 16 {
		req := "GET /v1/models HTTP/1.1\r\nHost: x\r\nX_Session_Id: session-" + itoa(i) + "\r\n\r\n"
		if r := rawRoundTrip(s.Addr, []byte(req), 10*time.Second); r.status != 200 {
			t.Fatalf("status %d err=%v", r.status, r.err)
		}
	}
	if b.Calls() != 0 {
		t.Errorf("%d of 16 sessions went to the second target: X_Session_Id was hashed as the sticky header", b.Calls())
	}
	if a.Calls() != 16 {
		t.Errorf("the first target got %d of 16", a.Calls())
	}
}

// TestUpgrades: the sidecar never switches protocols. An Upgrade request (WebSocket, h2c) is
// forwarded as a plain request without Upgrade and the Connection options, answered as one,
// and the connection serves the next request; CONNECT and the HTTP/2 preface are refused
// (TestMalformedRequests).
func TestUpgrades(t *testing.T) {
	t.Parallel()
	up, base := basedUpstream(t)
	s := start(t, env([]string{"FAILOVER_TARGET_0_URL=" + base, "FAILOVER_TARGET_0_NAME=t0"}, timeouts)...)
	const next = "GET /v1/models?next HTTP/1.1\r\nHost: x\r\n\r\n"
	for _, tc := range []struct{ name, headers string }{
		{"WebSocket", "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"},
		{"h2c", "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n"},
		{"Upgrade without Connection", "Upgrade: websocket\r\n"},
		{"TLS upgrade", "Connection: Upgrade\r\nUpgrade: TLS/1.2\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := up.Calls()
			a := rawParts(s.Addr, []string{"GET /v1/realtime HTTP/1.1\r\nHost: x\r\n" + tc.headers + "\r\n" + next}, 10*time.Second)
			if a.status != 200 || a.next.status != 200 || up.Calls() != before+2 {
				t.Fatalf("want 200, then the next request served; got %d, %d (err %v), %d upstream calls", a.status, a.next.status, a.err, up.Calls()-before)
			}
			h := up.Requests()[before].Header
			for _, gone := range []string{"Upgrade", "Connection", "Http2-Settings"} {
				if _, ok := h[gone]; ok {
					t.Errorf("%s reached the target", gone)
				}
			}
		})
	}
	for _, method := range []string{"TRACE", "CONNECT"} {
		t.Run(method+" under /v1 is refused, never forwarded", func(t *testing.T) {
			before := up.Calls()
			a := rawParts(s.Addr, []string{method + " /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-client\r\n\r\n" + next}, 10*time.Second)
			if a.status != 405 || a.next.status != 200 || up.Calls() != before+1 {
				t.Fatalf("want 405, then the next request served; got %d, %d (err %v), %d upstream calls", a.status, a.next.status, a.err, up.Calls()-before)
			}
		})
	}
	t.Run("Expect: 100-continue", func(t *testing.T) {
		a := rawParts(s.Addr, []string{"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n{}"}, 10*time.Second)
		if a.status != 100 || a.next.status != 200 {
			t.Errorf("want 100 Continue, then the target's 200; got %d, %d (err %v)", a.status, a.next.status, a.err)
		}
		if h := up.Requests()[up.Calls()-1].Header; h["Expect"] != "" {
			t.Errorf("Expect reached the target")
		}
	})
	checkContained(t, up)
}

// TestHostileUpstreamAnswers: an answer whose framing or header block is broken is a failed
// attempt: the sidecar transfers to the next target, and nothing of the broken answer reaches
// the client. An upstream's own X-Failover-* headers, in any spelling, never do.
func TestHostileUpstreamAnswers(t *testing.T) {
	t.Parallel()
	body := pt.ChatCompletion("from the broken target")
	broken := func(header ...string) pt.Step {
		// Delay: written by hand on the socket, header lines as they are.
		return pt.Step{Header: append([]string{"Content-Type: application/json"}, header...), Body: body, Delay: time.Millisecond}
	}
	rows := []struct {
		name string
		step pt.Step
	}{
		{"two Content-Lengths", broken("Content-Length: 5")},
		{"negative Content-Length", broken("Content-Length: -1")},
		{"Content-Length and a chunked coding the body lacks", broken("Transfer-Encoding: chunked")},
		{"unknown transfer coding", broken("Transfer-Encoding: gzip")},
		{"identity transfer coding", broken("Transfer-Encoding: identity")},
		{"space before a header colon", broken("Content-Length : 5")},
		{"header line without a colon", broken("NoColonHere")},
		{"NUL in a header value", broken("X-A: a\x00b")},
		{"header block over the limit", broken("X-Big: " + strings.Repeat("a", 200<<10))},
		{"100 Continue and nothing after it", pt.Step{Status: 100, Delay: time.Millisecond}},
		{"not HTTP at all", pt.Step{Fault: pt.FaultGarbage}},
	}
	runConcurrently(t, rows, func(r struct {
		name string
		step pt.Step
	}) string {
		return r.name
	}, func(t *testing.T, r struct {
		name string
		step pt.Step
	}) {
		bad, good := upstream(t, r.step), upstream(t)
		s := start(t, env(targets(bad.URL, good.URL), timeouts)...)
		resp, err := post(s, "/chat/completions", chatBody)
		if err != nil || resp.Status != 200 || resp.Header.Get("X-Failover-Target") != "t1" || resp.Err != nil {
			t.Fatalf("want a transfer to t1 and its 200; got err %v, status %d from %q", err, resp.Status, resp.Header.Get("X-Failover-Target"))
		}
		if bytes.Contains(resp.Body, []byte("broken target")) || resp.Header.Get("X-Big") != "" || resp.Header.Get("X-A") != "" {
			t.Errorf("the broken answer reached the client")
		}
	})
	t.Run("an upstream's X-Failover-* in any spelling", func(t *testing.T) {
		up := upstream(t, broken("X-Failover-Target: spoof", "x-failover-attempts: spoof", "X_Failover_Model: spoof", "X-Kept: yes"))
		s := start(t, env(targets(up.URL), timeouts)...)
		resp, err := post(s, "/chat/completions", chatBody)
		if err != nil || resp.Status != 200 || resp.Header.Get("X-Kept") != "yes" {
			t.Fatalf("err %v, status %d", err, resp.Status)
		}
		for k, v := range resp.Header {
			if strings.Contains(strings.Join(v, ","), "spoof") {
				t.Errorf("the upstream's %s reached the client", k)
			}
		}
	})
}
