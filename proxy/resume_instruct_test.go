package proxy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llm-failover/failover/proxy/internal/config"
	pt "github.com/llm-failover/failover/proxy/proxytest"
	"github.com/llm-failover/failover/proxy/proxytest/sidecar"
)

// docs/streams.md, Resume a cut stream: a target marked instruct is asked to continue the answer by
// instruction (the delivered text as an assistant message, then a user message asking to go
// on), and auto asks for a prefill first and by instruction where the target refuses it.

// resumeStory is a stream of family (messages or chat) cut after it delivered "Once upon a ti".
func resumeStory(messages bool) (path, body string, cut pt.Step) {
	if messages {
		return "/messages", messagesStreamBody, cutAt(messagesWords("a", true, "Once upon a ti", "me, there"), pt.FaultCloseAfter, `"text":"me`, 0)
	}
	return "/chat/completions", streamBody, cutAt(chatWords("a", true, "Once upon a ti", "me, there"), pt.FaultCloseAfter, `"content":"me`, 0)
}

// continuation is the continuation's stream of family, one event per word.
func continuation(messages bool, words ...string) pt.Step {
	if messages {
		return pt.SSE(pt.Events(0, messagesWords("b", true, words...)...)...)
	}
	return pt.SSE(pt.Events(0, chatWords("b", true, words...)...)...)
}

// checkClientRead checks that the client read one whole stream with text want: one id (chat) or
// one message_start and block indexes in order (messages), no error, one terminal event last,
// and a clean end.
func checkClientRead(t *testing.T, messages bool, r sidecar.Response, want string) {
	t.Helper()
	if r.Status != 200 || r.Err != nil {
		t.Fatalf("got %d err=%v, want a 200 that ends cleanly:\n%s", r.Status, r.Err, r.Body)
	}
	v := readClient(t, messages, r.Body)
	if v.text != want || len(v.errors) > 0 || len(v.problems) > 0 {
		t.Fatalf("the client read %q (errors %q, problems %q), want %q:\n%s", v.text, v.errors, v.problems, want, r.Body)
	}
	if v.terminal != 1 || (messages && (v.last != `{"type":"message_stop"}` || v.starts != 1)) || (!messages && (v.last != "[DONE]" || strings.Join(v.ids, ",") != "chatcmpl-a")) {
		t.Fatalf("%d terminal events, last %q, ids %q, %d message_start:\n%s", v.terminal, v.last, v.ids, v.starts, r.Body)
	}
}

// checkInstructRequest checks a continuation asked by instruction: the client's body with the
// delivered text, without its trailing whitespace, as an assistant message, then the
// instruction as a user message; nothing else changed.
func checkInstructRequest(t *testing.T, req pt.Request, clientBody, delivered, instruction string) {
	t.Helper()
	var got, sent map[string]any
	if err := json.Unmarshal(req.Body, &got); err != nil {
		t.Fatalf("the continuation's body is not JSON: %v\n%s", err, req.Body)
	}
	json.Unmarshal([]byte(clientBody), &sent)
	msgs, sentMsgs := got["messages"].([]any), sent["messages"].([]any)
	tail, _ := json.Marshal(msgs[len(sentMsgs):])
	want, _ := json.Marshal([]any{
		map[string]any{"role": "assistant", "content": strings.TrimRight(delivered, " \n")},
		map[string]any{"role": "user", "content": instruction},
	})
	if len(msgs) != len(sentMsgs)+2 || string(tail) != string(want) {
		t.Fatalf("the continuation's messages end with %s (%d messages), want %s after the client's %d", tail, len(msgs), want, len(sentMsgs))
	}
	for k, v := range sent {
		if k != "messages" {
			if a, b := fmt.Sprint(got[k]), fmt.Sprint(v); a != b {
				t.Fatalf("the continuation changed %q: %s, the client sent %s", k, a, b)
			}
		}
	}
}

