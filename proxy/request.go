package proxy

import (
	"bytes"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/llm-failover/failover/stream"
)

// familyOf tells a request's API family from its (normalised) path.
func familyOf(path []byte) stream.Family {
	switch {
	case hasPathPrefix(path, "/v1/chat/completions"):
		return stream.Chat
	case hasPathPrefix(path, "/v1/responses"):
		return stream.Responses
	case hasPathPrefix(path, "/v1/messages"):
		return stream.Messages
	case hasPathPrefix(path, "/v1/images"):
		return stream.Image
	}
	return stream.Other
}

// hasPathPrefix reports whether path is prefix or continues it with a new segment.
func hasPathPrefix(path []byte, prefix string) bool {
	return len(path) >= len(prefix) && string(path[:len(prefix)]) == prefix &&
		(len(path) == len(prefix) || path[len(prefix)] == '/')
}

// requestFields is what the sidecar reads from a request body: the top-level "model" (its
// bytes, and where its string literal starts and ends, quotes included, for substitution) and
// "stream". The body is scanned, not decoded. Model is a view into the body.
type requestFields struct {
	model      []byte // raw string contents (escapes kept as sent; exchange.model is decoded)
	modelStart int    // index of the opening quote; -1 when there is no model string
	modelEnd   int    // index just past the closing quote
	stream     bool   // "stream": true
	json       bool   // the body is a JSON object the scanner walked to its end
}

// scanRequest reads the top-level "model" and "stream" of a JSON object without decoding the
// document; it does validate all of it (RFC 8259, nesting up to maxNesting), so it agrees with
// encoding/json on what is JSON. A body that is not a well-formed JSON object (multipart
// audio, garbage) yields json=false and no fields: it is forwarded untouched and treated as
// non-streaming. Later duplicate keys win, as in most JSON parsers. It never allocates and
// never recurses.
func scanRequest(b []byte) requestFields {
	f := requestFields{modelStart: -1}
	var objects nesting
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return requestFields{modelStart: -1}
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		if skipWS(b, i+1) != len(b) {
			return requestFields{modelStart: -1}
		}
		f.json = true
		return f
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return requestFields{modelStart: -1}
		}
		keyEnd := skipString(b, i)
		if keyEnd < 0 {
			return requestFields{modelStart: -1}
		}
		key := b[i+1 : keyEnd-1]
		i = skipWS(b, keyEnd)
		if i >= len(b) || b[i] != ':' {
			return requestFields{modelStart: -1}
		}
		i = skipWS(b, i+1)
		valStart := i
		i = objects.skipValue(b, i)
		if i < 0 {
			return requestFields{modelStart: -1}
		}
		val := b[valStart:i]
		switch {
		case jsonKeyIs(key, "model"):
			if len(val) >= 2 && val[0] == '"' {
				f.model, f.modelStart, f.modelEnd = val[1:len(val)-1], valStart, i
			} else {
				f.model, f.modelStart = nil, -1
			}
		case jsonKeyIs(key, "stream"):
			f.stream = string(val) == "true"
		}
		i = skipWS(b, i)
		if i >= len(b) {
			return requestFields{modelStart: -1}
		}
		if b[i] == '}' {
			f.json = skipWS(b, i+1) == len(b)
			if !f.json {
				return requestFields{modelStart: -1}
			}
			return f
		}
		if b[i] != ',' {
			return requestFields{modelStart: -1}
		}
		i = skipWS(b, i+1)
	}
}

// jsonKeyIs reports whether key, the contents of a valid JSON string literal as sent, decodes
// to name (lower-case ASCII letters): "mod\u0065l" is "model" to every JSON parser, so it is to
// the sidecar too. Without a backslash it is a plain comparison; with one, the escapes are
// decoded as they are compared, without allocating.
func jsonKeyIs(key []byte, name string) bool {
	if bytes.IndexByte(key, '\\') < 0 {
		return string(key) == name
	}
	j := 0
	for i := 0; i < len(key); j++ {
		var c rune
		c, i = nextJSONRune(key, i)
		if j >= len(name) || c != rune(name[j]) {
			return false
		}
	}
	return j == len(name)
}

