// Package sidecar runs the proxy in-process on loopback for tests, with its JSON log
// captured, and reads what it wrote (ledger records, events, metrics). It is kept apart from
// proxytest so the binary, whose drill uses proxytest's fake upstream, does not link testing.
package sidecar

import (
	"bufio"
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llm-failover/failover/budget"
	"github.com/llm-failover/failover/proxy"
	"github.com/llm-failover/failover/proxy/internal/config"
	"github.com/llm-failover/failover/proxy/proxytest"
)

// Sidecar is a running proxy.Server on loopback with its JSON log captured, for tests.
type Sidecar struct {
	T       testing.TB
	Srv     *proxy.Server
	Config  *config.Config
	URL     string // http://127.0.0.1:port/v1
	Addr    string // 127.0.0.1:port of the proxy listener
	Metrics string // http://127.0.0.1:port of the metrics listener
	Log     *SyncBuffer
}

// SyncBuffer is where the sidecar's log is captured.
type SyncBuffer = proxytest.SyncBuffer

// Start runs a sidecar configured by env (FAILOVER_* assignments), shut down at the end of
// the test. The log is JSON at debug level.
func Start(t testing.TB, env ...string) *Sidecar {
	t.Helper()
	cfg, err := config.Load(env, true)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return StartConfig(t, cfg)
}

// StartConfig runs a sidecar with a ready configuration.
func StartConfig(t testing.TB, cfg *config.Config) *Sidecar {
	t.Helper()
	return StartWith(t, cfg, Options{})
}

// Options change how StartWith runs the sidecar.
type Options struct {
	// Wrap, when set, wraps the proxy listener (to shape the client connections' sockets).
	Wrap func(net.Listener) net.Listener
	// Log receives the JSON log at Level instead of the captured debug log (benchmarks give
	// io.Discard at info, as in production); Sidecar.Log is then nil.
	Log   io.Writer
	Level slog.Level
	// RootCAs verifies https targets' certificates (proxy.Options): the CA of loopback TLS
	// servers. nil: the system roots.
	RootCAs *x509.CertPool
	// Clock is the sidecar's policy time (proxy.Options.Clock): a budget.ManualClock lets a
	// test move past an ejection or a rate limit's reset without waiting. nil: the system clock.
	Clock budget.Clock
}

// StartWith runs a sidecar with a ready configuration and options.
func StartWith(t testing.TB, cfg *config.Config, o Options) *Sidecar {
	t.Helper()
	var buf *SyncBuffer
	out, level := o.Log, o.Level
	if out == nil {
		buf = &SyncBuffer{}
		out, level = buf, slog.LevelDebug
	}
	srv, err := proxy.New(cfg, proxy.Options{Logger: slog.New(proxy.NewJSONHandler(out, level)), RootCAs: o.RootCAs, Clock: o.Clock})
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
	served := ln
	if o.Wrap != nil {
		served = o.Wrap(ln)
	}
	go srv.Serve(served)    // ends at Shutdown
	go srv.ServeProbes(mln) // ends at Shutdown
	s := &Sidecar{T: t, Srv: srv, Config: cfg, URL: "http://" + ln.Addr().String() + "/v1", Addr: ln.Addr().String(),
		Metrics: "http://" + mln.Addr().String(), Log: buf}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		if n := srv.LeakedProbes(); n > 0 {
			t.Errorf("%d request(s) finished with a target's probe still leased (probe_lease_leaked)", n)
		}
	})
	return s
}

// Upstream starts a fake provider closed at the end of the test.
func Upstream(t testing.TB, script ...proxytest.Step) *proxytest.Upstream {
	t.Helper()
	u, err := proxytest.New(script...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(u.Close)
	return u
}

// Targets renders FAILOVER_TARGET_<i>_URL and _NAME=t<i> for each URL.
func Targets(urls ...string) []string {
	var env []string
	for i, u := range urls {
		env = append(env, fmt.Sprintf("FAILOVER_TARGET_%d_URL=%s", i, u), fmt.Sprintf("FAILOVER_TARGET_%d_NAME=t%d", i, i))
	}
	return env
}

// Env joins lists of assignments.
func Env(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

// Client is an HTTP client for tests: no compression, generous pool.
var Client = &http.Client{Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 256}, Timeout: 60 * time.Second}

// Response is what the client saw.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
	Err    error // the body ended with an error (an interrupted stream)
}

// Post sends a JSON body to path (relative to /v1) with extra headers "Name: value".
func (s *Sidecar) Post(path, body string, headers ...string) Response {
	s.T.Helper()
	req, err := http.NewRequest("POST", s.URL+path, strings.NewReader(body))
	if err != nil {
		s.T.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ":")
		req.Header.Set(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	return s.Do(req)
}

// Do sends a request and reads the whole answer.
func (s *Sidecar) Do(req *http.Request) Response {
	s.T.Helper()
	resp, err := Client.Do(req)
	if err != nil {
		s.T.Fatalf("request: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: b, Err: err}
}

// Abandon posts a JSON body to path (relative to /v1) and leaves (cancels the request, closing
// its connection) once ready returns. It returns when the client has left, and when: it is a
// test failure that the request was answered before.
func (s *Sidecar) Abandon(path, body string, ready func()) time.Time {
	s.T.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", s.URL+path, strings.NewReader(body))
	if err != nil {
		s.T.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := Client.Do(req); err == nil {
			resp.Body.Close()
			s.T.Errorf("the request answered %d before it was abandoned", resp.StatusCode)
		}
	}()
	ready()
	cancel()
	left := time.Now()
	<-done
	return left
}

// Records returns the log records with this msg ("request" for the ledger).
func (s *Sidecar) Records(msg string) []map[string]any {
	s.T.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(s.Log.String()))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			s.T.Fatalf("log line is not JSON: %s", sc.Text())
		}
		if rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// Ledger returns the request records.
func (s *Sidecar) Ledger() []map[string]any { return s.Records("request") }

// WaitLedger waits until n request records were written (a stream's record is written when
// the stream ends, after the client has read it).
func (s *Sidecar) WaitLedger(n int) []map[string]any {
	s.T.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		recs := s.Ledger()
		if len(recs) >= n || time.Now().After(deadline) {
			return recs
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ScrapeMetrics returns the metrics page.
func (s *Sidecar) ScrapeMetrics() string {
	s.T.Helper()
	resp, err := Client.Get(s.Metrics + "/metrics")
	if err != nil {
		s.T.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
