package stream

import (
	"strconv"
	"strings"
	"testing"
)

func chatChunk(id, delta string) string {
	return `data: {"id":"` + id + `","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":` + delta + `,"finish_reason":null}]}` + "\n\n"
}

func chatText(id, s string) string { return chatChunk(id, `{"content":`+strconv.Quote(s)+`}`) }

const (
	chatRoleA  = `data: {"id":"chatcmpl-a","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}` + "\n\n"
	chatFinish = `data: {"id":"chatcmpl-b","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n"
	chatUsage  = `data: {"id":"chatcmpl-b","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":20,"completion_tokens":3,"total_tokens":23}}` + "\n\n"
	doneEvent  = "data: [DONE]\n\n"
)

func msgEvent(typ, data string) string { return "event: " + typ + "\ndata: " + data + "\n\n" }

func msgStart(id string) string {
	return msgEvent("message_start", `{"type":"message_start","message":{"id":"`+id+`","type":"message","role":"assistant","content":[],"usage":{"input_tokens":9,"output_tokens":1}}}`)
}

func msgBlockStart(i int, block string) string {
	return msgEvent("content_block_start", `{"type":"content_block_start","index":`+strconv.Itoa(i)+`,"content_block":`+block+`}`)
}

func msgText(i int, s string) string {
	return msgEvent("content_block_delta", `{"type":"content_block_delta","index":`+strconv.Itoa(i)+`,"delta":{"type":"text_delta","text":`+strconv.Quote(s)+`}}`)
}

func msgStop(i int) string {
	return msgEvent("content_block_stop", `{"type":"content_block_stop","index":`+strconv.Itoa(i)+`}`)
}

const (
	msgPing      = "event: ping\ndata: {\"type\":\"ping\"}\n\n"
	msgTextBlock = `{"type":"text","text":""}`
	msgDelta     = "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":4}}\n\n"
	msgStopEvent = "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
)

func fed(f Family, events ...string) *Transcript {
	var t Transcript
	t.Reset(f)
	for _, e := range events {
		t.Feed([]byte(e))
	}
	return &t
}

// Once the stream showed anything but text it is not resumable, and its text is no longer kept.
func TestTranscriptFeed(t *testing.T) {
	for _, tc := range []struct {
		name      string
		family    Family
		events    []string
		text      string
		resumable bool
	}{
		{"chat text", Chat, []string{chatRoleA, chatText("chatcmpl-a", "Hel"), chatText("chatcmpl-a", "lo wor")}, "Hello wor", true},
		{"chat text in one read", Chat, []string{chatRoleA + chatText("chatcmpl-a", "Hel") + chatText("chatcmpl-a", "lo")}, "Hello", true},
		{"chat with CRLF line ends", Chat, []string{strings.ReplaceAll(chatRoleA+chatText("chatcmpl-a", "Hi"), "\n", "\r\n")}, "Hi", true},
		{"chat finished", Chat, []string{chatText("chatcmpl-a", "Hi"), chatFinish}, "Hi", false},
		{"chat [DONE]", Chat, []string{chatText("chatcmpl-a", "Hi"), doneEvent}, "Hi", false},
		{"chat tool call", Chat, []string{chatText("chatcmpl-a", "Hi"), chatChunk("chatcmpl-a", `{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":""}}]}`)}, "Hi", false},
		{"chat function call", Chat, []string{chatText("chatcmpl-a", "Hi"), chatChunk("chatcmpl-a", `{"function_call":{"name":"f","arguments":""}}`)}, "Hi", false},
		{"chat refusal", Chat, []string{chatChunk("chatcmpl-a", `{"content":null,"refusal":"I can't"}`), chatText("chatcmpl-a", "Hi")}, "", false},
		{"chat null refusal is text", Chat, []string{chatChunk("chatcmpl-a", `{"content":"Hi","refusal":null}`)}, "Hi", true},
		{"chat reasoning delivered", Chat, []string{chatChunk("chatcmpl-a", `{"reasoning_content":"let me think"}`), chatText("chatcmpl-a", "Hi")}, "", false},
		{"chat empty reasoning is no reasoning", Chat, []string{chatChunk("chatcmpl-a", `{"content":"Hi","reasoning_content":""}`)}, "Hi", true},
		{"chat audio", Chat, []string{chatChunk("chatcmpl-a", `{"audio":{"id":"a","data":"AAA"}}`)}, "", false},
		{"chat second choice", Chat, []string{chatText("chatcmpl-a", "Hi"), strings.Replace(chatText("chatcmpl-a", "Yo"), `"index":0`, `"index":1`, 1)}, "Hi", false},
		{"chat logprobs", Chat, []string{strings.Replace(chatText("chatcmpl-a", "Hi"), `"index":0,`, `"index":0,"logprobs":{"content":[]},`, 1)}, "", false},
		{"chat content parts", Chat, []string{chatChunk("chatcmpl-a", `{"content":[{"type":"text","text":"Hi"}]}`)}, "", false},
		{"chat not JSON", Chat, []string{chatText("chatcmpl-a", "Hi"), "data: hello\n\n"}, "Hi", false},
		{"chat without an id", Chat, []string{`data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}` + "\n\n"}, "Hi", false},
		{"chat with an empty id first (Azure)", Chat, []string{`data: {"choices":[],"id":"","prompt_filter_results":[]}` + "\n\n", chatText("chatcmpl-a", "Hi")}, "Hi", true},
		{"chat whitespace only", Chat, []string{chatText("chatcmpl-a", " \n ")}, " \n ", false},
		{"chat comments", Chat, []string{": keep-alive\n\n", chatText("chatcmpl-a", "Hi"), ": x\n\n"}, "Hi", true},

		{"messages text", Messages, []string{msgStart("msg_a"), msgBlockStart(0, msgTextBlock), msgPing, msgText(0, "Hel"), msgText(0, "lo")}, "Hello", true},
		{"messages text block stopped", Messages, []string{msgStart("msg_a"), msgBlockStart(0, msgTextBlock), msgText(0, "Hi"), msgStop(0)}, "Hi", true},
		{"messages finished", Messages, []string{msgStart("msg_a"), msgBlockStart(0, msgTextBlock), msgText(0, "Hi"), msgStop(0), msgDelta}, "Hi", false},
		{"messages stopped", Messages, []string{msgBlockStart(0, msgTextBlock), msgText(0, "Hi"), msgStopEvent}, "Hi", false},
		{"messages thinking", Messages, []string{msgBlockStart(0, `{"type":"thinking","thinking":""}`),
			msgEvent("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm"}}`), msgStop(0),
			msgBlockStart(1, msgTextBlock), msgText(1, "Hi")}, "", false},
		{"messages tool use", Messages, []string{msgBlockStart(0, msgTextBlock), msgText(0, "Hi"), msgStop(0),
			msgBlockStart(1, `{"type":"tool_use","id":"toolu_1","name":"f","input":{}}`)}, "Hi", false},
		{"messages input json", Messages, []string{msgBlockStart(0, msgTextBlock), msgText(0, "Hi"),
			msgEvent("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{"}}`)}, "Hi", false},
		{"messages signature", Messages, []string{msgBlockStart(0, msgTextBlock), msgText(0, "Hi"),
			msgEvent("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"x"}}`)}, "Hi", false},
		{"messages two text blocks", Messages, []string{msgBlockStart(0, msgTextBlock), msgText(0, "Hi"), msgStop(0), msgBlockStart(1, msgTextBlock), msgText(1, " there")}, "Hi there", true},

		{"responses is never resumable", Responses, []string{"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hi\"}\n\n"}, "", false},
		{"other is never resumable", Other, []string{"data: {\"text\":\"Hi\"}\n\n"}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := fed(tc.family, tc.events...)
			if string(tr.Text()) != tc.text || tr.Resumable() != tc.resumable {
				t.Fatalf("text %q resumable %v, want %q %v", tr.Text(), tr.Resumable(), tc.text, tc.resumable)
			}
		})
	}
}

