package proxy

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llm-failover/failover/proxy/internal/config"
	pt "github.com/llm-failover/failover/proxy/proxytest"
)

// A configuration built in code (the drill's) with a _RESUME value Load would refuse is refused
// by New too, rather than run without resume.
func TestNewRefusesAnUnknownResumeForm(t *testing.T) {
	t.Parallel()
	c, err := config.Load([]string{"FAILOVER_TARGET_0_URL=http://a/v1"}, true)
	if err != nil {
		t.Fatal(err)
	}
	c.Targets[0].Resume = "assistant"
	if _, err := New(c, Options{}); err == nil || !strings.Contains(err.Error(), "FAILOVER_TARGET_0: RESUME=\"assistant\"") {
		t.Fatalf("New: %v", err)
	}
}

// With FAILOVER_RESUME_MAX=0 no stream can be resumed, and none pays for it, as with
// FAILOVER_RESUME=off (docs/streams.md, Resume a cut stream): a stream that could be resumed otherwise
// copies nothing of its request at commit, so its exchange never gets a resumption, and its
// events do not go through a transcript. Every exchange the server uses is made by its pool's
// New, so the test sees them all.
func TestResumeMaxZeroCopiesNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		env    []string
		copies bool
	}{
		{"FAILOVER_RESUME_MAX=1", []string{"FAILOVER_RESUME=on"}, true},
		{"FAILOVER_RESUME_MAX=0", []string{"FAILOVER_RESUME=on", "FAILOVER_RESUME_MAX=0"}, false},
		{"FAILOVER_RESUME=off", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up, err := pt.New(pt.SSE(pt.ChatStream(20*time.Millisecond, "Hello", " world")...)) // piped after commit
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(up.Close)
			cfg, err := config.Load(append([]string{"FAILOVER_TARGET_0_URL=" + up.URL, "FAILOVER_TARGET_0_RESUME=prefill"}, tc.env...), true)
			if err != nil {
				t.Fatal(err)
			}
			srv, err := New(cfg, Options{Logger: slog.New(NewJSONHandler(io.Discard, slog.LevelInfo))})
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var made []*exchange
			srv.pool.New = func() any {
				ex := newExchange(srv)
				mu.Lock()
				made = append(made, ex)
				mu.Unlock()
				return ex
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go srv.Serve(ln) // ends with Shutdown
			resp, err := http.Post("http://"+ln.Addr().String()+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"Say hello"}]}`))
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || !strings.HasSuffix(string(body), pt.Done) {
				t.Fatalf("the stream did not end cleanly: %v\n%s", err, body)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			srv.Shutdown(ctx) // returns once the stream's exchange is finished
			mu.Lock()
			defer mu.Unlock()
			copied := false
			for _, ex := range made {
				copied = copied || ex.resume != nil
			}
			if copied != tc.copies || len(made) == 0 {
				t.Fatalf("%d exchanges, a request copied for a resume: %v, want %v", len(made), copied, tc.copies)
			}
		})
	}
}