// A stream cut after text and resumed by instruction reads as one stream with the whole text,
// also when the continuation starts by repeating the delivered text's last words or its
// unfinished last word, which are dropped; the record says what the seam took off.
func TestResumeByInstruction(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cont []string
		seam string
	}{
		{"going on where it stopped", []string{"me, there", " was a fox."}, "none"},
		{"repeating the last words", []string{"upon a ", "time, there", " was a fox."}, "overlap:9"},
		{"repeating the unfinished word", []string{"ti", "me, there", " was a fox."}, "word:2"},
	} {
		for _, messages := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/messages=%v", tc.name, messages), func(t *testing.T) {
				t.Parallel()
				path, body, cut := resumeStory(messages)
				a := upstream(t, cut)
				// The resume target takes no prefill: asked for one, the resume would fail.
				b := upstream(t)
				b.Respond(pt.RefusesPrefill(func(*pt.Request) pt.Step { return continuation(messages, tc.cont...) }))
				s := start(t, env(targets(a.URL, b.URL), resumeEnv("instruct"))...)
				r := s.Post(path, body)
				checkClientRead(t, messages, r, "Once upon a time, there was a fox.")
				reqs := b.Requests()
				if len(reqs) != 1 {
					t.Fatalf("the resume target got %d requests, want 1", len(reqs))
				}
				checkInstructRequest(t, reqs[0], body, "Once upon a ti", config.DefaultResumeInstruction)
				ledger := s.WaitLedger(1)[0]["ledger"].([]any)
				if cont := ledger[len(ledger)-1].(map[string]any); len(ledger) != 2 || cont["phase"] != "resumed" || cont["seam"] != tc.seam {
					t.Fatalf("ledger %v, want the continuation with seam %s", ledger, tc.seam)
				}
				if ev := s.Records("stream_resumed"); len(ev) != 1 || ev[0]["form"] != "instruct" {
					t.Errorf("stream_resumed %v, want one in the instruct form", ev)
				}
			})
		}
	}
}

// FAILOVER_RESUME_INSTRUCTION replaces the instruction's wording.
func TestResumeInstruction(t *testing.T) {
	t.Parallel()
	path, body, cut := resumeStory(false)
	a, b := upstream(t, cut), upstream(t, continuation(false, "me."))
	s := start(t, env(targets(a.URL, b.URL), resumeEnv("instruct", "FAILOVER_RESUME_INSTRUCTION=Fahre genau dort fort, wo du aufgehört hast."))...)
	checkClientRead(t, false, s.Post(path, body), "Once upon a time.")
	checkInstructRequest(t, b.Requests()[0], body, "Once upon a ti", "Fahre genau dort fort, wo du aufgehört hast.")
}

// A target marked auto that refuses the prefill (Anthropic's 400 for Claude 4.6 and later) is
// asked again at once by instruction, within the same resume and with no health effect, and
// from then on the target and model are asked by instruction first: the prefill is tried once
// per process, not once per request. Another model is tried with a prefill again.
func TestResumeAutoLearnsWhoRefusesThePrefill(t *testing.T) {
	t.Parallel()
	for _, messages := range []bool{false, true} {
		t.Run(fmt.Sprintf("messages=%v", messages), func(t *testing.T) {
			t.Parallel()
			path, body, cut := resumeStory(messages)
			model := "gpt-4o-mini"
			if messages {
				model = "claude"
			}
			other := strings.Replace(body, `"model":"`+model+`"`, `"model":"other-model"`, 1)
			a := upstream(t, cut, cut, cut)
			b := upstream(t)
			b.Respond(pt.RefusesPrefill(func(*pt.Request) pt.Step { return continuation(messages, "ti", "me, there", " was a fox.") }))
			// One failure ejects a target, for a millisecond: t0, cut each time, is back for the
			// next request, and t1 would be ejected by a refusal that counted against it.
			s := start(t, env(targets(a.URL, b.URL), resumeEnv("auto", "FAILOVER_EJECT_AFTER=1", "FAILOVER_EJECT_BASE=1ms", "FAILOVER_EJECT_MAX=1ms"))...)
			post := func(body string) sidecar.Response {
				time.Sleep(10 * time.Millisecond) // t0's ejection runs out
				return s.Post(path, body)
			}

			checkClientRead(t, messages, post(body), "Once upon a time, there was a fox.")
			if reqs := b.Requests(); len(reqs) != 2 || pt.LastRole(reqs[0].Body) != "assistant" || pt.LastRole(reqs[1].Body) != "user" {
				t.Fatalf("the resume target got %d requests, want a prefill and then an instruction", len(reqs))
			}
			checkInstructRequest(t, b.Requests()[1], body, "Once upon a ti", config.DefaultResumeInstruction)
			rec := s.WaitLedger(1)[0]
			ledger := rec["ledger"].([]any)
			if rec["outcome"] != "ok_after_failover" || len(ledger) != 3 {
				t.Fatalf("record %v", rec)
			}
			refused, cont := ledger[1].(map[string]any), ledger[2].(map[string]any)
			if refused["target"] != "t1" || refused["status"] != 400.0 || refused["class"] != "client_error" || refused["action"] != "retry" ||
				refused["reason"] != "prefill_refused" || refused["phase"] == "resumed" || cont["phase"] != "resumed" || cont["seam"] != "word:2" {
				t.Fatalf("ledger %v", ledger)
			}

			// The next request goes to the instruction at once.
			checkClientRead(t, messages, post(body), "Once upon a time, there was a fox.")
			if reqs := b.Requests(); len(reqs) != 3 || pt.LastRole(reqs[2].Body) != "user" {
				t.Fatalf("the resume target got %d requests, want one more, by instruction", len(reqs))
			}
			// Another model is asked for a prefill first.
			checkClientRead(t, messages, post(other), "Once upon a time, there was a fox.")
			if reqs := b.Requests(); len(reqs) != 5 || pt.LastRole(reqs[3].Body) != "assistant" {
				t.Fatalf("the resume target got %d requests, want a prefill and an instruction for the other model", len(reqs))
			}
			s.WaitLedger(3)

			events := s.Records("resume_prefill_refused")
			if len(events) != 2 || events[0]["target"] != "t1" || events[0]["model"] != model || events[1]["model"] != "other-model" {
				t.Fatalf("resume_prefill_refused %v, want one per model", events)
			}
			if ev := s.Records("stream_resumed"); len(ev) != 3 || ev[0]["form"] != "instruct" {
				t.Errorf("stream_resumed %v", ev)
			}
			_, table := targetTable(t, s)
			t1 := byName(t, table, "t1")
			if strings.Join(t1.PrefillRefused, ",") != strings.Join(sorted(model, "other-model"), ",") || t1.State != "up" || t1.ConsecutiveFailures != 0 || t1.Ejections != 0 {
				t.Fatalf("t1 in /targets: %+v", t1)
			}
			for _, ev := range s.Records("target_ejected") {
				if ev["target"] == "t1" {
					t.Fatalf("a refused prefill counted against t1: %v", ev)
				}
			}
			if m := s.ScrapeMetrics(); metric(m, `failover_resumes_total{target="t1",outcome="ok"}`) != 3 || metric(m, `failover_resumes_total{target="t1",outcome="failed"}`) != 0 {
				t.Errorf("failover_resumes_total:\n%s", metricLine(m, "failover_resumes_total"))
			}
		})
	}
}

