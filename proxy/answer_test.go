package proxy_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	pt "github.com/llm-failover/failover/proxy/proxytest"
)

// An error event before content whose data only looks like an error document, its "error"
// behind a missing comma, is no document an SDK can read: the client gets the sidecar's own
// upstream_stream_error in the family's shape, never the provider's
// bytes sent as application/json (docs/decisions.md, Errors the sidecar makes). The same event
// well-formed goes back as it is.
func TestStreamErrorEventThatIsNotJSONIsNotPassedOn(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, data string
		status     int // the malformed one carries no status the sidecar can read: 502
		passedOn   bool
	}{
		{"malformed", `{"id":"x" "error":{"message":"The server had an error","type":"server_error"}}`, 502, false},
		{"well-formed", `{"id":"x","error":{"message":"The server had an error","type":"server_error"}}`, 500, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
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

// A stream that arrived whole before commit goes out as one answer whose body is the buffer
// the gate held it in, and the gate takes another for its next stream. Many such streams at
// once, each with its own words: every client gets its own stream, byte for byte, as one
// answer with a length (not piped).
func TestWholeStreamsAtOnceEachKeepTheirBytes(t *testing.T) {
	t.Parallel()
	stream := func(word string) string {
		return pt.ChatRole + pt.ChatDelta(word) + pt.ChatDelta(word+" again") + pt.ChatFinish + pt.Done
	}
	up, err := pt.NewResponder(func(r *pt.Request) pt.Step {
		var req struct{ Model string }
		if err := json.Unmarshal(r.Body, &req); err != nil {
			return pt.JSON(400, pt.OpenAIError("bad body", "invalid_request_error", ""))
		}
		// One write with a length: the whole stream is read before the gate commits.
		return pt.Step{Header: []string{"Content-Type: text/event-stream"}, Body: stream(req.Model)}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(up.Close)
	s := start(t, targets(up.URL)...)
	const clients, each = 6, 40
	var wg sync.WaitGroup
	errs := make(chan string, clients*each)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				word := fmt.Sprintf("w%d-%d", c, i)
				r := s.Post("/chat/completions", `{"model":"`+word+`","stream":true,"messages":[]}`)
				switch {
				case r.Status != 200 || r.Err != nil:
					errs <- fmt.Sprintf("%s: %d %v", word, r.Status, r.Err)
				case string(r.Body) != stream(word):
					errs <- fmt.Sprintf("%s: got another stream's bytes: %q", word, r.Body)
				case r.Header.Get("Content-Length") == "":
					errs <- fmt.Sprintf("%s: piped, not answered whole", word)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
