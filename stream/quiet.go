package stream

import (
	"bytes"

	"github.com/llm-failover/failover/stream/jsonscan"
)

// The tail's per-event rules (isErrorEvent, isTerminal, noteEnd) cost about 240 ns an event
// when each event is framed and read on its own, and a fast upstream's short answer arrives
// whole: a 21-event chat stream in one read. skipQuiet reads such a read's leading events as
// one run of bytes instead, with a few vectorised searches, and passes over every event in the
// run that the rules could learn nothing from. It is a shortcut and never a rule of its own:
// it stops before the first bytes that any of the rules might act on, and the events from
// there are framed and read one by one as before (quiet_test.go checks the two agree).

var (
	quietError = []byte("rror") // in every error member, `event: error` and llama.cpp's `error:` line
	quietDone  = []byte("DONE]")
	eventEnd   = []byte("\n\n")
)

// skipQuiet returns how many bytes from the start of p (a read of a committed chat or other
// stream, the Framer between records) are whole events that could change nothing the tail
// needs to know; the Framer is left between records after them. 0 when there are none, or the
// shortcut does not apply. It passes over two kinds of run:
//
//   - The read ends the stream: its last event is `data: [DONE]` after a blank line, and it
//     holds no error (no bytes "rror"). Every event before that one is passed over, whatever
//     it says of its choices: none is an error event, and once the `[DONE]` after them is
//     read the stream is finished (an earlier `[DONE]` would only have finished it sooner),
//     and what the tail noted of its choices is read no more (Finished answers from finished
//     first, and observe frames nothing more). Line ends do not matter here: "\n\n" before
//     `data:` ends with a blank line whether a CR ended the line before it or not. This is
//     the last read of most streams, and the only read of a fast upstream's short answer: the
//     load test's.
//   - Otherwise, for chat only, the leading events none of which is an error event or
//     `[DONE]`, and that noteEnd would skip every one of (chunkChangesNothing).
//
// Why reading the raw bytes gives the per-event answer: an event's data is its data lines'
// values joined with "\n", cut to tailCaptureLimit. Every pattern the rules look for has no
// line end in it, so an event's data holds one only where the raw bytes do; between a key and
// its colon, or a colon and its value, a join puts a line end and then the next line's field
// name (or a line the join left out), so a line end there counts as trouble, as does a key
// that cannot be read to its value. In the second kind, only streams without CR are read
// this way (their events end at "\n\n"), and, as a margin, only events no longer than
// tailCaptureLimit: the rules read each event only up to the capture (a value it cuts is no
// value to them), and the argument is kept to events they read whole. (In the first kind the
// length does not matter: a capture only hides bytes, and the run has none the rules could
// act on.)
//
// clean tells that p is known to hold no "rror" (the end of a read endsStream found to end the
// stream): it is not searched again.
func (g *Gate) skipQuiet(p []byte, clean bool) int {
	if !g.endsOnFinish() || g.perEventOnly || !g.fr.betweenRecords() {
		return 0
	}
	b := p
	if !clean {
		if i := bytes.Index(b, quietError); i >= 0 {
			b = b[:i]
		}
	}
	if len(b) == len(p) && bytes.HasSuffix(p, doneLast) {
		g.fr.skipRecords()
		return len(p) - len(doneRecord) // the first kind: all but the [DONE] event
	}
	if i := bytes.IndexByte(b, '\r'); i >= 0 {
		b = b[:i] // CR line ends: events are framed one by one from here
	}
	if i := bytes.Index(b, quietDone); i >= 0 {
		b = b[:i]
	}
	if g.family != Chat || g.choicesSeen&1 == 0 {
		return 0
	}
	b = g.quietMembers(b, keyFinishReason, endFinishReason, true)
	b = g.quietMembers(b, keyIndex, endIndex, false)
	n := 0
	for {
		i := bytes.Index(b[n:], eventEnd)
		if i < 0 || i > tailCaptureLimit {
			break
		}
		n += i + len(eventEnd)
	}
	if n > 0 {
		g.fr.skipRecords()
	}
	return n
}

// endsStream reports, for a chat or other stream, a read p that skipQuiet's first kind passes
// over up to its last event: it ends with `[DONE]` after a blank line, and holds no error.
func (g *Gate) endsStream(p []byte) bool {
	return g.endsOnFinish() && !g.perEventOnly && bytes.HasSuffix(p, doneLast) && !bytes.Contains(p, quietError)
}

// doneLast is how a read that ends a stream with `[DONE]` ends: a blank line, then the
// `[DONE]` event (doneRecord).
var (
	doneRecord = []byte("data: [DONE]\n\n")
	doneLast   = append([]byte("\n\n"), doneRecord...)
)

// quietMembers returns the prefix of b before the first member named key (searched by its
// end; finish tells finish_reason from index) that chunkChangesNothing would not pass: a
// finish_reason that is not null or "", an index that is not a number of a choice seen (or
// one a line end follows), or a key not followed by a colon and a value within b.
func (g *Gate) quietMembers(b, key, end []byte, finish bool) []byte {
	for off := 0; ; {
		i := bytes.Index(b[off:], end)
		if i < 0 {
			return b
		}
		after := off + i + len(end)
		off = after
		start := after - len(key)
		if start < 0 || !bytes.Equal(b[start:after], key) {
			continue
		}
		// A line end between the key and its colon, or the colon and the value, may be a
		// join of data lines (skipQuiet): the bytes after it are not the event's.
		j := jsonscan.SkipSpace(b, after)
		if j >= len(b) || bytes.IndexByte(b[after:j], '\n') >= 0 {
			return b[:start]
		}
		if b[j] != ':' {
			continue // a string that is not a key ("role":"index")
		}
		colon := j
		if j = jsonscan.SkipSpace(b, j+1); j >= len(b) || bytes.IndexByte(b[colon:j], '\n') >= 0 {
			return b[:start]
		}
		v := b[j:]
		if finish {
			if !openFinish(v) {
				return b[:start]
			}
			continue
		}
		// A line end after the number may end the event's data, where the number is one the
		// capture may have cut (chunkChangesNothing leaves it to the walk): trouble too.
		if k := g.seenIndex(v); k == 0 || v[k] == '\n' {
			return b[:start]
		}
	}
}
