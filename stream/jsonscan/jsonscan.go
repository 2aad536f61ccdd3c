// Package jsonscan reads JSON text in place, for the few fields the sidecar looks at in bodies
// it otherwise passes on untouched: a request's "model" and "stream", an SSE event's "type",
// "error" and "choices", the shape of an in-stream error. A Cursor walks an object's members
// or an array's values one at a time; values are skipped without being decoded, and a string
// is decoded only when asked (AppendString, StringIs). Nothing allocates, nothing recurses:
// open containers are kept as one bit each, so hostile nesting cannot exhaust the stack.
//
// One strictness everywhere: RFC 8259 as encoding/json reads it. Whitespace is space, tab, LF
// and CR; a string holds no raw control character (below U+0020) and only the escapes \" \\
// \/ \b \f \n \r \t and \uXXXX (bytes from 0x80 up are taken as they are, valid UTF-8 or not,
// as encoding/json's validator takes them); numbers have no leading zero, no '+', no bare '.';
// literals are true, false and null; containers nest at most MaxDepth deep. A walk stops at
// the first byte that breaks these rules.
//
// The text may also be a prefix, cut anywhere (an SSE event's data past a capture limit): a
// walk then stops where the text ends, after reporting every member that began before it.
// A value that reaches the end of the text is whole when its last byte says so (a string's
// closing quote, a bracket, a literal's last letter); a number never says so, so a number
// that runs to the end of the text counts as cut.
//
// One reader is not strict, by design: ObjectEnd follows a text fed in pieces that are not
// kept (an event's data past the capture) only as far as its brackets and strings, to tell an
// object that ended from one cut short. It sits in this file beside SkipValue, whose reading of
// brackets and strings it repeats, and objectend_test.go checks that it agrees with SkipValue
// on every object SkipValue takes and on every cut of one.
//
// It writes one thing: a string as a JSON string (AppendQuote), for the log's strings and the
// sidecar's own error bodies, crossing plain bytes eight at a time as SkipString does.
//
// Files: jsonscan.go, the rules (SkipSpace, SkipString, SkipValue) and ObjectEnd; cursor.go,
// the Cursor; strings.go, a string's escapes: decoding them (AppendString, StringIs) and
// writing them (AppendQuote).
//
// The package knows nothing of HTTP, SSE or providers: callers decide what a member means.
package jsonscan

import (
	"bytes"
	"encoding/binary"
	"math/bits"
)

// MaxDepth is how deep objects and arrays may nest in one JSON text, the outermost included:
// encoding/json's limit, so that both agree on what is JSON.
const MaxDepth = 10000

// SkipSpace returns the index of the first byte of b from i on that is not JSON whitespace
// (len(b) when there is none).
func SkipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// SkipString returns the index just past the string literal that starts at b[i] (a quote), or
// -1 when b holds no valid JSON string there: a raw control character, a bad escape, or b
// ending before the closing quote. Plain bytes are crossed eight at a time.
func SkipString(b []byte, i int) int {
	for i++; ; i++ {
		// Find the next byte that is not plain.
		for {
			if len(b)-i < 8 {
				for i < len(b) && plainStringByte[b[i]] {
					i++
				}
				break
			}
			if m := specialBytes(binary.LittleEndian.Uint64(b[i:])); m != 0 {
				i += bits.TrailingZeros64(m) / 8
				break
			}
			i += 8
		}
		if i >= len(b) {
			return -1
		}
		switch b[i] {
		case '"':
			return i + 1
		case '\\':
			if i++; i >= len(b) {
				return -1
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(b) || !isHex(b[i+1]) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) {
					return -1
				}
				i += 4
			default:
				return -1
			}
		default:
			return -1 // a raw control character
		}
	}
}

// specialBytes marks (with its high bit) the first byte of the eight in w, read little-endian,
// that a string cannot hold as it is: a quote, a backslash or a control character. It is the
// word trick for "has a zero byte" (a quote is a zero after XOR with quotes) and for "has a
// byte below 0x20": a borrow only runs upwards from a byte that is such a byte, so the lowest
// mark is exact (higher marks may be spurious, and are not used).
func specialBytes(w uint64) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	q := w ^ (ones * '"')
	s := w ^ (ones * '\\')
	return ((q-ones)&^q | (s-ones)&^s | (w-ones*0x20)&^w) & highs
}

