//go:build linux && !failover_portable

package netio

import (
	"strconv"
	"testing"
	"time"

	pt "github.com/llm-failover/failover/proxy/proxytest"
)

// The wait for the client's next request in the write that ends an answer (endAnswer), and
// the counts it keeps, are Linux's (client_linux.go): what these tests read does not exist on
// the portable path. listener_test.go tests what both paths must do.

// The write that ends an answer waits for the client's next request: the read of that
// request's first byte finds it, rather than looking once for nothing and then waiting. A
// request whose body came chunked is read with more bytes than its body holds, so its answer
// does not wait, and the read after it looks once for nothing: the count this test reads
// counts what it should.
func TestAnswerWaitsForTheNextRequestInItsLastWrite(t *testing.T) {
	ts := startTestServer(t, 0, 50*time.Millisecond)
	s := pt.DialRaw(t, ts.addr)
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hello"}]}`
	chunked := "POST /v1/chat/completions HTTP/1.1\r\nHost: sidecar\r\nContent-Type: application/json\r\n" +
		"Transfer-Encoding: chunked\r\n\r\n" + strconv.FormatInt(int64(len(body)), 16) + "\r\n" + body + "\r\n0\r\n\r\n"
	s.RoundTrip(s.Req, "the first answer")
	cc := ts.onlyConn(t)
	base := cc.empty.Load() // the reads before the first answers: they do not wait (not yet sequential)
	for i := range 4 {
		s.RoundTrip(s.Req, "answer "+strconv.Itoa(i))
	}
	if n := cc.empty.Load() - base; n != 0 {
		t.Fatalf("%d reads of a next request found nothing after answers that wait for it", n)
	}
	s.RoundTrip(chunked, "the chunked request's answer") // it does not wait
	s.RoundTrip(s.Req, "the answer after it")
	if n := cc.empty.Load() - base; n != 1 {
		t.Fatalf("%d reads found nothing after an answer that does not wait, want 1", n)
	}
}

// A connection whose client sends nothing after an answer does not keep waiting in the
// answer's write, which holds fasthttp's write buffer: EndLongWaits ends the wait, the
// connection waits for its next request as it did before (a read that looks once first), and
// serves it: the past read deadline that ended the wait is not left on the socket.
func TestALongWaitAfterAnAnswerIsEnded(t *testing.T) {
	ts := startTestServer(t, 0, 20*time.Millisecond)
	s := pt.DialRaw(t, ts.addr)
	s.RoundTrip(s.Req, "the first answer") // does not wait: the client has not yet shown it waits for answers
	cc := ts.onlyConn(t)
	for i := range 3 {
		s.SendRaw(s.Req)
		s.Answer("answer " + strconv.Itoa(i))
		before := cc.empty.Load()
		// Ended within two ticks; then the read for the next request looks once and waits.
		for deadline := time.Now().Add(5 * time.Second); cc.empty.Load() == before; {
			if time.Now().After(deadline) {
				t.Fatalf("after answer %d the connection still waits in the answer's write", i)
			}
			time.Sleep(5 * time.Millisecond)
		}
		cc.wait.mu.Lock()
		awaiting := cc.wait.on
		cc.wait.mu.Unlock()
		if awaiting {
			t.Fatalf("after answer %d: a wait in the answer's write goes on", i)
		}
	}
}

// A client that waits for its answers, then sends pairs of requests (the second while the
// handler of the first waits for the target), with an idle gap before each pair: the wait
// after the first pair's first answer misses the second request, and is ended within two
// looks (2 s here); the client is then remembered as one that pipelines, and no later pair's
// request waits for a look, though the gap before each pair makes its first read find nothing.
func TestAClientThatPipelinedOnceIsNotWaitedForAgain(t *testing.T) {
	ts := startTestServer(t, 150*time.Millisecond, time.Second)
	s := pt.DialRaw(t, ts.addr)
	for i := range 2 {
		s.Send()
		s.Answer("sequential answer " + strconv.Itoa(i))
		time.Sleep(20 * time.Millisecond)
	}
	for i := range 4 {
		s.Send()
		time.Sleep(50 * time.Millisecond) // read; its answer waits for the target
		s.Send()
		s.Answer("the first answer of pair " + strconv.Itoa(i))
		begin := time.Now()
		s.Answer("the second answer of pair " + strconv.Itoa(i))
		// 150 ms in the handler; a missed request waits one look at least (1 s).
		if took := time.Since(begin); i > 0 && took > 900*time.Millisecond {
			t.Fatalf("pair %d: the second answer took %v", i, took)
		}
		time.Sleep(30 * time.Millisecond)
	}
	cc := ts.onlyConn(t)
	ts.shutdown() // the connection's goroutine is done with it: its fields may be read
	if cc.pace != pacePipelining {
		t.Fatal("a client whose request a wait missed is not remembered as one that pipelines")
	}
}
