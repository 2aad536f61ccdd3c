package stream

import (
	"strconv"
	"strings"
	"testing"
)

// docs/streams.md, Resume a cut stream, The seam: what of a continuation's start repeats the end of the
// delivered text, and when more of the continuation is needed to tell.
func TestRepeatAt(t *testing.T) {
	long := strings.Repeat("word ", 300) + "end"
	for _, tc := range []struct {
		name      string
		delivered string
		cont      string
		wordOK    bool
		final     bool
		n         int
		kind      SeamKind
		undecided bool
	}{
		{"the last words again", "Once upon a ti", "upon a time, there", true, false, len("upon a ti"), SeamOverlap, false},
		{"the last words after a space", "there was a fox", " was a fox who", true, false, len(" was a fox"), SeamOverlap, false},
		{"the unfinished word whole", "Once upon a ti", "time, there", true, false, len("ti"), SeamWord, false},
		{"the unfinished word goes on", "Once upon a ti", "me, there", true, false, 0, SeamNone, false},
		{"the word could still be the unfinished one", "Once upon a ti", "ti", true, false, 0, SeamNone, true},
		{"it was the same word", "Once upon a ti", "ti", true, true, 0, SeamNone, false},
		{"a letter of it", "Once upon a ti", "t", true, false, 0, SeamNone, true},
		{"a repeat may still come", "Once upon a ti", "upon a", true, false, 0, SeamNone, true},
		{"nothing yet", "Once upon a ti", "", true, false, 0, SeamNone, true},
		{"only whitespace yet", "Once upon a ti", " \n", true, false, 0, SeamNone, true},
		{"nothing at all", "Once upon a ti", "", true, true, 0, SeamNone, false},
		{"the longest repeat wins", "a b c a b c", "a b c a b c d", true, false, len("a b c a b c"), SeamOverlap, false},
		{"a longer repeat may still come", "a b c a b c", "a b c", true, false, 0, SeamNone, true},
		{"the shorter one, at the end", "a b c a b c", "a b c", true, true, len("a b c"), SeamOverlap, false},
		{"a longer one did not come", "a b c a b c", "a b c d", true, false, len("a b c"), SeamOverlap, false},
		{"two words are too few", "upon a time", "a time, there", true, false, 0, SeamNone, false},
		{"the whole delivered text, however short", "Once", "Once upon a time", true, false, len("Once"), SeamOverlap, false},
		{"16 bytes of one word", "it was supercalifragilistic", "supercalifragilistic, yes", true, false, len("supercalifragilistic"), SeamOverlap, false},
		{"a repeat starts at a word", "Once upon a time", "nce upon a time again", true, false, 0, SeamNone, false},
		{"after punctuation", `he said "go home now`, `go home now," she`, true, false, len("go home now"), SeamOverlap, false},
		{"Japanese, without spaces", "今日は天気がいいですね", "天気がいいですね。明日も", true, false, len("天気がいいですね"), SeamOverlap, false},
		{"no word repeat after whitespace", "Once upon a ti", "time", false, false, 0, SeamNone, false},
		{"no word repeat when the continuation starts with a space", "Once upon a ti", " time", true, false, 0, SeamNone, false},
		{"no word after punctuation", "Once upon a time.", "time.", true, false, 0, SeamNone, false},
		{"a paraphrase", "Once upon a ti", "Long ago, there", true, false, 0, SeamNone, false},
		{"a repeat longer than 1 KiB is not looked for", long, long + " more", true, false, 0, SeamNone, false},
		{"the last 1 KiB is", long, long[505:] + " more", true, false, len(long) - 505, SeamOverlap, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, kind, decided := repeatAt([]byte(tc.delivered), []byte(tc.cont), tc.wordOK, tc.final)
			if decided == tc.undecided || decided && (n != tc.n || kind != tc.kind) {
				t.Fatalf("repeatAt = %d, %v, decided %v; want %d, %v, decided %v", n, kind, decided, tc.n, tc.kind, !tc.undecided)
			}
		})
	}
}

