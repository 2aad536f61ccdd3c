package stream

import (
	"bytes"

	"github.com/llm-failover/failover/stream/jsonscan"
)

// After commit the Gate watches the piped bytes without holding them (the tail): for the
// family's terminal event, for error events, and for chat and other, for what a clean end of
// the body would mean (noteEnd). The rules read each event on its own, as observe's loop frames
// it: that is the slow path. Two fast paths sit beside it, each a shortcut and never a rule of
// its own:
//
//   - skipQuiet reads a read's leading events as one run of bytes, with a few vectorised
//     searches, and passes over every event in the run that the rules could learn nothing
//     from. It stops before the first bytes that any rule might act on, and the events from
//     there are framed and read one by one. A fast upstream's short answer arrives whole (a
//     21-event chat stream in one read), and is then read in a few searches instead of 21
//     events' rules (BenchmarkGateWholeStream). When such a read ends the stream (endsStream),
//     Feed does not read its events for their choices before commit either.
//   - chunkChangesNothing tells from two searches that noteEnd's walk of a chat chunk could
//     not change what the gate knows of its choices, and spares the walk (noteChoices).
//
// tail_test.go checks each against the rules it shortcuts, on tables, the fixtures and fuzz
// inputs; slowpaths_test.go runs the gate's tests with both turned off.

// Observe watches a chunk piped to the client after Commit and records whether
// the family's terminal event went by. It keeps at most tailCaptureLimit data
// bytes per event, however large the event.
//
// It returns how many bytes of p, from its start, end between events: all of p
// when p ends between two events, else up to where the event p ends inside
// begins (0 when it began before p). An SSE client acts on an event only at its
// blank line, so the proxy sends the whole events now and holds the rest until
// the event's end arrives. Once the terminal event went by nothing more is
// framed, and all of p counts as whole. Before Commit it does nothing and
// returns len(p).
func (g *Gate) Observe(p []byte) (whole int) {
	return max(g.observe(p, false), 0)
}

// observe is Observe, returning -1 when p ends inside an event that began before p. clean
// tells that p is known to hold no error (the bytes "rror"), for skipQuiet.
func (g *Gate) observe(p []byte, clean bool) int {
	if !g.decided || g.decision != Commit || g.finished {
		return len(p) // nothing left to learn once the terminal event went by
	}
	whole := -1 // where the last event in p ended
	if !g.fr.inRecord() {
		whole = 0
	}
	off := g.skipQuiet(p, clean) // the leading events that change nothing, read as one run
	if off > 0 {
		whole = off
	}
	for off < len(p) && !g.finished {
		n, ok := g.fr.Next(p[off:])
		off += n
		if ok {
			whole = off
			ev := g.fr.Event()
			lead := tailType(g.family, ev)
			g.failed = g.failed || isErrorEvent(g.family, ev, lead)
			g.finished = isTerminal(g.family, ev, lead)
			if g.endsOnFinish() {
				g.noteEnd(ev)
			}
		}
	}
	if g.finished || !g.fr.inRecord() {
		return len(p)
	}
	if whole >= 0 {
		whole = skipLineEnds(p, whole)
	}
	return whole
}

