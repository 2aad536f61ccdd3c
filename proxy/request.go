package proxy

import (
	"bytes"
	"strings"

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
	model      []byte // raw string contents (escapes kept as sent)
	modelStart int    // index of the opening quote; -1 when there is no model string
	modelEnd   int    // index just past the closing quote
	stream     bool   // "stream": true
	json       bool   // the body is a JSON object the scanner walked to its end
}

// scanRequest reads the top-level "model" and "stream" of a JSON object without decoding the
// document. A body that is not a well-formed JSON object (multipart audio, garbage) yields
// json=false and no fields: it is forwarded untouched and treated as non-streaming. Later
// duplicate keys win, as in most JSON parsers. It never allocates and never recurses.
func scanRequest(b []byte) requestFields {
	f := requestFields{modelStart: -1}
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return requestFields{modelStart: -1}
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		f.json = skipWS(b, i+1) == len(b)
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
		i = skipValue(b, i)
		if i < 0 {
			return requestFields{modelStart: -1}
		}
		val := b[valStart:i]
		switch string(key) {
		case "model":
			if len(val) >= 2 && val[0] == '"' {
				f.model, f.modelStart, f.modelEnd = val[1:len(val)-1], valStart, i
			} else {
				f.model, f.modelStart = nil, -1
			}
		case "stream":
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

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index just past the string literal starting at b[i] == '"', or -1.
func skipString(b []byte, i int) int {
	i++
	for {
		j := bytes.IndexAny(b[i:], "\"\\")
		if j < 0 {
			return -1
		}
		i += j
		if b[i] == '"' {
			return i + 1
		}
		i += 2 // a backslash escapes the next byte
		if i > len(b) {
			return -1
		}
	}
}

// skipValue returns the index just past the JSON value starting at b[i], or -1. Objects and
// arrays are skipped by counting brackets outside strings; their contents are not validated.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch c := b[i]; {
	case c == '"':
		return skipString(b, i)
	case c == '{' || c == '[':
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
	default:
		start := i
		for i < len(b) {
			switch b[i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				if i == start {
					return -1
				}
				return i
			}
			i++
		}
		return -1
	}
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
		if j := bytes.IndexByte(query, '&'); j >= 0 {
			pair, query = query[:j], query[j+1:]
		} else {
			pair, query = query, nil
		}
		if len(pair) == 0 || targetHasKey(t, pair) {
			continue
		}
		dst = append(dst, sep)
		dst = append(dst, pair...)
		sep = '&'
	}
	return dst
}

func targetHasKey(t *Target, pair []byte) bool {
	key := pair
	if j := bytes.IndexByte(pair, '='); j >= 0 {
		key = pair[:j]
	}
	for _, k := range t.queryKey {
		if bytes.Equal(k, key) {
			return true
		}
	}
	return false
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
