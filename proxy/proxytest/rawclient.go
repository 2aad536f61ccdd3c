package proxytest

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// RawClient is a keep-alive HTTP/1 client on a raw connection: it writes requests as bytes,
// so a test decides exactly when each one reaches the server (pipelined, split, or after
// the server began to wait).
type RawClient struct {
	t    testing.TB
	Conn net.Conn
	Br   *bufio.Reader
	Req  string // a chat completion request with a Content-Length body, HTTP/1.1
}

// DialRaw connects to addr with a 20 s deadline; the connection closes with the test.
func DialRaw(t testing.TB, addr string) *RawClient {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	return &RawClient{t: t, Conn: c, Br: bufio.NewReader(c), Req: PostRequest("HTTP/1.1", "")}
}

// PostRequest is a chat completion request with a Content-Length body; header, when not
// empty, is one more header line.
func PostRequest(proto, header string) string {
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hello"}]}`
	if header != "" {
		header += "\r\n"
	}
	return "POST /v1/chat/completions " + proto + "\r\nHost: sidecar\r\nContent-Type: application/json\r\n" + header +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

// Send writes the chat request; SendRaw writes req as it is.
func (s *RawClient) Send() { s.SendRaw(s.Req) }

func (s *RawClient) SendRaw(req string) {
	s.t.Helper()
	if _, err := io.WriteString(s.Conn, req); err != nil {
		s.t.Fatal(err)
	}
}

// Answer reads one whole 200 answer and returns its body; name says which in a failure.
func (s *RawClient) Answer(name string) string {
	s.t.Helper()
	resp, err := http.ReadResponse(s.Br, nil)
	if err != nil {
		s.t.Fatalf("%s: %v", name, err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		s.t.Fatalf("%s: %d, %v", name, resp.StatusCode, err)
	}
	return string(body)
}

// RoundTrip sends req, reads its answer, and leaves the server time to begin its wait (or its
// read) before the next request: a client that waits for its answers.
func (s *RawClient) RoundTrip(req, name string) string {
	s.t.Helper()
	s.SendRaw(req)
	body := s.Answer(name)
	time.Sleep(20 * time.Millisecond)
	return body
}