// Feed returns where an error event begins, so that the caller can hold it back, and the
// event's bytes; nothing after it is read.
func TestTranscriptFeedStopsAtAnErrorEvent(t *testing.T) {
	for _, tc := range []struct {
		name   string
		family Family
		before string
		err    string
		after  string
	}{
		{"chat", Chat, chatRoleA + chatText("chatcmpl-a", "Hi"), `data: {"error":{"message":"overloaded","code":503}}` + "\n\n", chatText("chatcmpl-a", "late") + doneEvent},
		{"chat event error", Chat, chatText("chatcmpl-a", "Hi"), "event: error\ndata: {\"message\":\"x\"}\r\n\r\n", doneEvent},
		{"messages", Messages, msgBlockStart(0, msgTextBlock) + msgText(0, "Hi"), msgEvent("error", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`), msgText(0, "late")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tr Transcript
			tr.Reset(tc.family)
			p := tc.before + tc.err + tc.after
			n, errEvent := tr.Feed([]byte(p))
			if n != len(tc.before) || string(errEvent) != tc.err {
				t.Fatalf("n %d (want %d), error event %q (want %q)", n, len(tc.before), errEvent, tc.err)
			}
			if string(tr.Text()) != "Hi" || !tr.Resumable() {
				t.Fatalf("text %q resumable %v", tr.Text(), tr.Resumable())
			}
		})
	}
}

func TestTranscriptPrefill(t *testing.T) {
	for text, want := range map[string]string{
		"Hello":           "Hello",
		"Hello ":          "Hello",
		"Hello\n\n":       "Hello",
		"Hello \t\r\n":    "Hello",
		"Hello\u3000":     "Hello",
		"Hello\u00a0 ":    "Hello",
		"  ":              "",
		"a b":             "a b",
		"日本語 ":            "日本語",
		"line\n\nnext\n ": "line\n\nnext",
	} {
		tr := fed(Chat, chatText("chatcmpl-a", text))
		if got := string(tr.Prefill()); got != want {
			t.Errorf("Prefill of %q = %q, want %q", text, got, want)
		}
	}
}

// splice feeds the delivered events, splices, and rewrites the continuation, returning what the
// client gets of it.
func splice(t *testing.T, f Family, delivered []string, continuation ...string) (*Transcript, string) {
	t.Helper()
	tr := fed(f, delivered...)
	if !tr.Resumable() {
		t.Fatalf("the delivered stream is not resumable (text %q)", tr.Text())
	}
	tr.Splice(false)
	var out []byte
	for _, e := range continuation {
		var n int
		var errEvent []byte
		out, n, errEvent = tr.Rewrite(out, []byte(e))
		if n != len(e) || errEvent != nil {
			t.Fatalf("Rewrite stopped at %d of %q (error event %q)", n, e, errEvent)
		}
	}
	return tr, string(out)
}

func TestTranscriptRewriteChat(t *testing.T) {
	delivered := []string{chatRoleA, chatText("chatcmpl-a", "Hello "), chatText("chatcmpl-a", "wor")}
	tr, out := splice(t, Chat, delivered,
		strings.ReplaceAll(chatRoleA, "chatcmpl-a", "chatcmpl-b"), ": keep-alive\n\n",
		chatText("chatcmpl-b", "ld"), chatText("chatcmpl-b", "!"), chatFinish, chatUsage, doneEvent)
	want := chatText("chatcmpl-a", "ld") + chatText("chatcmpl-a", "!") +
		strings.ReplaceAll(chatFinish, "chatcmpl-b", "chatcmpl-a") + strings.ReplaceAll(chatUsage, "chatcmpl-b", "chatcmpl-a") + doneEvent
	if out != want {
		t.Fatalf("the client gets\n%s\nwant\n%s", out, want)
	}
	if string(tr.Text()) != "Hello world!" || !tr.Continues() || tr.Resumable() {
		t.Fatalf("text %q continues %v resumable %v", tr.Text(), tr.Continues(), tr.Resumable())
	}
}

// A continuation chunk without an id gets the client's; the id the client's stream showed first
// is the one, not Azure's empty one before it.
func TestTranscriptRewriteChatIDs(t *testing.T) {
	azure := `data: {"choices":[],"created":0,"id":"","model":"","object":"","prompt_filter_results":[]}` + "\n\n"
	_, out := splice(t, Chat, []string{azure, chatText("chatcmpl-a", "Hello")}, `data: {"choices":[{"index":0,"delta":{"content":" world"}}]}`+"\n\n")
	if want := `data: {"id":"chatcmpl-a","choices":[{"index":0,"delta":{"content":" world"}}]}` + "\n\n"; out != want {
		t.Fatalf("the client gets\n%s\nwant\n%s", out, want)
	}
}

// The whitespace Prefill leaves out is taken off the start of the continuation's text, so the
// client's text is the delivered text followed by the continuation: escaped or raw, across
// deltas, partly or not at all.
func TestTranscriptSeam(t *testing.T) {
	for _, tc := range []struct {
		name, delivered string
		continuation    []string // text deltas, each Quote'd as JSON
		raw             []string // or raw JSON literals
		want            string   // the client's whole text
	}{
		{"no seam", "Hello", []string{" world"}, nil, "Hello world"},
		{"a space", "Hello ", []string{" world"}, nil, "Hello world"},
		{"the model leaves the space out", "Hello ", []string{"world"}, nil, "Hello world"},
		{"newlines", "Para one.\n\n", []string{"\n\nPara two."}, nil, "Para one.\n\nPara two."},
		{"part of the seam", "Para one.\n\n", []string{"\nPara two."}, nil, "Para one.\n\nPara two."},
		{"the seam across deltas", "Para one.\n\n", []string{"\n", "\n", "Para two."}, nil, "Para one.\n\nPara two."},
		{"a delta of the seam alone", "Hi ", []string{" ", "there"}, nil, "Hi there"},
		{"escaped as \\u", "Hello\n", nil, []string{`"\u000aworld"`}, "Hello\nworld"},
		{"a wide space", "日本\u3000", nil, []string{`"\u3000語"`}, "日本\u3000語"},
		{"a wide space, raw", "日本\u3000", []string{"\u3000語"}, nil, "日本\u3000語"},
		{"only the start", "A \n", []string{" x \n"}, nil, "A \nx \n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lits := tc.raw
			for _, s := range tc.continuation {
				lits = append(lits, strconv.Quote(s))
			}
			for _, f := range []Family{Chat, Messages} {
				var delivered, cont []string
				if f == Chat {
					delivered = []string{chatText("chatcmpl-a", tc.delivered)}
					for _, l := range lits {
						cont = append(cont, chatChunk("chatcmpl-b", `{"content":`+l+`}`))
					}
				} else {
					delivered = []string{msgBlockStart(0, msgTextBlock), msgText(0, tc.delivered)}
					cont = []string{msgStart("msg_b"), msgBlockStart(0, msgTextBlock)}
					for _, l := range lits {
						cont = append(cont, msgEvent("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":`+l+`}}`))
					}
				}
				tr, out := splice(t, f, delivered, cont...)
				if string(tr.Text()) != tc.want {
					t.Errorf("%s: the client's text is %q, want %q; it got:\n%s", f, tr.Text(), tc.want, out)
				}
			}
		})
	}
}

