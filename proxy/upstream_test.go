package proxy_test

import (
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

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
	go srv.Serve(ln) //nolint:errcheck
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
	go srv.Serve(ln) //nolint:errcheck
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
// burst (sendBurst) gets a connection of its own. It returns the target's base URL and port.
func burstTarget(t *testing.T) (url string, port int) {
	t.Helper()
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
	go srv.Serve(ln) //nolint:errcheck
	t.Cleanup(func() { srv.Shutdown() })
	return "http://" + ln.Addr().String() + "/v1", ln.Addr().(*net.TCPAddr).Port
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
func TestIdlePoolShrinksAfterABurst(t *testing.T) {
	url, port := burstTarget(t)
	s := start(t, targets(url)...)
	sendBurst(t, s, 24)
	// One request at a time from here on, more often than the target's idle timeout: the
	// newest connection stays alive, the burst's others are closed by the target.
	start := time.Now()
	for n := 0; ; n++ {
		if r := s.Post("/chat/completions", chatBody); r.Status != 200 {
			t.Fatalf("status %d", r.Status)
		}
		n := socketsTo(t, port, tcpCloseWait)
		if n == 0 && time.Since(start) > 500*time.Millisecond {
			return
		}
		if time.Since(start) > 2*time.Second {
			t.Fatalf("%d pooled connections the target closed are still open", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// After a burst the traffic may stop altogether. The target then closes the burst's
// connections, and the sidecar must close its side too without waiting for a request that may
// never come (README, How it decides: within about 2 s of the target's close).
func TestIdlePoolLetsGoOfClosedConnectionsWithoutTraffic(t *testing.T) {
	const burst = 8
	url, port := burstTarget(t)
	s := start(t, targets(url)...)
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
