package proxy_test

import (
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llm-failover/failover/proxy/internal/config"
	pt "github.com/llm-failover/failover/proxy/proxytest"
	"github.com/llm-failover/failover/proxy/proxytest/sidecar"
)

// A pooled upstream connection the far side closed while it sat idle must cost neither a
// failed attempt nor a transfer: the sidecar notices (a peek before reuse) and sends the
// request once on a fresh connection.
func TestStalePooledConnectionIsRedialled(t *testing.T) {
	var calls atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			calls.Add(1)
			ctx.SetContentType("application/json")
			ctx.SetBodyString(pt.ChatCompletion("fresh"))
		},
		IdleTimeout: 100 * time.Millisecond, // closes keep-alive connections soon after each answer
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown() })
	second := upstream(t)
	s := start(t, targets("http://"+ln.Addr().String()+"/v1", second.URL)...)
	for _, idle := range []time.Duration{300 * time.Millisecond, 1500 * time.Millisecond} {
		if r := s.Post("/chat/completions", chatBody); r.Status != 200 {
			t.Fatalf("status %d", r.Status)
		}
		time.Sleep(idle) // the upstream closes the pooled connection meanwhile
		before := calls.Load()
		r := s.Post("/chat/completions", chatBody)
		if r.Status != 200 || r.Header.Get("X-Failover-Target") != "t0" || r.Header.Get("X-Failover-Attempts") != "1" {
			t.Fatalf("after %v idle: %d via %s in %s attempts", idle, r.Status, r.Header.Get("X-Failover-Target"), r.Header.Get("X-Failover-Attempts"))
		}
		if got := calls.Load() - before; got != 1 {
			t.Fatalf("after %v idle the upstream answered %d times, want 1", idle, got)
		}
	}
	if second.Calls() != 0 {
		t.Fatalf("a stale connection caused a transfer")
	}
}

// A request written to a pooled connection that then closes (or resets) without an answer is
// an attempt like any other: the far side may have read it and started generating, so it is
// never sent again behind the decision function's back. With failover off that is one
// upstream request and one attempt in the ledger.
func TestWrittenRequestIsNotResentOnAPooledConnection(t *testing.T) {
	for _, fault := range []pt.Fault{pt.FaultClose, pt.FaultReset} {
		up := upstream(t, pt.JSON(200, pt.ChatCompletion("first")), pt.Step{Fault: fault}, pt.JSON(200, pt.ChatCompletion("second")))
		s := start(t, env(targets(up.URL), []string{"FAILOVER_ENABLED=false"})...)
		if r := s.Post("/chat/completions", chatBody); r.Status != 200 {
			t.Fatalf("first request: %d", r.Status)
		}
		r := s.Post("/chat/completions", chatBody) // on the pooled connection, at once
		if r.Status != 502 || r.Header.Get("X-Failover-Attempts") != "1" {
			t.Errorf("fault %d: %d in %s attempts, want 502 in 1", fault, r.Status, r.Header.Get("X-Failover-Attempts"))
		}
		if n := len(up.Requests()); n != 2 {
			t.Errorf("fault %d: the upstream received %d requests, want 2 (the second one once)", fault, n)
		}
		recs := s.WaitLedger(2)
		if l, _ := recs[1]["ledger"].([]any); len(l) != 1 || l[0].(map[string]any)["class"] != "reset" {
			t.Errorf("fault %d: ledger %v, want one reset attempt", fault, recs[1]["ledger"])
		}
	}
}

// An upstream answer without a Content-Type reaches the client without one: the sidecar does
// not invent text/plain (fasthttp's default), whether the answer was held whole or, past
// FAILOVER_MAX_RESPONSE_BYTES, piped through.
func TestAnswerWithoutContentTypeGetsNone(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	big := `{"data":"` + strings.Repeat("x", 4096) + `"}`
	srv := &fasthttp.Server{
		NoDefaultContentType: true,
		Handler: func(ctx *fasthttp.RequestCtx) {
			if strings.Contains(string(ctx.PostBody()), "big") {
				ctx.SetBodyString(big)
				return
			}
			ctx.SetBodyString(pt.ChatCompletion("hi"))
		},
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown() })
	s := start(t, "FAILOVER_TARGET_0_URL=http://"+ln.Addr().String()+"/v1", "FAILOVER_MAX_RESPONSE_BYTES=1KiB")
	for _, body := range []string{chatBody, `{"model":"big"}`} {
		r := s.Post("/chat/completions", body)
		if r.Status != 200 || len(r.Body) < 20 {
			t.Fatalf("%s: %d %s", body, r.Status, r.Body)
		}
		if ct, ok := r.Header["Content-Type"]; ok {
			t.Errorf("%s: the answer has Content-Type %q, the upstream sent none", body, ct)
		}
	}
}