func TestTranscriptRewriteMessages(t *testing.T) {
	cont := []string{msgStart("msg_b"), msgBlockStart(0, msgTextBlock), msgPing, msgText(0, " world"), msgText(0, "!"), msgStop(0), msgDelta, msgStopEvent}
	t.Run("the text block is still open", func(t *testing.T) {
		delivered := []string{msgStart("msg_a"), msgBlockStart(0, msgTextBlock), msgText(0, "Hello")}
		tr, out := splice(t, Messages, delivered, cont...)
		if want := msgText(0, " world") + msgText(0, "!") + msgStop(0) + msgDelta + msgStopEvent; out != want {
			t.Fatalf("the client gets\n%s\nwant\n%s", out, want)
		}
		if string(tr.Text()) != "Hello world!" || !tr.Continues() {
			t.Fatalf("text %q continues %v", tr.Text(), tr.Continues())
		}
	})
	t.Run("after a text block at index 2", func(t *testing.T) {
		delivered := []string{msgBlockStart(0, msgTextBlock), msgText(0, "A"), msgStop(0), msgBlockStart(1, msgTextBlock), msgText(1, "B"), msgStop(1),
			msgBlockStart(2, msgTextBlock), msgText(2, "C")}
		_, out := splice(t, Messages, delivered, cont...)
		if want := msgText(2, " world") + msgText(2, "!") + msgStop(2) + msgDelta + msgStopEvent; out != want {
			t.Fatalf("the client gets\n%s\nwant\n%s", out, want)
		}
	})
	t.Run("the text block stopped", func(t *testing.T) {
		delivered := []string{msgBlockStart(0, msgTextBlock), msgText(0, "Hello"), msgStop(0)}
		tr, out := splice(t, Messages, delivered, cont...)
		if want := msgBlockStart(1, msgTextBlock) + msgText(1, " world") + msgText(1, "!") + msgStop(1) + msgDelta + msgStopEvent; out != want {
			t.Fatalf("the client gets\n%s\nwant\n%s", out, want)
		}
		if string(tr.Text()) != "Hello world!" {
			t.Fatalf("text %q", tr.Text())
		}
	})
	t.Run("a first block that carries its text", func(t *testing.T) {
		delivered := []string{msgBlockStart(0, msgTextBlock), msgText(0, "Hello ")}
		tr, out := splice(t, Messages, delivered, msgBlockStart(0, `{"type":"text","text":" wor"}`), msgText(0, "ld"))
		if want := msgText(0, "wor") + msgText(0, "ld"); out != want {
			t.Fatalf("the client gets\n%s\nwant\n%s", out, want)
		}
		if string(tr.Text()) != "Hello world" {
			t.Fatalf("text %q", tr.Text())
		}
	})
}

