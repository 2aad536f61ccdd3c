package stream

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// After commit the tail reads an event's JSON structure as the parser that classifies events
// before commit does: data whose structure breaks before the member the tail looks for (a
// missing comma, mismatched brackets) shows no type, error or finish_reason, before commit as
// after it (docs/streams.md, Streams). Each malformed event is paired with the same event well-formed,
// which the tail does read.
func TestTailReadsMalformedEventsAsTheGateDoes(t *testing.T) {
	for _, tc := range []struct {
		name             string
		family           Family
		data             string
		finished, failed bool
	}{
		{"messages: message_stop after a missing comma does not end the stream", Messages,
			`{"usage":{"output_tokens":1} "type":"message_stop"}`, false, false},
		{"messages: message_stop after a comma ends it", Messages,
			`{"usage":{"output_tokens":1},"type":"message_stop"}`, true, false},
		{"responses: an error after a missing comma is no error event", Responses,
			`{"note":"a" "error":{"message":"x"}}`, false, false},
		{"responses: the error after a comma ends and fails the stream", Responses,
			`{"note":"a","error":{"message":"x"}}`, true, true},
		{"chat: an error after mismatched brackets is no error event", Chat,
			`{"choices":[{"index":0}},"error":{"message":"x"}}`, false, false},
		{"chat: the error after matched brackets fails the stream", Chat,
			`{"choices":[{"index":0}],"error":{"message":"x"}}`, false, true},
		{"chat: a finish_reason after a missing comma does not finish its choice", Chat,
			`{"choices":[{"index":0 "finish_reason":"stop"}]}`, false, false},
		{"chat: the finish_reason after a comma finishes it", Chat,
			`{"choices":[{"index":0,"finish_reason":"stop"}]}`, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			event := []byte("data: " + tc.data + "\n\n")
			var g Gate
			g.Reset(tc.family, 0) // commits at headers: the event is tail
			g.Feed(nil)
			g.Observe(event)
			if g.Finished() != tc.finished || g.Failed() != tc.failed {
				t.Errorf("after commit: finished %v, failed %v; want %v, %v", g.Finished(), g.Failed(), tc.finished, tc.failed)
			}
			g.Reset(tc.family, bigPeek)
			if d := g.Feed(event); (d == Error) != tc.failed {
				t.Errorf("before commit the gate decided %v: it reads the event otherwise", d)
			}
		})
	}
}

// tailState is what the tail knows after a read, as far as anything reads it again:
// everything skipQuiet must leave as the per-event rules would. Once the stream finished, what
// the tail noted of its choices is read no more (Finished answers from finished first, and
// observe frames nothing more), so it is left out then.
type tailState struct {
	whole                    int
	finished, failed         bool
	choicesSeen, choicesDone uint64
	typedDone, inRecord      bool
}

func (g *Gate) tailState(whole int) tailState {
	if g.finished {
		return tailState{whole: whole, finished: true, failed: g.failed, inRecord: g.fr.inRecord()}
	}
	return tailState{whole, g.finished, g.failed, g.choicesSeen, g.choicesDone, g.typedDone, g.fr.inRecord()}
}

// quietOpening commits a chat gate on a content chunk that shows choice 0, as a real stream's
// opening does, so that the tail's shortcut may apply to what follows.
const quietOpening = "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n"

// checkQuietAgrees feeds the same reads to a gate that may take the shortcut and to one that
// reads every event on its own, and fails at the first read after which they differ. It
// returns how many bytes the shortcut passed over, to show that a case exercises it.
func checkQuietAgrees(t *testing.T, chunks [][]byte) (skipped int) {
	t.Helper()
	return checkQuietAgreesAfter(t, quietOpening, chunks)
}

// checkQuietAgreesAfter is checkQuietAgrees after the opening given, which must commit.
func checkQuietAgreesAfter(t *testing.T, opening string, chunks [][]byte) (skipped int) {
	t.Helper()
	return checkQuietAgreesIn(t, Chat, opening, chunks)
}

