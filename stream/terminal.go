package stream

import (
	"bytes"

	"github.com/llm-failover/failover/stream/jsonscan"
)

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
// stream (README, Streams: the terminal-event rules): which choices the stream has shown and
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
	if g.family == Chat && g.chunkChangesNothing(data) {
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
// other byte of a chunk (120 ns a search), where an underscore or an x is rare (20-30 ns).
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
