package main

import (
	"net"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// serve runs s on a loopback port until the test ends and returns its address.
func serve(t *testing.T, s *fasthttp.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(ln) }() // ends with Shutdown
	t.Cleanup(func() { s.Shutdown() })
	return ln.Addr().String()
}

// TestForwards checks that the floor passes a request and its answer through unchanged: method,
// path, headers and body on the way up; status, headers and body on the way back, for a plain
// answer and for a stream.
func TestForwards(t *testing.T) {
	up := serve(t, &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		ctx.Response.Header.Set("X-Seen", string(ctx.Method())+" "+string(ctx.RequestURI())+" "+string(ctx.Request.Header.Peek("Authorization")))
		if string(ctx.Request.Header.Peek("Accept")) == "text/event-stream" {
			ctx.SetContentType("text/event-stream")
			ctx.SetBodyString("data: {\"a\":1}\n\ndata: [DONE]\n\n")
			return
		}
		ctx.SetStatusCode(fasthttp.StatusCreated)
		ctx.SetContentType("application/json")
		ctx.SetBody(append([]byte("echo:"), ctx.PostBody()...))
	}})
	proxy := serve(t, newServer(up))
	c := &fasthttp.Client{}
	for _, tc := range []struct {
		accept, wantType, wantBody string
		wantStatus                 int
	}{
		{"", "application/json", `echo:{"model":"m"}`, fasthttp.StatusCreated},
		{"text/event-stream", "text/event-stream", "data: {\"a\":1}\n\ndata: [DONE]\n\n", fasthttp.StatusOK},
	} {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.SetRequestURI("http://" + proxy + "/v1/chat/completions?x=1")
		req.Header.SetMethod("POST")
		req.Header.Set("Authorization", "Bearer sk-test-not-a-key")
		if tc.accept != "" {
			req.Header.Set("Accept", tc.accept)
		}
		req.SetBodyString(`{"model":"m"}`)
		if err := c.Do(req, resp); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode() != tc.wantStatus || string(resp.Header.ContentType()) != tc.wantType || string(resp.Body()) != tc.wantBody {
			t.Errorf("accept %q: got %d %q %q, want %d %q %q", tc.accept, resp.StatusCode(), resp.Header.ContentType(), resp.Body(), tc.wantStatus, tc.wantType, tc.wantBody)
		}
		if got, want := string(resp.Header.Peek("X-Seen")), "POST /v1/chat/completions?x=1 Bearer sk-test-not-a-key"; got != want {
			t.Errorf("accept %q: the upstream saw %q, want %q", tc.accept, got, want)
		}
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
	}
}

// TestLoopbackOnly checks that the floor refuses any address off loopback, naming the variable.
func TestLoopbackOnly(t *testing.T) {
	for _, target := range []string{"http://10.0.0.1:80/v1", "https://127.0.0.1/v1", "http://example.com/v1", "127.0.0.1:80"} {
		if _, err := upstreamAddr(target); err == nil || !strings.Contains(err.Error(), "FAILOVER_TARGET_0_URL") {
			t.Errorf("upstreamAddr(%q) = %v, want an error naming FAILOVER_TARGET_0_URL", target, err)
		}
	}
	if addr, err := upstreamAddr("http://127.0.0.1/v1"); err != nil || addr != "127.0.0.1:80" {
		t.Errorf("upstreamAddr(http://127.0.0.1/v1) = %q, %v", addr, err)
	}
	for _, l := range []string{"0.0.0.0:4000", ":4000", "192.168.1.1:4000"} {
		if err := loopback("FAILOVER_LISTEN", l); err == nil {
			t.Errorf("loopback(%q) = nil, want an error", l)
		}
	}
	for _, l := range []string{"127.0.0.1:4000", "[::1]:4000", "localhost:4000"} {
		if err := loopback("FAILOVER_LISTEN", l); err != nil {
			t.Errorf("loopback(%q) = %v", l, err)
		}
	}
}