// A continuation whose first content is not text, or that ends without any, does not continue
// the answer.
func TestTranscriptContinues(t *testing.T) {
	for _, tc := range []struct {
		name   string
		family Family
		events []string
		want   bool
	}{
		{"chat text", Chat, []string{chatRoleA, chatText("chatcmpl-b", "x")}, true},
		{"chat whitespace of the seam is text", Chat, []string{chatText("chatcmpl-b", " ")}, true},
		{"chat tool call first", Chat, []string{chatRoleA, chatChunk("chatcmpl-b", `{"tool_calls":[{"index":0,"id":"c","type":"function","function":{"name":"f","arguments":""}}]}`), chatText("chatcmpl-b", "x")}, false},
		{"chat reasoning first", Chat, []string{chatChunk("chatcmpl-b", `{"reasoning_content":"hmm"}`), chatText("chatcmpl-b", "x")}, false},
		{"chat an end without text", Chat, []string{chatRoleA, chatFinish, doneEvent}, false},
		{"chat opening only", Chat, []string{chatRoleA}, false},
		{"messages text", Messages, []string{msgStart("msg_b"), msgBlockStart(0, msgTextBlock), msgPing, msgText(0, "x")}, true},
		{"messages thinking first", Messages, []string{msgStart("msg_b"), msgBlockStart(0, `{"type":"thinking","thinking":"hmm"}`)}, false},
		{"messages tool first", Messages, []string{msgStart("msg_b"), msgBlockStart(0, `{"type":"tool_use","id":"t","name":"f","input":{}}`)}, false},
		{"messages an end without text", Messages, []string{msgStart("msg_b"), msgBlockStart(0, msgTextBlock), msgStop(0), msgDelta, msgStopEvent}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			delivered := []string{chatText("chatcmpl-a", "Hi ")}
			if tc.family == Messages {
				delivered = []string{msgBlockStart(0, msgTextBlock), msgText(0, "Hi ")}
			}
			tr := fed(tc.family, delivered...)
			tr.Splice(false)
			var out []byte
			for _, e := range tc.events {
				out, _, _ = tr.Rewrite(out, []byte(e))
			}
			if tr.Continues() != tc.want {
				t.Fatalf("Continues() = %v, want %v; the client would get\n%s", tr.Continues(), tc.want, out)
			}
		})
	}
}

