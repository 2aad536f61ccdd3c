package netio

import (
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pt "github.com/llm-failover/failover/proxy/proxytest"
	"github.com/valyala/fasthttp"
)

// testServer is a fasthttp server on a Listener that uses its client connections as the
// request path's server does (package proxy, Server.serveProxy): fasthttp with
// ReduceMemoryUsage and a write buffer of WriteBufferSize, Begin before each answer and
// AwaitAfter once it is made, EndLongWaits at every tick, and at its end, CloseIdle while
// fasthttp shuts down. Each request is answered, after delay, with a chat completion.
type testServer struct {
	srv      *fasthttp.Server
	conns    Conns
	closing  atomic.Bool
	addr     string
	quit     chan struct{}
	stopOnce sync.Once
}

// testAnswer is the body of every answer of a testServer.
const testAnswer = `{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`

type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}

// startTestServer starts a testServer; it is shut down when the test ends.
func startTestServer(t *testing.T, delay, tick time.Duration) *testServer {
	t.Helper()
	ts := &testServer{quit: make(chan struct{})}
	ts.srv = &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			cc, _ := ctx.Conn().(*ClientConn)
			mayWait := cc != nil && cc.Begin(len(ctx.Request.Body()))
			time.Sleep(delay)
			ctx.SetContentType("application/json")
			ctx.SetBodyString(testAnswer)
			if mayWait {
				cc.AwaitAfter(&ctx.Response.Header)
			}
		},
		ReduceMemoryUsage:     true,
		WriteBufferSize:       WriteBufferSize,
		ReadTimeout:           2 * time.Minute,
		IdleTimeout:           2 * time.Minute,
		NoDefaultServerHeader: true,
		CloseOnShutdown:       true,
		Logger:                quietLogger{},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts.addr = ln.Addr().String()
	go ts.srv.Serve(Listener{Listener: ln, Conns: &ts.conns, Closing: &ts.closing}) // ends with shutdown
	go func() {
		tk := time.NewTicker(tick)
		defer tk.Stop()
		for {
			select {
			case <-ts.quit:
				return
			case <-tk.C:
				ts.conns.EndLongWaits()
			}
		}
	}()
	t.Cleanup(ts.shutdown)
	return ts
}

// shutdown stops the server: no wait after an answer begins any more, the connections that
// wait for a request are closed, and fasthttp ends the rest. When it returns, every
// connection's serving goroutine is done with it.
func (ts *testServer) shutdown() {
	ts.stopOnce.Do(func() {
		close(ts.quit)
		ts.closing.Store(true)
		done := make(chan struct{})
		go func() {
			for {
				ts.conns.CloseIdle()
				select {
				case <-done:
					return
				case <-time.After(10 * time.Millisecond):
				}
			}
		}()
		ts.srv.Shutdown()
		close(done)
	})
}

// onlyConn returns the one client connection the server has open.
func (ts *testServer) onlyConn(t *testing.T) *ClientConn {
	t.Helper()
	ts.conns.mu.Lock()
	defer ts.conns.mu.Unlock()
	if len(ts.conns.m) != 1 {
		t.Fatalf("%d client connections listed, want 1", len(ts.conns.m))
	}
	for c := range ts.conns.m {
		return c
	}
	return nil
}

// A connection is listed while open and leaves the list when closed, by the client or by the
// server.
func TestClientConnectionsAreListedWhileOpen(t *testing.T) {
	ts := startTestServer(t, 0, 50*time.Millisecond)
	listed := func() int {
		ts.conns.mu.Lock()
		defer ts.conns.mu.Unlock()
		return len(ts.conns.m)
	}
	waitListed := func(want int) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); listed() != want; {
			if time.Now().After(deadline) {
				t.Fatalf("%d connections listed, want %d", listed(), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	var conns []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", ts.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	waitListed(3)
	conns[0].Close()
	waitListed(2)
	// A request that closes its connection: the server closes it after the answer.
	req := "GET /v1/models HTTP/1.1\r\nHost: sidecar\r\nConnection: close\r\n\r\n"
	if _, err := io.WriteString(conns[1], req); err != nil {
		t.Fatal(err)
	}
	conns[1].SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.Copy(io.Discard, conns[1]); err != nil {
		t.Fatalf("reading to the connection's end: %v", err)
	}
	waitListed(1)
}

// A client that waited for its answers and then pipelines one request: the wait after the
// answer before it misses that request, and EndLongWaits ends the wait within two looks; the
// request is served, and the answers after it do not wait (the client no longer counts as
// one that waits for its answers) until it waits again.
func TestAMissedRequestWaitsTwoLooksAtMost(t *testing.T) {
	ts := startTestServer(t, 300*time.Millisecond, 50*time.Millisecond)
	s := pt.DialRaw(t, ts.addr)
	for i := range 2 { // sequential: the second answer waits for the next request
		s.Send()
		s.Answer("sequential answer " + strconv.Itoa(i))
		time.Sleep(20 * time.Millisecond)
	}
	s.Send()
	time.Sleep(100 * time.Millisecond) // read; its answer waits, armed
	s.Send()                           // arrives before that wait begins
	s.Answer("the answer before the pipelined request")
	begin := time.Now()
	s.Answer("the pipelined request's answer")
	// 300 ms in the handler, and two looks (100 ms) at most for the missed request: far less
	// than the read deadline.
	if took := time.Since(begin); took > 5*time.Second {
		t.Fatalf("the pipelined request was answered after %v", took)
	}
	cc := ts.onlyConn(t)
	ts.shutdown() // the connection's goroutine is done with it: its fields may be read
	if cc.pace == paceSequential {
		t.Fatal("a client that sent a request before its answer still counts as one that waits")
	}
}
