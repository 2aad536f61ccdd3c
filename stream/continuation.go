package stream

import (
	"bytes"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/valyala/fastjson"

	"github.com/llm-failover/failover/stream/jsonscan"
)

// The continuation's side of the Transcript (transcript.go): its events rewritten into events of
// the stream the client already has (Rewrite's work), the first ones held back until the seam
// shows (seam.go), and the JSON edits that rewrite an event in place.

// rewrite appends a continuation's event as the client gets it.
func (t *Transcript) rewrite(dst []byte, ev Event) []byte {
	if t.family == Chat {
		return t.rewriteChat(dst, ev)
	}
	return t.rewriteMessages(dst, ev)
}

// hold keeps back an event of a continuation whose seam is not decided yet, and its text,
// when it is an opening event or one of text alone: a chat chunk of a single choice that
// carries nothing but content, a Messages ping, message_start, the start of a text block, a
// text_delta. It reports false for any other event, which decides the seam.
func (t *Transcript) hold(ev Event) bool {
	data := trimSpace(ev.Data)
	if len(data) == 0 {
		return true // a comment or an empty event: the client gets none
	}
	v, err := t.parser.ParseBytes(data)
	if err != nil || v.Type() != fastjson.TypeObject {
		return false
	}
	var text []byte
	if t.family == Chat {
		var ok bool
		if text, ok = textChunk(v); !ok {
			return false
		}
	} else {
		typ := v.GetStringBytes("type")
		if typ == nil {
			typ = ev.Name
		}
		switch string(typ) {
		case "ping", "message_start":
		case "content_block_start":
			if string(v.GetStringBytes("content_block", "type")) != "text" {
				return false
			}
			text = v.GetStringBytes("content_block", "text")
		case "content_block_delta":
			if string(v.GetStringBytes("delta", "type")) != "text_delta" {
				return false
			}
			text = v.GetStringBytes("delta", "text")
		default:
			return false
		}
	}
	t.held = appendEvent(t.held, ev.Name, data)
	t.lead = append(t.lead, text...)
	return true
}

// textChunk returns the text of a chat chunk that carries text alone, or nothing: no usage, at
// most one choice, index 0, without a finish_reason or logprobs, whose delta has no field of
// content but content (and role). ok is false for any other chunk.
func textChunk(v *fastjson.Value) (text []byte, ok bool) {
	if !isEmpty(v.Get("usage")) {
		return nil, false
	}
	choices := v.Get("choices")
	if choices == nil {
		return nil, false
	}
	arr, err := choices.Array()
	if err != nil || len(arr) > 1 {
		return nil, false
	}
	for _, c := range arr {
		if c.Type() != fastjson.TypeObject || c.GetInt("index") != 0 || !isEmpty(c.Get("finish_reason")) || !isEmpty(c.Get("logprobs")) {
			return nil, false
		}
		d := c.Get("delta")
		if d == nil {
			continue
		}
		o, err := d.Object()
		if err != nil {
			return nil, false
		}
		ok = true
		o.Visit(func(k []byte, fv *fastjson.Value) {
			switch {
			case string(k) == "content":
				switch fv.Type() {
				case fastjson.TypeString:
					text = fv.GetStringBytes()
				case fastjson.TypeNull:
				default:
					ok = false
				}
			case isChatContentField(k) && !isEmpty(fv):
				ok = false
			}
		})
		if !ok {
			return nil, false
		}
	}
	return text, true
}

// settle decides the seam from the text held back, when it can (final: no more comes):
// the runes of the repeat to drop from the continuation's start, and what the seam took off.
func (t *Transcript) settle(final bool) bool {
	if t.settled {
		return true
	}
	n, kind, ok := repeatAt(t.text[:t.cut], t.lead, len(t.seam) == 0, final)
	if !ok {
		return false
	}
	t.settled = true
	t.drop = utf8.RuneCount(t.lead[:n])
	if kind != SeamNone {
		t.seamOut = Seam{Kind: kind, Bytes: n}
	}
	return true
}

