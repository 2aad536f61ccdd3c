package stream

import (
	"bytes"
	"strconv"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/valyala/fastjson"

	"github.com/llm-failover/failover/stream/jsonscan"
)

// MaxTranscriptText bounds the text a Transcript keeps: a stream that delivered more is not
// resumable (the prefill would be a second prompt of that size, billed again).
const MaxTranscriptText = 1 << 20

// maxTranscriptEvent bounds the data of one event a Transcript reads: a larger one cannot be
// parsed, and makes the stream not resumable (chat and messages events are a few hundred bytes).
const maxTranscriptEvent = 1 << 20

// Transcript is what a committed chat or messages stream has delivered to the client, kept so
// that the stream can be continued on another target when it is cut (docs/streams.md, Resume a cut
// stream): the text (JSON-decoded), the chunks' id (chat), the content blocks (messages), and
// whether the stream may still be resumed: only while it has shown nothing but text and has
// not finished.
//
// It reads whole events, the bytes the proxy forwards: Feed for the stream that committed,
// then, after Splice, Rewrite for a continuation, whose events it turns into events of the
// stream the client has (the same id, the block indexes the client expects, the opening events
// dropped, the whitespace at the seam taken off) and records as delivered in turn. Error
// events are never recorded: both return where the first one begins, so the caller can hold it
// back. It never touches a socket or a clock.
//
// Call Reset before first use; a Transcript is reused with Reset, which keeps its buffers.
// Slices it returns are valid until its next call. Not safe for concurrent use.
type Transcript struct {
	family Family
	fr     Framer
	parser fastjson.Parser

	text     []byte // the text the client got, JSON-decoded
	id       []byte // chat: the raw JSON literal of the chunks' id, quotes included
	eligible bool   // nothing but text so far (and the family can be resumed at all)
	finished bool   // the stream's end was delivered (finish_reason, stop_reason, [DONE], message_stop)

	// messages: the content blocks the client has seen.
	blocks   int  // blocks started
	lastText int  // index of the last text block, -1 before one
	open     bool // the last text block has not stopped

	// A continuation (Splice, Rewrite).
	spliced   bool
	offset    int  // messages: a continuation block's index plus offset is the client's index
	dropStart bool // messages: the continuation's first text block goes on in the client's open one
	started   bool // the continuation has shown content
	textFirst bool // its first content was text
	seam      []byte
	seamBuf   []byte
	data      []byte   // a rewritten event's data
	num       [20]byte // a block index being written

	// The seam of a continuation asked by instruction (Splice): its first events are held back
	// whole (held, their text in lead) until its text shows whether it starts with a repeat of
	// the delivered text's end (repeatAt), which is then dropped: drop runes before the
	// whitespace of seam. cut is the end of the delivered text the continuation goes on from.
	instructed bool
	holding    bool
	settled    bool
	cut        int
	held       []byte
	lead       []byte
	drop       int
	seamOut    Seam // what the seam took off
	replay     Framer
}

// Reset readies t for a committed stream of family f; only Chat and Messages can be resumable.
func (t *Transcript) Reset(f Family) {
	t.family = f
	t.fr.Reset(maxTranscriptEvent)
	t.text, t.id = t.text[:0], t.id[:0]
	t.eligible, t.finished = f == Chat || f == Messages, false
	t.blocks, t.lastText, t.open = 0, -1, false
	t.spliced, t.offset, t.dropStart, t.started, t.textFirst = false, 0, false, false, false
	t.seam = nil
	t.instructed, t.holding, t.settled, t.cut, t.drop, t.seamOut = false, false, false, 0, 0, Seam{}
	t.held, t.lead = t.held[:0], t.lead[:0]
}

// Shed lets go of buffers grown past limit bytes (a long answer's text, a large event).
func (t *Transcript) Shed(limit int) {
	if cap(t.text) > limit {
		t.text = nil
	}
	if cap(t.data) > limit {
		t.data = nil
	}
	if cap(t.fr.data) > limit {
		t.fr.data = nil
	}
	if cap(t.held) > limit {
		t.held, t.lead = nil, nil
	}
}

// Feed reads p, whole events the client is about to get, and records what they deliver. It
// returns how many bytes of p, from its start, may go to the client: all of p, or the bytes
// before the first error event, which it returns too (the stream failed: what follows it is
// not read).
func (t *Transcript) Feed(p []byte) (n int, errEvent []byte) {
	_, n, errEvent = t.read(nil, p, false)
	return n, errEvent
}

