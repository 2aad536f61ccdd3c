package stream

import "bytes"

// isTerminal reports whether ev properly ends a stream of family f: after it the tail has
// nothing left to learn. It reads only the captured prefix of the data (the tail keeps a few
// hundred bytes per event), so it finds the `type` with a bounded scan of the top-level object
// instead of parsing the whole event. As in classify, a JSON "type" decides; without one, a
// top-level error ends the stream, else the event name decides.
//
// For chat and other only `[DONE]` is terminal: a stream of theirs may also end cleanly after
// a finish_reason or a `.done` type (noteEnd), but the tail keeps watching it until the body
// ends, so that an error event after those is still seen.
func isTerminal(f Family, ev Event) bool {
	switch f {
	case Chat, Other, Image:
		return ev.DataLen == len(ev.Data) && bytes.Equal(trimSpace(ev.Data), done)
	}
	typ := leadingType(ev.Data) // providers put "type" first: no scan needed
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

// noteChoices records the choices in the array that starts at b[i] (b may cut it anywhere):
// each choice's index is seen, and finished when its finish_reason is a non-empty string. A
// choice whose index was cut off (or is missing) counts as index 0; indexes from 63 up share
// one bit.
func (g *Gate) noteChoices(b []byte, i int) {
	i++ // past '['
	for {
		i = skipSpace(b, i)
		if i < len(b) && b[i] == ',' {
			i = skipSpace(b, i+1)
		}
		if i >= len(b) || b[i] != '{' {
			return // the array's end, or not a choice
		}
		index, finished := 0, false
		j := i + 1
		for {
			key, vs, ok := member(b, j)
			if !ok {
				j = vs
				break
			}
			if string(key) == "finish_reason" {
				// A non-empty string, also when the capture cuts it after its first letter.
				finished = b[vs] == '"' && vs+1 < len(b) && b[vs+1] != '"'
			}
			if j = skipValue(b, vs); j <= vs {
				j = -1
				break
			}
			if string(key) == "index" {
				index = smallIndex(b[vs:j])
			}
		}
		bit := uint64(1) << index
		g.choicesSeen |= bit
		if finished {
			g.choicesDone |= bit
		}
		if j < 0 {
			return // the capture cut this choice
		}
		i = j
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
func isErrorEvent(f Family, ev Event) bool {
	typ := leadingType(ev.Data)
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

// scanTopLevel walks the top-level members of the JSON object that b starts
// (b may be cut anywhere) and returns the raw value of the first string
// "type" member, whether the first "error" member is not null (also when b
// cuts that member's value), and where the value of the first "choices"
// member starts when it is an array (also when b cuts it), else -1; with
// untilChoices, the walk ends there. It stops at the first thing that is not
// well-formed and never recurses, so hostile nesting cannot exhaust the stack.
func scanTopLevel(b []byte, untilChoices bool) (typ []byte, hasErr bool, choices int) {
	choices = -1
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, false, choices
	}
	i++
	seenErr := false
	for {
		key, vs, ok := member(b, i)
		if !ok {
			return typ, hasErr, choices
		}
		switch string(key) {
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
		}
		i = skipValue(b, vs)
		if i <= vs {
			return typ, hasErr, choices
		}
		if string(key) == "type" && typ == nil && b[vs] == '"' {
			typ = b[vs+1 : i-1]
		}
	}
}

// member reads the start of the object member at b[i:] (after any space and separating
// commas): its key, and vs, where its value starts (a byte of b). ok is false when no member
// starts there: at the object's closing brace (vs is then the index after it), or when b ends
// or stops being well-formed before a value begins (vs is -1).
func member(b []byte, i int) (key []byte, vs int, ok bool) {
	for {
		i = skipSpace(b, i)
		if i >= len(b) {
			return nil, -1, false
		}
		if b[i] != ',' {
			break
		}
		i++
	}
	switch b[i] {
	case '}':
		return nil, i + 1, false
	case '"':
	default:
		return nil, -1, false
	}
	ks := i + 1
	if i = skipString(b, i); i < 0 {
		return nil, -1, false
	}
	key = b[ks : i-1]
	if i = skipSpace(b, i); i >= len(b) || b[i] != ':' {
		return nil, -1, false
	}
	if vs = skipSpace(b, i+1); vs >= len(b) {
		return nil, -1, false
	}
	return key, vs, true
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// skipString returns the index after the string that starts at b[i] (a
// quote), or -1 if b ends inside it. Long strings (instructions, text) are
// crossed with IndexByte rather than byte by byte.
func skipString(b []byte, i int) int {
	i++
	for {
		q := bytes.IndexByte(b[i:], '"')
		if q < 0 {
			return -1
		}
		q += i
		// The quote is escaped when an odd run of backslashes precedes it.
		bs := 0
		for j := q - 1; j >= i && b[j] == '\\'; j-- {
			bs++
		}
		if bs%2 == 0 {
			return q + 1
		}
		i = q + 1
	}
}

// skipValue returns the index after the JSON value that starts at b[i], or -1
// if b ends inside it. Objects and arrays are skipped by counting brackets
// outside strings.
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				if i < 0 {
					return -1
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return -1
	}
	// A number or a literal: up to the next delimiter.
	for i < len(b) {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
		i++
	}
	return -1
}