// skipLineEnds returns the index of the first byte of b from i on that is not a
// line end: where the record after an event's end begins (blank lines, and the
// LF of a CRLF whose CR ended the event, belong to no record).
func skipLineEnds(b []byte, i int) int {
	for i < len(b) && (b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// Failed reports whether an error event went by after Commit: the upstream failed after
// output began, even if it then ended its stream properly.
func (g *Gate) Failed() bool { return g.failed }

// Finished reports whether the committed stream would be complete if its body ended cleanly
// now (docs/streams.md, Streams: the pre-commit peek): for chat, after `data: [DONE]`, or
// after a non-null finish_reason for every choice index the stream showed (usage-only chunks
// may follow); for other, the same, or when the last event's type ends in ".done"; for
// responses, after response.completed, response.incomplete, response.failed or an error
// event; for messages, after message_stop or an error event. Image has no required terminal
// event and is always finished. Like any SSE event, an event counts only once its blank line
// arrived; for the finish_reason and ".done" rules, a record begun after it and not ended
// means the stream was cut. An error event after any of these still makes the stream Failed.
func (g *Gate) Finished() bool {
	switch {
	case g.finished || g.family == Image:
		return true
	case !g.endsOnFinish() || g.fr.inRecord():
		return false
	}
	return g.choicesDone != 0 && g.choicesSeen&^g.choicesDone == 0 || g.family == Other && g.typedDone
}

// endsOnFinish reports the families whose stream may end without a terminal
// event, once its choices finished (chat, other) or on a ".done" type (other).
func (g *Gate) endsOnFinish() bool { return g.family == Chat || g.family == Other }

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
	if !g.endsOnFinish() || g.perEventOnly || slowPaths || !g.fr.betweenRecords() {
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
	return g.endsOnFinish() && !g.perEventOnly && !slowPaths && bytes.HasSuffix(p, doneLast) &&
		!bytes.Contains(p, quietError)
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

// isTerminal reports whether ev properly ends a stream of family f: after it the tail has
// nothing left to learn. It reads only the captured prefix of the data (the tail keeps a few
// hundred bytes per event), so it finds the `type` with a bounded scan of the top-level object
// instead of parsing the whole event. As in classify, a JSON "type" decides; without one, a
// top-level error ends the stream, else the event name decides.
//
// For chat and other only `[DONE]` is terminal: a stream of theirs may also end cleanly after
// a finish_reason or a `.done` type (noteEnd), but the tail keeps watching it until the body
// ends, so that an error event after those is still seen.
//
// lead is tailType(f, ev).
func isTerminal(f Family, ev Event, lead []byte) bool {
	switch f {
	case Chat, Other, Image:
		return ev.DataLen == len(ev.Data) && bytes.Equal(trimSpace(ev.Data), done)
	}
	typ := lead // providers put "type" first: no scan needed
	if typ == nil {
		var hasErr bool
		if typ, hasErr, _ = scanTopLevel(ev.Data, false); typ == nil {
			if hasErr {
				return true
			}
			typ = ev.Name
		}
	}
	if f == Responses {
		switch string(typ) {
		case "response.completed", "response.incomplete", "response.failed", "response.error", "error":
			return true
		}
		return false
	}
	switch string(typ) {
	case "message_stop", "error":
		return true
	}
	return false
}

// noteEnd records what a clean end of the body right after ev would mean for a chat or other
// stream (docs/streams.md, Streams: the pre-commit peek): which choices the stream has shown and
// which of them finished (a non-null finish_reason; several choices when n > 1, told apart by
// their index), and whether ev's `type` (or, without one, its event name) ends in ".done".
// Events without data (comments, keep-alives) change nothing. Like the tail, it reads only
// the first tailCaptureLimit bytes of the data, before commit as after, so what the stream
// shows does not depend on where it committed. The walk of the top-level object ends at the
// choices: what follows them (usage, provider metadata) says nothing about the end.
func (g *Gate) noteEnd(ev Event) {
	data := ev.Data[:min(len(ev.Data), tailCaptureLimit)]
	if len(trimSpace(data)) == 0 {
		return
	}
	if g.family == Chat && !slowPaths && g.chunkChangesNothing(data) {
		return // most chunks of a chat stream: no walk needed to know it
	}
	typ, _, choices := scanTopLevel(data, true)
	if typ == nil {
		typ = ev.Name
	}
	g.typedDone = bytes.HasSuffix(typ, doneSuffix)
	if choices >= 0 {
		g.noteChoices(data, choices)
	}
}

var doneSuffix = []byte(".done")

// The keys chunkChangesNothing looks for, each with the end it is searched by: bytes.Index
// finds a pattern by its first byte, and a quote, the first byte of every key, is on every
// other byte of a chunk, where an underscore or an x is rare, so a search by the end skips
// ahead several times as fast.
var (
	keyFinishReason, endFinishReason = []byte(`"finish_reason"`), []byte(`_reason"`)
	keyIndex, endIndex               = []byte(`"index"`), []byte(`x"`)
)

// chunkChangesNothing reports, from the bytes alone, that walking a chat chunk (noteEnd) could
// not change what the gate knows of its choices: choice 0 was seen already, every
// "finish_reason" member in the chunk is null or empty, and every "index" member is a number
// whose choice was seen already. A walk reads those members only (a choice without an index
// is choice 0), and only where JSON's rules let it get to them, so it could only find less:
// the answer is the walk's, without the walk, for nearly every chunk of a stream. Anything
// else, a value cut off by the capture or a finish_reason that names a reason, is left to the
// walk. (A key spelt with escapes is not the key to the walk either.) On the tail's path: no
// allocation, two vectorised searches.
func (g *Gate) chunkChangesNothing(data []byte) bool {
	if g.choicesSeen&1 == 0 {
		return false
	}
	for rest := data; ; {
		v, found, cut := memberValue(rest, keyFinishReason, endFinishReason)
		if cut {
			return false
		}
		if !found {
			break
		}
		if !openFinish(v) {
			return false // a reason, or a value the walk must judge
		}
		rest = v
	}
	for rest := data; ; {
		v, found, cut := memberValue(rest, keyIndex, endIndex)
		if cut {
			return false
		}
		if !found {
			return true
		}
		k := g.seenIndex(v)
		if k == 0 {
			return false
		}
		rest = v[k:]
	}
}

// openFinish reports whether v, what follows a finish_reason's colon, leaves its choice open
// as the walk reads it: null, or "".
func openFinish(v []byte) bool {
	return v[0] == 'n' || v[0] == '"' && len(v) >= 2 && v[1] == '"'
}

// seenIndex reads v, what follows an index's colon, as the number of a choice seen already,
// followed by what may end a member value, and returns the number's length; 0 when v is not
// that (another number, not a plain number, or cut where b ends).
func (g *Gate) seenIndex(v []byte) int {
	n, k := 0, 0
	for ; k < len(v) && v[k] >= '0' && v[k] <= '9'; k++ {
		n = min(n*10+int(v[k]-'0'), 63)
	}
	if k == 0 || k >= len(v) || !isIndexEnd(v[k]) || g.choicesSeen&(1<<n) == 0 {
		return 0
	}
	return k
}

// memberValue finds the next place in b where key (quoted, ending in end) is followed by a
// colon, and returns what follows the colon and its spaces. found is false when there is none;
// cut when b ends before a value begins.
func memberValue(b, key, end []byte) (v []byte, found, cut bool) {
	for off := 0; ; {
		i := bytes.Index(b[off:], end)
		if i < 0 {
			return nil, false, false
		}
		after := off + i + len(end) // just past the key, if it is one
		off = after
		if start := after - len(key); start < 0 || !bytes.Equal(b[start:after], key) {
			continue
		}
		j := jsonscan.SkipSpace(b, after)
		if j >= len(b) {
			return nil, true, true
		}
		if b[j] != ':' {
			continue // a string that is not a key ("role":"index")
		}
		j = jsonscan.SkipSpace(b, j+1)
		if j >= len(b) {
			return nil, true, true
		}
		return b[j:], true, false
	}
}

// isIndexEnd reports whether c may follow a number that is a whole member value.
func isIndexEnd(c byte) bool {
	return c == ',' || c == '}' || c == ' ' || c == '\t' || c == '\n' || c == '\r'
}

// noteChoices records the choices in the array that starts at b[i] (b may cut it anywhere):
// each choice's index is seen, and finished when its finish_reason is a non-empty string. A
// choice whose index was cut off (or is missing) counts as index 0; indexes from 63 up share
// one bit.
func (g *Gate) noteChoices(b []byte, i int) {
	var choices jsonscan.Cursor
	for ok := choices.OpenArray(b, i); ok && choices.Next(); {
		var choice jsonscan.Cursor
		if !choice.OpenObject(b, choices.Start()) {
			return // not a choice
		}
		index, finished := 0, false
		for choice.Next() {
			vs := choice.Start()
			switch string(choice.Key()) {
			case "finish_reason":
				// A non-empty string, also when the capture cuts it after its first letter.
				finished = b[vs] == '"' && vs+1 < len(b) && b[vs+1] != '"'
			case "index":
				if v := choice.Value(); v != nil {
					index = smallIndex(v)
				}
			}
		}
		bit := uint64(1) << index
		g.choicesSeen |= bit
		if finished {
			g.choicesDone |= bit
		}
		if choice.End() < 0 {
			return // the capture cut this choice
		}
		choices.Skipped(choice.End())
	}
}

// smallIndex reads a choice index, capped at 63 (one bit each); 0 for anything but digits.
func smallIndex(b []byte) int {
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0
		}
		n = min(n*10+int(c-'0'), 63)
	}
	return n
}

// isErrorEvent reports whether ev, seen after commit, is an error event of family f. Like
// isTerminal it reads only the captured prefix of the data, never a whole event. It runs on
// every event after commit, so the top-level scan is skipped when it cannot change the answer:
// as in classify, a JSON "type" decides on its own (and providers put it first, where
// leadingType finds it), and without the bytes "error" in the data there is no error member.
//
// lead is tailType(f, ev).
func isErrorEvent(f Family, ev Event, lead []byte) bool {
	typ := lead
	hasErr := false
	typed := f == Responses || f == Messages
	if typ == nil && (typed || string(ev.Name) == "error") || !typed && bytes.Contains(ev.Data, quotedError) {
		t, e, _ := scanTopLevel(ev.Data, false)
		if typ == nil {
			typ = t
		}
		hasErr = e
	}
	switch {
	case typed && typ != nil:
		switch string(typ) {
		case "error", "response.error", "response.failed":
			return f == Responses || string(typ) == "error"
		}
		return false
	}
	return hasErr || typ == nil && string(ev.Name) == "error"
}

var quotedError = []byte(`"error"`)

// tailType is leadingType(ev.Data) where the tail's rules read it (isTerminal, isErrorEvent):
// for the typed families, and for an event named error; elsewhere a type decides nothing, and
// nil spares the scan on every event of a chat stream.
func tailType(f Family, ev Event) []byte {
	if f == Responses || f == Messages || string(ev.Name) == "error" {
		return leadingType(ev.Data)
	}
	return nil
}

// scanTopLevel walks the top-level members of the JSON object that b starts
// (b may be cut anywhere) and returns the raw value of the first string
// "type" member, whether the first "error" member is not null (also when b
// cuts that member's value), and where the value of the first "choices"
// member starts when it is an array (also when b cuts it), else -1; with
// untilChoices, the walk ends there. It stops at the first byte that breaks
// JSON's rules (package jsonscan): a member past a missing comma or a
// mismatched bracket is not read, as the parser that classifies events before
// commit does not read it either.
func scanTopLevel(b []byte, untilChoices bool) (typ []byte, hasErr bool, choices int) {
	choices = -1
	seenErr := false
	var c jsonscan.Cursor
	for ok := c.OpenObject(b, 0); ok && c.Next(); {
		vs := c.Start()
		switch string(c.Key()) {
		case "error":
			if !seenErr {
				// Told by the value's first byte (only null starts with n), before the value is
				// skipped: a long error (a provider's message, its metadata) is cut by the capture
				// limit, and is an error all the same.
				seenErr = true
				hasErr = b[vs] != 'n'
			}
		case "choices":
			if choices < 0 && b[vs] == '[' {
				if choices = vs; untilChoices {
					return typ, hasErr, choices
				}
			}
		case "type":
			if v := c.Value(); typ == nil && len(v) > 0 && v[0] == '"' {
				typ = v[1 : len(v)-1]
			}
		}
	}
	return typ, hasErr, choices
}