// checkQuietAgreesIn is checkQuietAgreesAfter for a stream of family f.
func checkQuietAgreesIn(t *testing.T, f Family, opening string, chunks [][]byte) (skipped int) {
	t.Helper()
	var fast, ref Gate
	fast.Reset(f, 1<<20)
	ref.Reset(f, 1<<20)
	ref.perEventOnly = true
	for _, g := range []*Gate{&fast, &ref} {
		if d := g.Feed([]byte(opening)); d != Commit {
			t.Fatalf("the opening chunk gave %v, want Commit", d)
		}
	}
	for i, c := range chunks {
		skipped += fast.skipQuietDry(c)
		got, want := fast.tailState(fast.Observe(c)), ref.tailState(ref.Observe(c))
		if got != want {
			t.Fatalf("after read %d (%q):\n shortcut  %+v\n per event %+v", i, c, got, want)
		}
	}
	return skipped
}

// checkFeedAgrees feeds in, a stream's start, to a gate of family f in one read, and to one
// that reads every event on its own, before commit as after (no skipQuiet, every event to
// noteEnd), and fails when their decisions, what they hold as events and whole, or their tails
// differ.
func checkFeedAgrees(t *testing.T, f Family, in []byte) {
	t.Helper()
	var fast, ref Gate
	fast.Reset(f, 1<<20)
	ref.Reset(f, 1<<20)
	ref.perEventOnly = true
	df, dr := fast.Feed(in), ref.Feed(in)
	if df != dr || len(fast.Events()) != len(ref.Events()) || fast.HeldWhole() != ref.HeldWhole() {
		t.Fatalf("one read of %q:\n shortcut  %v, events %d, whole %d\n per event %v, events %d, whole %d",
			in, df, len(fast.Events()), fast.HeldWhole(), dr, len(ref.Events()), ref.HeldWhole())
	}
	if df != Commit {
		return
	}
	if got, want := fast.tailState(0), ref.tailState(0); got != want || fast.Finished() != ref.Finished() {
		t.Fatalf("one read of %q:\n shortcut  %+v, finished %v\n per event %+v, finished %v", in, got, fast.Finished(), want, ref.Finished())
	}
}

// skipQuietDry is how many bytes skipQuiet would pass over in p, without its effect.
func (g *Gate) skipQuietDry(p []byte) int {
	saved := g.fr
	n := g.skipQuiet(p, false)
	g.fr = saved
	return n
}

// quietChunk is a chat chunk of choice 0 with the delta and finish_reason given.
func quietChunk(delta, finish string) string {
	return `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":` + delta + `,"finish_reason":` + finish + "}]}\n\n"
}

