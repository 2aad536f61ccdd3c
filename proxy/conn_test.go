package proxy_test

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

// rawPost writes one POST on c, as an SDK's keep-alive client would.
func rawPost(t *testing.T, c net.Conn, proto, body string, extra ...string) {
	t.Helper()
	req := "POST /v1/chat/completions " + proto + "\r\nHost: sidecar\r\nContent-Type: application/json\r\n"
	for _, h := range extra {
		req += h + "\r\n"
	}
	req += "Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	if _, err := c.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
}

// dial opens a client connection to addr, closed when the test ends.
func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c
}

// A committed stream is written outside fasthttp's response writer; after its clean end the
// client's connection must still serve the next request, as keep-alive SDK clients expect.
func TestConnectionServesTheNextRequestAfterAStream(t *testing.T) {
	a := upstream(t,
		pt.SSE(pt.ChatStream(30*time.Millisecond, "Hello", " world")...), // arrives over time: piped after commit
		pt.JSON(200, pt.ChatCompletion("second answer")),
		pt.SSE(pt.ChatStream(30*time.Millisecond, "third")...),
	)
	s := start(t, targets(a.URL)...)
	c := dial(t, s.Addr)
	br := bufio.NewReader(c)
	read := func(want string) *http.Response {
		t.Helper()
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("body: %v (%q)", err, body)
		}
		if resp.StatusCode != 200 || !strings.Contains(string(body), want) {
			t.Fatalf("got %d %q, want %q in it", resp.StatusCode, body, want)
		}
		return resp
	}

	rawPost(t, c, "HTTP/1.1", streamBody)
	resp := read(`"content":" world"`)
	if resp.TransferEncoding == nil || resp.TransferEncoding[0] != "chunked" || resp.Close {
		t.Fatalf("a stream to an HTTP/1.1 client: chunked keep-alive, got %v close=%v", resp.TransferEncoding, resp.Close)
	}
	if resp.Header.Get("X-Failover-Target") != "t0" || resp.Header.Get("X-Request-Id") == "" {
		t.Fatalf("failover headers missing: %v", resp.Header)
	}
	rawPost(t, c, "HTTP/1.1", chatBody)
	read("second answer")
	rawPost(t, c, "HTTP/1.1", streamBody)
	read(`"content":"third"`)
	if got := len(s.WaitLedger(3)); got != 3 {
		t.Fatalf("%d ledger records, want 3", got)
	}
}

// An HTTP/1.0 client cannot read chunked framing: its stream ends when the connection closes.
func TestStreamToAnHTTP10Client(t *testing.T) {
	a := upstream(t, pt.SSE(pt.ChatStream(20*time.Millisecond, "Hello")...))
	s := start(t, targets(a.URL)...)
	c := dial(t, s.Addr)
	rawPost(t, c, "HTTP/1.0", streamBody)
	raw, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	head, body, _ := strings.Cut(string(raw), "\r\n\r\n")
	if !strings.HasPrefix(head, "HTTP/1.1 200") || strings.Contains(strings.ToLower(head), "transfer-encoding") ||
		!strings.Contains(strings.ToLower(head), "connection: close") {
		t.Fatalf("head %q", head)
	}
	if !strings.HasPrefix(body, pt.ChatRole) || !strings.HasSuffix(body, pt.Done) {
		t.Fatalf("body %q", body)
	}
}

// After an interruption the connection closes without the last chunk: the client's HTTP
// library reports an error rather than a complete body, and the connection is not reused.
func TestInterruptedStreamClosesTheConnection(t *testing.T) {
	events := pt.Events(30*time.Millisecond, pt.ChatRole, pt.ChatDelta("Hello"))
	step := pt.SSE(events...)
	step.Fault, step.FaultBytes = pt.FaultResetAfter, 10_000 // the upstream resets after the events
	a := upstream(t, step)
	s := start(t, targets(a.URL)...)
	c := dial(t, s.Addr)
	rawPost(t, c, "HTTP/1.1", streamBody)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	if err == nil {
		t.Fatalf("an interrupted stream read as complete: %q", body)
	}
	if !strings.Contains(string(body), `"content":"Hello"`) || !strings.Contains(string(body), `"code":"stream_interrupted"`) {
		t.Fatalf("body %q", body)
	}
	if n, err := br.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("the connection stayed open after an interrupted stream (%d, %v)", n, err)
	}
}

