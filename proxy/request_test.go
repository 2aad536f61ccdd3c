package proxy_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	pt "github.com/llm-failover/failover/proxy/proxytest"
)

// rawRequest writes a raw HTTP/1.1 request to the sidecar and returns the status line.
func rawRequest(t *testing.T, addr, req string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "closed: " + err.Error()
	}
	return strings.TrimSpace(line)
}

func TestPathMapping(t *testing.T) {
	t.Parallel()
	up := upstream(t)
	s := start(t, "FAILOVER_TARGET_0_URL="+strings.TrimSuffix(up.URL, "/v1")+"/api/openai/v1?api-version=2024-10-21")
	tests := []struct{ path, want string }{
		{"/v1/chat/completions", "/api/openai/v1/chat/completions?api-version=2024-10-21"},
		{"/v1/chat/completions?api-version=evil&foo=1", "/api/openai/v1/chat/completions?api-version=2024-10-21&foo=1"},
		// The client's key is compared percent-decoded, as the upstream will read it.
		{"/v1/chat/completions?api%2Dversion=evil&foo=1", "/api/openai/v1/chat/completions?api-version=2024-10-21&foo=1"},
		{"/v1/chat/completions?api-versio%6E=evil", "/api/openai/v1/chat/completions?api-version=2024-10-21"},
		{"/v1/chat/completions?%61pi%2dversion=evil", "/api/openai/v1/chat/completions?api-version=2024-10-21"},
		{"/v1/chat/completions?api%2Dversion", "/api/openai/v1/chat/completions?api-version=2024-10-21"},
		{"/v1/chat/completions?a=1&a=2&b=%20x", "/api/openai/v1/chat/completions?api-version=2024-10-21&a=1&a=2&b=%20x"},
		// And in any case: a server that reads keys case-insensitively takes them for its own.
		{"/v1/chat/completions?API-VERSION=evil&foo=1", "/api/openai/v1/chat/completions?api-version=2024-10-21&foo=1"},
		{"/v1/chat/completions?Api-Version=evil", "/api/openai/v1/chat/completions?api-version=2024-10-21"},
		{"/v1/chat/completions?API%2DVERSION=evil", "/api/openai/v1/chat/completions?api-version=2024-10-21"},
		{"/v1/chat/completions?%41PI-version=evil", "/api/openai/v1/chat/completions?api-version=2024-10-21"},
		{"/v1/chat/completions?API-VERSION", "/api/openai/v1/chat/completions?api-version=2024-10-21"},
		{"/v1/chat/completions?API-VERSIONS=x", "/api/openai/v1/chat/completions?api-version=2024-10-21&API-VERSIONS=x"},
		{"/v1/chat/completions?api-version%3Devil", "/api/openai/v1/chat/completions?api-version=2024-10-21&api-version%3Devil"},
		{"/v1/chat/completions?api-version%zz=1&api-version%", "/api/openai/v1/chat/completions?api-version=2024-10-21&api-version%zz=1&api-version%"},
		{"/v1/chat/completions?api%252Dversion=1", "/api/openai/v1/chat/completions?api-version=2024-10-21&api%252Dversion=1"},
		{"/v1/../../admin", "/api/openai/v1/admin?api-version=2024-10-21"},
		{"/v1/chat/../../../secret", "/api/openai/v1/secret?api-version=2024-10-21"},
		{"/v1//chat//completions", "/api/openai/v1/chat/completions?api-version=2024-10-21"},
		{"/v1/%2e%2e/%2e%2e/admin", "/api/openai/v1/admin?api-version=2024-10-21"},
		{"/v1/models/gpt%2F4o", "/api/openai/v1/models/gpt/4o?api-version=2024-10-21"},
		{"/v1/files/a%20b", "/api/openai/v1/files/a%20b?api-version=2024-10-21"},
	}
	for _, tc := range tests {
		before := up.Calls()
		status := rawRequest(t, s.Addr, "POST "+tc.path+" HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
		reqs := up.Requests()
		if len(reqs) == before {
			// A path that normalises outside /v1/ is not proxied at all: also fine, never escaped.
			if !strings.Contains(status, "404") {
				t.Fatalf("%s: %s and no upstream call", tc.path, status)
			}
			continue
		}
		got := reqs[len(reqs)-1].URI
		if got != tc.want {
			t.Errorf("%s went to %s, want %s", tc.path, got, tc.want)
		}
		if !strings.HasPrefix(got, "/api/openai/v1/") {
			t.Errorf("%s escaped the base path: %s", tc.path, got)
		}
	}
}

// A '+' in a query key is a space in form encoding (how the target's keys are decoded) and
// itself to a server reading RFC 3986 queries: a client key that is the target's either way is
// dropped.
func TestQueryMergePlusInKeys(t *testing.T) {
	t.Parallel()
	up := upstream(t)
	s := start(t, "FAILOVER_TARGET_0_URL="+strings.TrimSuffix(up.URL, "/v1")+"/v1?x+y=1&a%2Bb=1")
	const base = "/v1/models?x+y=1&a%2Bb=1"
	tests := []struct{ query, want string }{
		{"x+y=2", base},
		{"x%20y=2", base},
		{"a+b=2", base},
		{"a%2Bb=2", base},
		{"x%2By=2", base + "&x%2By=2"},
		{"a%20b=2", base + "&a%20b=2"},
	}
	for _, tc := range tests {
		before := up.Calls()
		st := rawRequest(t, s.Addr, "GET /v1/models?"+tc.query+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		reqs := up.Requests()
		if len(reqs) == before {
			t.Fatalf("%s: %s and no upstream call", tc.query, st)
		}
		if got := reqs[len(reqs)-1].URI; got != tc.want {
			t.Errorf("?%s went to %s, want %s", tc.query, got, tc.want)
		}
	}
}

// A target URL's key written in capitals is the same key to a server that reads keys in any
// case: the client's, in whichever case, is dropped.
func TestQueryMergeTargetKeyInCapitals(t *testing.T) {
	t.Parallel()
	up := upstream(t)
	s := start(t, "FAILOVER_TARGET_0_URL="+strings.TrimSuffix(up.URL, "/v1")+"/v1?Api-Version=1")
	for _, query := range []string{"api-version=2", "API-VERSION=2", "Api-Version=2", "api%2dVERSION=2"} {
		before := up.Calls()
		st := rawRequest(t, s.Addr, "GET /v1/models?"+query+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		reqs := up.Requests()
		if len(reqs) == before {
			t.Fatalf("%s: %s and no upstream call", query, st)
		}
		if got := reqs[len(reqs)-1].URI; got != "/v1/models?Api-Version=1" {
			t.Errorf("?%s went to %s, want /v1/models?Api-Version=1", query, got)
		}
	}
}

func TestHeadersForwarded(t *testing.T) {
	t.Parallel()
	up := upstream(t)
	s := start(t, targets(up.URL)...)
	req := "POST /v1/chat/completions HTTP/1.1\r\nHost: sidecar.local\r\nContent-Type: application/json\r\n" +
		"Connection: keep-alive, X-Hop\r\nX-Hop: drop-me\r\nConnection: X-Hop2\r\nX-Hop2: drop-me-too\r\n" +
		"Keep-Alive: timeout=5\r\nTe: trailers\r\nUpgrade: h2c\r\n" +
		"Proxy-Authorization: Basic abc\r\nX-Failover-Attempt: 99\r\nX-Failover-Target: spoof\r\nAccept-Encoding: gzip\r\n" +
		"X-Request-Id: my-trace-1\r\nOpenAI-Organization: org-1\r\nContent-Length: 2\r\n\r\n{}"
	if st := rawRequest(t, s.Addr, req); !strings.Contains(st, "200") {
		t.Fatal(st)
	}
	h := up.Requests()[0].Header
	for _, gone := range []string{"X-Hop", "X-Hop2", "Keep-Alive", "Te", "Upgrade", "Proxy-Authorization", "X-Failover-Target"} {
		if _, ok := h[gone]; ok {
			t.Errorf("%s was forwarded", gone)
		}
	}
	want := map[string]string{"Host": strings.TrimPrefix(strings.TrimSuffix(up.URL, "/v1"), "http://"), "Accept-Encoding": "identity",
		"X-Failover-Attempt": "1", "X-Request-Id": "my-trace-1", "Openai-Organization": "org-1"}
	for k, v := range want {
		if h[k] != v {
			t.Errorf("%s = %q, want %q", k, h[k], v)
		}
	}
}

// metricLine returns the value of the series on a /metrics page ("" when it is absent).
func metricLine(page, series string) string {
	for _, line := range strings.Split(page, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	return ""
}

// underscoreNames returns the names in h that contain '_'.
func underscoreNames(h map[string]string) []string {
	var names []string
	for k := range h {
		if strings.Contains(k, "_") {
			names = append(names, k)
		}
	}
	return names
}

// Client headers with '_' in their names stay behind (a CGI-style server behind the target
// reads X_Api_Key as X-Api-Key), counted once per request however many attempts it makes;
// FAILOVER_ALLOW_UNDERSCORE_HEADERS=true forwards them, except those that read with '-' for
// '_' as a header the sidecar drops or sets itself.
func TestUnderscoreHeaders(t *testing.T) {
	t.Parallel()
	const req = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
		"X_Api_Key: sk-client\r\nApi_Key: sk-client\r\nauthorization_: x\r\nX_Request_Id: spoofed\r\nX_Failover_Attempt: 9\r\n" +
		"Content_Length: 9\r\nConnection: X-Hop\r\nX_Hop: hop\r\nX_Custom: mine\r\nX-Kept: yes\r\nContent-Length: 2\r\n\r\n{}"
	t.Run("dropped by default", func(t *testing.T) {
		t.Parallel()
		bad, up := upstream(t, pt.JSON(503, pt.OpenAIError("overloaded", "server_error", ""))), upstream(t)
		s := start(t, env(targets(bad.URL, up.URL), []string{"FAILOVER_TARGET_1_API_KEY=sk-target"})...)
		if st := rawRequest(t, s.Addr, req); !strings.Contains(st, "200") {
			t.Fatal(st)
		}
		for _, u := range []*pt.Upstream{bad, up} {
			h := u.Requests()[0].Header
			if names := underscoreNames(h); len(names) > 0 {
				t.Errorf("forwarded: %v", names)
			}
			if h["X-Kept"] != "yes" {
				t.Errorf("X-Kept was dropped")
			}
		}
		// 8 headers, on a request that made two attempts.
		if got := metricLine(s.ScrapeMetrics(), `failover_dropped_headers_total{reason="underscore"}`); got != "8" {
			t.Errorf("failover_dropped_headers_total{reason=\"underscore\"} is %q, want 8", got)
		}
	})
	t.Run("FAILOVER_ALLOW_UNDERSCORE_HEADERS=true", func(t *testing.T) {
		t.Parallel()
		up := upstream(t)
		s := start(t, env(targets(up.URL), []string{"FAILOVER_TARGET_0_API_KEY=sk-target", "FAILOVER_ALLOW_UNDERSCORE_HEADERS=true"})...)
		if st := rawRequest(t, s.Addr, req); !strings.Contains(st, "200") {
			t.Fatal(st)
		}
		h := up.Requests()[0].Header
		if names := underscoreNames(h); len(names) != 2 || h["X_custom"] != "mine" || h["Authorization_"] != "x" {
			t.Errorf("forwarded %v, want X_Custom and authorization_ alone (no credential, hop-by-hop, sidecar or framing header)", names)
		}
		if h["Authorization"] != "Bearer sk-target" || h["X-Request-Id"] == "spoofed" || h["X-Failover-Attempt"] != "1" {
			t.Errorf("upstream headers %v", h)
		}
		if got := metricLine(s.ScrapeMetrics(), `failover_dropped_headers_total{reason="underscore"}`); got != "0" {
			t.Errorf("failover_dropped_headers_total{reason=\"underscore\"} is %q, want 0: forwarded headers are not dropped ones", got)
		}
	})
}

// The options a client's Connection lines name are compared with every header it sent, on every
// attempt: thousands of options beside thousands of headers (16 KiB) would cost a hundred times
// a plain request in CPU. More than 32 options are refused with 400 before any attempt; a few,
// over several lines, are still dropped (TestHeadersForwarded).
func TestConnectionOptionsAreBounded(t *testing.T) {
	t.Parallel()
	up := upstream(t)
	s := start(t, targets(up.URL)...)
	var b strings.Builder
	b.WriteString("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: keep-alive")
	for i := range 1400 {
		fmt.Fprintf(&b, ",o%d", i)
	}
	b.WriteString("\r\n")
	for b.Len() < 15<<10 {
		b.WriteString("h:\r\n")
	}
	b.WriteString("Content-Length: 2\r\n\r\n{}")
	tests := []struct {
		name, req, want string
		reaches         bool
	}{
		{"1400 options beside 2000 headers", b.String(), "400", false},
		{"33 options over two lines", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: " + strings.Repeat("o,", 16) + "o\r\n" +
			"Connection: " + strings.Repeat("p, ", 15) + "p\r\nContent-Length: 2\r\n\r\n{}", "400", false},
		{"32 options and empty items", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: ,, " + strings.Repeat("o, ", 31) + "X-Hop,\r\n" +
			"X-Hop: drop-me\r\nContent-Length: 2\r\n\r\n{}", "200", true},
	}
	for _, tc := range tests {
		before := up.Calls()
		if st := rawRequest(t, s.Addr, tc.req); !strings.Contains(st, tc.want) {
			t.Errorf("%s: %s, want %s", tc.name, st, tc.want)
		}
		if reached := up.Calls() > before; reached != tc.reaches {
			t.Errorf("%s: reached the target %v, want %v", tc.name, reached, tc.reaches)
		} else if reached {
			if _, ok := up.Requests()[before].Header["X-Hop"]; ok {
				t.Errorf("%s: X-Hop was forwarded", tc.name)
			}
		}
	}
}

// Bodies as curl sends them reach the upstream whole, with a Content-Length: a large one after
// "Expect: 100-continue" (answered by the sidecar, which has the whole body before any attempt:
// the expectation is not forwarded) and a chunked one.
func TestClientBodyFraming(t *testing.T) {
	t.Parallel()
	up := upstream(t)
	s := start(t, targets(up.URL)...)
	big := `{"model":"gpt-4o","pad":"` + strings.Repeat("a", 2<<20) + `"}`
	t.Run("expect 100-continue", func(t *testing.T) {
		c, err := net.Dial("tcp", s.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n", len(big))
		br := bufio.NewReader(c)
		if line, err := br.ReadString('\n'); err != nil || !strings.Contains(line, " 100 ") {
			t.Fatalf("interim answer %q, %v", line, err)
		}
		br.ReadString('\n')
		io.WriteString(c, big)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%v %v", resp, err)
		}
		got := up.Requests()[up.Calls()-1]
		if string(got.Body) != big || got.Header["Expect"] != "" || got.Header["Content-Length"] != fmt.Sprint(len(big)) {
			t.Errorf("upstream got %d body bytes, Expect %q, Content-Length %q", len(got.Body), got.Header["Expect"], got.Header["Content-Length"])
		}
	})
	t.Run("chunked", func(t *testing.T) {
		req := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n" +
			fmt.Sprintf("%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n", 10, chatBody[:10], len(chatBody)-10, chatBody[10:])
		if st := rawRequest(t, s.Addr, req); !strings.Contains(st, "200") {
			t.Fatal(st)
		}
		got := up.Requests()[up.Calls()-1]
		if string(got.Body) != chatBody || got.Header["Transfer-Encoding"] != "" || got.Header["Content-Length"] != fmt.Sprint(len(chatBody)) {
			t.Errorf("upstream got %q, Transfer-Encoding %q, Content-Length %q", got.Body, got.Header["Transfer-Encoding"], got.Header["Content-Length"])
		}
	})
}

// Transfer-Encoding: identity (with no Content-Length) is no framing: fasthttp reads no body
// for it, and the body would be read as the client's next request, which a proxy in front
// sent as this one's body (request smuggling). RFC 9112 section 6.3: 400, then close. An
// empty chunked body is framing, and served.
func TestTransferEncodingIdentityIsRefused(t *testing.T) {
	t.Parallel()
	up := upstream(t)
	s := start(t, targets(up.URL)...)
	const smuggled = "GET /v1/models?smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
	for _, req := range []string{
		"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: identity\r\n\r\n" + smuggled,
		"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ntransfer-encoding:  IDENTITY \r\n\r\n" + smuggled,
		"GET /v1/models HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: identity\r\n\r\n" + smuggled,
		"POST /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: identity\r\n\r\n" + smuggled,
	} {
		c := dial(t, s.Addr)
		io.WriteString(c, req)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%q: %v", req, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		_, err = br.ReadByte() // the connection is closed: nothing more is answered
		if resp.StatusCode != 400 || err == nil || up.Calls() != 0 {
			t.Errorf("%q: status %d, read after it %v, upstream calls %d; want 400, a close, none", req, resp.StatusCode, err, up.Calls())
		}
		c.Close()
	}
	c := dial(t, s.Addr)
	defer c.Close()
	io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"+smuggled)
	br := bufio.NewReader(c)
	for i := range 2 {
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("an empty chunked body, request %d: %v %v", i+1, err, resp)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// FAILOVER_INBOUND_TOKEN is never forwarded, in whichever headers and however often the client
// sends it (an Anthropic SDK given the token as both api_key and auth_token sends it twice).
func TestInboundTokenNeverForwarded(t *testing.T) {
	t.Parallel()
	const tok = "tok-inbound-not-a-key"
	up := upstream(t)
	s := start(t, env(targets(up.URL), []string{"FAILOVER_INBOUND_TOKEN=" + tok})...)
	for _, headers := range [][]string{
		{"Authorization: Bearer " + tok, "X-Api-Key: " + tok},
		{"X-Api-Key: " + tok, "Authorization: bearer " + tok},
		{"Authorization: Bearer " + tok, "Api-Key: " + tok, "X-Goog-Api-Key:  " + tok + " "},
	} {
		before := up.Calls()
		if r := s.Post("/chat/completions", chatBody, append(headers, "X-Trace: kept")...); r.Status != 200 {
			t.Fatalf("%v: %d", headers, r.Status)
		}
		h := up.Requests()[before].Header
		for k, v := range h {
			if strings.Contains(v, tok) {
				t.Errorf("%v: the token went upstream in %s", headers, k)
			}
		}
		if h["X-Trace"] != "kept" {
			t.Errorf("%v: an unrelated header was dropped", headers)
		}
	}
}

// The client gets none of the upstream's hop-by-hop headers, however many Connection lines
// name them, nor the upstream's own X-Failover-* (only the sidecar's). Past maxConnectionOptions
// options the lines are read as they are, not collected: the same headers stay behind.
func TestUpstreamHopByHopAndFailoverHeadersStayBehind(t *testing.T) {
	t.Parallel()
	for _, n := range []int{10, 40} { // 40: more than the 32 collected (maxConnectionOptions)
		var line1, line2 []string
		for i := 1; i <= n; i++ {
			if i <= n/2 {
				line1 = append(line1, fmt.Sprintf("X-Up-%d", i))
			} else {
				line2 = append(line2, fmt.Sprintf("X-Up-%d", i))
			}
		}
		hdr := []string{"Connection: keep-alive, " + strings.Join(line1, ", "), "Connection: " + strings.Join(line2, ", "),
			"X-Failover-Model: inner-model", "X-Failover-Attempt: 7", "X-Kept: yes"}
		for i := 1; i <= n; i++ {
			hdr = append(hdr, fmt.Sprintf("X-Up-%d: hop", i))
		}
		step := pt.JSON(200, pt.ChatCompletion("hi"), hdr...)
		step.Delay = time.Millisecond // written by hand: the Connection lines stay two lines
		up := upstream(t, step)
		s := start(t, targets(up.URL)...)
		r := s.Post("/chat/completions", chatBody)
		if r.Status != 200 || r.Header.Get("X-Kept") != "yes" {
			t.Fatalf("%d options: %d, X-Kept %q", n, r.Status, r.Header.Get("X-Kept"))
		}
		for k := range r.Header {
			if strings.HasPrefix(k, "X-Up-") || k == "X-Failover-Model" || k == "X-Failover-Attempt" {
				t.Errorf("%d options: %s reached the client", n, k)
			}
		}
		if r.Header.Get("X-Failover-Target") != "t0" {
			t.Errorf("%d options: the sidecar's own X-Failover-Target is missing", n)
		}
	}
}

// The errors fasthttp reports after resetting the request (headers over 16 KiB, a chunked body
// over the limit) still take the shape of the request's family: an Anthropic SDK on
// /v1/messages gets its own error shape.
func TestResetRequestErrorsKeepTheFamilyShape(t *testing.T) {
	t.Parallel()
	up := upstream(t)
	s := start(t, env(targets(up.URL), []string{"FAILOVER_MAX_REQUEST_BYTES=100"})...)
	for name, req := range map[string]string{
		"431":         "POST /v1/messages HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 17<<10) + "\r\nContent-Length: 2\r\n\r\n{}",
		"chunked 413": "POST /v1/messages HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1f4\r\n" + strings.Repeat("a", 500) + "\r\n0\r\n\r\n",
	} {
		c, err := net.Dial("tcp", s.Addr)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, req)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		c.Close()
		if !strings.HasPrefix(string(body), `{"type":"error","error":{"type":"api_error"`) {
			t.Errorf("%s: %d %s, want the messages shape", name, resp.StatusCode, body)
		}
	}
}

// A "model" or "stream" key written with escapes is the same key to every JSON parser, so to
// the sidecar too: the model filter, the substitution and the streaming decision see it.
func TestEscapedKeys(t *testing.T) {
	t.Parallel()
	claude, gpt := upstream(t, pt.JSON(200, `{"from":"claude"}`)), upstream(t, pt.JSON(200, `{"from":"gpt"}`))
	s := start(t, "FAILOVER_TARGET_0_URL="+claude.URL, "FAILOVER_TARGET_0_MODELS=claude-*",
		"FAILOVER_TARGET_1_URL="+gpt.URL, "FAILOVER_TARGET_1_MODELS=gpt-4o*", "FAILOVER_TARGET_1_MODEL=gpt-4o-2024")
	r := s.Post("/chat/completions", `{"mod\u0065l":"gpt-4o","messages":[]}`)
	if string(r.Body) != `{"from":"gpt"}` || r.Header.Get("X-Failover-Model") != "gpt-4o-2024" {
		t.Fatalf("%d %s, X-Failover-Model %q", r.Status, r.Body, r.Header.Get("X-Failover-Model"))
	}
	if got := string(gpt.Requests()[0].Body); got != `{"mod\u0065l":"gpt-4o-2024","messages":[]}` {
		t.Errorf("substituted body %s", got)
	}
	s.Post("/chat/completions", `{"model":"gpt-4o","str\u0065am":true}`)
	if rec := s.WaitLedger(2)[1]; rec["stream"] != true {
		t.Errorf("an escaped stream key was not seen: %v", rec)
	}
}

// A model value written with escapes is matched and logged as decoded: PHP's json_encode
// writes every "/" as "\/", and "gpt\u002d4o" is gpt-4o to any JSON parser. The body goes
// upstream as sent.
func TestEscapedModelValues(t *testing.T) {
	t.Parallel()
	other, router := upstream(t, pt.JSON(200, `{"from":"other"}`)), upstream(t, pt.JSON(200, `{"from":"router"}`))
	s := start(t, "FAILOVER_TARGET_0_URL="+other.URL, "FAILOVER_TARGET_0_MODELS=claude-*",
		"FAILOVER_TARGET_1_URL="+router.URL, "FAILOVER_TARGET_1_MODELS=openai/gpt-4o*,gpt-4o")
	for i, body := range []string{`{"model":"openai\/gpt-4o-mini"}`, `{"model":"gpt\u002d4o"}`} {
		r := s.Post("/chat/completions", body)
		if string(r.Body) != `{"from":"router"}` {
			t.Fatalf("%s: %d %s", body, r.Status, r.Body)
		}
		if got := string(router.Requests()[i].Body); got != body {
			t.Errorf("forwarded %s, sent %s", got, body)
		}
	}
	recs := s.WaitLedger(2)
	if recs[0]["model"] != "openai/gpt-4o-mini" || recs[1]["model"] != "gpt-4o" || recs[1]["served_model"] != "gpt-4o" {
		t.Errorf("logged models %v / %v, %v", recs[0]["model"], recs[1]["model"], recs[1]["served_model"])
	}
}

func TestModelAndPathFilters(t *testing.T) {
	t.Parallel()
	openai := upstream(t, pt.JSON(200, `{"from":"openai"}`))
	anth := upstream(t, pt.JSON(200, `{"from":"anthropic"}`))
	s := start(t, "FAILOVER_TARGET_0_URL="+openai.URL, "FAILOVER_TARGET_0_NAME=openai", "FAILOVER_TARGET_0_MODELS=gpt-4o*,o3",
		"FAILOVER_TARGET_1_URL="+anth.URL, "FAILOVER_TARGET_1_NAME=anthropic", "FAILOVER_TARGET_1_PATHS=/v1/messages")
	if r := s.Post("/chat/completions", `{"model":"gpt-4o-mini"}`); string(r.Body) != `{"from":"openai"}` {
		t.Errorf("gpt-4o-mini: %s", r.Body)
	}
	if r := s.Post("/messages", `{"model":"claude-sonnet-4"}`); string(r.Body) != `{"from":"anthropic"}` {
		t.Errorf("messages: %s", r.Body)
	}
	if r := s.Post("/messagesx", `{"model":"claude-sonnet-4"}`); r.Status != 404 {
		t.Errorf("a path prefix must match whole segments: /v1/messagesx got %d", r.Status)
	}
	r := s.Post("/chat/completions", `{"model":"llama-3"}`)
	if r.Status != 404 || !strings.Contains(string(r.Body), `"code":"no_target"`) {
		t.Errorf("unserved model: %d %s", r.Status, r.Body)
	}
	if rec := s.Ledger()[3]; rec["outcome"] != "rejected" {
		t.Errorf("ledger %v", rec)
	}
}

func TestSizeLimits(t *testing.T) {
	t.Parallel()
	up := upstream(t)
	s := start(t, env(targets(up.URL), []string{"FAILOVER_MAX_REQUEST_BYTES=1KiB"})...)
	r := s.Post("/chat/completions", `{"model":"x","pad":"`+strings.Repeat("a", 2048)+`"}`)
	if r.Status != 413 || !strings.Contains(string(r.Body), `"code":"request_too_large"`) || !strings.Contains(string(r.Body), "FAILOVER_MAX_REQUEST_BYTES") {
		t.Errorf("big body: %d %s", r.Status, r.Body)
	}
	big := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("b", 17<<10) + "\r\nContent-Length: 2\r\n\r\n{}"
	if st := rawRequest(t, s.Addr, big); !strings.Contains(st, "431") {
		t.Errorf("17 KiB of headers: %s", st)
	}
	if up.Calls() != 0 {
		t.Errorf("%d upstream calls", up.Calls())
	}
	if recs := s.Ledger(); len(recs) != 2 || recs[0]["outcome"] != "rejected" || recs[0]["status"].(float64) != 413 {
		t.Errorf("ledger %v", recs)
	}
}

// The sidecar's own refusals carry the response headers of every answer: X-Request-Id and
// X-Failover-Attempts (none made), in the family's error shape.
func TestRefusalsCarryTheFailoverHeaders(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, path, body, header string
		wantStatus               int
		wantCode                 string
	}{
		{"401 without the inbound token", "/v1/chat/completions", chatBody, "", 401, "unauthorized"},
		{"404 when no target serves the model", "/v1/chat/completions", `{"model":"llama-3"}`, "Authorization: Bearer tok", 404, "no_target"},
		{"404 outside /v1/", "/admin", "{}", "Authorization: Bearer tok", 404, "not_found"},
		{"413 over the body limit", "/v1/messages", `{"model":"gpt-4o","pad":"` + strings.Repeat("a", 2048) + `"}`, "Authorization: Bearer tok", 413, "request_too_large"},
	}
	up := upstream(t)
	s := start(t, env(targets(up.URL), []string{"FAILOVER_INBOUND_TOKEN=tok", "FAILOVER_TARGET_0_MODELS=gpt-4o*", "FAILOVER_MAX_REQUEST_BYTES=1KiB"})...)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest("POST", "http://"+s.Addr+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("X-Request-Id", "refused-1")
			if k, v, ok := strings.Cut(tc.header, ": "); ok {
				req.Header.Set(k, v)
			}
			r := s.Do(req)
			if r.Status != tc.wantStatus || !strings.Contains(string(r.Body), `"code":"`+tc.wantCode+`"`) {
				t.Fatalf("got %d %s, want %d %s", r.Status, r.Body, tc.wantStatus, tc.wantCode)
			}
			if r.Header.Get("X-Request-Id") != "refused-1" || r.Header.Get("X-Failover-Attempts") != "0" || r.Header.Get("X-Failover-Target") != "" {
				t.Errorf("headers %v, want X-Request-Id refused-1, X-Failover-Attempts 0 and no X-Failover-Target", r.Header)
			}
		})
	}
	if up.Calls() != 0 {
		t.Errorf("%d upstream calls", up.Calls())
	}
}

func TestNonProxiedPaths(t *testing.T) {
	t.Parallel()
	up := upstream(t)
	s := start(t, targets(up.URL)...)
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/admin": 404, "/": 404, "/v2/chat": 404} {
		resp, err := http.Get("http://" + s.Addr + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s: %d, want %d", path, resp.StatusCode, want)
		}
	}
	resp, err := http.Get(s.Metrics + "/metrics")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("metrics: %v", err)
	}
	resp.Body.Close()
	if up.Calls() != 0 {
		t.Errorf("%d upstream calls", up.Calls())
	}
}