// Streams whose reads carry several events, each next to the rule it must not hide: the
// shortcut passes over the quiet events and leaves every other to the per-event rules.
func TestQuietShortcutAgreesWithPerEvent(t *testing.T) {
	quiet := quietChunk(`{"content":"a"}`, "null") + quietChunk(`{"content":"b"}`, "null")
	long := quietChunk(`{"content":"`+strings.Repeat("x", 600)+`"}`, "null")
	finish := quietChunk(`{}`, `"stop"`)
	tests := []struct {
		name      string
		reads     []string
		skipsSome bool // the shortcut must pass over at least one event
	}{
		{"quiet events, then a finish and [DONE]", []string{quiet + finish + "data: [DONE]\n\n"}, true},
		{"a finish in one read, [DONE] in the next", []string{quiet + finish, ": x\n\ndata: [DONE]\n\n"}, true},
		{"an error event, then [DONE]", []string{quiet + `data: {"error":{"message":"overloaded"}}` + "\n\n" + quiet + "data: [DONE]\n\n"}, true},
		{"an event named error, then [DONE]", []string{quiet + "event: error\ndata: {}\n\ndata: [DONE]\n\n"}, true},
		{"CR before [DONE]", []string{quiet + "data: x\r\n\r\n" + quiet + "data: [DONE]\n\n"}, true},
		{"[DONE] inside content, and at the end", []string{quiet + quietChunk(`{"content":"[DONE]"}`, "null") + quiet + "data: [DONE]\n\n"}, true},
		{"[DONE] as the second data line of an event", []string{quiet + "data: {}\ndata: [DONE]\n\n"}, true},
		{"[DONE] with more on its line", []string{quiet + "data: [DONE] x\n\n"}, true},
		{"[DONE] without its blank line", []string{quiet + "data: [DONE]\n"}, true},
		{"[DONE] in an event with a name", []string{quiet + "event: x\ndata: [DONE]\n\n"}, true},
		{"an unfinished choice, then [DONE]", []string{quiet + strings.Replace(quietChunk(`{"content":"c"}`, "null"), `"index":0`, `"index":5`, 1) + "data: [DONE]\n\n"}, true},
		{"an event longer than the capture, then [DONE]", []string{long + quiet + "data: [DONE]\n\n"}, true},
		{"a finish without [DONE]", []string{quiet + quietChunk(`{}`, `"length"`)}, true},
		{"an error event after quiet ones", []string{quiet + `data: {"error":{"message":"overloaded"}}` + "\n\n"}, true},
		{"an event named error", []string{quiet + "event: error\ndata: {}\n\n"}, true},
		{"llama.cpp's error line", []string{quiet + "error: {\"code\":500}\n\n"}, true},
		{"an unseen choice", []string{quiet + strings.Replace(quietChunk(`{"content":"c"}`, "null"), `"index":0`, `"index":1`, 1) + quiet}, true},
		{"a tool call's index of an unseen number", []string{quiet + quietChunk(`{"tool_calls":[{"index":3}]}`, "null")}, true},
		{"a finish_reason joined across data lines", []string{quiet + "data: {\"choices\":[{\"index\":0,\"finish_reason\"\ndata: :\"stop\"}]}\n\n"}, true},
		{"an index joined across data lines", []string{quiet + "data: {\"choices\":[{\"index\"\ndata: :4}]}\n\n"}, true},
		{"a finish_reason's value on the next data line", []string{quiet + "data: {\"choices\":[{\"index\":0,\"finish_reason\":\ndata: \"stop\"}]}\n\n"}, true},
		{"an event longer than the capture", []string{long + quiet}, false},
		{"a finish_reason past the capture", []string{quiet + strings.Replace(long, "null", `"stop"`, 1)}, true},
		{"CRLF line ends", []string{strings.ReplaceAll(quiet, "\n", "\r\n") + quietChunk(`{}`, `"stop"`)}, false},
		{"CR after quiet events", []string{quiet + strings.ReplaceAll(quietChunk(`{}`, `"stop"`), "\n", "\r")}, true},
		{"a read that ends inside an event", []string{quiet + quiet[:40], quiet[40:] + quiet}, true},
		{"a read that ends between the two line ends", []string{quiet[:len(quiet)-1], "\n" + quiet}, true},
		{"comments and blank lines", []string{": ping\n\n\n\n" + quiet + ": ping\n\n"}, true},
		{"the word index as content", []string{quietChunk(`{"content":"index"}`, "null") + quiet}, true},
		{"[DONE] then more", []string{quiet + "data: [DONE]\n\n" + quiet}, true},
		{"[DONE] inside content", []string{quietChunk(`{"content":"[DONE]"}`, "null") + quiet}, false},
		{"usage-only chunk after the finish", []string{quiet + quietChunk(`{}`, `"stop"`) + `data: {"choices":[],"usage":{"total_tokens":3}}` + "\n\n"}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reads := make([][]byte, len(tc.reads))
			for i, r := range tc.reads {
				reads[i] = []byte(r)
			}
			if skipped := checkQuietAgrees(t, reads); tc.skipsSome && skipped == 0 {
				t.Fatal("the shortcut passed over nothing: the case does not test it")
			}
		})
	}
}

