package proxy

import (
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	pt "github.com/llm-failover/failover/proxy/proxytest"
)

// startScripted starts a sidecar whose one target plays steps (the last one again and again),
// with its periodic look (tend) every tick; it is shut down when the test ends.
func startScripted(t *testing.T, tick time.Duration, steps ...pt.Step) (*Server, string) {
	t.Helper()
	defer func(d time.Duration) { waitTick = d }(waitTick)
	waitTick = tick // read by New
	up, err := pt.New(steps...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(up.Close)
	srv, addr := startServer(t, up.URL)
	t.Cleanup(func() { srv.Shutdown(t.Context()) })
	return srv, addr
}

// startSlowServer is startScripted with a target that answers every request after delay.
func startSlowServer(t *testing.T, delay, tick time.Duration) (*Server, string) {
	t.Helper()
	return startScripted(t, tick, pt.Step{Body: pt.ChatCompletion("hi"), Header: []string{"Content-Type: application/json"}, Delay: delay})
}

// Answers of every size keep serving the connection: one that goes out in a single write, one
// past the write buffer whose last write is shorter than it, and one whose body goes out past
// the buffer in a write of its own (only the write that ends an answer may wait). Then, after
// an answer that would wait, a request that closes its connection and one from an HTTP/1.0
// client get their answer and the connection's end. The server's periodic look (tend) comes
// too rarely here to end a wait after an answer: a wrong one shows as a client's timeout.
func TestAnswersOfEverySizeThenTheEnd(t *testing.T) {
	var steps []pt.Step
	var want []string
	for _, n := range []int{0, 40 << 10, 70 << 10, 0} {
		b := pt.ChatCompletion(strings.Repeat("x", n))
		steps = append(steps, pt.JSON(200, b))
		want = append(want, b)
	}
	steps = append(steps, pt.JSON(200, pt.ChatCompletion("more")))
	_, addr := startScripted(t, 10*time.Minute, steps...)
	s := pt.DialRaw(t, addr)
	for i := range want {
		if body := s.RoundTrip(s.Req, "answer "+strconv.Itoa(i)); body != want[i] {
			t.Fatalf("answer %d: %d bytes, want %d", i, len(body), len(want[i]))
		}
	}
	for _, end := range []struct{ proto, keep, close string }{
		{"HTTP/1.1", "", "Connection: close"},
		{"HTTP/1.0", "Connection: keep-alive", ""},
	} {
		s := pt.DialRaw(t, addr)
		s.Conn.SetDeadline(time.Now().Add(5 * time.Second))
		s.RoundTrip(pt.PostRequest(end.proto, end.keep), end.proto+" keep-alive")
		s.RoundTrip(pt.PostRequest(end.proto, end.close), end.proto+" closing")
		if _, err := s.Br.ReadByte(); err != io.EOF {
			t.Fatalf("%s %s: after the answer: %v, want the connection's end", end.proto, end.close, err)
		}
	}
}

// Requests that arrive together (a pipelining client) are answered in order: an answer must
// not wait for a request that fasthttp has already read. The server's periodic look comes too
// rarely here to end a wait.
func TestPipelinedRequestsGetEveryAnswer(t *testing.T) {
	_, addr := startSlowServer(t, 0, 10*time.Minute)
	s := pt.DialRaw(t, addr)
	s.RoundTrip(s.Req, "the first answer") // the client waits for its answers, at first
	s.RoundTrip(s.Req, "the second answer")
	s.SendRaw(s.Req + s.Req + s.Req)
	for i := range 3 {
		s.Answer("pipelined answer " + strconv.Itoa(i))
	}
	s.RoundTrip(s.Req, "the answer after the pipelined ones")
}

// A client that sends its next request before it has the answer (pipelining), the request
// arriving while the handler waits for the target: the answer must not wait for a request that
// has already arrived, which the poller would not report again. The server's periodic look
// comes too rarely here to end such a wait: the answer comes at once or not at all.
func TestAPipelinedRequestArrivingDuringTheHandlerIsServed(t *testing.T) {
	_, addr := startSlowServer(t, 300*time.Millisecond, 10*time.Minute)
	s := pt.DialRaw(t, addr)
	s.Send()
	time.Sleep(100 * time.Millisecond) // the first request is read; its answer is not written yet
	s.Send()
	s.Answer("answer 1")
	begin := time.Now()
	s.Answer("answer 2")
	// The second answer takes the target's 300 ms; a missed request would wait for the read
	// deadline (120 s), past the client's (20 s).
	if took := time.Since(begin); took > 10*time.Second {
		t.Fatalf("the second answer took %v", took)
	}
}
