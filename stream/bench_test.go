package stream

import (
	"bytes"
	"fmt"
	"testing"
)

// streamCase is a stream per family for benchmarks and allocation tests:
// opening holds the events seen before content, tail is a whole stream piped
// after commit.
type streamCase struct {
	family Family
	file   string
}

var benchStreams = []streamCase{
	{Chat, "content.sse"},
	{Responses, "text.sse"},
	{Messages, "text.sse"},
	{Other, "completions.sse"},
	{Chat, "finish_no_done.sse"}, // finished by its finish_reason: the choices are read per event
	{Other, "transcription.sse"}, // finished by a ".done" type
}

func countEvents(in []byte) int {
	var f Framer
	f.Reset(0)
	n := 0
	for len(in) > 0 {
		k, ok := f.Next(in)
		in = in[k:]
		if ok {
			n++
		}
	}
	return n
}

// frameAll frames p to the end and returns the events seen.
func frameAll(f *Framer, p []byte) int {
	n := 0
	for len(p) > 0 {
		k, ok := f.Next(p)
		p = p[k:]
		if ok {
			n++
		}
	}
	return n
}

func BenchmarkFramerNext(b *testing.B) {
	for _, sc := range benchStreams {
		in := fixture(b, sc.family, sc.file)
		events := countEvents(in)
		b.Run(fmt.Sprintf("%s/%s", sc.family, sc.file), func(b *testing.B) {
			var f Framer
			f.Reset(0)
			b.ReportAllocs()
			b.SetBytes(int64(len(in)))
			for b.Loop() {
				frameAll(&f, in) // one op frames the whole fixture
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*events), "ns/event")
		})
	}
}

// BenchmarkGateFeed gates each stream up to its commit, fed as one read per
// event (as a socket delivers a live stream).
func BenchmarkGateFeed(b *testing.B) {
	for _, sc := range benchStreams {
		in := fixture(b, sc.family, sc.file)
		chunks := perEvent(in)
		var g Gate
		g.Reset(sc.family, bigPeek)
		gated := 0
		for _, c := range chunks {
			gated++
			if g.Feed(c) != Hold {
				break
			}
		}
		b.Run(fmt.Sprintf("%s/%s", sc.family, sc.file), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				g.Reset(sc.family, bigPeek)
				for _, c := range chunks[:gated] {
					g.Feed(c)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*gated), "ns/event")
		})
	}
}

// BenchmarkGateObserve pipes a whole stream through a committed Gate, one
// read per event.
func BenchmarkGateObserve(b *testing.B) {
	for _, sc := range benchStreams {
		in := fixture(b, sc.family, sc.file)
		chunks := perEvent(in)
		b.Run(fmt.Sprintf("%s/%s", sc.family, sc.file), func(b *testing.B) {
			var g Gate
			b.ReportAllocs()
			for b.Loop() {
				g.Reset(sc.family, 0) // commits at headers
				g.Feed(nil)
				for _, c := range chunks {
					g.Observe(c)
				}
			}
			if !g.Finished() {
				b.Fatal("stream not finished")
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(chunks)), "ns/event")
		})
	}
}

// perEvent cuts an LF fixture into one chunk per record.
func perEvent(in []byte) [][]byte {
	var out [][]byte
	for len(in) > 0 {
		i := bytes.Index(in, []byte("\n\n"))
		if i < 0 {
			return append(out, in)
		}
		out = append(out, in[:i+2])
		in = in[i+2:]
	}
	return out
}

func TestZeroAllocsFramerNext(t *testing.T) {
	for _, sc := range benchStreams {
		in := fixture(t, sc.family, sc.file)
		var f Framer
		f.Reset(0)
		frameAll(&f, in) // warm-up: buffers reach the largest event
		allocs := testing.AllocsPerRun(100, func() { frameAll(&f, in) })
		if allocs != 0 {
			t.Errorf("%v/%s: %v allocations per stream, want 0", sc.family, sc.file, allocs)
		}
		// Byte-by-byte chunking must not allocate either.
		bytewise := byteByByte(string(in))
		allocs = testing.AllocsPerRun(10, func() {
			for _, c := range bytewise {
				frameAll(&f, c)
			}
		})
		if allocs != 0 {
			t.Errorf("%v/%s byte by byte: %v allocations per stream, want 0", sc.family, sc.file, allocs)
		}
	}
}

