package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
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

// rawClient is a keep-alive client of the proxy listener on a raw connection.
type rawClient struct {
	t   *testing.T
	c   net.Conn
	br  *bufio.Reader
	req string // a chat completion request with a Content-Length body
}

func dialRaw(t *testing.T, addr string) *rawClient {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	return &rawClient{t: t, c: c, br: bufio.NewReader(c), req: postRequest("HTTP/1.1", "")}
}

// postRequest is a chat completion request with a Content-Length body; header, when not
// empty, is one more header line.
func postRequest(proto, header string) string {
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hello"}]}`
	if header != "" {
		header += "\r\n"
	}
	return "POST /v1/chat/completions " + proto + "\r\nHost: sidecar\r\nContent-Type: application/json\r\n" + header +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

// send writes the chat request; sendRaw writes req as it is.
func (s *rawClient) send() { s.sendRaw(s.req) }

func (s *rawClient) sendRaw(req string) {
	s.t.Helper()
	if _, err := io.WriteString(s.c, req); err != nil {
		s.t.Fatal(err)
	}
}

// answer reads one whole 200 answer and returns its body.
func (s *rawClient) answer(name string) string {
	s.t.Helper()
	resp, err := http.ReadResponse(s.br, nil)
	if err != nil {
		s.t.Fatalf("%s: %v", name, err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		s.t.Fatalf("%s: %d, %v", name, resp.StatusCode, err)
	}
	return string(body)
}

// roundTrip sends req, reads its answer, and leaves the server time to begin its wait (or its
// read) before the next request: the client waits for its answers.
func (s *rawClient) roundTrip(req, name string) string {
	s.t.Helper()
	s.sendRaw(req)
	body := s.answer(name)
	time.Sleep(20 * time.Millisecond)
	return body
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
	s := dialRaw(t, addr)
	for i := range want {
		if body := s.roundTrip(s.req, "answer "+strconv.Itoa(i)); body != want[i] {
			t.Fatalf("answer %d: %d bytes, want %d", i, len(body), len(want[i]))
		}
	}
	for _, end := range []struct{ proto, keep, close string }{
		{"HTTP/1.1", "", "Connection: close"},
		{"HTTP/1.0", "Connection: keep-alive", ""},
	} {
		s := dialRaw(t, addr)
		s.c.SetDeadline(time.Now().Add(5 * time.Second))
		s.roundTrip(postRequest(end.proto, end.keep), end.proto+" keep-alive")
		s.roundTrip(postRequest(end.proto, end.close), end.proto+" closing")
		if _, err := s.br.ReadByte(); err != io.EOF {
			t.Fatalf("%s %s: after the answer: %v, want the connection's end", end.proto, end.close, err)
		}
	}
}

// Requests that arrive together (a pipelining client) are answered in order: an answer must
// not wait for a request that fasthttp has already read. The server's periodic look comes too
// rarely here to end a wait.
func TestPipelinedRequestsGetEveryAnswer(t *testing.T) {
	_, addr := startSlowServer(t, 0, 10*time.Minute)
	s := dialRaw(t, addr)
	s.roundTrip(s.req, "the first answer") // the client waits for its answers, at first
	s.roundTrip(s.req, "the second answer")
	s.sendRaw(s.req + s.req + s.req)
	for i := range 3 {
		s.answer("pipelined answer " + strconv.Itoa(i))
	}
	s.roundTrip(s.req, "the answer after the pipelined ones")
}

// A client that sends its next request before it has the answer (pipelining), the request
// arriving while the handler waits for the target: the answer must not wait for a request that
// has already arrived, which the poller would not report again. The server's periodic look
// comes too rarely here to end such a wait: the answer comes at once or not at all.
func TestAPipelinedRequestArrivingDuringTheHandlerIsServed(t *testing.T) {
	_, addr := startSlowServer(t, 300*time.Millisecond, 10*time.Minute)
	s := dialRaw(t, addr)
	s.send()
	time.Sleep(100 * time.Millisecond) // the first request is read; its answer is not written yet
	s.send()
	s.answer("answer 1")
	begin := time.Now()
	s.answer("answer 2")
	// The second answer takes the target's 300 ms; a missed request would wait for the read
	// deadline (120 s), past the client's (20 s).
	if took := time.Since(begin); took > 10*time.Second {
		t.Fatalf("the second answer took %v", took)
	}
}