func sorted(a, b string) []string {
	if a > b {
		return []string{b, a}
	}
	return []string{a, b}
}

// A target marked auto that takes the prefill is asked for one, and nothing is learnt.
func TestResumeAutoTakesAPrefill(t *testing.T) {
	t.Parallel()
	path, body, cut := resumeStory(true)
	a, b := upstream(t, cut), upstream(t, continuation(true, "me, there was a fox."))
	s := start(t, env(targets(a.URL, b.URL), resumeEnv("auto"))...)
	checkClientRead(t, true, s.Post(path, body), "Once upon a time, there was a fox.")
	checkContinuationRequest(t, b, body, "Once upon a ti", "")
	s.WaitLedger(1)
	if ev := s.Records("stream_resumed"); len(ev) != 1 || ev[0]["form"] != "prefill" || len(s.Records("resume_prefill_refused")) != 0 {
		t.Fatalf("stream_resumed %v, resume_prefill_refused %v", ev, s.Records("resume_prefill_refused"))
	}
	if _, table := targetTable(t, s); len(byName(t, table, "t1").PrefillRefused) != 0 {
		t.Fatalf("t1 in /targets: %+v", byName(t, table, "t1"))
	}
}

// The instruction that follows a refused prefill is one more attempt of the same resume: it
// needs the retry budget and FAILOVER_MAX_ELAPSED, and is never made after the client left or
// while the sidecar shuts down. Without it the resume fails as any: the client gets the
// original interruption's error event, and the refusal is still learnt.
func TestResumeAutoInstructionWithinTheBounds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		extra  []string
		delay  time.Duration // before the refusal
		reason string        // the refused attempt's ledger reason, and stream_not_resumed's ("" for none)
	}{
		// One retry token per request: the resume takes it, the instruction finds none.
		{"the retry budget", []string{"FAILOVER_RETRY_BUDGET_RATIO=1", "FAILOVER_RETRY_BUDGET_MIN=0"}, 0, "retry_budget"},
		{"FAILOVER_MAX_ELAPSED", []string{"FAILOVER_MAX_ELAPSED=300ms"}, 500 * time.Millisecond, "elapsed_limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path, body, cut := resumeStory(false)
			// Asked again by instruction, it would answer with the continuation.
			refusal := pt.AnthropicPrefillRefusal()
			refusal.Delay = tc.delay
			a, b := upstream(t, cut), upstream(t, refusal, continuation(false, "me."))
			s := start(t, env(targets(a.URL, b.URL), resumeEnv("auto", tc.extra...))...)
			r := s.Post(path, body)
			checkOriginalInterruption(t, r)
			if b.Calls() != 1 {
				t.Fatalf("the resume target was called %d times, want once", b.Calls())
			}
			ledger := s.WaitLedger(1)[0]["ledger"].([]any)
			if refused := ledger[len(ledger)-1].(map[string]any); len(ledger) != 2 || refused["action"] != "stop" || refused["reason"] != tc.reason {
				t.Fatalf("ledger %v, want the refused prefill stopped by %s", ledger, tc.reason)
			}
			if ev := s.Records("stream_not_resumed"); len(ev) != 1 || ev[0]["reason"] != tc.reason {
				t.Fatalf("stream_not_resumed %v", ev)
			}
			if len(s.Records("resume_prefill_refused")) != 1 {
				t.Fatalf("the refusal was not learnt")
			}
		})
	}
	t.Run("the client left", func(t *testing.T) {
		t.Parallel()
		_, body, cut := resumeStory(false)
		asked, left := make(chan struct{}, 1), make(chan struct{})
		a, b := upstream(t, cut), upstream(t)
		b.Respond(func(*pt.Request) pt.Step {
			asked <- struct{}{}
			<-left // the client is gone before the refusal is sent
			return pt.AnthropicPrefillRefusal()
		})
		s := start(t, env(targets(a.URL, b.URL), resumeEnv("auto"))...)
		c := dial(t, s.Addr)
		rawPost(t, c, "HTTP/1.1", body)
		select {
		case <-asked:
		case <-time.After(10 * time.Second):
			t.Fatal("the resume target was never asked")
		}
		c.Close()
		close(left)
		rec := s.WaitLedger(1)[0]
		time.Sleep(50 * time.Millisecond)
		if b.Calls() != 1 || rec["outcome"] != "cancelled" {
			t.Fatalf("the resume target was called %d times after the client left; record %v", b.Calls(), rec)
		}
	})
	t.Run("the sidecar shuts down", func(t *testing.T) {
		t.Parallel()
		path, body, cut := resumeStory(false)
		asked, shutting := make(chan struct{}, 1), make(chan struct{})
		a, b := upstream(t, cut), upstream(t)
		b.Respond(func(*pt.Request) pt.Step {
			asked <- struct{}{}
			<-shutting // the refusal comes once the shutdown has begun
			return pt.AnthropicPrefillRefusal()
		})
		s := start(t, env(targets(a.URL, b.URL), resumeEnv("auto"))...)
		go func() {
			select {
			case <-asked:
			case <-time.After(10 * time.Second):
				return
			}
			go func() { // the shutdown has begun once the sidecar says it is not ready
				waitFor(5*time.Second, func() bool {
					resp, err := http.Get(s.Metrics + "/readyz")
					if err != nil {
						return false
					}
					resp.Body.Close()
					return resp.StatusCode == 503
				})
				close(shutting)
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s.Srv.Shutdown(ctx)
		}()
		checkOriginalInterruption(t, s.Post(path, body))
		if b.Calls() != 1 {
			t.Fatalf("the resume target was called %d times while the sidecar shut down, want once", b.Calls())
		}
	})
}