// release lets go of the events held back for the seam, decided on the text they carry, and
// appends them to dst as the client gets them.
func (t *Transcript) release(dst []byte) []byte {
	if !t.holding {
		return dst
	}
	t.settle(true)
	t.holding = false
	t.replay.Reset(maxTranscriptEvent)
	held := t.held
	for off := 0; off < len(held); {
		k, ok := t.replay.Next(held[off:])
		off += k
		if !ok {
			break
		}
		dst = t.rewrite(dst, t.replay.Event())
	}
	t.held = held[:0]
	return dst
}

// rewriteChat appends a continuation's chat event as the client gets it.
func (t *Transcript) rewriteChat(dst []byte, ev Event) []byte {
	data := trimSpace(ev.Data)
	if len(data) == 0 {
		return dst // a comment or an empty event
	}
	if bytes.Equal(data, done) {
		t.note(ev.Name, data, len(data))
		return appendEvent(dst, ev.Name, data)
	}
	v, err := t.parser.ParseBytes(data)
	if err != nil || v.Type() != fastjson.TypeObject {
		t.note(ev.Name, data, len(data))
		return appendEvent(dst, ev.Name, data) // not a chunk: it goes as it came
	}
	content := v.Get("choices", "0", "delta", "content")
	if !t.started {
		if !chunkHasContent(v) {
			return dst // an opening chunk: the client has its own
		}
		t.started = true
		t.textFirst = content != nil && len(content.GetStringBytes()) > 0
	}
	var edits [2]edit
	n := 0
	if vs, ve := memberSpan(data, "id"); vs >= 0 {
		edits[n] = edit{vs, ve, t.id}
		n++
	} else if i := jsonscan.SkipSpace(data, 0); i < len(data) && data[i] == '{' {
		// A chunk without an id gets the client's: an SDK holds every chunk to the first one's.
		with := append(append([]byte(`"id":`), t.id...), ',')
		edits[n] = edit{i + 1, i + 1, with}
		n++
	}
	if t.seaming() && content != nil && content.Type() == fastjson.TypeString {
		if vs, ve := pathSpan(data, "choices", "", "delta", "content"); vs >= 0 {
			edits[n] = edit{vs, ve, t.dropSeam(data[vs:ve])}
			n++
		}
	}
	return t.emit(dst, ev.Name, data, edits[:n])
}

// chunkHasContent reports a chat chunk that carries content for the client: a choice with a
// non-empty content field or a finish_reason, or a chunk the gate would not hold (no choices
// array: usage, or a provider's own object).
func chunkHasContent(v *fastjson.Value) bool {
	choices := v.Get("choices")
	if choices == nil {
		return v.Get("usage") != nil
	}
	arr, _ := choices.Array()
	for _, c := range arr {
		if !isEmpty(c.Get("finish_reason")) {
			return true
		}
		if d := c.Get("delta"); d != nil && deltaHasContent(d) {
			return true
		}
	}
	return false
}

