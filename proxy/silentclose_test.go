package proxy_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	pt "github.com/llm-failover/failover/proxy/proxytest"
)

// silentCase is a first target that keeps the request in silence for silence, then ends the
// connection with fault, for a streaming request or not.
type silentCase struct {
	name    string
	silence time.Duration
	fault   pt.Fault
	stream  bool
}

// silentCases crosses a close and a reset with streaming and non-streaming requests.
func silentCases(silence time.Duration) []silentCase {
	var out []silentCase
	for _, f := range []struct {
		name  string
		fault pt.Fault
	}{{"close", pt.FaultClose}, {"reset", pt.FaultReset}} {
		for _, stream := range []bool{false, true} {
			name := "silent " + silence.String() + " then " + f.name
			if stream {
				name += ", streaming"
			}
			out = append(out, silentCase{name: name, silence: silence, fault: f.fault, stream: stream})
		}
	}
	return out
}

// together runs play for each case as a subtest, all at once whatever -parallel says: each
// waits on a scripted silence, not on the processor.
func together[C any](t *testing.T, cases []C, name func(C) string, play func(*testing.T, C)) {
	var wg sync.WaitGroup
	for _, c := range cases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.Run(name(c), func(t *testing.T) { play(t, c) })
		}()
	}
	wg.Wait()
}

// answerFrom is a good answer from target who, streamed or not.
func answerFrom(who string, stream bool) pt.Step {
	if stream {
		return pt.SSE(pt.ChatStream(0, "from ", who)...)
	}
	return pt.JSON(200, pt.ChatCompletion("from "+who))
}

// playSilent sends one request through a sidecar whose first target plays script and whose
// second answers well. It checks that the client got the answer of target want, and returns
// the ledger's sweep and how long the client waited.
func playSilent(t *testing.T, stream bool, script []pt.Step, want string, extra ...string) (sweep string, took time.Duration, first, second *pt.Upstream) {
	t.Helper()
	body := chatBody
	if stream {
		body = streamBody
	}
	first, second = upstream(t, script...), upstream(t, answerFrom("t1", stream))
	s := start(t, env(targets(first.URL, second.URL), extra)...)
	begin := time.Now()
	r := s.Post("/chat/completions", body)
	took = time.Since(begin)
	if r.Status != 200 || r.Err != nil || string(r.Body) != string(answerFrom(want, stream).BodyBytes()) {
		t.Fatalf("got %d %q (err %v), want the answer of %s", r.Status, r.Body, r.Err, want)
	}
	return ledgerSteps(s.WaitLedger(1)[0]), took, first, second
}

// A target that keeps a request in silence for 3 s and then closes or resets the connection,
// without a byte of answer, has failed as silently as one that timed out: with the defaults
// (one same-target retry, FAILOVER_CONNECT_TIMEOUT 5 s, so the threshold is 1 s) the request
// transfers at once, and the client waits the silence once, not twice (docs/decisions.md, The decision
// order, rule 5).
func TestSilentCloseTransfersAtOnce(t *testing.T) {
	t.Parallel()
	const silence = 3 * time.Second
	together(t, silentCases(silence), func(c silentCase) string { return c.name }, func(t *testing.T, tc silentCase) {
		sweep, took, first, second := playSilent(t, tc.stream, []pt.Step{{Delay: tc.silence, Fault: tc.fault}}, "t1")
		if sweep != "t0:silent_close:transfer t1:ok:commit" || first.Calls() != 1 || second.Calls() != 1 {
			t.Fatalf("sweep %s, calls t0=%d t1=%d; want t0 once (silent_close, transfer), then t1", sweep, first.Calls(), second.Calls())
		}
		if took < silence || took > 2*silence-time.Second {
			t.Errorf("answered after %v: the silence of %v is waited on once", took, silence)
		}
	})
}

// An answer that began and then went silent before it committed (its headers alone, or the start
// of a body or of a stream) is judged by the silence since its last bytes: closed after 1.5 s of
// it, a silent close that transfers at once; closed right after them, a reset retried as before
// (docs/decisions.md, The decision order, rule 5). For a close and a reset, streamed and not.
func TestSilentCloseAfterTheAnswerBegan(t *testing.T) {
	t.Parallel()
	type tc struct {
		name    string
		stream  bool
		started []pt.Chunk // what the answer sends after its headers
		silence time.Duration
		fault   pt.Fault // after the silence: FaultTruncate closes, FaultTruncateReset resets
	}
	var cases []tc
	for _, stream := range []bool{false, true} {
		start := []pt.Chunk{{Data: `{"id":"chatcmpl-t0","object":"chat.completion",`}}
		kind := ""
		if stream {
			start, kind = []pt.Chunk{{Data: pt.ChatRole}}, ", streaming"
		}
		for _, began := range []struct {
			name   string
			chunks []pt.Chunk
		}{{"headers", nil}, {"the start of the body", start}} {
			for _, f := range []struct {
				name  string
				fault pt.Fault
			}{{"close", pt.FaultTruncate}, {"reset", pt.FaultTruncateReset}} {
				for _, silence := range []time.Duration{1500 * time.Millisecond, 0} {
					cases = append(cases, tc{name: fmt.Sprintf("%s, silent %v, then %s%s", began.name, silence, f.name, kind),
						stream: stream, started: began.chunks, silence: silence, fault: f.fault})
				}
			}
		}
	}
	together(t, cases, func(c tc) string { return c.name }, func(t *testing.T, c tc) {
		step := pt.Step{Status: 200, Header: []string{"Content-Type: application/json"}}
		if c.stream {
			step = pt.SSE()
		}
		step.Chunks = append(append([]pt.Chunk(nil), c.started...), pt.Chunk{Raw: true, Delay: c.silence})
		step.Fault = c.fault
		want, sweep := "t1", "t0:silent_close:transfer t1:ok:commit"
		if c.silence == 0 {
			want, sweep = "t0", "t0:reset:retry t0:ok:commit"
		}
		got, _, _, _ := playSilent(t, c.stream, []pt.Step{step, answerFrom("t0", c.stream)}, want)
		if got != sweep {
			t.Fatalf("sweep %s, want %s", got, sweep)
		}
	})
}