// An error event in a continuation stops Rewrite where it begins; what came before it is
// rewritten, and the continuation can itself be resumed.
func TestTranscriptRewriteStopsAtAnErrorEvent(t *testing.T) {
	tr := fed(Chat, chatText("chatcmpl-a", "One "))
	tr.Splice(false)
	errEvent := `data: {"error":{"message":"overloaded","type":"server_error"}}` + "\n\n"
	p := chatText("chatcmpl-b", " two") + errEvent + doneEvent
	out, n, got := tr.Rewrite(nil, []byte(p))
	if string(out) != chatText("chatcmpl-a", "two") || n != len(chatText("chatcmpl-b", " two")) || string(got) != errEvent {
		t.Fatalf("out %q n %d error event %q", out, n, got)
	}
	if !tr.Resumable() || string(tr.Prefill()) != "One two" {
		t.Fatalf("resumable %v prefill %q", tr.Resumable(), tr.Prefill())
	}
	tr.Splice(false)
	out, _, _ = tr.Rewrite(nil, []byte(chatText("chatcmpl-c", " three")+doneEvent))
	if string(out) != chatText("chatcmpl-a", " three")+doneEvent || string(tr.Text()) != "One two three" {
		t.Fatalf("second continuation: %q, text %q", out, tr.Text())
	}
}