// rewriteMessages appends a continuation's Messages event as the client gets it.
func (t *Transcript) rewriteMessages(dst []byte, ev Event) []byte {
	data := trimSpace(ev.Data)
	if len(data) == 0 {
		return dst
	}
	v, err := t.parser.ParseBytes(data)
	if err != nil || v.Type() != fastjson.TypeObject {
		t.note(ev.Name, data, len(data))
		return appendEvent(dst, ev.Name, data)
	}
	typ := v.GetStringBytes("type")
	if typ == nil {
		typ = ev.Name
	}
	if !t.started {
		switch classifyMessages(typ, v) {
		case Hold:
			if string(typ) != "content_block_start" && string(typ) != "content_block_stop" {
				return dst // message_start, ping: the client has its own
			}
		case Commit:
			t.started = true
			t.textFirst = isTextContent(typ, v)
		}
	}
	var edits [2]edit
	n := 0
	switch string(typ) {
	case "message_start":
		return dst
	case "content_block_start", "content_block_delta", "content_block_stop":
		k := v.GetInt("index")
		if string(typ) == "content_block_start" && k == 0 && t.dropStart && string(v.GetStringBytes("content_block", "type")) == "text" {
			// The continuation's text goes on in the client's open block: no second start.
			if vs, ve := pathSpan(data, "content_block", "text"); vs >= 0 && len(v.GetStringBytes("content_block", "text")) > 0 {
				return t.emitTextDelta(dst, data[vs:ve])
			}
			return dst
		}
		if vs, ve := memberSpan(data, "index"); vs >= 0 {
			edits[n] = edit{vs, ve, strconv.AppendInt(t.num[:0], int64(k+t.offset), 10)}
			n++
		}
		switch {
		case !t.seaming():
		case string(typ) == "content_block_delta" && string(v.GetStringBytes("delta", "type")) == "text_delta":
			if vs, ve := pathSpan(data, "delta", "text"); vs >= 0 && data[vs] == '"' {
				edits[n] = edit{vs, ve, t.dropSeam(data[vs:ve])}
				n++
			}
		case string(typ) == "content_block_start" && string(v.GetStringBytes("content_block", "type")) == "text":
			if vs, ve := pathSpan(data, "content_block", "text"); vs >= 0 && data[vs] == '"' && ve-vs > 2 {
				edits[n] = edit{vs, ve, t.dropSeam(data[vs:ve])}
				n++
			}
		}
	}
	return t.emit(dst, ev.Name, data, edits[:n])
}

// isTextContent reports whether a Messages event that carries content (classifyMessages says
// Commit) carries text.
func isTextContent(typ []byte, v *fastjson.Value) bool {
	switch string(typ) {
	case "content_block_start":
		return string(v.GetStringBytes("content_block", "type")) == "text"
	case "content_block_delta":
		return string(v.GetStringBytes("delta", "type")) == "text_delta"
	}
	return false
}

// emitTextDelta appends a text_delta event carrying lit (a JSON string literal) for the
// client's open text block: the text a continuation's dropped content_block_start carried.
func (t *Transcript) emitTextDelta(dst, lit []byte) []byte {
	lit = t.dropSeam(lit)
	data := append(t.data[:0], `{"type":"content_block_delta","index":`...)
	data = strconv.AppendInt(data, int64(t.lastText), 10)
	data = append(data, `,"delta":{"type":"text_delta","text":`...)
	data = append(data, lit...)
	data = append(data, "}}"...)
	t.data = data
	t.note(nameContentBlockDelta, data, len(data))
	return appendEvent(dst, nameContentBlockDelta, data)
}

var nameContentBlockDelta = []byte("content_block_delta")

// edit replaces data[from:to] with with.
type edit struct {
	from, to int
	with     []byte
}

// emit applies edits (in order of position, not overlapping) to data, records the result as
// delivered and appends it as an event.
func (t *Transcript) emit(dst, name, data []byte, edits []edit) []byte {
	if len(edits) == 2 && edits[1].from < edits[0].from {
		edits[0], edits[1] = edits[1], edits[0]
	}
	out := t.data[:0]
	at := 0
	for _, e := range edits {
		out = append(out, data[at:e.from]...)
		out = append(out, e.with...)
		at = e.to
	}
	out = append(out, data[at:]...)
	t.data = out
	t.note(name, out, len(out))
	return appendEvent(dst, name, out)
}

// appendEvent appends an SSE event: its name, its data one line per `data:` field, a blank line.
func appendEvent(dst, name, data []byte) []byte {
	if name != nil {
		dst = append(dst, "event: "...)
		dst = append(dst, name...)
		dst = append(dst, '\n')
	}
	for {
		line, rest, more := bytes.Cut(data, newline)
		dst = append(dst, "data: "...)
		dst = append(dst, line...)
		dst = append(dst, '\n')
		if !more {
			break
		}
		data = rest
	}
	return append(dst, '\n')
}

// seaming reports whether the start of the continuation's text still has runes to lose to the
// seam.
func (t *Transcript) seaming() bool { return len(t.seam) > 0 || t.drop > 0 }

