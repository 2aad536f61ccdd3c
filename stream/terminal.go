package stream

import "bytes"

// isTerminal reports whether ev properly ends a stream of family f. It reads
// only the captured prefix of the data (the tail keeps a few hundred bytes per
// event), so it finds the `type` with a bounded scan of the top-level object
// instead of parsing the whole event. As in classify, a JSON "type" decides;
// without one, a top-level error ends the stream, else the event name decides.
func isTerminal(f Family, ev Event) bool {
	switch f {
	case Chat, Other, Image:
		// Other and Image need no terminal event (Gate.Finished is true for them anyway), but
		// the tail keeps watching them until [DONE] so an error event after commit is seen.
		return ev.DataLen == len(ev.Data) && bytes.Equal(trimSpace(ev.Data), done)
	}
	typ := leadingType(ev.Data) // providers put "type" first: no scan needed
	if typ == nil {
		var hasErr bool
		if typ, hasErr = scanTopLevel(ev.Data); typ == nil {
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
		t, e := scanTopLevel(ev.Data)
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
// "type" member and whether the first "error" member is not null (also when b
// cuts that member's value). It stops at the first thing that is not
// well-formed and never recurses, so hostile nesting cannot exhaust the stack.
func scanTopLevel(b []byte) (typ []byte, hasErr bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, false
	}
	i++
	seenErr := false
	for {
		key, vs, ok := member(b, i)
		if !ok {
			return typ, hasErr
		}
		if string(key) == "error" && !seenErr {
			// Told by the value's first byte (only null starts with n), before the value is
			// skipped: a long error (a provider's message, its metadata) is cut by the capture
			// limit, and is an error all the same.
			seenErr = true
			hasErr = b[vs] != 'n'
		}
		i = skipValue(b, vs)
		if i <= vs {
			return typ, hasErr
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