func TestImageCommitsAtHeaders(t *testing.T) {
	t.Parallel()
	// A generated image is never paid for twice: once the image answer's headers arrive it
	// commits, and a failure in its body is the client's to see, not a reason to generate again.
	img := pt.JSON(200, `{"created":1,"data":[{"b64_json":"`+strings.Repeat("QUFB", 4096)+`"}]}`)
	img.Fault, img.FaultBytes = pt.FaultResetAfter, 2000
	a := upstream(t, img)
	b := upstream(t)
	s := start(t, targets(a.URL, b.URL)...)
	req, _ := http.NewRequest("POST", s.URL+"/images/generations", strings.NewReader(`{"model":"gpt-image-1","prompt":"a cat"}`))
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if err == nil {
		t.Fatal("a cut image body reached the client as a clean answer")
	}
	time.Sleep(100 * time.Millisecond)
	if b.Calls() != 0 {
		t.Fatalf("the image was generated again on the second target")
	}
	if !strings.Contains(s.ScrapeMetrics(), `failover_stream_commits_total{reason="headers"} 1`) {
		t.Error("image commit not counted")
	}
}

// An upstream header block larger than the pooled 4 KiB reader (a gateway's cookies and
// policy headers) is read with a larger one: the answer and its headers reach the client, and
// the next request is served. A block past 64 KiB still fails the attempt.
func TestLargeUpstreamHeaderBlock(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("p", 3000)
	big := pt.JSON(200, pt.ChatCompletion("big headers"), "X-Policy-1: "+long, "X-Policy-2: "+long, "X-Policy-3: "+long)
	up := upstream(t, big, big, pt.JSON(200, pt.ChatCompletion("small headers")),
		pt.JSON(200, pt.ChatCompletion("huge headers"), "X-Huge: "+strings.Repeat("h", 70<<10)))
	s := start(t, append(targets(up.URL), "FAILOVER_TARGET_0_RETRIES=0")...)
	for i, want := range []string{"big headers", "big headers", "small headers"} {
		r := s.Post("/chat/completions", chatBody)
		if r.Status != 200 || !strings.Contains(string(r.Body), want) {
			t.Fatalf("request %d: %d %s", i+1, r.Status, r.Body)
		}
		if i < 2 && r.Header.Get("X-Policy-3") != long {
			t.Fatalf("request %d: the upstream's long header did not reach the client (%d bytes)", i+1, len(r.Header.Get("X-Policy-3")))
		}
	}
	if r := s.Post("/chat/completions", chatBody); r.Status == 200 {
		t.Fatalf("a 70 KiB header block was accepted: %s", r.Body)
	}
}

