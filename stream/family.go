package stream

import (
	"bytes"

	"github.com/valyala/fastjson"

	"github.com/llm-failover/failover/stream/jsonscan"
)

// Family is the API family of a request, from its path. It decides which
// events are opening, business content, errors and terminal.
type Family uint8

const (
	Chat      Family = iota // /v1/chat/completions
	Responses               // /v1/responses
	Messages                // /v1/messages (Anthropic)
	Image                   // /v1/images/...
	Other                   // anything else

	NumFamilies // number of families, for tables indexed by Family
)

var familyNames = [NumFamilies]string{Chat: "chat", Responses: "responses", Messages: "messages", Image: "image", Other: "other"}

// String returns the family's name as used in logs and metric labels.
func (f Family) String() string {
	if int(f) < len(familyNames) {
		return familyNames[f]
	}
	return "unknown"
}

// classify tells what one complete pre-commit event means for g's family:
// Hold (opening), Commit (business content), Error or Empty ([DONE]).
func (g *Gate) classify(ev Event) Decision {
	data := trimSpace(ev.Data)
	if len(data) == 0 {
		// Comment-only records, bare `event:` records and empty data carry
		// nothing: only the event name can still say something.
		return g.classifyName(ev.Name)
	}
	if bytes.Equal(data, done) {
		return Empty
	}
	if g.family == Chat && !slowPaths {
		// Nearly every chat event is decided by a walk in place, without a parse (chat.go).
		if d, sure := scanChat(data, ev.Name); sure {
			return d
		}
	}
	if g.family == Responses || g.family == Messages {
		// The type decides most events alone: response.created and
		// response.in_progress echo the whole request (instructions, tools),
		// so they are not parsed when "type" comes first, as providers send it.
		if typ := leadingType(data); typ != nil && !needsPayload(g.family, typ) {
			return classifyTyped(g.family, typ, nil)
		}
	}
	p := parsers.Get()
	d := g.classifyJSON(p, data, ev.Name)
	parsers.Put(p)
	return d
}

// parsers lend the JSON parser an event is classified with, for that one event: a parser
// keeps a cache of values (a few KiB) that a Gate holding a long committed stream, which
// parses nothing more, should not keep.
var parsers fastjson.ParserPool

// classifyJSON classifies an event's data with parser p; what p parsed is not used after it
// returns.
func (g *Gate) classifyJSON(p *fastjson.Parser, data, name []byte) Decision {
	v, err := p.ParseBytes(data)
	if err != nil {
		return g.classifyText(name)
	}
	switch g.family {
	case Chat:
		return classifyChat(v, name)
	case Responses, Messages:
		if typ := v.GetStringBytes("type"); typ != nil {
			return classifyTyped(g.family, typ, v)
		}
		if isErrorObject(v) {
			return Error
		}
		if len(name) == 0 && g.family == Responses {
			return Commit // an unknown event type
		}
		return classifyTyped(g.family, name, v)
	default:
		if isErrorObject(v) || bytes.Equal(name, nameError) {
			return Error
		}
		return Commit
	}
}

func classifyTyped(f Family, typ []byte, v *fastjson.Value) Decision {
	if f == Responses {
		return classifyResponses(typ, v)
	}
	return classifyMessages(typ, v)
}

var (
	done      = []byte("[DONE]")
	nameError = []byte("error")
)

// classifyName classifies an event without data by its `event:` name alone.
func (g *Gate) classifyName(name []byte) Decision {
	switch g.family {
	case Responses, Messages:
		if len(name) == 0 {
			return Hold
		}
		return classifyTyped(g.family, name, nil)
	default:
		if bytes.Equal(name, nameError) {
			return Error
		}
		return Hold
	}
}

// classifyText classifies an event whose data is not JSON: an error when its
// name says so; otherwise content, except for messages, where unknown events
// are opening and only the name can say more.
func (g *Gate) classifyText(name []byte) Decision {
	switch g.family {
	case Responses:
		if isResponsesError(name) {
			return Error
		}
		return Commit
	case Messages:
		return classifyMessages(name, nil)
	default:
		if bytes.Equal(name, nameError) {
			return Error
		}
		return Commit
	}
}

// isErrorObject reports a JSON object with a non-null top-level "error".
// A nested error (response.created's "response":{"error":null}, or
// response.failed's response.error) is not top-level.
func isErrorObject(v *fastjson.Value) bool {
	e := v.Get("error")
	return e != nil && e.Type() != fastjson.TypeNull
}

func isResponsesError(typ []byte) bool {
	switch string(typ) {
	case "error", "response.error", "response.failed":
		return true
	}
	return false
}

