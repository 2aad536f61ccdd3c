package proxy_test

import (
	"encoding/json"
	"testing"

	pt "github.com/llm-failover/failover/proxy/proxytest"
)

// An error event before content whose data only looks like an error document, its "error"
// behind a missing comma, is no document an SDK can read: the client gets the sidecar's own
// upstream_stream_error in the family's shape, never the provider's
// bytes sent as application/json (README, Errors the sidecar makes). The same event
// well-formed goes back as it is.
func TestStreamErrorEventThatIsNotJSONIsNotPassedOn(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		status     int // the malformed one carries no status the sidecar can read: 502
		passedOn   bool
	}{
		{"malformed", `{"id":"x" "error":{"message":"The server had an error","type":"server_error"}}`, 502, false},
		{"well-formed", `{"id":"x","error":{"message":"The server had an error","type":"server_error"}}`, 500, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := upstream(t, pt.SSE(pt.Events(0, pt.ChatRole, "event: error\ndata: "+tc.data+"\n\n")...))
			s := start(t, env(targets(up.URL), noRetries)...)
			r := s.Post("/chat/completions", streamBody)
			if r.Status != tc.status || r.Err != nil || r.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("got %d %q (Content-Type %q, err %v), want an error document", r.Status, r.Body, r.Header.Get("Content-Type"), r.Err)
			}
			if tc.passedOn {
				if string(r.Body) != tc.data {
					t.Fatalf("body %s, want the provider's error document %s", r.Body, tc.data)
				}
				return
			}
			var doc struct{ Error struct{ Type, Code string } }
			if err := json.Unmarshal(r.Body, &doc); err != nil || doc.Error.Code != "upstream_stream_error" {
				t.Fatalf("body %s (%v): want the sidecar's upstream_stream_error", r.Body, err)
			}
		})
	}
}