// TCP states in /proc/net/tcp.
const (
	tcpEstablished = "01"
	tcpCloseWait   = "08" // the far side closed, this side has not
)

// socketsTo counts this process's TCP sockets to port in one of states, from /proc/net/tcp.
func socketsTo(t *testing.T, port int, states ...string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Skip("no /proc/net/tcp")
	}
	want := fmt.Sprintf(":%04X", port)
	n := 0
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 3 && strings.HasSuffix(f[2], want) && slices.Contains(states, f[3]) {
			n++
		}
	}
	return n
}

// burstTarget starts a target that closes a keep-alive connection idle for 200 ms, and
// answers a request with "burst" in its body only after 100 ms, so that every request of a
// burst (sendBurst) gets a connection of its own. It returns the target's base URL and port,
// and the CA the sidecar needs to trust it (nil over http).
func burstTarget(t *testing.T, scheme string) (url string, port int, roots *x509.CertPool) {
	t.Helper()
	if scheme == "https" {
		up, roots, _ := tlsTarget(t, 200*time.Millisecond)
		return up.URL + "/v1", up.Listener.Addr().(*net.TCPAddr).Port, roots
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			if strings.Contains(string(ctx.PostBody()), "burst") {
				time.Sleep(100 * time.Millisecond)
			}
			ctx.SetContentType("application/json")
			ctx.SetBodyString(pt.ChatCompletion("hi"))
		},
		IdleTimeout: 200 * time.Millisecond, // closes keep-alive connections soon after each answer
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown() })
	return "http://" + ln.Addr().String() + "/v1", ln.Addr().(*net.TCPAddr).Port, nil
}

// tlsTarget starts an https target (net/http's test server, HTTP/1.1 over TLS 1.3) that
// answers as burstTarget does and closes a keep-alive connection idle for idle (0: never).
// It returns the server, the CA that verifies its certificate, and how many connections it
// accepted.
func tlsTarget(t *testing.T, idle time.Duration) (up *httptest.Server, roots *x509.CertPool, conns *atomic.Int64) {
	t.Helper()
	conns = new(atomic.Int64)
	up = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if strings.Contains(string(body), "burst") {
			time.Sleep(100 * time.Millisecond)
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, pt.ChatCompletion("hi"))
	}))
	up.Config.IdleTimeout = idle
	up.Config.ErrorLog = log.New(io.Discard, "", 0)
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	up.StartTLS()
	t.Cleanup(up.Close)
	roots = x509.NewCertPool()
	roots.AddCert(up.Certificate())
	return up, roots, conns
}

// startTrusting starts a sidecar configured by env that trusts roots for https targets.
func startTrusting(t *testing.T, roots *x509.CertPool, env ...string) *sidecar.Sidecar {
	t.Helper()
	cfg, err := config.Load(env, true)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return sidecar.StartWith(t, cfg, sidecar.Options{RootCAs: roots})
}

// sendBurst sends n requests at once through the sidecar and waits for their answers.
func sendBurst(t *testing.T, s *sidecar.Sidecar, n int) {
	t.Helper()
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r := s.Post("/chat/completions", strings.Replace(chatBody, "hello", "burst", 1)); r.Status != 200 {
				t.Errorf("status %d", r.Status)
			}
		}()
	}
	wg.Wait()
}

// A burst fills a target's idle pool; the traffic that follows, one request at a time, reuses
// only the newest connection. The ones below it must not stay open for ever once the target
// has closed them (in CLOSE_WAIT, each a descriptor): the pool lets them go.
// Over https the target's close comes as a TLS alert before the FIN: the same holds.
func TestIdlePoolShrinksAfterABurst(t *testing.T) {
	for _, scheme := range []string{"http", "https"} {
		t.Run(scheme, func(t *testing.T) { idlePoolShrinksAfterABurst(t, scheme) })
	}
}

