package proxy

import (
	"bufio"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// begin finds Accept, X-Request-Id and traceparent in one walk over the request's lines: in
// any case, and the first line of a name, as a lookup by name would.
func TestBeginReadsHeadersOnce(t *testing.T) {
	const (
		parent  = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	)
	tests := []struct {
		name        string
		header      string
		stream      bool
		id, traceID string // id "": one of the sidecar's own (32 hex digits)
	}{
		{"canonical", "Accept: text/event-stream\r\nX-Request-Id: req-1\r\ntraceparent: " + parent + "\r\n", true, "req-1", traceID},
		{"any case", "ACCEPT: Text/Event-Stream\r\nx-request-id: req-2\r\nTRACEPARENT: " + parent + "\r\n", true, "req-2", traceID},
		{"the first line counts", "Accept: application/json\r\nAccept: text/event-stream\r\nX-Request-Id: first\r\nX-Request-Id: second\r\n" +
			"traceparent: 00-zz\r\ntraceparent: " + parent + "\r\n", false, "first", ""},
		{"none", "Content-Type: application/json\r\n", false, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := `{"model":"m"}`
			raw := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + tc.header + "Content-Length: 13\r\n\r\n" + body
			var ctx fasthttp.RequestCtx
			if err := ctx.Request.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
				t.Fatal(err)
			}
			ex := newExchange(&Server{})
			ex.begin(&ctx)
			if ex.Stream != tc.stream || string(ex.TraceID) != tc.traceID {
				t.Errorf("streaming %v, trace id %q; want %v, %q", ex.Stream, ex.TraceID, tc.stream, tc.traceID)
			}
			if got := string(ex.RequestID); tc.id != "" && got != tc.id || tc.id == "" && len(got) != 32 {
				t.Errorf("request id %q, want %q", got, tc.id)
			}
		})
	}
}
