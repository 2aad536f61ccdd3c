package proxy_test

import (
	"net/http"
	"strings"
	"testing"

	pt "github.com/llm-failover/failover/proxy/proxytest"
)

// W3C Trace Context: the client's traceparent and tracestate reach every attempt unchanged (a
// retry and a transfer included), the request record carries the trace id, and a request
// without them gets none invented (docs/operations.md, The request record).
func TestTraceContextReachesEveryAttempt(t *testing.T) {
	t.Parallel()
	const (
		traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		tracestate  = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"
		traceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
	)
	busy := pt.JSON(503, pt.OpenAIError("busy", "server_error", ""))
	tests := []struct {
		name        string
		header      []string
		wantTraceID string // "" = no trace_id in the record
	}{
		{"traceparent and tracestate", []string{"traceparent: " + traceparent, "tracestate: " + tracestate}, traceID},
		{"a later version", []string{"traceparent: cc-" + traceID + "-00f067aa0ba902b7-01-more"}, traceID},
		{"an invalid traceparent is forwarded, not logged", []string{"traceparent: 00-" + traceID + "-0000000000000000-01", "tracestate: " + tracestate}, ""},
		{"none sent, none invented", nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := upstream(t, busy)
			b := upstream(t)
			s := start(t, targets(a.URL, b.URL)...)
			for _, body := range []string{chatBody, `{"model":"gpt-4o-mini","stream":true,"messages":[]}`} {
				if body != chatBody {
					b.Script(pt.SSE(pt.ChatStream(0, "hi")...))
				}
				if r := s.Post("/chat/completions", body, tc.header...); r.Status != 200 {
					t.Fatalf("status %d", r.Status)
				}
			}
			want := map[string]string{}
			for _, h := range tc.header {
				k, v, _ := strings.Cut(h, ":")
				want[http.CanonicalHeaderKey(k)] = strings.TrimSpace(v)
			}
			reqs := append(a.Requests(), b.Requests()...)
			if len(reqs) != 6 { // per request: t0, its retry, t1
				t.Fatalf("%d upstream requests, want 6", len(reqs))
			}
			for i, r := range reqs {
				for _, name := range []string{"Traceparent", "Tracestate"} {
					if got, ok := r.Header[name]; got != want[name] || ok != (want[name] != "") {
						t.Errorf("upstream request %d: %s %q (sent: %v), want %q", i, name, got, ok, want[name])
					}
				}
			}
			for i, rec := range s.WaitLedger(2) {
				got, present := rec["trace_id"]
				if tc.wantTraceID == "" && present || tc.wantTraceID != "" && got != tc.wantTraceID {
					t.Errorf("record %d: trace_id %v, want %q", i, got, tc.wantTraceID)
				}
				if steps := ledgerSteps(rec); steps != "t0:server_error:retry t0:server_error:transfer t1:ok:commit" {
					t.Errorf("record %d: %s", i, steps)
				}
			}
		})
	}
}
