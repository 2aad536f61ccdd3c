package faults_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	pt "github.com/llm-failover/failover/proxy/proxytest"
	"github.com/llm-failover/failover/proxy/proxytest/sidecar"
)

// leave is a client that goes away while the sidecar waits on the first target.
type leave struct {
	name  string
	fam   family
	steps []pt.Step
	extra []string
	// until: the client leaves once its body holds this (committed output), or, when empty,
	// after a short wait without any response.
	until string
	// stalled: the first target holds a connection the sidecar must close when the client leaves.
	stalled bool
}

func leaveRows() []leave {
	okSSE := chatSSE.answer("t0")
	okJSON := chatJSON.answer("t0")
	headLen := func(s pt.Step) int { return pt.RawOffset(s, "\r\n\r\n", 0) }
	// The sidecar would give up on the stall after 5 s by itself: well after the client left,
	// and after the 2.5 s this test allows for noticing it.
	long := []string{"FAILOVER_FIRST_BYTE_TIMEOUT=5s", "FAILOVER_ATTEMPT_TIMEOUT=5s", "FAILOVER_IDLE_TIMEOUT=5s"}
	retryAfter := append([]string{"FAILOVER_SAME_TARGET_RETRIES=1"}, long...)
	afterRole := pt.RawOffset(okSSE, pt.ChatRole, 0)
	return []leave{
		{name: "stall before headers", fam: chatJSON, steps: script(pt.Step{Fault: pt.FaultStall}), extra: long, stalled: true},
		{name: "stall before headers", fam: chatSSE, steps: script(pt.Step{Fault: pt.FaultStall}), extra: long, stalled: true},
		{name: "stall mid headers", fam: chatJSON, steps: script(fault(okJSON, pt.FaultStallAfter, headLen(okJSON)-10)), extra: long, stalled: true},
		{name: "stall mid headers", fam: chatSSE, steps: script(fault(okSSE, pt.FaultStallAfter, headLen(okSSE)-10)), extra: long, stalled: true},
		{name: "stall mid body", fam: chatJSON, steps: script(fault(okJSON, pt.FaultStallAfter, headLen(okJSON)+20)), extra: long, stalled: true},
		{name: "stall after the opening event", fam: chatSSE, steps: script(fault(okSSE, pt.FaultStallAfter, afterRole+2)), extra: long, stalled: true},
		{name: "stall inside the chunk framing before content", fam: chatSSE, steps: script(fault(okSSE, pt.FaultStallAfter, afterRole)), extra: long, stalled: true},
		{name: "stall after content (committed)", fam: chatSSE, steps: script(fault(okSSE, pt.FaultStallAfter, pt.RawOffset(okSSE, pt.ChatDelta("Hello"), 2))),
			extra: long, until: pt.ChatDelta("Hello"), stalled: true},
		{name: "slow stream after content (committed)", fam: chatSSE, steps: script(pt.SSE(pt.ChatStream(200*time.Millisecond, "Hello", " from", " a", " slow", " target", " that", " goes", " on")...)),
			extra: long, until: pt.ChatDelta("Hello"), stalled: true},
		{name: "waiting out a Retry-After before a retry", fam: chatJSON, steps: script(pt.RateLimited(pt.RetryAfterSeconds(4)), okJSON), extra: retryAfter},
		// The upstream keeps sending (whitespace before a JSON body, keep-alive comments before
		// content) faster than the sidecar's poll slice, so no wait ever times out: the client
		// leaving must be seen all the same.
		{name: "steady whitespace before the body", fam: chatJSON, steps: script(keptAlive(okJSON, " ")), extra: long, stalled: true},
		{name: "steady keep-alive comments before content", fam: chatSSE, steps: script(keptAlive(okSSE, ": keep-alive\n\n")), extra: long, stalled: true},
		{name: "waiting out a Retry-After before a retry", fam: chatSSE, steps: script(pt.RateLimited(pt.RetryAfterSeconds(4)), okSSE), extra: retryAfter},
	}
}

// keptAlive returns ok as a chunked answer that first sends filler every 50 ms for 4 s: a
// target that is alive and busy (a provider's keep-alive while it generates), well within the
// timeouts, and never silent for a whole poll slice.
func keptAlive(ok pt.Step, filler string) pt.Step {
	var chunks []pt.Chunk
	for range 80 {
		chunks = append(chunks, pt.Chunk{Data: filler, Delay: 50 * time.Millisecond})
	}
	if len(ok.Chunks) > 0 {
		ok.Chunks = append(chunks, ok.Chunks...)
		return ok
	}
	ok.Chunks, ok.Body = append(chunks, pt.Chunk{Data: ok.Body}), ""
	return ok
}

// TestClientLeaves: when the client goes away, no attempt starts after it left, the upstream
// connection it was waiting on is closed, and the request is recorded once, as cancelled.
func TestClientLeaves(t *testing.T) {
	t.Parallel()
	runConcurrently(t, leaveRows(), func(r leave) string { return rowName(r.fam, r.name) }, playLeave)
}

func playLeave(t *testing.T, r leave) {
	first := upstream(t, r.steps...)
	second := upstream(t, r.fam.answer("t1"))
	s := start(t, env(targets(first.URL, second.URL), timeouts, r.extra)...)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", s.URL+r.fam.path, strings.NewReader(r.fam.body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	done := make(chan []byte, 1)
	go func() {
		var got []byte
		defer func() { done <- got }()
		resp, err := sidecar.Client.Do(req)
		if err != nil {
			return
		}
		defer resp.Body.Close()
		buf := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(buf)
			got = append(got, buf[:n]...)
			if r.until != "" && bytes.Contains(got, []byte(r.until)) {
				cancel() // the client has output, and leaves in the middle of the stream
			}
			if err != nil {
				return
			}
		}
	}()
	if r.until == "" {
		time.Sleep(400 * time.Millisecond)
		cancel()
	}
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		cancel() // the output never came: leave anyway
		<-done
		t.Errorf("the client never received the committed output %q", r.until)
	}
	callsWhenLeft := first.Calls()

	if r.stalled {
		select {
		case <-first.PeerClosed():
		case <-time.After(2500 * time.Millisecond):
			t.Errorf("the upstream connection was not closed within 2.5 s of the client leaving")
		}
	}
	// The record is written when the exchange ends: after it, no attempt can start.
	recs := waitLedger(s, 1, 10*time.Second)
	if len(recs) != 1 {
		t.Fatalf("%d ledger records, want 1:\n%s", len(recs), s.Log.String())
	}
	rec := recs[0]
	if second.Calls() != 0 || first.Calls() != callsWhenLeft || callsWhenLeft != 1 {
		t.Errorf("an attempt started after the client left: first %d (%d when it left), second %d\n%s",
			first.Calls(), callsWhenLeft, second.Calls(), ledgerLine(rec))
	}
	if rec["outcome"] != "cancelled" {
		t.Errorf("want outcome cancelled: %s", ledgerLine(rec))
	}
	if recs := s.Ledger(); len(recs) != 1 {
		t.Errorf("%d ledger records, want 1", len(recs))
	}
}