// The shortcut on the load test's stream: all but the finish chunk and [DONE] after the
// committing chunk are passed over.
func TestQuietShortcutOnAWholeStream(t *testing.T) {
	in := benchChatBody()
	var g Gate
	g.Reset(Chat, 128<<10)
	if g.Feed(in) != Commit || !g.Finished() || g.Failed() {
		t.Fatal("the stream is not committed, finished and clean")
	}
	// The opening (role) chunk does not commit; the first content chunk does, and the quiet
	// run is the 17 content chunks after it.
	events := bytes.SplitAfter(in, []byte("\n\n"))
	var fast Gate
	fast.Reset(Chat, 128<<10)
	fast.Feed(bytes.Join(events[:2], nil))
	rest := bytes.Join(events[2:], nil)
	want := len(bytes.Join(events[2:20], nil))
	if got := fast.skipQuietDry(rest); got != want {
		t.Fatalf("the shortcut passed over %d bytes, want %d (17 content chunks and the finish)", got, want)
	}
	checkQuietAgrees(t, [][]byte{rest})
	// Without its [DONE], the finish chunk is left to the per-event rules.
	want = len(bytes.Join(events[2:19], nil))
	if got := fast.skipQuietDry(bytes.Join(events[2:20], nil)); got != want {
		t.Fatalf("without [DONE], the shortcut passed over %d bytes, want %d (17 content chunks)", got, want)
	}
}

// A whole stream in one read, from its first event: the gate that skips noteEnd before commit
// (the read ends the stream) decides where the one that reads every event does, and ends
// finished alike.
func TestQuietWholeStreamInOneFeed(t *testing.T) {
	quiet := quietChunk(`{"content":"a"}`, "null")
	role := quietChunk(`{"role":"assistant","content":""}`, "null")
	for _, in := range []string{
		string(benchChatBody()),
		role + quiet + quietChunk(`{}`, `"stop"`) + "data: [DONE]\n\n",
		role + quietChunk(`{}`, `"stop"`) + "data: [DONE]\n\n", // finished before any content
		role + "data: [DONE]\n\n",                              // empty
		role + quiet + `data: {"error":{"message":"x"}}` + "\n\ndata: [DONE]\n\n",
		`data: {"error":{"message":"x"}}` + "\n\ndata: [DONE]\n\n",
	} {
		checkFeedAgrees(t, Chat, []byte(in))
		checkFeedAgrees(t, Other, []byte(in))
	}
}

// A read that ends the stream with [DONE] is passed over up to that event, for chat and for
// other (legacy completions), however its events read; the per-event rules agree on the end.
func TestQuietShortcutToDone(t *testing.T) {
	openings := []struct {
		f       Family
		opening string
		chunk   string
	}{
		{Chat, quietOpening, quietChunk(`{"content":"a"}`, "null") + quietChunk(`{}`, `"stop"`)},
		{Other, `data: {"id":"c","choices":[{"text":"Hi","index":0,"finish_reason":null}]}` + "\n\n",
			`data: {"id":"c","choices":[{"text":"a","index":0,"finish_reason":null}]}` + "\n\n" +
				`data: {"id":"c","choices":[{"text":"","index":0,"finish_reason":"length"}]}` + "\n\n"},
	}
	for _, o := range openings {
		t.Run(o.f.String(), func(t *testing.T) {
			before := ": keep-alive\n\n" + o.chunk
			read := []byte(before + "data: [DONE]\n\n")
			if got := checkQuietAgreesIn(t, o.f, o.opening, [][]byte{read}); got != len(before) {
				t.Fatalf("the shortcut passed over %d bytes, want %d (all but [DONE])", got, len(before))
			}
		})
	}
}

