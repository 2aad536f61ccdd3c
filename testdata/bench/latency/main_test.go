package main

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

const chatJSON = `{"id":"chatcmpl-bench","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`

// startUpstream serves a chat completion with Content-Length at /json, a chunked SSE body at
// /sse (only to requests that accept event streams) and 404 elsewhere.
func startUpstream(t *testing.T) string {
	t.Helper()
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		switch string(ctx.Path()) {
		case "/json":
			ctx.SetContentType("application/json")
			ctx.SetBodyString(chatJSON)
		case "/sse":
			if !bytes.Contains(ctx.Request.Header.Peek("Accept"), []byte("text/event-stream")) {
				ctx.SetStatusCode(fasthttp.StatusNotAcceptable)
				return
			}
			ctx.SetContentType("text/event-stream")
			ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
				for _, e := range []string{`{"delta":"a"}`, `{"delta":"b"}`, `[DONE]`} {
					w.WriteString("data: " + e + "\n\n")
					w.Flush() // one chunk per event
				}
			})
		default:
			ctx.SetStatusCode(fasthttp.StatusNotFound)
		}
	}}
	return serve(t, srv.Serve)
}

// startRaw answers every request with response, byte for byte, and closes the connection
// after it when closeAfter is set: framings fasthttp does not write.
func startRaw(t *testing.T, response string, closeAfter bool) string {
	t.Helper()
	return serve(t, func(ln net.Listener) error {
		for {
			c, err := ln.Accept()
			if err != nil {
				return err
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					if _, err := io.WriteString(c, response); err != nil || closeAfter {
						return
					}
				}
			}()
		}
	})
}

func serve(t *testing.T, serve func(net.Listener) error) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go serve(ln)
	t.Cleanup(func() { ln.Close() })
	return "http://" + ln.Addr().String()
}

func TestMeasure(t *testing.T) {
	upstream := startUpstream(t)
	tests := []struct {
		name       string
		url        string
		sse        bool
		wantErrors bool
	}{
		{"content-length json", upstream + "/json", false, false},
		{"chunked sse", upstream + "/sse", true, false},
		{"chunk extensions and trailers", startRaw(t, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"+
			"5;ext=1\r\nhello\r\n0\r\nX-Trailer: t\r\n\r\n", false), false, false},
		{"body until close", startRaw(t, "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nhello", true), false, false},
		{"404 counts as errors", upstream + "/missing", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const rate, duration = 500, 300 * time.Millisecond
			res, err := measure(config{url: tt.url, conns: 2, rate: rate, duration: duration,
				warmup: 50 * time.Millisecond, body: `{"model":"m","messages":[]}`, sse: tt.sse})
			if err != nil {
				t.Fatal(err)
			}
			want := int(rate * duration.Seconds())
			if tt.wantErrors {
				if res.Errors < want/2 || res.Requests != 0 {
					t.Fatalf("errors %d, requests %d: want about %d errors and no requests", res.Errors, res.Requests, want)
				}
				return
			}
			if res.Errors != 0 {
				t.Fatalf("%d errors, first: %s", res.Errors, res.FirstError)
			}
			if res.Requests < want/2 {
				t.Fatalf("%d requests, want about %d", res.Requests, want)
			}
			for _, s := range []summary{res.Latency, res.Service} {
				if s.P50 <= 0 || s.P50 > s.P99 || s.Min > s.P50 || s.P99 > s.Max {
					t.Fatalf("percentiles out of order: %+v", s)
				}
			}
			if res.Service.P50 > res.Latency.P50 {
				t.Errorf("service p50 %v > latency p50 %v: service is measured from a later time", res.Service.P50, res.Latency.P50)
			}
		})
	}
}

func TestTargetLoopbackOnly(t *testing.T) {
	tests := []struct {
		name, url string
		ok        bool
	}{
		{"127.0.0.1", "http://127.0.0.1:29000/v1/chat/completions", true},
		{"::1", "http://[::1]:29000/", true},
		{"localhost", "http://localhost:29000/", true},
		{"other address refused", "http://10.0.0.1:80/", false},
		{"name refused", "http://example.com/", false},
		{"https refused", "https://127.0.0.1:29000/", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, _, err := target(tt.url); (err == nil) != tt.ok {
				t.Fatalf("target(%q) error %v, want ok %v", tt.url, err, tt.ok)
			}
		})
	}
}

// The request loop records into preallocated slices; a round trip itself allocates nothing,
// so the tool's own garbage collection does not show up in the figures it reports. The
// upstream here reads fixed-size requests and writes prepared bytes, so that it allocates
// nothing either: AllocsPerRun counts every goroutine's allocations.
func TestRoundTripAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, tt := range []struct{ name, response string }{
		{"content-length", "HTTP/1.1 200 OK\r\nContent-Length: " + strconv.Itoa(len(chatJSON)) + "\r\n\r\n" + chatJSON},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" +
			"e;ext=1\r\ndata: [DONE]\n\n\r\n0\r\nX-Trailer: t\r\n\r\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req := buildRequest("127.0.0.1", "/v1/chat/completions", config{body: "{}", sse: true})
			response := []byte(tt.response)
			url := serve(t, func(ln net.Listener) error {
				c, err := ln.Accept()
				if err != nil {
					return err
				}
				defer c.Close()
				buf := make([]byte, len(req))
				for {
					if _, err := io.ReadFull(c, buf); err != nil {
						return err
					}
					if _, err := c.Write(response); err != nil {
						return err
					}
				}
			})
			addr, _, _, err := target(url)
			if err != nil {
				t.Fatal(err)
			}
			r := &run{addr: addr, req: req, deadline: time.Now().Add(time.Minute)}
			if err := r.roundTrip(); err != nil { // dials, and sizes the reader
				t.Fatal(err)
			}
			if n := testing.AllocsPerRun(200, func() {
				if err := r.roundTrip(); err != nil {
					t.Fatal(err)
				}
			}); n != 0 {
				t.Fatalf("%v allocations per round trip, want 0", n)
			}
		})
	}
}
