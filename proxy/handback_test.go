package proxy_test

import (
	"bufio"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	pt "github.com/llm-failover/failover/proxy/proxytest"
)

// readOK reads one whole 200 answer from br.
func readOK(t *testing.T, br *bufio.Reader) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("got %d %v %q", resp.StatusCode, err, body)
	}
}

// A connection given back to the server after a stream serves its next requests like any
// other: a client that leaves one of them is seen, and the upstream closed at once, rather
// than the attempt running on to FAILOVER_ATTEMPT_TIMEOUT for nobody.
func TestClientLeavingIsSeenAfterAStreamOnTheConnection(t *testing.T) {
	a := upstream(t,
		pt.SSE(pt.ChatStream(20*time.Millisecond, "Hello", " world")...), // piped after commit
		pt.SSE(pt.ChatStream(20*time.Millisecond, "again")...),
		pt.Step{Fault: pt.FaultStall},
	)
	s := start(t, env(targets(a.URL), []string{"FAILOVER_ATTEMPT_TIMEOUT=20s"})...)
	c := dial(t, s.Addr)
	br := bufio.NewReader(c)
	for range 2 {
		rawPost(t, c, "HTTP/1.1", streamBody)
		readOK(t, br)
	}
	rawPost(t, c, "HTTP/1.1", chatBody)
	for a.Calls() < 3 {
		time.Sleep(10 * time.Millisecond)
	}
	for len(a.PeerClosed()) > 0 { // the streams' connections
		<-a.PeerClosed()
	}
	left := time.Now()
	c.Close()
	select {
	case at := <-a.PeerClosed():
		if d := at.Sub(left); d > 2*time.Second {
			t.Fatalf("the upstream connection was closed %v after the client left", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream connection stayed open after the client left")
	}
	if recs := s.WaitLedger(3); len(recs) != 3 || recs[2]["outcome"] != "cancelled" {
		t.Errorf("ledger %v", recs)
	}
}

// Each stream hands its connection back to the server, which wraps what it serves when the
// next stream hijacks it: handed back as it came, the wrappers would nest one deeper per
// stream, so that a keep-alive client's every read and write went through all of them.
func TestStreamsOnOneConnectionDoNotNestIt(t *testing.T) {
	const streams = 8
	a := upstream(t, pt.SSE(pt.ChatStream(5*time.Millisecond, "Hello", " world")...))
	s := start(t, targets(a.URL)...)
	c := dial(t, s.Addr)
	br := bufio.NewReader(c)
	for range streams {
		rawPost(t, c, "HTTP/1.1", streamBody)
		readOK(t, br)
	}
	// The connection's goroutine now waits for the next request, in a read of the client's
	// socket under whatever wraps it.
	buf := make([]byte, 1<<20)
	deepest := -1
	for deadline := time.Now().Add(5 * time.Second); deepest < 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.Contains(g, "netio.(*ClientConn).Read(") && strings.Contains(g, "ServeConn(") {
				deepest = strings.Count(g, "(*hijackConn).Read(")
			}
		}
	}
	if deepest < 0 {
		t.Fatal("no goroutine waits for the connection's next request")
	}
	if deepest > 1 {
		t.Fatalf("after %d streams a read of the connection goes through %d wrappers", streams, deepest)
	}
	rawPost(t, c, "HTTP/1.1", chatBody)
	readOK(t, br)
}

// A client may send its next requests before a stream's answer ends (pipelining): the bytes
// the server had read of them before the stream took the connection are served next, in order.
func TestRequestsPipelinedBehindAStream(t *testing.T) {
	a := upstream(t,
		pt.SSE(pt.ChatStream(20*time.Millisecond, "Hello", " world")...),
		pt.JSON(200, pt.ChatCompletion("second answer")),
		pt.SSE(pt.ChatStream(20*time.Millisecond, "third")...),
		pt.JSON(200, pt.ChatCompletion("fourth answer")),
	)
	s := start(t, targets(a.URL)...)
	c := dial(t, s.Addr)
	br := bufio.NewReader(c)
	// All four in one write: the server reads the others with the first.
	var reqs strings.Builder
	for _, body := range []string{streamBody, chatBody, streamBody, chatBody} {
		reqs.WriteString("POST /v1/chat/completions HTTP/1.1\r\nHost: sidecar\r\nContent-Type: application/json\r\nContent-Length: " +
			strconv.Itoa(len(body)) + "\r\n\r\n" + body)
	}
	if _, err := c.Write([]byte(reqs.String())); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"content":" world"`, "second answer", `"content":"third"`, "fourth answer"} {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("waiting for %q: %v", want, err)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != 200 || !strings.Contains(string(body), want) {
			t.Fatalf("got %d %v %q, want %q in it", resp.StatusCode, err, body, want)
		}
	}
}