// An index whose number ends its event's data is a value the capture may have cut, to
// chunkChangesNothing, so noteEnd walks the event, and the walk sets typedDone from it: the
// shortcut must leave that event to the per-event rules, though its raw bytes show a line end
// after the number, as they do after a number that a next data line follows.
func TestQuietShortcutIndexEndingTheData(t *testing.T) {
	opening := `data: {"type":"x.done","choices":[{"index":0,"delta":{"content":"Hi"}}]}` + "\n\n"
	quiet := quietChunk(`{"content":"a"}`, "null")
	if skipped := checkQuietAgreesAfter(t, opening, [][]byte{[]byte(quiet + "data: {\"choices\":[{\"index\":0\n\n" + quiet)}); skipped == 0 {
		t.Fatal("the shortcut passed over nothing: the case does not test it")
	}
}

// FuzzQuietShortcut: on any reads after a committed chat opening, the shortcut leaves the
// tail exactly where reading every event on its own does.
func FuzzQuietShortcut(f *testing.F) {
	quiet := quietChunk(`{"content":"a"}`, "null")
	f.Add([]byte(quiet+quiet+quietChunk(`{}`, `"stop"`)+"data: [DONE]\n\n"), []byte{200})
	f.Add([]byte(quiet+"data: {\"choices\":[{\"index\"\ndata: :4}]}\n\n"+quiet), []byte{63, 7})
	f.Add([]byte(quiet+"event: error\ndata: {}\n\n"), []byte{0})
	f.Add([]byte(quiet+"data: {\"choices\":[{\"index\":0,\"finish_reason\":\ndata: \"stop\"}]}\n\n"), []byte{100, 100})
	f.Add([]byte(": x\n\n\n"+quiet+"\r\n"+quiet), []byte{30})
	typed := `data: {"type":"x.done","choices":[{"index":1}]}` + "\n\n" // walked: typedDone
	f.Add([]byte(typed+"data: {\"choices\":[{\"index\":0\n\n"+quiet), []byte{byte(len(typed) - 1), 255})
	f.Add([]byte(quiet+quietChunk(`{}`, `"stop"`)+": x\n\ndata: [DONE]\n\n"), []byte{255})
	f.Add([]byte(quiet+"data: {\"choices\":[{\"index\":7}]}\n\ndata: [DONE]\n\n"), []byte{90})
	other := `data: {"choices":[{"text":"Hi","index":0,"finish_reason":null}]}` + "\n\n"
	f.Fuzz(func(t *testing.T, in, cuts []byte) {
		checkQuietAgrees(t, [][]byte{in})
		checkQuietAgrees(t, splitByLarge(in, cuts))
		checkQuietAgreesIn(t, Other, other, [][]byte{in})
		checkQuietAgreesIn(t, Other, other, splitByLarge(in, cuts))
		checkFeedAgrees(t, Chat, in)
		checkFeedAgrees(t, Other, in)
	})
}

// splitByLarge cuts in into reads of 1 to 256 bytes (each byte of cuts a size, cycled), so
// that reads hold several events as well as parts of one.
func splitByLarge(in, cuts []byte) [][]byte {
	if len(cuts) == 0 || len(in) == 0 {
		return [][]byte{in}
	}
	var out [][]byte
	for i := 0; len(in) > 0; i++ {
		n := min(int(cuts[i%len(cuts)])+1, len(in))
		out = append(out, in[:n])
		in = in[n:]
	}
	return out
}

// checkSkipIsTheWalks: whenever chunkChangesNothing says a chat chunk cannot change what the
// gate knows of its choices, the walk it spares (noteEnd's) indeed changes nothing, from every
// state of choices seen and done the tests give it.
func checkSkipIsTheWalks(t *testing.T, data []byte) {
	t.Helper()
	data = data[:min(len(data), tailCaptureLimit)]
	for _, st := range [][2]uint64{{1, 0}, {1, 1}, {3, 0}, {3, 1}, {1<<63 | 1, 0}, {0x7, 0x2}} {
		g := &Gate{family: Chat, choicesSeen: st[0], choicesDone: st[1]}
		if !g.chunkChangesNothing(data) {
			continue
		}
		_, _, choices := scanTopLevel(data, true)
		if choices >= 0 {
			g.noteChoices(data, choices)
		}
		if g.choicesSeen != st[0] || g.choicesDone != st[1] {
			t.Fatalf("chunk %q: skipped as changing nothing, but the walk moves seen %b→%b, done %b→%b",
				data, st[0], g.choicesSeen, st[1], g.choicesDone)
		}
	}
}