// A continuation asked by instruction is spliced without a repeat of the delivered text's end,
// in chat and in Messages, however its text is cut into deltas; and the record says what the
// seam took off.
func TestTranscriptInstructedSeam(t *testing.T) {
	for _, tc := range []struct {
		name         string
		delivered    string
		continuation []string
		want         string
		seam         string
		ascii        bool // the continuation's non-ASCII runes \u-escaped
	}{
		{"the last words again", "Once upon a ti", []string{"upon a ", "time, there ", "was a fox."}, "Once upon a time, there was a fox.", "overlap:9", false},
		{"the unfinished word again", "Once upon a ti", []string{"ti", "me, there", " was a fox."}, "Once upon a time, there was a fox.", "word:2", false},
		{"the word goes on", "Once upon a ti", []string{"me, there"}, "Once upon a time, there", "none", false},
		{"a restart of a short answer", "There was a ", []string{"There was a", " fox."}, "There was a fox.", "overlap:12", false},
		{"the space the delivered text ended with", "Hello ", []string{" world"}, "Hello world", "space:1", false},
		{"no space at all", "Hello ", []string{"world"}, "Hello world", "none", false},
		{"one rune at a time", "Once upon a ti", strings.Split("upon a time.", ""), "Once upon a time.", "overlap:9", false},
		{"escaped", "café au lai", []string{"café au lait"}, "café au lait", "overlap:12", true},
		{"a paraphrase is not repaired", "Once upon a ti", []string{"Long ago, a fox."}, "Once upon a tiLong ago, a fox.", "none", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, f := range []Family{Chat, Messages} {
				var delivered, cont []string
				if f == Chat {
					delivered = []string{chatText("chatcmpl-a", tc.delivered)}
					cont = []string{strings.ReplaceAll(chatRoleA, "chatcmpl-a", "chatcmpl-b")}
					for _, s := range tc.continuation {
						cont = append(cont, chatChunk("chatcmpl-b", `{"content":`+quote(s, tc.ascii)+`}`))
					}
					cont = append(cont, chatFinish, doneEvent)
				} else {
					delivered = []string{msgBlockStart(0, msgTextBlock), msgText(0, tc.delivered)}
					cont = []string{msgStart("msg_b"), msgBlockStart(0, msgTextBlock), msgPing}
					for _, s := range tc.continuation {
						cont = append(cont, msgEvent("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":`+quote(s, tc.ascii)+`}}`))
					}
					cont = append(cont, msgStop(0), msgDelta, msgStopEvent)
				}
				tr := fed(f, delivered...)
				tr.Splice(true)
				var out []byte
				for _, e := range cont {
					var n int
					var errEvent []byte
					out, n, errEvent = tr.Rewrite(out, []byte(e))
					if n != len(e) || errEvent != nil {
						t.Fatalf("%s: Rewrite stopped at %d of %q", f, n, e)
					}
				}
				if string(tr.Text()) != tc.want || tr.Seam().String() != tc.seam {
					t.Errorf("%s: the client's text is %q (seam %s), want %q (%s); it got:\n%s", f, tr.Text(), tr.Seam(), tc.want, tc.seam, out)
				}
				events := checkEvents(t, out)
				if f == Chat && (strings.Contains(string(out), "chatcmpl-b") || strings.Contains(string(out), `"role"`) || events[len(events)-1] != "[DONE]") {
					t.Errorf("chat: the continuation's id or opening chunk reached the client, or it does not end with [DONE]:\n%s", out)
				}
				if f == Messages && (strings.Contains(string(out), "message_start") || strings.Contains(string(out), "content_block_start")) {
					t.Errorf("messages: a second start reached the client:\n%s", out)
				}
			}
		})
	}
}

func quote(s string, ascii bool) string {
	if ascii {
		return strconv.QuoteToASCII(s)
	}
	return strconv.Quote(s)
}

// checkEvents returns the data of each whole event in out, failing on a partial one.
func checkEvents(t *testing.T, out []byte) []string {
	t.Helper()
	var fr Framer
	fr.Reset(0)
	var data []string
	for off := 0; off < len(out); {
		n, ok := fr.Next(out[off:])
		off += n
		if !ok {
			t.Fatalf("not whole events: %q", out)
		}
		data = append(data, string(fr.Event().Data))
		off = skipLineEnds(out, off)
	}
	return data
}

// While the seam is undecided nothing of the continuation goes out, though it counts as one
// that continues with text; an event that is not text lets the held ones go first, in order;
// an error event too, before it is returned.
func TestTranscriptInstructedHold(t *testing.T) {
	start := func() *Transcript {
		tr := fed(Chat, chatText("chatcmpl-a", "Once upon a ti"))
		tr.Splice(true)
		return tr
	}
	t.Run("held", func(t *testing.T) {
		tr := start()
		out, n, _ := tr.Rewrite(nil, []byte(chatRoleA+chatText("chatcmpl-b", "upon")))
		if len(out) != 0 || n == 0 || !tr.Continues() || string(tr.Text()) != "Once upon a ti" || tr.Seam().Kind != SeamNone {
			t.Fatalf("out %q, continues %v, text %q", out, tr.Continues(), tr.Text())
		}
	})
	t.Run("a tool call lets it go", func(t *testing.T) {
		tr := start()
		tool := chatChunk("chatcmpl-b", `{"tool_calls":[{"index":0,"id":"c","type":"function","function":{"name":"f","arguments":""}}]}`)
		out, _, _ := tr.Rewrite(nil, []byte(chatText("chatcmpl-b", "ti")+tool))
		want := chatText("chatcmpl-a", "ti") + strings.ReplaceAll(tool, "chatcmpl-b", "chatcmpl-a")
		if string(out) != want || tr.Resumable() {
			t.Fatalf("the client gets\n%s\nwant\n%s", out, want)
		}
	})
	t.Run("an error event lets it go", func(t *testing.T) {
		tr := start()
		errEvent := `data: {"error":{"message":"overloaded","type":"server_error"}}` + "\n\n"
		first := chatText("chatcmpl-b", "ti")
		out, n, got := tr.Rewrite(nil, []byte(first+errEvent))
		if string(out) != chatText("chatcmpl-a", "ti") || n != len(first) || string(got) != errEvent || string(tr.Prefill()) != "Once upon a titi" {
			t.Fatalf("out %q n %d error %q prefill %q", out, n, got, tr.Prefill())
		}
	})
	t.Run("a first content that is not text", func(t *testing.T) {
		tr := start()
		tr.Rewrite(nil, []byte(chatChunk("chatcmpl-b", `{"reasoning_content":"hmm"}`)))
		if tr.Continues() {
			t.Fatal("reasoning first continues")
		}
	})
}

// Seam renders sizes, never text.
func TestSeamText(t *testing.T) {
	for s, want := range map[Seam]string{{}: "none", {SeamSpace, 2}: "space:2", {SeamWord, 3}: "word:3", {SeamOverlap, 12}: "overlap:12"} {
		if got := s.String(); got != want {
			t.Errorf("%#v: %q, want %q", s, got, want)
		}
	}
}