// dropSeam returns lit, a JSON string literal of the continuation's text, without the runes at
// its start that go on with the seam: first those of a repeat (drop), then those that match the
// whitespace Prefill left out, which the client has, and takes them off the seam. The seam is
// done at the first rune that does not match; when lit ends first, the next text goes on with
// what is left of it.
func (t *Transcript) dropSeam(lit []byte) []byte {
	if len(lit) < 2 || lit[0] != '"' {
		t.seam, t.drop = nil, 0
		return lit
	}
	i := 1
	for t.drop > 0 && i < len(lit)-1 {
		_, n := jsonRune(lit, i)
		i += n
		t.drop--
	}
	for t.drop == 0 && len(t.seam) > 0 && i < len(lit)-1 {
		r, n := jsonRune(lit, i)
		s, sn := utf8.DecodeRune(t.seam)
		if r != s {
			t.seam = nil
			break
		}
		i += n
		t.seam = t.seam[sn:]
		if t.seamOut.Kind == SeamNone {
			t.seamOut.Kind = SeamSpace
		}
		t.seamOut.Bytes += sn
	}
	if i == 1 {
		return lit
	}
	out := make([]byte, 0, len(lit)-i+1)
	out = append(out, '"')
	return append(out, lit[i:]...)
}

// jsonRune decodes the rune of a JSON string literal at lit[i] (raw UTF-8 or an escape) and
// returns it with its length in lit. A surrogate pair is one rune; anything malformed is
// U+FFFD, which matches no whitespace.
func jsonRune(lit []byte, i int) (rune, int) {
	if lit[i] != '\\' {
		return utf8.DecodeRune(lit[i:])
	}
	if i+1 >= len(lit) {
		return utf8.RuneError, 1
	}
	switch lit[i+1] {
	case 'n':
		return '\n', 2
	case 't':
		return '\t', 2
	case 'r':
		return '\r', 2
	case 'b':
		return '\b', 2
	case 'f':
		return '\f', 2
	case 'u':
		r, ok := hex4(lit, i+2)
		if !ok {
			return utf8.RuneError, 2
		}
		if utf16.IsSurrogate(r) {
			if r2, ok := hex4(lit, i+8); ok && i+7 < len(lit) && lit[i+6] == '\\' && lit[i+7] == 'u' {
				if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
					return d, 12
				}
			}
			return utf8.RuneError, 6
		}
		return r, 6
	}
	return rune(lit[i+1]), 2 // '"', '\\', '/'
}

// hex4 reads four hex digits at b[i:].
func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// memberSpan returns where the value of the top-level member name of the JSON object in data
// starts and ends, or -1, -1.
func memberSpan(data []byte, name string) (vs, ve int) {
	return objectMember(data, jsonscan.SkipSpace(data, 0), name)
}

// pathSpan is memberSpan down a path of object members; "" takes an array's first element.
func pathSpan(data []byte, path ...string) (vs, ve int) {
	vs, ve = jsonscan.SkipSpace(data, 0), len(data)
	for _, name := range path {
		if vs >= len(data) {
			return -1, -1
		}
		switch {
		case name == "" && data[vs] == '[':
			var c jsonscan.Cursor
			if !c.OpenArray(data, vs) || !c.Next() {
				return -1, -1
			}
			vs = c.Start()
			if v := c.Value(); v != nil {
				ve = vs + len(v)
			} else {
				ve = -1
			}
		case name != "" && data[vs] == '{':
			vs, ve = objectMember(data, vs, name)
		default:
			return -1, -1
		}
		if vs < 0 || ve <= vs {
			return -1, -1
		}
	}
	return vs, ve
}

// objectMember returns the span of the value of member name in the object that starts at
// data[i], or -1, -1.
func objectMember(data []byte, i int, name string) (vs, ve int) {
	var c jsonscan.Cursor
	for ok := c.OpenObject(data, i); ok && c.Next(); {
		if string(c.Key()) != name {
			continue
		}
		vs = c.Start()
		v := c.Value()
		if v == nil {
			return -1, -1
		}
		return vs, vs + len(v)
	}
	return -1, -1
}
