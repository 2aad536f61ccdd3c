package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/llm-failover/failover/budget"
)

// copyResponseHeaders drops what observeHead found as it read the head, and walks the copy
// only when the Connection lines name options of their own: the client gets the same header
// as from a copy walked whole with every line looked up (the way it was done before).
func TestCopyResponseHeadersAsAWholeWalk(t *testing.T) {
	many := make([]string, 40)
	for i := range many {
		many[i] = fmt.Sprintf("X-Opt-%d", i)
	}
	heads := []string{
		"Content-Type: application/json\r\nContent-Length: 2\r\nConnection: keep-alive\r\nServer: nginx\r\nDate: Sun, 01 Mar 2026 12:00:00 GMT",
		"Content-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nConnection: close\r\nCache-Control: no-cache",
		"Connection: close, X-Hop\r\nX-Hop: 1\r\nx-hop: 2\r\nX-Keep: yes\r\nContent-Length: 0",
		"Connection: keep-alive\r\nConnection: X-Other\r\nX-Other: a\r\nKeep-Alive: timeout=5\r\nContent-Length: 0",
		"Keep-Alive: timeout=5\r\nTrailer: X-Checksum\r\nUpgrade: h2c\r\nProxy-Connection: keep-alive\r\nTe: trailers\r\nContent-Length: 0",
		"X-Failover-Target: spoofed\r\nx-failover-attempts: 9\r\nX-Failover-Model: m\r\nContent-Length: 0",
		"X-Request-Id: req_abc\r\nX-Request-Id: req_second\r\nContent-Length: 0",
		"X-Request-Id: ours\r\nContent-Length: 0",
		"Connection: " + strings.Join(many, ", ") + "\r\nX-Opt-3: dropped\r\nX-Kept: yes\r\nContent-Length: 0",
		"Set-Cookie: a=1\r\nSet-Cookie: b=2\r\nConnection: Set-Cookie\r\nContent-Length: 0",
		"Content-Length: 0",
		"Connection: keep-alive, keep-alive, close\r\nConnection: Keep-Alive\r\nX-RateLimit-Remaining-Requests: 9\r\nRetry-After: 1\r\nContent-Length: 0",
	}
	for _, head := range heads {
		raw := "HTTP/1.1 200 OK\r\n" + head + "\r\n\r\n"
		var up fasthttp.ResponseHeader
		if err := up.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
			t.Fatalf("%q: %v", head, err)
		}

		want := &fasthttp.ResponseHeader{}
		up.CopyTo(want)
		want.SetNoDefaultContentType(true)
		dropHopByHop(want, up.PeekAll(stringConnection), nil)
		want.ResetConnectionClose()
		if id := up.PeekBytes(headerRequestID); len(id) > 0 && string(id) != "ours" {
			want.SetCanonical(headerUpstreamID, id)
		}

		ex := newExchange(&Server{clock: budget.SystemClock{}})
		ex.ctx = &fasthttp.RequestCtx{}
		ex.RequestID = []byte("ours")
		a := &attempt{t: &Target{health: budget.NewHealth(&budget.Config{})}}
		up.CopyTo(&a.up.resp.Header)
		ex.observeHead(a)
		ex.copyResponseHeaders(a)
		if got := ex.ctx.Response.Header.Header(); !bytes.Equal(got, want.Header()) {
			t.Errorf("%q:\ngot  %q\nwant %q", head, got, want.Header())
		}
	}
}
