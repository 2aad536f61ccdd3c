package proxy_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/llm-failover/failover/proxy"
	pt "github.com/llm-failover/failover/proxy/proxytest"
	"github.com/llm-failover/failover/proxy/proxytest/sidecar"
)

// README, Resume a cut stream: a target marked instruct is asked to continue the answer by
// instruction (the delivered text as an assistant message, then a user message asking to go
// on).

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
				checkInstructRequest(t, reqs[0], body, "Once upon a ti", proxy.DefaultResumeInstruction)
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
	path, body, cut := resumeStory(false)
	a, b := upstream(t, cut), upstream(t, continuation(false, "me."))
	s := start(t, env(targets(a.URL, b.URL), resumeEnv("instruct", "FAILOVER_RESUME_INSTRUCTION=Fahre genau dort fort, wo du aufgehört hast."))...)
	checkClientRead(t, false, s.Post(path, body), "Once upon a time.")
	checkInstructRequest(t, b.Requests()[0], body, "Once upon a ti", "Fahre genau dort fort, wo du aufgehört hast.")
}