// A response to HEAD has no body by definition (RFC 9110 section 9.3.2): the upstream's 200 is
// its answer, not an empty one, so it commits on the first target with its headers.
func TestHeadPassesThrough(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		header []string // the request's
		step   pt.Step
	}{
		{"models", nil, pt.JSON(200, `{"object":"list","data":[]}`, "X-Upstream: a")},
		{"event-stream answer is not an empty stream", []string{"Accept: text/event-stream"},
			pt.JSON(200, `data: {}`+"\n\n", "Content-Type: text/event-stream", "X-Upstream: a")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := upstream(t, tc.step)
			b := upstream(t, pt.JSON(200, `{"object":"list","data":[]}`, "X-Upstream: b"))
			s := start(t, targets(a.URL, b.URL)...)
			req, err := http.NewRequest(http.MethodHead, s.URL+"/models", nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, h := range tc.header {
				k, v, _ := strings.Cut(h, ":")
				req.Header.Set(k, strings.TrimSpace(v))
			}
			r := s.Do(req)
			if r.Status != 200 || r.Header.Get("X-Upstream") != "a" || len(r.Body) != 0 {
				t.Errorf("HEAD answered %d from %q with %d body bytes, want the first target's 200 without body", r.Status, r.Header.Get("X-Upstream"), len(r.Body))
			}
			if got := r.Header.Get("X-Failover-Attempts"); got != "1" {
				t.Errorf("X-Failover-Attempts %q, want 1", got)
			}
			if a.Calls() != 1 || b.Calls() != 0 {
				t.Errorf("calls a=%d b=%d, want 1 and 0: no transfer", a.Calls(), b.Calls())
			}
			if m := a.Requests()[0].Method; m != http.MethodHead {
				t.Errorf("upstream got %s, want HEAD", m)
			}
			rec := s.WaitLedger(1)[0]
			if rec["outcome"] != "ok" || rec["status"].(float64) != 200 {
				t.Errorf("ledger outcome %v status %v, want ok 200", rec["outcome"], rec["status"])
			}
		})
	}
}