// The threshold is FAILOVER_CONNECT_TIMEOUT when that is shorter than 1 s. A close or reset
// that comes sooner than the threshold keeps its meaning, a transient reset: retried once by
// default, also after a silence that is short of the 1 s.
func TestSilentCloseThreshold(t *testing.T) {
	t.Parallel()
	// A silence of 700 ms is a silent close under a 500 ms connect timeout, and a reset under the
	// default's 1 s: each at least 300 ms from its threshold, and an immediate close 500 ms below
	// the lower one, for a loaded machine (an immediate reset once took over 300 ms under -race).
	const short, connect = 700 * time.Millisecond, "500ms"
	type tc struct {
		silentCase
		connect string // FAILOVER_CONNECT_TIMEOUT; "" the default 5 s
		want    string
	}
	var cases []tc
	for _, c := range silentCases(short) {
		cases = append(cases,
			tc{c, connect, "t0:silent_close:transfer t1:ok:commit"},
			tc{c, "", "t0:reset:retry t0:ok:commit"})
	}
	for _, c := range silentCases(0) {
		c.name = strings.Replace(c.name, "silent 0s then", "immediate", 1)
		cases = append(cases,
			tc{c, connect, "t0:reset:retry t0:ok:commit"},
			tc{c, "", "t0:reset:retry t0:ok:commit"})
	}
	name := func(c tc) string {
		if c.connect == "" {
			return c.name + ", connect timeout 5s"
		}
		return c.name + ", connect timeout " + c.connect
	}
	together(t, cases, name, func(t *testing.T, c tc) {
		var extra []string
		if c.connect != "" {
			extra = append(extra, "FAILOVER_CONNECT_TIMEOUT="+c.connect)
		}
		want := "t1"
		if strings.Contains(c.want, "retry") {
			want = "t0"
		}
		script := []pt.Step{{Delay: c.silence, Fault: c.fault}, answerFrom("t0", c.stream)}
		if sweep, _, _, _ := playSilent(t, c.stream, script, want, extra...); sweep != c.want {
			t.Fatalf("sweep %s, want %s", sweep, c.want)
		}
	})
}

// A silent close counts against the target's health as a timeout does: the ejection it causes
// is the silent kind, lasting FAILOVER_EJECT_SILENT (docs/decisions.md, Health). A quick reset ejects for
// FAILOVER_EJECT_BASE, as any fast failure does. With no
// other candidate, a silent close is still never retried: the client gets 502 at once.
func TestSilentCloseHealth(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		step    pt.Step
		reason  string
		seconds float64
	}{
		{"a silent close ejects as a timeout does", pt.Step{Delay: 400 * time.Millisecond, Fault: pt.FaultReset}, "silent_close", 60},
		{"an immediate reset ejects as a fast failure", pt.Step{Fault: pt.FaultReset}, "consecutive_failures", 10},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			u := upstream(t, tc.step)
			s := start(t, env(targets(u.URL), []string{"FAILOVER_CONNECT_TIMEOUT=300ms", "FAILOVER_EJECT_AFTER=1", "FAILOVER_SAME_TARGET_RETRIES=0"})...)
			r := s.Post("/chat/completions", chatBody)
			if r.Status != 502 || !strings.Contains(string(r.Body), `"code":"upstream_unreachable"`) {
				t.Fatalf("got %d %s, want 502 upstream_unreachable", r.Status, r.Body)
			}
			ev := s.Records("target_ejected")
			if len(ev) != 1 || ev[0]["reason"] != tc.reason || ev[0]["seconds"] != tc.seconds {
				t.Fatalf("target_ejected %v, want reason %s for %v s", ev, tc.reason, tc.seconds)
			}
		})
	}
	t.Run("alone, a silent close is not retried", func(t *testing.T) {
		t.Parallel()
		u := upstream(t, pt.Step{Delay: 400 * time.Millisecond, Fault: pt.FaultClose}, pt.JSON(200, pt.ChatCompletion("too late")))
		s := start(t, env(targets(u.URL), []string{"FAILOVER_CONNECT_TIMEOUT=300ms", "FAILOVER_SAME_TARGET_RETRIES=3"})...)
		r := s.Post("/chat/completions", chatBody)
		if r.Status != 502 || u.Calls() != 1 || !strings.Contains(string(r.Body), "silent_close") {
			t.Fatalf("got %d %s after %d calls, want 502 (silent_close) after one", r.Status, r.Body, u.Calls())
		}
		if got := ledgerSteps(s.WaitLedger(1)[0]); got != "t0:silent_close:stop" {
			t.Fatalf("sweep %s", got)
		}
	})
}
