package stream

import (
	"bytes"

	"github.com/valyala/fastjson"

	"github.com/llm-failover/failover/stream/jsonscan"
)

// A chat event is classified before commit (docs/streams.md, Streams: the pre-commit peek, the
// chat row) in one of two ways that give the same answer: classifyChat reads the event's data
// parsed by fastjson (the slow path), and scanChat walks the data in place and answers alone
// whenever it can be sure of the parse's answer (the fast path, which allocates nothing).
// classify tries scanChat first; chat_test.go checks the two agree.

// classifyChat classifies a chat.completion.chunk; name is its `event:` name.
func classifyChat(v *fastjson.Value, name []byte) Decision {
	o, err := v.Object()
	if err != nil {
		return Commit // a JSON value that is not a chunk
	}
	var choices, errv *fastjson.Value
	o.Visit(func(k []byte, mv *fastjson.Value) {
		switch string(k) {
		case "choices":
			if choices == nil {
				choices = mv
			}
		case "error":
			if errv == nil {
				errv = mv
			}
		}
	})
	if (errv != nil && errv.Type() != fastjson.TypeNull) || bytes.Equal(name, nameError) {
		return Error
	}
	if choices == nil || choices.Type() != fastjson.TypeArray {
		return Commit // not a chunk we know: let it through
	}
	arr, _ := choices.Array()
	for _, c := range arr {
		co, err := c.Object()
		if err != nil {
			continue
		}
		content := false
		co.Visit(func(k []byte, cv *fastjson.Value) {
			switch string(k) {
			case "finish_reason":
				content = content || !isEmpty(cv)
			case "delta", "message":
				content = content || deltaHasContent(cv)
			}
		})
		if content {
			return Commit
		}
	}
	return Hold
}

func deltaHasContent(d *fastjson.Value) bool {
	o, err := d.Object()
	if err != nil {
		return false
	}
	content := false
	o.Visit(func(k []byte, fv *fastjson.Value) {
		if !content && isChatContentField(k) && !isEmpty(fv) {
			content = true
		}
	})
	return content
}

// isChatContentField reports the delta (or message) fields of a chat chunk
// that carry business content when non-empty. Other fields (role, provider
// metadata such as token ids) never commit.
func isChatContentField(k []byte) bool {
	switch string(k) {
	case "content", "reasoning_content", "reasoning", "refusal", "tool_calls",
		"function_call", "audio", "images", "reasoning_details":
		return true
	}
	return false
}

// scanChat classifies a chat event before commit as classifyChat does after a fastjson parse,
// without parsing: one walk of the data in place, which allocates nothing and costs less than
// the parse (BenchmarkClassifyChat measures both). A chat stream has two events to classify on
// nearly every request, the role chunk (Hold) and the first content chunk (Commit), and the
// walk decides both. data is the event's data, trimmed (trimSpace) and not empty; name is its
// `event:` name.
//
// sure is false when the walk cannot be certain that its answer is the parse's; classify then
// parses the data, so the decision never depends on which path took it. The answer is the
// same because:
//
//   - an `event: error` whose data starts with '{' is an error, and other data that does not
//     start with '{' is content, however the parse goes: classifyText and classifyChat agree
//     on both (an `event: error` with a JSON value that is not an object is content, and one
//     with data that is not JSON an error: only the parse can tell those apart);
//   - otherwise the walk takes the data only when it is one valid JSON object, to its last
//     byte, by RFC 8259 (jsonscan's rules, stricter than fastjson's: what jsonscan takes,
//     fastjson parses to the same members, in the same order, a key without a backslash
//     kept as sent), nesting far less deep than fastjson's limit (chatScanDepth);
//   - it reads the members classifyChat reads (the first "choices" and the first "error" at
//     the top, every "finish_reason", "delta" and "message" of every choice, every content
//     field of a delta), judges their values as isEmpty does, and skips the rest;
//   - a key at those levels spelt with a backslash (fastjson unescapes keys: "ch\u006fices" is
//     "choices" to it) makes it unsure, and so does anything it does not take: a control
//     character in a string, a number or escape outside RFC 8259, deeper nesting, bytes after
//     the object.
//
// FuzzScanChat checks the two answers against each other on any input, and
// TestScanChatDecidesFixtures that the walk alone decides every event of the chat fixtures.
func scanChat(data, name []byte) (d Decision, sure bool) {
	named := bytes.Equal(name, nameError)
	switch {
	case data[0] != '{' && named:
		return Hold, false // an error when not JSON, content when JSON that is not a chunk
	case data[0] != '{':
		return Commit, true // either way
	case named:
		return Error, true // whether the object parses or not
	}
	// A key spelt with escapes makes the walk unsure; most chunks have no backslash at all.
	escapes := bytes.IndexByte(data, '\\') >= 0
	var top jsonscan.Cursor
	top.OpenObject(data, 0)
	var sawChoices, sawError, isArray, failed, content bool
	for top.Next() {
		key, i := top.Key(), top.Start()
		var end int
		switch {
		case escapes && bytes.IndexByte(key, '\\') >= 0:
			return Hold, false
		case !sawChoices && string(key) == "choices":
			sawChoices, isArray = true, data[i] == '['
			if isArray {
				end, content = scanChoices(data, i, escapes)
			} else {
				end = skipShallow(data, i)
			}
		case !sawError && string(key) == "error":
			sawError, failed = true, data[i] != 'n' // a valid value starting with n is null
			end = skipShallow(data, i)
		default:
			end = skipShallow(data, i)
		}
		if end < 0 {
			return Hold, false
		}
		top.Skipped(end)
	}
	switch {
	case top.End() != len(data):
		return Hold, false
	case failed:
		return Error, true
	case !isArray || content:
		return Commit, true
	}
	return Hold, true
}