// appendJSONString appends the decoded contents of a valid JSON string literal (without its
// quotes, as scanRequest found it): "openai\/gpt-4o" (PHP escapes every slash) and
// "gpt\u002d4o" are openai/gpt-4o and gpt-4o to every JSON parser, so to the model filter and
// the log too. A lone surrogate becomes U+FFFD, as encoding/json decodes it; bytes that are not
// escapes are kept as sent.
func appendJSONString(dst, s []byte) []byte {
	if bytes.IndexByte(s, '\\') < 0 {
		return append(dst, s...)
	}
	for i := 0; i < len(s); {
		if s[i] != '\\' {
			dst = append(dst, s[i])
			i++
			continue
		}
		var c rune
		c, i = nextJSONRune(s, i)
		if utf16.IsSurrogate(c) {
			r := utf8.RuneError
			if i+1 < len(s) && s[i] == '\\' && s[i+1] == 'u' {
				if c2, j := nextJSONRune(s, i); utf16.DecodeRune(c, c2) != utf8.RuneError {
					r, i = utf16.DecodeRune(c, c2), j
				}
			}
			c = r
		}
		dst = utf8.AppendRune(dst, c)
	}
	return dst
}

// nextJSONRune decodes one byte or one escape of a valid JSON string's contents at s[i] and
// returns it with the index past it. An escaped UTF-16 surrogate is returned as it is, for the
// caller to pair; a truncated escape (not in a valid literal) yields U+FFFD and the end.
func nextJSONRune(s []byte, i int) (rune, int) {
	if s[i] != '\\' {
		return rune(s[i]), i + 1
	}
	if i+1 >= len(s) {
		return utf8.RuneError, len(s)
	}
	switch e := s[i+1]; e {
	case 'b':
		return '\b', i + 2
	case 'f':
		return '\f', i + 2
	case 'n':
		return '\n', i + 2
	case 'r':
		return '\r', i + 2
	case 't':
		return '\t', i + 2
	case 'u':
		if i+6 > len(s) {
			return utf8.RuneError, len(s)
		}
		var c rune
		for _, h := range s[i+2 : i+6] {
			if !isHex(h) {
				return utf8.RuneError, len(s)
			}
			c = c<<4 | rune(unhex(h))
		}
		return c, i + 6
	default: // '"', '\\', '/'
		return rune(e), i + 2
	}
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// maxNesting is how deep objects and arrays may nest, the request's own object included:
// encoding/json's limit, so that both agree on what is JSON. A deeper body is not JSON to the
// scanner (it is forwarded untouched, like any other).
const maxNesting = 10000

// skipString returns the index just past the string literal starting at b[i] == '"', or -1
// when it is not a valid JSON string (a raw control character, a bad escape, no end).
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		if plainStringByte[b[i]] {
			continue
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
	return -1
}

// plainStringByte marks the bytes a JSON string holds as they are: all but the quote, the
// backslash and the control characters.
var plainStringByte = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

// skipValue returns the index just past the JSON value starting at b[i], or -1 when there is
// no valid JSON value there. Objects and arrays are validated without recursion: a bit per
// open container says whether it is an object, so hostile nesting cannot exhaust the stack,
// and nothing is allocated.
func skipValue(b []byte, i int) int {
	var objects nesting
	return objects.skipValue(b, i)
}

// nesting has a bit per open container, set when it is an object. Bits are written before
// they are read, so one nesting serves any number of values.
type nesting [(maxNesting + 63) / 64]uint64

// skipValue is the package skipValue, keeping its stack in objects.
func (objects *nesting) skipValue(b []byte, i int) int {
	depth := 0 // containers open inside this value
	for {
		// A value starts at b[i].
		if i >= len(b) {
			return -1
		}
		switch c := b[i]; c {
		case '"':
			i = skipString(b, i)
		case '{', '[':
			if depth+2 > maxNesting { // +1 for the request's own object
				return -1
			}
			if c == '{' {
				objects[depth/64] |= 1 << (depth % 64)
			} else {
				objects[depth/64] &^= 1 << (depth % 64)
			}
			depth++
			i = skipWS(b, i+1)
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
		case 't':
			i = skipLiteral(b, i, "true")
		case 'f':
			i = skipLiteral(b, i, "false")
		case 'n':
			i = skipLiteral(b, i, "null")
		default:
			i = skipNumber(b, i)
		}
		if i < 0 {
			return -1
		}
		// A value ended at i: close containers until one goes on with a comma.
		for {
			if depth == 0 {
				return i
			}
			if i = skipWS(b, i); i >= len(b) {
				return -1
			}
			obj := objects[(depth-1)/64]&(1<<((depth-1)%64)) != 0
			if b[i] == ',' {
				if i = skipWS(b, i+1); obj {
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
	if i = skipString(b, i); i < 0 {
		return -1
	}
	if i = skipWS(b, i); i >= len(b) || b[i] != ':' {
		return -1
	}
	return skipWS(b, i+1)
}

func skipLiteral(b []byte, i int, lit string) int {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}

// skipNumber returns the index just past the JSON number at b[i], or -1.
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
	return i
}

func skipDigits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

// appendUpstreamURI writes the upstream request URI: the target's base path, the request path
// after /v1, then the target's query followed by the client's (a key the target sets wins).
// path must be normalised (no dot segments), so it cannot climb above the base path.
func appendUpstreamURI(dst []byte, t *Target, path, query []byte) []byte {
	dst = append(dst, t.basePath...)
	dst = appendEscapedPath(dst, path[len("/v1"):])
	sep := byte('?')
	if len(t.query) > 0 {
		dst = append(dst, sep)
		dst = append(dst, t.query...)
		sep = '&'
	}
	for len(query) > 0 {
		var pair []byte
		pair, query = cutList(query, '&')
		if len(pair) == 0 || targetHasKey(t, pair) {
			continue
		}
		dst = append(dst, sep)
		dst = append(dst, pair...)
		sep = '&'
	}
	return dst
}

// targetHasKey reports whether the client's query pair names a key the target's URL sets. The
// client's key is compared percent-decoded, as the upstream reads it: "api%2Dversion" is
// "api-version", and sent beside the target's it could override it. It is compared in any
// case too: a server that reads keys case-insensitively (ASP.NET, behind Azure OpenAI) takes
// "API-VERSION" for "api-version". A '+' is compared both as a space (form encoding, as
// url.ParseQuery decoded the target's keys) and as itself (as a server reading RFC 3986
// queries sees it): a key that is the target's either way is dropped.
func targetHasKey(t *Target, pair []byte) bool {
	key, _ := cutList(pair, '=')
	plus := bytes.IndexByte(key, '+') >= 0
	for _, k := range t.queryKey {
		if queryKeyIs(key, k, true) || plus && queryKeyIs(key, k, false) {
			return true
		}
	}
	return false
}

// queryKeyIs reports whether raw, a query key as sent, percent-decodes to lower, in any ASCII
// case (lower is in lower case). A '%' that starts no escape ("%zz", a trailing "%") stands
// for itself. It decodes while it compares, so it allocates nothing.
func queryKeyIs(raw, lower []byte, plusIsSpace bool) bool {
	j := 0
	for i := 0; i < len(raw); i, j = i+1, j+1 {
		c := raw[i]
		switch {
		case c == '%' && i+2 < len(raw) && isHex(raw[i+1]) && isHex(raw[i+2]):
			c = unhex(raw[i+1])<<4 | unhex(raw[i+2])
			i += 2
		case c == '+' && plusIsSpace:
			c = ' '
		}
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if j >= len(lower) || lower[j] != c {
			return false
		}
	}
	return j == len(lower)
}

// unhex is the value of the hex digit c (isHex(c) holds).
func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c >= 'a':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// appendEscapedPath percent-encodes what may not appear raw in a path segment. '%' itself is
// encoded too: the path is already decoded, so "%2e" in it is a literal name, not a dot.
func appendEscapedPath(dst, p []byte) []byte {
	const hex = "0123456789ABCDEF"
	for _, c := range p {
		if isPathByte(c) {
			dst = append(dst, c)
			continue
		}
		dst = append(dst, '%', hex[c>>4], hex[c&15])
	}
	return dst
}

func isPathByte(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("-._~!$&'()*+,;=:@/", c) >= 0
}

// appendSubstitutedBody writes body with the model string literal replaced by model (which was
// validated to need no escaping). Every other byte stays as the client sent it.
func appendSubstitutedBody(dst, body []byte, f *requestFields, model []byte) []byte {
	dst = append(dst, body[:f.modelStart]...)
	dst = append(dst, '"')
	dst = append(dst, model...)
	dst = append(dst, '"')
	return append(dst, body[f.modelEnd:]...)
}
