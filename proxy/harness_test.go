package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llm-failover/failover/proxy"
	"github.com/llm-failover/failover/proxy/proxytest"
)

// sidecar is a running proxy.Server on loopback with its JSON log captured.
type sidecar struct {
	t       testing.TB
	srv     *proxy.Server
	URL     string // http://127.0.0.1:port/v1
	Metrics string // http://127.0.0.1:port
	log     *syncBuffer
	cfg     *proxy.Config
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// start runs a sidecar configured by env (FAILOVER_* assignments).
func start(t testing.TB, env ...string) *sidecar {
	t.Helper()
	cfg, err := proxy.Load(env, true)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	buf := &syncBuffer{}
	log := slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv, err := proxy.New(cfg, proxy.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)        //nolint:errcheck
	go srv.ServeProbes(mln) //nolint:errcheck
	s := &sidecar{t: t, srv: srv, URL: "http://" + ln.Addr().String() + "/v1", Metrics: "http://" + mln.Addr().String(), log: buf, cfg: cfg}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return s
}

// upstream starts a fake provider closed at the end of the test.
func upstream(t testing.TB, script ...proxytest.Step) *proxytest.Upstream {
	t.Helper()
	u, err := proxytest.New(script...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(u.Close)
	return u
}

// targets renders FAILOVER_TARGET_<i>_URL (and _NAME t<i>) for each URL.
func targets(urls ...string) []string {
	var env []string
	for i, u := range urls {
		env = append(env, fmt.Sprintf("FAILOVER_TARGET_%d_URL=%s", i, u), fmt.Sprintf("FAILOVER_TARGET_%d_NAME=t%d", i, i))
	}
	return env
}

// env joins lists of assignments.
func env(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

var client = &http.Client{Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 64}, Timeout: 30 * time.Second}

// response is what the client saw.
type response struct {
	Status int
	Header http.Header
	Body   []byte
	Err    error // a body that ended with an error (interrupted stream)
}

// post sends a JSON body to path (relative to /v1) with extra headers "Name: value".
func (s *sidecar) post(path, body string, headers ...string) response {
	s.t.Helper()
	req, err := http.NewRequest("POST", s.URL+path, strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ":")
		req.Header.Set(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	return s.do(req)
}

func (s *sidecar) do(req *http.Request) response {
	s.t.Helper()
	resp, err := client.Do(req)
	if err != nil {
		s.t.Fatalf("request: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return response{Status: resp.StatusCode, Header: resp.Header, Body: b, Err: err}
}

// ledger returns the request records (msg=request) in the log.
func (s *sidecar) ledger() []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(s.log.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var rec map[string]any
		if json.Unmarshal(sc.Bytes(), &rec) != nil {
			s.t.Fatalf("log line is not JSON: %s", sc.Text())
		}
		if rec["msg"] == "request" {
			out = append(out, rec)
		}
	}
	return out
}

// events returns the log records with this msg.
func (s *sidecar) events(msg string) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(s.log.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// waitLedger waits until n request records were written (a stream's record is written when
// the stream ends, after the client has read it).
func (s *sidecar) waitLedger(n int) []map[string]any {
	s.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		recs := s.ledger()
		if len(recs) >= n || time.Now().After(deadline) {
			return recs
		}
		time.Sleep(10 * time.Millisecond)
	}
}

const chatBody = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hello"}]}`
