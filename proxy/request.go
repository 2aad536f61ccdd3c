package proxy

import (
	"bytes"
	"strings"

	"github.com/llm-failover/failover/stream"
	"github.com/llm-failover/failover/stream/jsonscan"
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

// requestFields is what the sidecar reads from a request body: the top-level "model" (its
// bytes, and where its string literal starts and ends, quotes included, for substitution),
// "stream" and "store". The body is scanned, not decoded. Model is a view into the body.
type requestFields struct {
	model      []byte // raw string contents (escapes kept as sent; exchange.model is decoded)
	modelStart int    // index of the opening quote; -1 when there is no model string
	modelEnd   int    // index just past the closing quote
	stream     bool   // "stream": true
	// noStore: "store": false. A Responses API request stores its response unless it says so
	// (the API's default is true), and a stored response is never hedged (docs/streams.md#hedging):
	// absent, or any other value, is stored.
	noStore bool
	json    bool // the body is a JSON object the scanner walked to its end
}

// scanRequest reads the top-level "model", "stream" and "store" of a JSON object without
// decoding the document; it does validate all of it (jsonscan's rules: RFC 8259, nesting up to
// jsonscan.MaxDepth), so it agrees with encoding/json on what is JSON. A body that is not a
// well-formed JSON object (multipart audio, garbage) yields json=false and no fields: it is
// forwarded untouched and treated as non-streaming (and as stored). Keys are compared decoded
// ("mod\u0065l" is model to every JSON parser). Later duplicate keys win, as in most JSON
// parsers. It never allocates and never recurses.
func scanRequest(b []byte) requestFields {
	f := requestFields{modelStart: -1}
	var c jsonscan.Cursor
	for ok := c.OpenObject(b, 0); ok && c.Next(); {
		key := c.Key()
		val := c.Value()
		switch {
		case val == nil:
			// not JSON: End says so below
		case jsonscan.StringIs(key, "model"):
			if val[0] == '"' {
				f.model, f.modelStart, f.modelEnd = val[1:len(val)-1], c.Start(), c.Start()+len(val)
			} else {
				f.model, f.modelStart = nil, -1
			}
		case jsonscan.StringIs(key, "stream"):
			f.stream = string(val) == "true"
		case jsonscan.StringIs(key, "store"):
			f.noStore = string(val) == "false"
		}
	}
	if end := c.End(); end < 0 || jsonscan.SkipSpace(b, end) != len(b) {
		return requestFields{modelStart: -1}
	}
	f.json = true
	return f
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

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

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

// cutList splits the first item off a sep-separated list.
func cutList(list []byte, sep byte) (item, rest []byte) {
	if i := bytes.IndexByte(list, sep); i >= 0 {
		return list[:i], list[i+1:]
	}
	return list, nil
}