// A client that stops reading a stream is taken as gone once a write has waited
// FAILOVER_IDLE_TIMEOUT: the upstream connection is closed and the request ends cancelled,
// rather than the stream, its upstream and the provider's generation being held for ever.
func TestStreamToAClientThatStopsReading(t *testing.T) {
	delta := pt.ChatDelta(strings.Repeat("x", 16<<10))
	chunks := []pt.Chunk{{Data: pt.ChatRole}, {Data: pt.ChatDelta("first"), Delay: 50 * time.Millisecond}}
	for range 4000 { // 64 MiB: more than every socket buffer between the upstream and the client
		chunks = append(chunks, pt.Chunk{Data: delta})
	}
	up := upstream(t, pt.SSE(chunks...))
	s := start(t, append(targets(up.URL), "FAILOVER_IDLE_TIMEOUT=1s")...)
	c := dial(t, s.Addr)
	if err := c.(*net.TCPConn).SetReadBuffer(4 << 10); err != nil {
		t.Fatal(err)
	}
	rawPost(t, c, "HTTP/1.1", streamBody)
	if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || !strings.Contains(line, "200") {
		t.Fatalf("status line %q %v", line, err)
	}
	// From here on the client reads nothing, and keeps its connection open.
	select {
	case <-up.PeerClosed():
	case <-time.After(8 * time.Second):
		t.Fatal("the upstream connection stayed open while the client read nothing")
	}
	if rec := s.WaitLedger(1)[0]; rec["outcome"] != "cancelled" {
		t.Errorf("ledger %v, want outcome cancelled", rec)
	}
}

// An answer piped to the client as it comes (a body larger than FAILOVER_MAX_RESPONSE_BYTES)
// goes out in writes of about a read each (the upstream reader holds 4 KiB), on either socket
// path: not a write per byte, as it would by a wait between reads that reads a byte itself and
// hands it on alone (rawsock_portable.go, waitsUnbuffered).
func TestAPipedBodyGoesOutInFewWrites(t *testing.T) {
	var chunks []pt.Chunk
	for _, c := range "abc" {
		chunks = append(chunks, pt.Chunk{Data: strings.Repeat(string(c), 20000), Delay: 50 * time.Millisecond})
	}
	up := upstream(t, pt.Step{Header: []string{"Content-Type: application/json"}, Chunks: chunks})
	s := start(t, append(targets(up.URL), "FAILOVER_MAX_RESPONSE_BYTES=1KiB")...)
	c := dial(t, s.Addr)
	rawPost(t, c, "HTTP/1.1", chatBody)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 || resp.TransferEncoding == nil {
		t.Fatalf("%v, %v: want a 200 with a chunked body", resp, err)
	}
	// The chunks on the wire, counted from the client's connection: http.ReadResponse took the
	// head, and its body reader is not used (closing it would read the body).
	writes, body := 0, 0
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("after %d chunks: %v", writes, err)
		}
		size, err := strconv.ParseInt(strings.TrimSpace(line), 16, 64)
		if err != nil {
			t.Fatalf("chunk size line %q: %v", line, err)
		}
		if _, err := br.Discard(int(size) + 2); err != nil {
			t.Fatal(err)
		}
		if size == 0 {
			break
		}
		writes++
		body += int(size)
	}
	if most := 60000 / 1024; body != 60000 || writes > most {
		t.Fatalf("%d bytes in %d chunks, want 60000 in at most %d", body, writes, most)
	}
}

// The write deadline a stream sets on the client's connection goes with the stream: the
// connection's next request, after a pause longer than FAILOVER_IDLE_TIMEOUT, is answered.
func TestStreamWriteDeadlineDoesNotOutliveTheStream(t *testing.T) {
	a := upstream(t,
		pt.SSE(pt.ChatStream(30*time.Millisecond, "Hello", " world")...), // piped after commit
		pt.JSON(200, pt.ChatCompletion("second answer")),
	)
	s := start(t, append(targets(a.URL), "FAILOVER_IDLE_TIMEOUT=1s")...)
	c := dial(t, s.Addr)
	br := bufio.NewReader(c)
	for i, body := range []string{streamBody, chatBody} {
		if i == 1 {
			time.Sleep(1500 * time.Millisecond) // past the deadline the stream's writes had
		}
		rawPost(t, c, "HTTP/1.1", body)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		got, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %q %v", i+1, resp.StatusCode, got, err)
		}
	}
}