// plainStringByte marks the bytes a JSON string holds as they are: all but the quote, the
// backslash and the control characters.
var plainStringByte = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// valueStart marks the bytes a JSON value can start with.
var valueStart = func() (t [256]bool) {
	for _, c := range []byte(`"{[tfn-0123456789`) {
		t[c] = true
	}
	return t
}()

// hexValue is the value of each hex digit, -1 for the other bytes.
var hexValue = func() (t [256]int8) {
	for c := range t {
		t[c] = -1
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = int8(c - '0')
	}
	for c := 'a'; c <= 'f'; c++ {
		t[c], t[c-'a'+'A'] = int8(c-'a'+10), int8(c-'a'+10)
	}
	return t
}()

func isHex(c byte) bool { return hexValue[c] >= 0 }

// SkipValue returns the index just past the JSON value that starts at b[i], or -1 when no
// whole, valid value starts there (see the package comment for the rules, and for a number
// that runs to the end of b). The value may nest MaxDepth containers deep.
func SkipValue(b []byte, i int) int {
	return skipValue(b, i, MaxDepth)
}

// SkipValueDepth is SkipValue for a value that may nest at most depth containers deep, itself
// included (a string, a number or a literal nests 0 deep): a value nested deeper counts as not
// valid, and -1 is returned. For a caller that must also agree with a parser stricter on
// nesting than encoding/json.
func SkipValueDepth(b []byte, i, depth int) int {
	return skipValue(b, i, min(depth, MaxDepth))
}

// skipValue is SkipValue for a value that may nest at most limit containers deep. A string or
// a scalar is skipped directly; a container's stack of open containers starts in one word,
// and only a value nested deeper than 64 is walked again with room for limit.
func skipValue(b []byte, i, limit int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return SkipString(b, i)
	case '{', '[':
	default:
		return skipScalar(b, i)
	}
	var small [1]uint64
	end := walkValue(b, i, limit, small[:])
	if end == errDeep {
		var big [(MaxDepth + 63) / 64]uint64
		end = walkValue(b, i, limit, big[:])
	}
	return end
}

// skipScalar returns the index just past the literal or number at b[i], or -1.
func skipScalar(b []byte, i int) int {
	switch b[i] {
	case 't':
		return skipLiteral(b, i, "true")
	case 'f':
		return skipLiteral(b, i, "false")
	case 'n':
		return skipLiteral(b, i, "null")
	}
	return skipNumber(b, i)
}

// errDeep is walkValue's answer for a value nested deeper than its stack has room for.
const errDeep = -2

// walkValue returns the index just past the value at b[i], or -1 (not valid, cut, or nested
// deeper than limit), or errDeep when open containers outgrow stack: a bit per container,
// set when it is an object. Bits are written before they are read, so stack needs no
// clearing.
func walkValue(b []byte, i, limit int, stack []uint64) int {
	depth := 0 // containers open inside this value
	for {
		// A value starts at b[i].
		if i >= len(b) {
			return -1
		}
		switch c := b[i]; c {
		case '"':
			i = SkipString(b, i)
		case '{', '[':
			if depth >= limit {
				return -1
			}
			if depth/64 >= len(stack) {
				return errDeep
			}
			if c == '{' {
				stack[depth/64] |= 1 << (depth % 64)
			} else {
				stack[depth/64] &^= 1 << (depth % 64)
			}
			depth++
			i = SkipSpace(b, i+1)
			if i < len(b) && b[i] == c+2 { // '}' is '{'+2 and ']' is '['+2: empty
				i++
				depth--
				break
			}
			if c == '{' {
				i = skipMemberName(b, i)
			}
			if i < 0 {
				return -1
			}
			continue // the container's first value
		default:
			i = skipScalar(b, i)
		}
		if i < 0 {
			return -1
		}
		// A value ended at i: close containers until one goes on with a comma.
		for {
			if depth == 0 {
				return i
			}
			if i = SkipSpace(b, i); i >= len(b) {
				return -1
			}
			obj := stack[(depth-1)/64]&(1<<((depth-1)%64)) != 0
			if b[i] == ',' {
				if i = SkipSpace(b, i+1); obj {
					i = skipMemberName(b, i)
				}
				if i < 0 {
					return -1
				}
				break
			}
			if obj && b[i] != '}' || !obj && b[i] != ']' {
				return -1
			}
			i++
			depth--
		}
	}
}

// skipMemberName skips an object member's name and its colon, and returns where its value
// starts, or -1.
func skipMemberName(b []byte, i int) int {
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	if i = SkipString(b, i); i < 0 {
		return -1
	}
	if i = SkipSpace(b, i); i >= len(b) || b[i] != ':' {
		return -1
	}
	return SkipSpace(b, i+1)
}