// checkOriginalInterruption checks that the client got the delivered text and then the
// original interruption's error event, and an aborted body.
func checkOriginalInterruption(t *testing.T, r sidecar.Response) {
	t.Helper()
	v := readClient(t, false, r.Body)
	if r.Status != 200 || r.Err == nil || v.text != "Once upon a ti" || len(v.errors) != 1 || !strings.Contains(v.errors[0], "stream_interrupted") ||
		strings.Contains(string(r.Body), "prefill") {
		t.Fatalf("got %d err=%v, text %q, errors %q; want the original interruption:\n%s", r.Status, r.Err, v.text, v.errors, r.Body)
	}
}

// A resume that fails in every form, auto's prefill refused and its instruction answered with a
// 503, leaves the client the original interruption's error event, as any failed resume.
func TestResumeAutoThatFailsInEveryForm(t *testing.T) {
	t.Parallel()
	path, body, cut := resumeStory(false)
	a := upstream(t, cut)
	b := upstream(t, pt.AnthropicPrefillRefusal(), pt.JSON(503, pt.OpenAIError("overloaded", "server_error", "")))
	s := start(t, env(targets(a.URL, b.URL), resumeEnv("auto"))...)
	checkOriginalInterruption(t, s.Post(path, body))
	if b.Calls() != 2 {
		t.Fatalf("the resume target was called %d times, want a prefill and an instruction", b.Calls())
	}
	rec := s.WaitLedger(1)[0]
	ledger := rec["ledger"].([]any)
	refused, failed := ledger[1].(map[string]any), ledger[2].(map[string]any)
	if rec["outcome"] != "partial" || len(ledger) != 3 || refused["reason"] != "prefill_refused" || failed["status"] != 503.0 || failed["action"] != "stop" {
		t.Fatalf("record %v", rec)
	}
	if m := s.ScrapeMetrics(); metric(m, `failover_resumes_total{target="t1",outcome="failed"}`) != 1 {
		t.Errorf("failover_resumes_total:\n%s", metricLine(m, "failover_resumes_total"))
	}
}