func idlePoolShrinksAfterABurst(t *testing.T, scheme string) {
	url, port, roots := burstTarget(t, scheme)
	s := startTrusting(t, roots, targets(url)...)
	sendBurst(t, s, 24)
	// One request at a time from here on, more often than the target's idle timeout: the
	// newest connection stays alive, the burst's others are closed by the target. On a loaded
	// machine a turn of this loop can take longer than that timeout, and the newest connection
	// is then seen closed once; the next request lets it go. So the test fails only when none
	// of the looks in 5 s finds every closed connection gone (the pool would keep them for
	// idleConnTimeout, 30 s).
	start := time.Now()
	for {
		if r := s.Post("/chat/completions", chatBody); r.Status != 200 {
			t.Fatalf("status %d", r.Status)
		}
		n := socketsTo(t, port, tcpCloseWait)
		if n == 0 && time.Since(start) > 500*time.Millisecond {
			return
		}
		if time.Since(start) > 5*time.Second {
			t.Fatalf("%d pooled connections the target closed are still open", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// After a burst the traffic may stop altogether. The target then closes the burst's
// connections, and the sidecar must close its side too without waiting for a request that may
// never come (docs/decisions.md, Three actions, never confused: within about 2 s of the target's close),
// over http and over https, where the close comes as a TLS alert before the FIN.
func TestIdlePoolLetsGoOfClosedConnectionsWithoutTraffic(t *testing.T) {
	for _, scheme := range []string{"http", "https"} {
		t.Run(scheme, func(t *testing.T) { idlePoolLetsGoWithoutTraffic(t, scheme) })
	}
}

func idlePoolLetsGoWithoutTraffic(t *testing.T, scheme string) {
	const burst = 8
	url, port, roots := burstTarget(t, scheme)
	s := startTrusting(t, roots, targets(url)...)
	sendBurst(t, s, burst)
	if n := socketsTo(t, port, tcpEstablished, tcpCloseWait); n < burst/2 {
		t.Fatalf("the burst left %d pooled connections, want about %d", n, burst)
	}
	// No request from here on. 10 s: five sweeps, for a loaded machine.
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := socketsTo(t, port, tcpEstablished, tcpCloseWait)
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections to the target are still open 10 s after the burst (%d closed by the target)",
				n, socketsTo(t, port, tcpCloseWait))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Shutdown closes the connections each target's pool keeps idle, and no request of the drain
// leaves one open: nothing of the sidecar holds a target's connection once it has shut down.
func TestShutdownClosesIdleUpstreamConnections(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	up := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) { // keeps idle connections open
		ctx.SetContentType("application/json")
		ctx.SetBodyString(pt.ChatCompletion("hi"))
	}}
	go up.Serve(ln)
	t.Cleanup(func() { up.Shutdown() })
	port := ln.Addr().(*net.TCPAddr).Port
	s := startTrusting(t, nil, targets("http://"+ln.Addr().String()+"/v1")...)
	sendBurst(t, s, 4)
	if n := socketsTo(t, port, tcpEstablished); n == 0 {
		t.Fatal("no pooled connection to the target after a burst")
	}
	s.Srv.Shutdown(t.Context())
	waitUntil(t, "connections to the target are still open after Shutdown", func() bool {
		return socketsTo(t, port, tcpEstablished, tcpCloseWait) == 0
	})
}

// waitUntil asks cond every few milliseconds until it holds, or fails with what after 5 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal(what)
		}
	}
}

// A provider closes idle keep-alive connections over https as well, and there its close comes
// as a TLS close_notify alert before the FIN. A pooled connection it closed must cost no
// attempt: the request goes once, on a fresh connection, and the target's health is
// untouched (one failure would eject it here).
func TestTLSConnectionClosedWhileIdleIsRedialled(t *testing.T) {
	up, roots, conns := tlsTarget(t, 200*time.Millisecond)
	s := startTrusting(t, roots, env(targets(up.URL+"/v1"), []string{"FAILOVER_EJECT_AFTER=1"})...)
	if r := s.Post("/chat/completions", chatBody); r.Status != 200 {
		t.Fatalf("first request: %d", r.Status)
	}
	time.Sleep(500 * time.Millisecond) // the target closes the pooled connection meanwhile
	r := s.Post("/chat/completions", chatBody)
	if r.Status != 200 || r.Header.Get("X-Failover-Attempts") != "1" {
		t.Fatalf("second request: %d in %s attempts, want 200 in 1", r.Status, r.Header.Get("X-Failover-Attempts"))
	}
	recs := s.WaitLedger(2)
	if l, _ := recs[1]["ledger"].([]any); len(l) != 1 {
		t.Fatalf("ledger %v, want one attempt", recs[1]["ledger"])
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("%d TLS connections for two requests, want 2 (the second on a fresh one)", n)
	}
	m := s.ScrapeMetrics()
	for _, want := range []string{`failover_target_up{target="t0"} 1`, `failover_target_ejections_total{target="t0"} 0`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// A TLS connection the target keeps open is reused after an idle spell longer than the one
// after which it is checked: nothing waits on it, so the check must not condemn it.
func TestOpenTLSConnectionIsReused(t *testing.T) {
	up, roots, conns := tlsTarget(t, 0)
	s := startTrusting(t, roots, targets(up.URL+"/v1")...)
	for i := range 3 {
		if i > 0 {
			time.Sleep(300 * time.Millisecond) // more than the 100 ms after which it is checked
		}
		if r := s.Post("/chat/completions", chatBody); r.Status != 200 || r.Header.Get("X-Failover-Attempts") != "1" {
			t.Fatalf("request %d: %d in %s attempts", i, r.Status, r.Header.Get("X-Failover-Attempts"))
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d TLS connections for three requests, want 1 (kept alive)", n)
	}
}