// Resumable reports whether the stream may be continued now: it delivered text, and nothing
// but text (no tool or function call, audio, refusal, reasoning or thinking, no other block),
// a chat stream showed its id, and it has not delivered its end. What the request asked for
// (n > 1, logprobs) is the caller's to check.
func (t *Transcript) Resumable() bool {
	return t.eligible && !t.finished && len(t.Prefill()) > 0 && (t.family != Chat || len(t.id) > 0)
}

// Eligible reports whether the stream may still become resumable: it has shown nothing but
// text (if anything) and not its end. Once it is not, nothing it delivers changes that.
func (t *Transcript) Eligible() bool { return t.eligible && !t.finished }

// Text returns the text delivered so far, JSON-decoded.
func (t *Transcript) Text() []byte { return t.text }

// Prefill returns the text a continuation is asked to go on from: the delivered text without
// its trailing whitespace, which Anthropic refuses at the end of a final assistant message.
// The whitespace is not lost: a continuation that starts with it has it taken off (Rewrite),
// so the client's text is the delivered text followed by the rest of the continuation.
func (t *Transcript) Prefill() []byte { return bytes.TrimRightFunc(t.text, unicode.IsSpace) }

// Splice readies t for a continuation's events: the next Rewrite reads a new stream (from
// its first byte), and the seam is the whitespace Prefill left out. instructed: the
// continuation was asked by instruction, and the start of its text is held back until it shows
// whether it repeats the end of the delivered text, which is then dropped (docs/streams.md, Resume a cut
// stream, The seam); a continuation of a prefill goes on from the delivered text itself, and
// only the whitespace is handled.
func (t *Transcript) Splice(instructed bool) {
	t.fr.Reset(maxTranscriptEvent)
	t.spliced, t.started, t.textFirst = true, false, false
	t.cut = len(t.Prefill())
	t.seamBuf = append(t.seamBuf[:0], t.text[t.cut:]...)
	t.seam = t.seamBuf
	t.offset, t.dropStart = t.blocks, false
	if t.open {
		t.offset, t.dropStart = t.lastText, true
	}
	t.instructed, t.holding, t.settled, t.drop, t.seamOut = instructed, instructed, false, 0, Seam{}
	t.held, t.lead = t.held[:0], t.lead[:0]
}

// Continues reports whether the continuation's first content was text: the only kind of
// continuation that may reach the client (a continuation whose first content is a tool call,
// reasoning, or an end without text, is a failed one). Text held back for the seam counts.
func (t *Transcript) Continues() bool {
	return t.spliced && (t.textFirst || t.holding && len(t.lead) > 0)
}

// Seam returns what the continuation's seam took off its text so far (none while it is held
// back): for the request record.
func (t *Transcript) Seam() Seam { return t.seamOut }

// Rewrite appends to dst the continuation's whole events in p as the client must get them,
// and records them as delivered (Feed). Chat: opening chunks (before any content) are
// dropped, and every chunk's top-level id becomes the client's. Messages: message_start and
// pings before content are dropped, the first text block's content_block_start too when it
// goes on in the client's open block, and block indexes are moved to the client's. In both,
// the seam's whitespace is taken off the start of the continuation's text. Everything else in
// an event's data stays byte for byte; events are written with LF line ends.
//
// A continuation asked by instruction (Splice) has its first events held back, and read, until
// its text shows whether it starts with a repeat of the end of the delivered text (the
// longest, of at least 3 words or 16 bytes, or the whole delivered text; or the unfinished last
// word written again whole), which is then dropped with the whitespace around it. Any event but
// text or an opening one (a finish, a tool call, an error event, the end of a block) lets them
// go first. Held events are not yet delivered: a stream cut while they are held goes on from
// the text before them.
//
// It returns the bytes of p read: all of p; or up to the first error event, which it returns
// too; or, with errEvent nil, up to an event too large to read, which cannot be spliced.
func (t *Transcript) Rewrite(dst, p []byte) (out []byte, n int, errEvent []byte) {
	return t.read(dst, p, true)
}