// The provider's own request id (OpenAI's x-request-id, the one its support asks for) reaches
// the client as X-Upstream-Request-Id, since X-Request-Id is the sidecar's; on a stream too.
func TestUpstreamRequestIDGoesBack(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body string
		step       pt.Step
	}{
		{"response", chatBody, pt.JSON(200, pt.ChatCompletion("hi"), "X-Request-Id: req_8f2a")},
		{"stream", streamBody, func() pt.Step {
			st := pt.SSE(pt.ChatStream(0, "hi")...)
			st.Header = append(st.Header, "X-Request-Id: req_8f2a")
			return st
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := start(t, targets(upstream(t, tc.step).URL)...)
			r := s.Post("/chat/completions", tc.body, "X-Request-Id: app-42")
			if r.Status != 200 || r.Header.Get("X-Request-Id") != "app-42" || r.Header.Get("X-Upstream-Request-Id") != "req_8f2a" {
				t.Fatalf("%d, X-Request-Id %q, X-Upstream-Request-Id %q", r.Status, r.Header.Get("X-Request-Id"), r.Header.Get("X-Upstream-Request-Id"))
			}
		})
	}
	// An upstream that echoes the sidecar's id adds nothing.
	s := start(t, targets(upstream(t, pt.JSON(200, pt.ChatCompletion("hi"), "X-Request-Id: app-43")).URL)...)
	if r := s.Post("/chat/completions", chatBody, "X-Request-Id: app-43"); r.Header.Get("X-Upstream-Request-Id") != "" {
		t.Errorf("an echoed id came back as X-Upstream-Request-Id %q", r.Header.Get("X-Upstream-Request-Id"))
	}
}