// A transcript past MaxTranscriptText is not resumable: its prefill would be a second prompt.
func TestTranscriptTextLimit(t *testing.T) {
	big := strings.Repeat("x", MaxTranscriptText/2)
	tr := fed(Chat, chatText("chatcmpl-a", big))
	if !tr.Resumable() {
		t.Fatal("half the limit should be resumable")
	}
	tr.Feed([]byte(chatText("chatcmpl-a", big+"y")))
	if tr.Resumable() {
		t.Fatal("past the limit, not resumable")
	}
}

// eventEnds returns the offsets in in where events end (after the line ends that follow
// them), as a separate Framer reads it.
func eventEnds(in []byte) []int {
	var fr Framer
	fr.Reset(0)
	var ends []int
	for off := 0; off < len(in); {
		n, ok := fr.Next(in[off:])
		off += n
		if !ok {
			break
		}
		ends = append(ends, skipLineEnds(in, off))
	}
	return ends
}

// FuzzTranscript checks that a Transcript never panics; that Feed's answer does not depend on
// how the whole events are grouped into reads; that what Feed lets through and the error
// event it holds back are the bytes of the input; that Prefill is a prefix of Text, within the
// limit; and that what Rewrite writes for a continuation, asked as a prefill or by instruction,
// is whole events, after which the delivered text is still the start of the client's.
func FuzzTranscript(f *testing.F) {
	f.Add(false, false, []byte(chatRoleA+chatText("chatcmpl-a", "Hello ")+`data: {"error":{"message":"x"}}`+"\n\n"), []byte(chatRoleA+chatText("chatcmpl-b", " world")+chatFinish+doneEvent))
	f.Add(true, false, []byte(msgStart("msg_a")+msgBlockStart(0, msgTextBlock)+msgText(0, "Hi\n")), []byte(msgStart("msg_b")+msgBlockStart(0, msgTextBlock)+msgPing+msgText(0, "\\u000ax")+msgStop(0)+msgDelta+msgStopEvent))
	f.Add(true, false, []byte(msgBlockStart(0, msgTextBlock)+msgText(0, "a")+msgStop(0)), []byte(msgBlockStart(0, `{"type":"text","text":" b"}`)+msgBlockStart(1, `{"type":"tool_use"}`)))
	f.Add(false, false, []byte(chatText("chatcmpl-a", "x \u3000")), []byte("data: {\"id\":1,\"choices\":[{\"delta\":{\"content\":\"\\u3000\\ud83d\\ude00\"}}]}\r\n\r\n"))
	f.Add(false, true, []byte(chatText("chatcmpl-a", "Once upon a ti")), []byte(chatText("chatcmpl-b", "upon a ")+chatText("chatcmpl-b", "time")+chatFinish+doneEvent))
	f.Add(true, true, []byte(msgBlockStart(0, msgTextBlock)+msgText(0, "Once upon a ti")), []byte(msgStart("msg_b")+msgBlockStart(0, msgTextBlock)+msgText(0, "ti")+msgPing+msgText(0, "me")+msgStop(0)))
	f.Fuzz(func(t *testing.T, messages, instructed bool, delivered, continuation []byte) {
		family := Chat
		if messages {
			family = Messages
		}
		var whole, grouped Transcript
		whole.Reset(family)
		n, errEvent := whole.Feed(delivered)
		if n > len(delivered) || errEvent != nil && string(delivered[n:n+len(errEvent)]) != string(errEvent) {
			t.Fatalf("Feed let through %d bytes and held back %q", n, errEvent)
		}
		grouped.Reset(family)
		at := 0
		for _, end := range eventEnds(delivered) {
			m, e := grouped.Feed(delivered[at:end])
			if e != nil || m < end-at {
				break
			}
			at = end
		}
		if string(whole.Text()) != string(grouped.Text()) || whole.Resumable() != grouped.Resumable() {
			t.Fatalf("read at once: %q %v; event by event: %q %v", whole.Text(), whole.Resumable(), grouped.Text(), grouped.Resumable())
		}
		text, prefill := whole.Text(), whole.Prefill()
		if len(text) > MaxTranscriptText || !strings.HasPrefix(string(text), string(prefill)) {
			t.Fatalf("text %q, prefill %q", text, prefill)
		}
		prefill = append([]byte(nil), prefill...)
		whole.Splice(instructed)
		out, m, _ := whole.Rewrite(nil, continuation)
		if m > len(continuation) {
			t.Fatalf("Rewrite read %d of %d bytes", m, len(continuation))
		}
		var fr Framer
		fr.Reset(0)
		if k, ok := fr.Next(out); len(out) > 0 && !ok || k > len(out) {
			t.Fatalf("Rewrite wrote no whole event: %q", out)
		}
		if ends := eventEnds(out); len(out) > 0 && (len(ends) == 0 || ends[len(ends)-1] != len(out)) {
			t.Fatalf("Rewrite's output does not end between events: %q", out)
		}
		if !strings.HasPrefix(string(whole.Text()), string(prefill)) {
			t.Fatalf("the client's text %q does not start with the delivered %q", whole.Text(), prefill)
		}
	})
}

