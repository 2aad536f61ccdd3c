package stream

import (
	"bytes"
	"unicode"

	"github.com/valyala/fastjson"
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
