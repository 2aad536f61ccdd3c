package proxy_test

import (
	"bufio"
	"io"
	"strings"
	"testing"
	"time"

	pt "github.com/llm-failover/failover/proxy/proxytest"
)

// Whatever follows an operation that may wait is timed from after it: a health report from the
// end of the answer it is about, a stream's idle timeout from its last write.

// A health report is made at the attempt's end, read after its last read: the cooldown an
// answer asks for (docs/decisions.md, Health) runs its whole length from when the answer's body ended,
// not from an earlier reading. The body's last chunk comes in two parts, the second late: it
// is read within the body's framing, after the last wait for the body's bytes.
func TestCooldownRunsFromTheEndOfASlowBody(t *testing.T) {
	t.Parallel()
	const bodyDelay = 1500 * time.Millisecond
	slow := upstream(t, pt.Step{Status: 429, Header: []string{"Content-Type: application/json", pt.RetryAfterSeconds(60)},
		Chunks: []pt.Chunk{{Data: pt.OpenAIError("Rate limit reached", "requests", "rate_limit_exceeded")},
			{Data: "0\r", Raw: true}, {Data: "\n\r\n", Raw: true, Delay: bodyDelay}},
		Fault: pt.FaultTruncate}) // the last chunk is in the script
	s := start(t, env(targets(slow.URL), noRetries)...)

	sent := time.Now()
	if r := s.Post("/chat/completions", chatBody); r.Status != 429 {
		t.Fatalf("status %d, want the target's 429", r.Status)
	}
	answered := time.Now()
	_, table := targetTable(t, s)
	c := byName(t, table, "t0")
	if c.State != "cooling" {
		t.Fatalf("t0 is %q, want cooling: %+v", c.State, c)
	}
	// The body ended bodyDelay after the head at the earliest, and the answer followed it.
	earliest, latest := sent.Add(bodyDelay+60*time.Second), answered.Add(60*time.Second)
	if c.Until.Before(earliest.Add(-bodyDelay/3)) || c.Until.After(latest.Add(bodyDelay/3)) {
		t.Errorf("the cooldown ends %v after the request was sent, want between %v (the body's end, plus 60 s) and %v",
			c.Until.Sub(sent), earliest.Sub(sent), latest.Sub(sent))
	}
}

// A committed stream's idle timeout (docs/streams.md, Streams) counts from the end of its last write to
// the client: a write that waited for a slow client leaves the upstream its whole
// FAILOVER_IDLE_TIMEOUT for the next event, and a silence that lasts the timeout from there
// ends the stream, neither earlier nor much later.
func TestStreamIdleTimeoutCountsFromTheLastWrite(t *testing.T) {
	t.Parallel()
	const (
		idle  = 2 * time.Second
		stall = 1200 * time.Millisecond // the client reads nothing: shorter than idle, so the write waits without timing out
	)
	// Opening events past every socket buffer between the sidecar and the client (about
	// 4 MiB), held before commit and sent in one write once the first content commits, then
	// one more event after a pause.
	opening := strings.Repeat(pt.ChatRole, (8<<20)/len(pt.ChatRole))
	for _, c := range []struct {
		name  string
		pause time.Duration // after the held bytes
		ok    bool
	}{
		// Past idle from the commit, within idle from the end of the write that waited.
		{"an event within the timeout is waited for", 2600 * time.Millisecond, true},
		{"a silence as long as the timeout ends the stream", 20 * time.Second, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			up := upstream(t, pt.SSE(pt.Chunk{Data: opening + pt.ChatDelta("first")},
				pt.Chunk{Data: pt.ChatDelta("late"), Delay: c.pause}, pt.Chunk{Data: pt.ChatFinish + pt.Done}))
			s := start(t, env(targets(up.URL), noRetries, []string{"FAILOVER_IDLE_TIMEOUT=" + idle.String(), "FAILOVER_PEEK_BYTES=16MiB"})...)

			conn := dial(t, s.Addr)
			rawPost(t, conn, "HTTP/1.1", streamBody, "Connection: close")
			br := bufio.NewReaderSize(conn, 64)
			if line, err := br.ReadString('\n'); err != nil || !strings.Contains(line, "200") {
				t.Fatalf("status line %q %v", line, err)
			}
			time.Sleep(stall)
			resumed := time.Now()
			body, err := io.ReadAll(br)
			ended := time.Since(resumed)
			if err != nil {
				t.Fatalf("reading the stream: %v (%d bytes, ends %q)", err, len(body), tailOf(body, 300))
			}
			rec := s.WaitLedger(1)[0]
			if c.ok {
				if !strings.Contains(string(body), pt.ChatDelta("late")) || !strings.HasSuffix(string(body), "\r\n0\r\n\r\n") || rec["outcome"] != "ok" {
					t.Fatalf("the stream did not wait for the late event to its end (%d bytes, ends %q; ledger %v)", len(body), tailOf(body, 300), rec)
				}
				return
			}
			if !strings.Contains(tailOf(body, 300), "FAILOVER_IDLE_TIMEOUT") || rec["outcome"] != "partial" {
				t.Fatalf("the silence did not end the stream (%d bytes, ends %q; ledger %v)", len(body), tailOf(body, 300), rec)
			}
			if ended < idle-300*time.Millisecond || ended > idle+1500*time.Millisecond {
				t.Errorf("the stream ended %v after the client read again, want about %v (the idle timeout from the write's end)", ended, idle)
			}
		})
	}
}

func tailOf(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