// Eligible says whether a stream may still become resumable: before it delivered text too, and
// never again once it showed anything else or its end.
func TestTranscriptEligible(t *testing.T) {
	for _, tc := range []struct {
		name   string
		events []string
		want   bool
	}{
		{"nothing yet", nil, true},
		{"opening only", []string{chatRoleA}, true},
		{"whitespace", []string{chatText("chatcmpl-a", " ")}, true},
		{"text", []string{chatText("chatcmpl-a", "Hi")}, true},
		{"a tool call", []string{chatChunk("chatcmpl-a", `{"tool_calls":[{"index":0}]}`), chatText("chatcmpl-a", "Hi")}, false},
		{"finished", []string{chatText("chatcmpl-a", "Hi"), chatFinish}, false},
	} {
		if got := fed(Chat, tc.events...).Eligible(); got != tc.want {
			t.Errorf("%s: Eligible() = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// BenchmarkTranscriptFeed measures what a stream that may be resumed pays per event as it goes
// out (docs/streams.md, Resume a cut stream); Reset between runs keeps the text from growing without end.
func BenchmarkTranscriptFeed(b *testing.B) {
	for _, bc := range []struct {
		name   string
		family Family
		event  string
	}{
		{"chat", Chat, chatText("chatcmpl-a", "Hello, world. ")},
		{"messages", Messages, msgText(0, "Hello, world. ")},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var t Transcript
			t.Reset(bc.family)
			if bc.family == Messages {
				t.Feed([]byte(msgBlockStart(0, msgTextBlock)))
			}
			p := []byte(bc.event)
			b.ReportAllocs()
			b.SetBytes(int64(len(p)))
			for i := 0; b.Loop(); i++ {
				if i%4096 == 0 {
					t.text = t.text[:0]
				}
				t.Feed(p)
			}
		})
	}
}

// BenchmarkTranscriptRewrite measures a continuation's event rewritten into the client's stream.
func BenchmarkTranscriptRewrite(b *testing.B) {
	for _, bc := range []struct {
		name      string
		family    Family
		delivered string
		event     string
	}{
		{"chat", Chat, chatText("chatcmpl-a", "Hi"), chatText("chatcmpl-b", "Hello, world. ")},
		{"messages", Messages, msgBlockStart(0, msgTextBlock) + msgText(0, "Hi"), msgText(0, "Hello, world. ")},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var t Transcript
			t.Reset(bc.family)
			t.Feed([]byte(bc.delivered))
			t.Splice(false)
			p := []byte(bc.event)
			var out []byte
			b.ReportAllocs()
			b.SetBytes(int64(len(p)))
			for i := 0; b.Loop(); i++ {
				if i%4096 == 0 {
					t.text = t.text[:0]
				}
				out, _, _ = t.Rewrite(out[:0], p)
			}
		})
	}
}

// A stream that may be resumed allocates nothing per event once its buffers have grown: Feed as
// its events go out, Rewrite once it goes on with a continuation (the seam aside, once).
func TestZeroAllocsTranscript(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	for _, tc := range []struct {
		name             string
		family           Family
		delivered, event string
	}{
		{"chat", Chat, chatText("chatcmpl-a", "Hi"), chatText("chatcmpl-b", "Hello, world. ")},
		{"messages", Messages, msgBlockStart(0, msgTextBlock) + msgText(0, "Hi"), msgText(0, "Hello, world. ")},
	} {
		var tr Transcript
		tr.Reset(tc.family)
		delivered, event := []byte(tc.delivered), []byte(tc.event)
		feed := testing.AllocsPerRun(100, func() {
			tr.text = tr.text[:0]
			tr.Feed(delivered)
		})
		tr.Splice(false)
		out := make([]byte, 0, 1024)
		rewrite := testing.AllocsPerRun(100, func() {
			tr.text = tr.text[:0]
			out, _, _ = tr.Rewrite(out[:0], event)
		})
		if feed != 0 || rewrite != 0 {
			t.Errorf("%s: %v allocations per Feed, %v per Rewrite, want 0", tc.name, feed, rewrite)
		}
	}
}
