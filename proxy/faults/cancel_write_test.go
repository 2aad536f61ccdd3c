package faults_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	pt "github.com/llm-failover/failover/proxy/proxytest"
	"github.com/llm-failover/failover/proxy/proxytest/sidecar"
)

// deafTarget is a target that accepts connections and never reads from them, with a small
// receive buffer: a large request fills the socket buffers and the sidecar's write blocks.
type deafTarget struct {
	URL      string
	mu       sync.Mutex
	conns    []net.Conn
	accepted chan struct{}
}

func newDeafTarget(t *testing.T) *deafTarget {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { setReceiveBuffer(fd, 4096) })
	}}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &deafTarget{URL: "http://" + ln.Addr().String() + "/v1", accepted: make(chan struct{}, 16)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			d.mu.Lock()
			d.conns = append(d.conns, c)
			d.mu.Unlock()
			d.accepted <- struct{}{}
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		d.mu.Lock()
		defer d.mu.Unlock()
		for _, c := range d.conns {
			c.Close()
		}
	})
	return d
}

// TestClientLeavesDuringTheUpstreamWrite: the first target takes the connection but not the
// request (a large prompt the upstream does not read). The client leaving while the sidecar is
// still writing ends the request at once: no attempt after it, recorded as cancelled, and not
// only when FAILOVER_ATTEMPT_TIMEOUT ends the write.
func TestClientLeavesDuringTheUpstreamWrite(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{false, true} {
		name := "non-streaming"
		if stream {
			name = "streaming"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			deaf := newDeafTarget(t)
			second := upstream(t, pt.JSON(200, pt.ChatCompletion("Hello from t1")))
			s := start(t, env(targets(deaf.URL, second.URL), timeouts,
				[]string{"FAILOVER_ATTEMPT_TIMEOUT=20s", "FAILOVER_FIRST_BYTE_TIMEOUT=20s"})...)
			// Far more than loopback's socket buffers hold.
			body := `{"model":"gpt-4o-mini","stream":` + map[bool]string{false: "false", true: "true"}[stream] +
				`,"messages":[{"role":"user","content":"` + strings.Repeat("x", 24<<20) + `"}]}`

			s.Abandon("/chat/completions", body, func() {
				select {
				case <-deaf.accepted: // the request was read whole: the sidecar is writing it upstream
				case <-time.After(10 * time.Second):
					t.Fatal("the sidecar never connected to the first target")
				}
				time.Sleep(300 * time.Millisecond)
			})
			wantCancelledAlone(t, s, second, "FAILOVER_ATTEMPT_TIMEOUT is 20 s")
		})
	}
}

// TestClientLeavesDuringTheDial: the first target's connect neither succeeds nor fails. The
// client leaving during it ends the request before FAILOVER_CONNECT_TIMEOUT does.
func TestClientLeavesDuringTheDial(t *testing.T) {
	t.Parallel()
	l, err := pt.NewStalledListener()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	second := upstream(t, pt.JSON(200, pt.ChatCompletion("Hello from t1")))
	s := start(t, env(targets(l.URL, second.URL), timeouts, []string{"FAILOVER_CONNECT_TIMEOUT=20s"})...)
	s.Abandon("/chat/completions", chatBody, func() { time.Sleep(300 * time.Millisecond) })
	wantCancelledAlone(t, s, second, "FAILOVER_CONNECT_TIMEOUT is 20 s")
}

// wantCancelledAlone checks that the abandoned request was recorded as cancelled within 3 s,
// well before the timeout that would otherwise have ended it, and that no other target was
// tried.
func wantCancelledAlone(t *testing.T, s *sidecar.Sidecar, second *pt.Upstream, timeout string) {
	t.Helper()
	recs := waitLedger(s, 1, 3*time.Second)
	if len(recs) != 1 {
		t.Fatalf("no ledger record within 3 s of the client leaving (%s):\n%s", timeout, s.Log.String())
	}
	if recs[0]["outcome"] != "cancelled" || second.Calls() != 0 {
		t.Errorf("want cancelled and no second attempt (second called %d times): %s", second.Calls(), ledgerLine(recs[0]))
	}
}

// TestAttemptTimeoutBoundsABodyPastTheBuffer: a non-streaming answer larger than
// FAILOVER_MAX_RESPONSE_BYTES commits and is streamed through, but it is still a non-streaming
// attempt, which FAILOVER_ATTEMPT_TIMEOUT bounds whole: a target that stalls after the commit
// is cut at it (the client sees an aborted body, the outcome is partial), even with the
// streaming idle timeout disabled.
func TestAttemptTimeoutBoundsABodyPastTheBuffer(t *testing.T) {
	t.Parallel()
	big := pt.JSON(200, pt.ChatCompletion(strings.Repeat("long answer ", 700)))
	headLen := pt.RawOffset(big, "\r\n\r\n", 0)
	first := upstream(t, fault(big, pt.FaultStallAfter, headLen+4096))
	second := upstream(t, pt.JSON(200, pt.ChatCompletion("Hello from t1")))
	s := start(t, env(targets(first.URL, second.URL), timeouts,
		[]string{"FAILOVER_MAX_RESPONSE_BYTES=1KiB", "FAILOVER_ATTEMPT_TIMEOUT=500ms", "FAILOVER_IDLE_TIMEOUT=0"})...)

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", s.URL+"/chat/completions", strings.NewReader(chatBody))
	req.Header.Set("Content-Type", "application/json")
	resp, err := sidecar.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if ctx.Err() != nil {
		t.Fatalf("the body was still open 4 s later (FAILOVER_ATTEMPT_TIMEOUT is 500ms); %d bytes", len(got))
	}
	if err == nil || resp.StatusCode != 200 || !strings.HasPrefix(big.Body, string(got)) || len(got) < 1024 {
		t.Fatalf("want the first bytes of the answer then an aborted body: %d, %d bytes, err %v", resp.StatusCode, len(got), err)
	}
	rec := onlyRecord(t, s)
	if rec["outcome"] != "partial" || second.Calls() != 0 {
		t.Errorf("want partial, no transfer: %s", ledgerLine(rec))
	}
}