func TestZeroAllocsGateFeed(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	cases := append([]streamCase{
		{Chat, "tool_calls.sse"},
		{Chat, "role_then_error.sse"},
		{Chat, "done_only.sse"},
		{Responses, "reasoning_hidden.sse"},
		{Responses, "function_call.sse"},
		{Responses, "failed.sse"},
		{Messages, "thinking.sse"},
		{Messages, "overloaded.sse"},
		{Image, "partial_image.sse"},
	}, benchStreams...)
	for _, sc := range cases {
		in := fixture(t, sc.family, sc.file)
		chunks := perEvent(in)
		var g Gate
		run := func() {
			g.Reset(sc.family, bigPeek)
			for _, c := range chunks {
				if g.Feed(c) != Hold {
					return
				}
			}
		}
		run() // warm-up Reset/Feed
		if allocs := testing.AllocsPerRun(100, run); allocs != 0 {
			t.Errorf("%v/%s: %v allocations per stream, want 0", sc.family, sc.file, allocs)
		}
	}
}

func TestZeroAllocsGateObserve(t *testing.T) {
	for _, sc := range benchStreams {
		in := fixture(t, sc.family, sc.file)
		chunks := perEvent(in)
		var g Gate
		run := func() {
			g.Reset(sc.family, 0) // commits at headers
			g.Feed(nil)
			for _, c := range chunks {
				g.Observe(c)
			}
			if !g.Finished() {
				t.Fatalf("%v/%s: not finished", sc.family, sc.file)
			}
		}
		run() // warm-up
		allocs := testing.AllocsPerRun(100, run)
		if allocs != 0 {
			t.Errorf("%v/%s: %v allocations per stream, want 0", sc.family, sc.file, allocs)
		}
	}
}

// BenchmarkFramerLoneCR frames one large read of a stream with lone CR line
// ends: the line-end search must stay linear when no LF exists.
func BenchmarkFramerLoneCR(b *testing.B) {
	in := bytes.Repeat([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\r\r"), 3000)
	var f Framer
	f.Reset(0)
	b.ReportAllocs()
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		frameAll(&f, in)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*3000), "ns/event")
}

// benchChatBody is testdata/bench/run.sh's stream: a role chunk, 18 content deltas, the finish
// chunk and [DONE], 3,621 bytes.
func benchChatBody() []byte {
	chunk := func(delta, finish string) string {
		return `data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o-mini","choices":[{"index":0,"delta":` + delta + `,"finish_reason":` + finish + "}]}\n\n"
	}
	var b bytes.Buffer
	b.WriteString(chunk(`{"role":"assistant","content":""}`, "null"))
	for _, w := range []string{"Hello", "there,", "how", "can", "I", "help", "you", "today?", "I", "can", "answer", "questions,", "write", "text", "and", "explain", "things", "well"} {
		b.WriteString(chunk(`{"content":"`+w+` "}`, "null"))
	}
	b.WriteString(chunk(`{}`, `"stop"`))
	b.WriteString("data: [DONE]\n\n")
	return b.Bytes()
}

// BenchmarkGateWholeStream gates a whole chat stream that arrived in one read, as a fast
// upstream's short answer does (the load test's): the opening events are classified, the rest
// watched as tail in the same Feed.
func BenchmarkGateWholeStream(b *testing.B) {
	in := benchChatBody()
	var g Gate
	b.ReportAllocs()
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		g.Reset(Chat, 128<<10)
		if g.Feed(in) != Commit || !g.Finished() {
			b.Fatal("not committed and finished")
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*21), "ns/event")
}