// The skip's cases, each next to the walk: the common chunks are skipped; a chunk that the walk
// learns something from never is.
func TestChunkChangesNothing(t *testing.T) {
	tests := []struct {
		name string
		data string
		seen uint64
		want bool
	}{
		{"a content chunk of a seen choice", `{"id":"c","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}`, 1, true},
		{"spaces around the colons", `{"choices":[{"index" : 0 ,"delta":{},"finish_reason" : null}]}`, 1, true},
		{"a usage-only chunk", `{"id":"c","choices":[],"usage":{"total_tokens":9}}`, 1, true},
		{"an empty finish_reason", `{"choices":[{"index":0,"finish_reason":""}]}`, 1, true},
		{"the word index as a value", `{"choices":[{"index":0,"delta":{"role":"index"},"finish_reason":null}]}`, 1, true},
		{"the first chunk: choice 0 not seen yet", `{"choices":[{"index":0,"finish_reason":null}]}`, 0, false},
		{"a finish reason", `{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`, 1, false},
		{"a finish reason after spaces", `{"choices":[{"index":0,"finish_reason": "length"}]}`, 1, false},
		{"an unseen choice", `{"choices":[{"index":1,"delta":{"content":"x"},"finish_reason":null}]}`, 1, false},
		{"a seen second choice", `{"choices":[{"index":1,"delta":{"content":"x"},"finish_reason":null}]}`, 3, true},
		{"a tool call's index of an unseen number", `{"choices":[{"index":0,"delta":{"tool_calls":[{"index":2}]},"finish_reason":null}]}`, 1, false},
		{"an index that is not a plain number", `{"choices":[{"index":0.5,"finish_reason":null}]}`, 1, false},
		{"a value cut by the capture", `{"choices":[{"index":0,"finish_reason":`, 1, false},
		{"a finish reason cut after its quote", `{"choices":[{"index":0,"finish_reason":"`, 1, false},
		{"an index cut", `{"choices":[{"index":0`, 1, false},
		{"a finish_reason that is an object", `{"choices":[{"index":0,"finish_reason":{}}]}`, 1, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := &Gate{family: Chat, choicesSeen: tc.seen}
			if got := g.chunkChangesNothing([]byte(tc.data)); got != tc.want {
				t.Fatalf("chunkChangesNothing = %v, want %v", got, tc.want)
			}
			checkSkipIsTheWalks(t, []byte(tc.data))
		})
	}
}

// Every event of every chat fixture, whole and cut at every byte: the skip never says nothing
// changes where the walk would change something.
func TestChunkSkipAgreesWithTheWalkOnFixtures(t *testing.T) {
	files, err := filepath.Glob("../testdata/sse/chat/*.sse")
	if err != nil || len(files) == 0 {
		t.Fatalf("fixtures: %v (%d files)", err, len(files))
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(raw), "\n") {
			data, ok := strings.CutPrefix(line, "data:")
			if !ok {
				continue
			}
			data = strings.TrimSpace(data)
			for cut := 0; cut <= len(data); cut++ {
				checkSkipIsTheWalks(t, []byte(data[:cut]))
			}
		}
	}
}

// FuzzChunkSkip: on any bytes, a skipped chunk is one the walk learns nothing from.
func FuzzChunkSkip(f *testing.F) {
	f.Add([]byte(`{"id":"c","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}`))
	f.Add([]byte(`{"choices":[{"index" : 1 ,"finish_reason" : null},{"index":0,"finish_reason":"stop"}]}`))
	f.Add([]byte(`{"choices":[{"finish_reason":null,"index":2}],"index":0}`))
	f.Add([]byte(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"type":"function"}]},"finish_reason":null}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkSkipIsTheWalks(t, data)
	})
}
