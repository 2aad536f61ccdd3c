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

	pt "github.com/llm-failover/failover/proxy/proxytest"
)

// FAILOVER_RESUME, FAILOVER_RESUME_MAX and FAILOVER_TARGET_<i>_RESUME (README, Configuration
// reference): off by default; a bad value is an error that names the variable; -check shows them.
func TestLoadResume(t *testing.T) {
	base := []string{"FAILOVER_TARGET_0_URL=http://a/v1", "FAILOVER_TARGET_1_URL=http://b/v1"}
	c, err := Load(base, true)
	if err != nil {
		t.Fatal(err)
	}
	if c.Resume.On() || c.Resume.Max != 1 || c.Targets[0].Resume != "" {
		t.Fatalf("defaults: %+v, target %q", c.Resume, c.Targets[0].Resume)
	}
	if d := c.Describe(); !strings.Contains(d, "FAILOVER_RESUME=off  FAILOVER_RESUME_MAX=1\n") {
		t.Fatalf("-check:\n%s", d)
	}

	c, err = Load(append(base, "FAILOVER_RESUME=ON", "FAILOVER_RESUME_MAX=3", "FAILOVER_TARGET_0_RESUME=Prefill", "FAILOVER_TARGET_1_RESUME=continue"), true)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Resume.On() || c.Resume.Max != 3 || c.Targets[0].Resume != "prefill" || c.Targets[1].Resume != "continue" {
		t.Fatalf("%+v, targets %q %q", c.Resume, c.Targets[0].Resume, c.Targets[1].Resume)
	}
	d := c.Describe()
	for _, want := range []string{"FAILOVER_RESUME=on  FAILOVER_RESUME_MAX=3\n", "weight=1 retries=1 resume=prefill\n", "resume=continue\n"} {
		if !strings.Contains(d, want) {
			t.Errorf("-check lacks %q:\n%s", want, d)
		}
	}

	c, err = Load(append(base, "FAILOVER_RESUME=on"), true)
	if err != nil {
		t.Fatal(err)
	}
	if d := c.Describe(); !strings.Contains(d, "no target is marked resumable: set FAILOVER_TARGET_<i>_RESUME") {
		t.Errorf("-check does not say that nothing can be resumed:\n%s", d)
	}
	c, err = Load(append(base, "FAILOVER_RESUME=on", "FAILOVER_RESUME_MAX=0", "FAILOVER_TARGET_1_RESUME=prefill"), true)
	if err != nil {
		t.Fatal(err)
	}
	if d := c.Describe(); c.Resume.On() || !strings.Contains(d, "FAILOVER_RESUME_MAX=0: no stream is resumed") {
		t.Errorf("-check does not say that FAILOVER_RESUME_MAX=0 resumes nothing:\n%s", d)
	}

	c, err = Load(append(base, "FAILOVER_RESUME=on", "FAILOVER_TARGET_0_RESUME=Instruct", "FAILOVER_TARGET_1_RESUME=AUTO",
		"FAILOVER_RESUME_INSTRUCTION=Go on."), true)
	if err != nil {
		t.Fatal(err)
	}
	if c.Targets[0].Resume != "instruct" || c.Targets[1].Resume != "auto" || c.Resume.instruction() != "Go on." {
		t.Fatalf("targets %q %q, instruction %q", c.Targets[0].Resume, c.Targets[1].Resume, c.Resume.instruction())
	}
	if d := c.Describe(); !strings.Contains(d, `FAILOVER_RESUME_INSTRUCTION="Go on."`) || !strings.Contains(d, "resume=auto\n") {
		t.Errorf("-check:\n%s", d)
	}
	if c, _ = Load(base, true); c.Resume.instruction() != DefaultResumeInstruction {
		t.Errorf("the default instruction: %q", c.Resume.instruction())
	}
	if _, err = Load(append(base, "FAILOVER_RESUME_INSTRUCTION="+strings.Repeat("x", 5000)), true); err == nil ||
		!strings.Contains(err.Error(), "FAILOVER_RESUME_INSTRUCTION: must be at most 4096 bytes, is 5000") {
		t.Errorf("a long instruction: %v", err)
	}

	_, err = Load(append(base, "FAILOVER_RESUME=yes", "FAILOVER_RESUME_MAX=-1", "FAILOVER_TARGET_1_RESUME=assistant", "FAILOVER_RESUME_MAXIMUM=2",
		"FAILOVER_RESUME_INSTRUCTION= \t"), true)
	if err == nil {
		t.Fatal("bad values accepted")
	}
	for _, want := range []string{`FAILOVER_RESUME="yes": must be on or off`, `FAILOVER_RESUME_MAX="-1": must be >= 0`,
		`FAILOVER_RESUME_INSTRUCTION=" \t": must not be blank`,
		`FAILOVER_TARGET_1_RESUME="assistant": must be prefill, prefix, continue, instruct, auto, or empty`, "FAILOVER_RESUME_MAXIMUM: unknown variable (did you mean FAILOVER_RESUME_MAX?)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message lacks %q:\n%v", want, err)
		}
	}
}

// A configuration built in code (the drill's) with a _RESUME value Load would refuse is refused
// by New too, rather than run without resume.
func TestNewRefusesAnUnknownResumeForm(t *testing.T) {
	c, err := Load([]string{"FAILOVER_TARGET_0_URL=http://a/v1"}, true)
	if err != nil {
		t.Fatal(err)
	}
	c.Targets[0].Resume = "assistant"
	if _, err := New(c, Options{}); err == nil || !strings.Contains(err.Error(), "FAILOVER_TARGET_0: RESUME=\"assistant\"") {
		t.Fatalf("New: %v", err)
	}
}

// With FAILOVER_RESUME_MAX=0 no stream can be resumed, and none pays for it, as with
// FAILOVER_RESUME=off (README, Resume a cut stream): a stream that could be resumed otherwise
// copies nothing of its request at commit, so its exchange never gets a resumption, and its
// events do not go through a transcript. Every exchange the server uses is made by its pool's
// New, so the test sees them all.
func TestResumeMaxZeroCopiesNothing(t *testing.T) {
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
			up, err := pt.New(pt.SSE(pt.ChatStream(20*time.Millisecond, "Hello", " world")...)) // piped after commit
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(up.Close)
			cfg, err := Load(append([]string{"FAILOVER_TARGET_0_URL=" + up.URL, "FAILOVER_TARGET_0_RESUME=prefill"}, tc.env...), true)
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