// read frames the whole events in p and records each (Feed), or rewrites and appends it to dst
// (Rewrite), up to the first error event.
func (t *Transcript) read(dst, p []byte, rewrite bool) (out []byte, n int, errEvent []byte) {
	start := 0
	for off := 0; off < len(p); {
		k, ok := t.fr.Next(p[off:])
		off += k
		if !ok {
			break
		}
		ev := t.fr.Event()
		end := skipLineEnds(p, off)
		if isErrorEvent(t.family, ev, tailType(t.family, ev)) {
			return t.release(dst), start, p[start:end]
		}
		switch {
		case !rewrite:
			t.note(ev.Name, ev.Data, ev.DataLen)
		case ev.DataLen > len(ev.Data):
			t.eligible = false
			return t.release(dst), start, nil
		case t.holding && t.hold(ev):
			if t.settle(false) {
				dst = t.release(dst)
			}
		default:
			dst = t.rewrite(t.release(dst), ev)
		}
		start = end
	}
	return dst, len(p), nil
}

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

// note records one event the client gets.
func (t *Transcript) note(name, data []byte, dataLen int) {
	if dataLen > len(data) {
		t.eligible = false // too large to read: what it carries is unknown
		return
	}
	if ev := (Event{Name: name, Data: data, DataLen: dataLen, HasData: data != nil}); isTerminal(t.family, ev, tailType(t.family, ev)) {
		t.finished = true
	}
	data = trimSpace(data)
	if len(data) == 0 || !t.eligible || bytes.Equal(data, done) {
		return
	}
	v, err := t.parser.ParseBytes(data)
	if err != nil || v.Type() != fastjson.TypeObject {
		t.eligible = false // not a chunk or an event the transcript knows
		return
	}
	if t.family == Chat {
		t.noteChat(v, data)
	} else {
		t.noteMessages(v, name)
	}
}

// noteChat records a chat.completion.chunk.
func (t *Transcript) noteChat(v *fastjson.Value, data []byte) {
	if len(t.id) == 0 {
		// Not an empty one: Azure's first chunk, its prompt filter results, has "id":"".
		if vs, ve := memberSpan(data, "id"); vs >= 0 && data[vs] == '"' && ve-vs > 2 {
			t.id = append(t.id[:0], data[vs:ve]...)
		}
	}
	choices := v.Get("choices")
	if choices == nil {
		return
	}
	arr, err := choices.Array()
	if err != nil {
		t.eligible = false
		return
	}
	for _, c := range arr {
		if c.Type() != fastjson.TypeObject || c.GetInt("index") != 0 || !isEmpty(c.Get("logprobs")) {
			t.eligible = false // a second choice (n > 1), or logprobs the continuation would lack
			return
		}
		if !isEmpty(c.Get("finish_reason")) {
			t.finished = true
		}
		d := c.Get("delta")
		if d == nil {
			continue
		}
		o, err := d.Object()
		if err != nil {
			t.eligible = false
			return
		}
		o.Visit(func(k []byte, fv *fastjson.Value) {
			switch {
			case string(k) == "content":
				switch fv.Type() {
				case fastjson.TypeString:
					t.addText(fv.GetStringBytes())
				case fastjson.TypeNull:
				default:
					t.eligible = false // content parts: not plain text
				}
			case isChatContentField(k) && !isEmpty(fv):
				t.eligible = false // a tool or function call, audio, a refusal, reasoning
			}
		})
	}
}

// noteMessages records an Anthropic Messages event.
func (t *Transcript) noteMessages(v *fastjson.Value, name []byte) {
	typ := v.GetStringBytes("type")
	if typ == nil {
		typ = name
	}
	index := v.GetInt("index")
	switch string(typ) {
	case "content_block_start":
		t.blocks = max(t.blocks, index+1)
		b := v.Get("content_block")
		if string(b.GetStringBytes("type")) != "text" {
			t.eligible = false // tool_use, thinking, and any other block
			return
		}
		t.lastText, t.open = index, true
		t.addText(b.GetStringBytes("text"))
	case "content_block_delta":
		d := v.Get("delta")
		if string(d.GetStringBytes("type")) != "text_delta" || index != t.lastText || !t.open {
			t.eligible = false // thinking, signature, input JSON, citations
			return
		}
		t.addText(d.GetStringBytes("text"))
	case "content_block_stop":
		if index == t.lastText {
			t.open = false
		}
	case "message_delta":
		if !isEmpty(v.Get("delta", "stop_reason")) {
			t.finished = true
		}
	}
}

// addText appends delivered text, up to MaxTranscriptText.
func (t *Transcript) addText(s []byte) {
	if len(t.text)+len(s) > MaxTranscriptText {
		t.eligible = false
		return
	}
	t.text = append(t.text, s...)
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