// classifyResponses classifies an OpenAI Responses event by type; v is its
// data, nil when there was none.
func classifyResponses(typ []byte, v *fastjson.Value) Decision {
	if isResponsesError(typ) {
		return Error
	}
	switch string(typ) {
	case "response.created", "response.in_progress", "response.queued":
		return Hold
	case "response.completed", "response.incomplete":
		return Commit
	case "response.output_item.added", "response.output_item.done":
		item := v.Get("item")
		if item == nil {
			return Hold
		}
		switch string(item.GetStringBytes("type")) {
		case "message":
			if partsEmpty(item.Get("content")) {
				return Hold
			}
		case "reasoning":
			if partsEmpty(item.Get("summary")) && partsEmpty(item.Get("content")) {
				return Hold
			}
		}
		// Tool and function calls (function_call, custom_tool_call,
		// web_search_call, ...) are output the client acts on.
		return Commit
	case "response.content_part.added", "response.content_part.done",
		"response.reasoning_summary_part.added", "response.reasoning_summary_part.done":
		if partEmpty(v.Get("part")) {
			return Hold
		}
		return Commit
	}
	if bytes.HasSuffix(typ, deltaSuffix) {
		if isEmpty(v.Get("delta")) {
			return Hold
		}
		return Commit
	}
	return Commit // unknown event types
}

var deltaSuffix = []byte(".delta")

// needsPayload reports the event types whose classification reads more of
// the data than its type.
func needsPayload(f Family, typ []byte) bool {
	if f == Responses {
		switch string(typ) {
		case "response.output_item.added", "response.output_item.done",
			"response.content_part.added", "response.content_part.done",
			"response.reasoning_summary_part.added", "response.reasoning_summary_part.done":
			return true
		}
		return bytes.HasSuffix(typ, deltaSuffix)
	}
	switch string(typ) {
	case "message_start", "content_block_start", "content_block_delta", "message_delta":
		return true
	}
	return false
}

// leadingType returns the value of a "type" member that opens the JSON
// object in b, when it is a plain string (no escapes); nil otherwise.
func leadingType(b []byte) []byte {
	var c jsonscan.Cursor
	if !c.OpenObject(b, 0) || !c.Next() || string(c.Key()) != "type" {
		return nil
	}
	v := c.Value()
	if len(v) == 0 || v[0] != '"' || bytes.IndexByte(v, '\\') >= 0 {
		return nil
	}
	return v[1 : len(v)-1]
}

// classifyMessages classifies an Anthropic Messages event by type; v is its
// data, nil when there was none or it was not JSON.
func classifyMessages(typ []byte, v *fastjson.Value) Decision {
	switch string(typ) {
	case "error":
		return Error
	case "message_start":
		if partsEmpty(v.Get("message", "content")) {
			return Hold
		}
		return Commit
	case "content_block_start":
		b := v.Get("content_block")
		if b == nil {
			return Hold
		}
		switch string(b.GetStringBytes("type")) {
		case "text":
			if isEmpty(b.Get("text")) {
				return Hold
			}
		case "thinking":
			if isEmpty(b.Get("thinking")) {
				return Hold
			}
		}
		// tool_use, server_tool_use and every other block type.
		return Commit
	case "content_block_delta":
		if partEmpty(v.Get("delta")) {
			return Hold
		}
		return Commit
	case "message_delta":
		if isEmpty(v.Get("delta", "stop_reason")) {
			return Hold
		}
		return Commit
	case "message_stop":
		return Commit
	}
	return Hold // content_block_stop, ping and unknown event types
}

// isEmpty reports a value that carries nothing: missing, null, false, "", []
// or {}.
func isEmpty(v *fastjson.Value) bool {
	if v == nil {
		return true
	}
	switch v.Type() {
	case fastjson.TypeNull, fastjson.TypeFalse:
		return true
	case fastjson.TypeString:
		return len(v.GetStringBytes()) == 0
	case fastjson.TypeArray:
		a, _ := v.Array()
		return len(a) == 0
	case fastjson.TypeObject:
		o, _ := v.Object()
		return o.Len() == 0
	}
	return false
}

// partEmpty reports a content part (or delta) whose every field other than
// "type" is empty: {"type":"output_text","text":"","annotations":[]}.
func partEmpty(v *fastjson.Value) bool {
	if v == nil || v.Type() != fastjson.TypeObject {
		return isEmpty(v)
	}
	o, _ := v.Object()
	empty := true
	o.Visit(func(k []byte, fv *fastjson.Value) {
		if empty && string(k) != "type" && !isEmpty(fv) {
			empty = false
		}
	})
	return empty
}

// partsEmpty reports a content (or summary) list whose parts are all empty.
func partsEmpty(v *fastjson.Value) bool {
	if v == nil || v.Type() != fastjson.TypeArray {
		return isEmpty(v)
	}
	a, _ := v.Array()
	for _, p := range a {
		if !partEmpty(p) {
			return false
		}
	}
	return true
}

// trimSpace trims the JSON whitespace around b without allocating.
func trimSpace(b []byte) []byte {
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