// chatScanDepth is how deep the values scanChat skips may nest: they sit at most four levels
// down (object, choices, choice, delta), so nothing it takes nests past 4+chatScanDepth, far
// inside fastjson's limit (300), and the skip's stack of open containers stays one word.
const chatScanDepth = 32

// skipShallow skips the value at b[i], or returns -1 when it is not valid or nests deeper
// than chatScanDepth.
func skipShallow(b []byte, i int) int { return jsonscan.SkipValueDepth(b, i, chatScanDepth) }

// scanChoices walks the choices array at b[i] and returns where it ends (-1 when unsure) and
// whether a choice carries content, as classifyChat judges them: choices that are not
// objects are skipped. escapes tells that b holds a backslash (a key may be spelt with one).
func scanChoices(b []byte, i int, escapes bool) (end int, content bool) {
	var arr jsonscan.Cursor
	for ok := arr.OpenArray(b, i); ok && arr.Next(); {
		j := arr.Start()
		var e int
		if b[j] == '{' {
			var c bool
			e, c = scanMembers(b, j, escapes, isChoiceField)
			content = content || c
		} else {
			e = skipShallow(b, j)
		}
		if e < 0 {
			return -1, false
		}
		arr.Skipped(e)
	}
	return arr.End(), content
}

// scanMembers walks the object at b[i] (a choice, or a delta) and returns where it ends (-1
// when unsure) and whether a member says it carries content: field(key) tells what a member
// is worth. Every member counts, duplicates too, as Visit shows them all.
func scanMembers(b []byte, i int, escapes bool, field func(key []byte) chatField) (end int, content bool) {
	var obj jsonscan.Cursor
	for ok := obj.OpenObject(b, i); ok && obj.Next(); {
		key, j := obj.Key(), obj.Start()
		if escapes && bytes.IndexByte(key, '\\') >= 0 {
			return -1, false
		}
		var e int
		switch field(key) {
		case fieldContent:
			e = skipShallow(b, j)
			content = content || e >= 0 && !emptyValue(b, j, e)
		case fieldDelta:
			if b[j] == '{' {
				var c bool
				e, c = scanMembers(b, j, escapes, isDeltaField)
				content = content || c
			} else {
				e = skipShallow(b, j) // deltaHasContent: not an object, no content
			}
		default:
			e = skipShallow(b, j)
		}
		if e < 0 {
			return -1, false
		}
		obj.Skipped(e)
	}
	return obj.End(), content
}

// chatField is what a member of a choice or a delta is worth to classifyChat.
type chatField uint8

const (
	fieldOther   chatField = iota // says nothing
	fieldContent                  // content when its value is not empty (isEmpty)
	fieldDelta                    // content when it is an object with a content field
)

// isChoiceField: a choice's finish_reason, and its delta (message in a whole completion).
func isChoiceField(key []byte) chatField {
	switch string(key) {
	case "finish_reason":
		return fieldContent
	case "delta", "message":
		return fieldDelta
	}
	return fieldOther
}

// isDeltaField: a delta's content fields (isChatContentField).
func isDeltaField(key []byte) chatField {
	if isChatContentField(key) {
		return fieldContent
	}
	return fieldOther
}

// emptyValue is isEmpty for the valid JSON value b[i:end]: null, false, "", [] or {}, with any
// spaces inside the brackets. (A string whose literal is not empty never decodes to nothing.)
func emptyValue(b []byte, i, end int) bool {
	switch b[i] {
	case 'n', 'f':
		return true
	case '"':
		return end == i+2
	case '[', '{':
		return jsonscan.SkipSpace(b, i+1) == end-1
	}
	return false
}