func skipLiteral(b []byte, i int, lit string) int {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}

// skipNumber returns the index just past the JSON number at b[i], or -1: also when the number
// runs to the end of b, which may have cut it.
func skipNumber(b []byte, i int) int {
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = skipDigits(b, i)
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		if j := skipDigits(b, i+1); j > i+1 {
			i = j
		} else {
			return -1
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := skipDigits(b, i)
		if j == i {
			return -1
		}
		i = j
	}
	if i >= len(b) {
		return -1
	}
	return i
}

func skipDigits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

// ObjectEnd follows a JSON text fed in pieces whose bytes are not kept (an SSE event's data past
// a capture limit), far enough to tell one object whose closing brace arrived, with nothing but
// JSON whitespace after it, from one cut short. SkipValue reads a text that is kept; ObjectEnd
// reads the same brackets and strings (a string's quotes and escapes, not what it holds) and
// nothing else: not scalars, commas or colons. So it is never stricter than SkipValue on an
// object, and never fooled by a cut: a text SkipValue takes for one object, nested at most 64
// deep, is whole, and no proper prefix of it that ends in anything but whitespace is (what
// objectend_test.go checks). A text nested deeper is taken as not whole. Any split of the text
// into pieces reads as the whole text does.
//
// The zero value is ready for a new text. An ObjectEnd allocates nothing, keeps no view of the
// pieces it is fed, and is not safe for concurrent use.
type ObjectEnd struct {
	state uint8  // where the bytes fed so far stand
	depth uint8  // open brackets
	kinds uint64 // bit i: the bracket open at depth i+1 is '{' (else '[')
}

const (
	oeBefore   uint8 = iota // whitespace so far
	oeInside                // inside the object, outside strings
	oeString                // inside a string
	oeEscape                // inside a string, just past a backslash
	oeAfter                 // the object closed: only whitespace may follow
	oeNotWhole              // not one whole object (another value, a bracket mismatch, too deep, bytes after it)
)

// objectEndDepth is how deep ObjectEnd follows brackets (one bit each); a text nested deeper is
// taken as not whole.
const objectEndDepth = 64

// Reset readies o for a new text.
func (o *ObjectEnd) Reset() { *o = ObjectEnd{} }

// Whole reports that the text fed so far is one JSON object, ended, with nothing but JSON
// whitespace after it.
func (o *ObjectEnd) Whole() bool { return o.state == oeAfter }

// Feed reads the next piece of the text.
func (o *ObjectEnd) Feed(b []byte) {
	state, depth, kinds := o.state, o.depth, o.kinds
	i, quote := 0, -2 // quote: the index of the next '"' in b at or after i, -1 none, -2 not looked for
	for i < len(b) && state != oeNotWhole {
		switch state {
		case oeBefore, oeAfter:
			c := b[i]
			i++
			switch {
			case isSpace(c):
			case c == '{' && state == oeBefore:
				state, depth, kinds = oeInside, 1, 1
			default:
				state = oeNotWhole
			}
		case oeInside:
			for i < len(b) && state == oeInside {
				c := b[i]
				i++
				switch c {
				case '"':
					state = oeString
				case '{', '[':
					if depth == objectEndDepth {
						state = oeNotWhole
						break
					}
					if c == '{' {
						kinds |= 1 << depth
					} else {
						kinds &^= 1 << depth
					}
					depth++
				case '}', ']':
					depth--
					if opensObject := kinds>>depth&1 == 1; opensObject != (c == '}') {
						state = oeNotWhole
					} else if depth == 0 {
						state = oeAfter
					}
				}
			}
		case oeString:
			// Most of a text's bytes are inside strings: vectorised scans find the next quote
			// (kept while it lies ahead), then any backslash before it.
			if quote < i && quote != -1 {
				quote = bytes.IndexByte(b[i:], '"')
				if quote >= 0 {
					quote += i
				}
			}
			end := len(b)
			if quote >= 0 {
				end = quote
			}
			if s := bytes.IndexByte(b[i:end], '\\'); s >= 0 {
				i, state = i+s+1, oeEscape
			} else if quote >= 0 {
				i, state = quote+1, oeInside
			} else {
				i = len(b)
			}
		case oeEscape:
			i++ // the escaped byte (\uXXXX's digits are read as string bytes)
			state = oeString
		}
	}
	o.state, o.depth, o.kinds = state, depth, kinds
}
