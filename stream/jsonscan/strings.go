package jsonscan

import (
	"bytes"
	"encoding/binary"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// AppendQuote appends s as a JSON string: quotes, backslashes and control characters
// escaped, invalid UTF-8 replaced by U+FFFD, U+2028 and U+2029 escaped, as encoding/json
// writes it. It is the one thing this package writes: the log's strings and the sidecar's own
// error bodies.
func AppendQuote(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	// Eight bytes at a time while they are all plain: printable ASCII but the quote and the
	// backslash (SkipString's word tricks, and a test of the high bits).
	i := 0
	for ; len(s)-i >= 8; i += 8 {
		const ones, highs = 0x0101010101010101, 0x8080808080808080
		w := binary.LittleEndian.Uint64(unsafe.Slice(unsafe.StringData(s[i:]), 8))
		q, bs := w^(ones*'"'), w^(ones*'\\')
		if ((q-ones)&^q|(bs-ones)&^bs|(w-ones*0x20)&^w|w)&highs != 0 {
			break
		}
	}
	start := 0
	for i < len(s) {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&15])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// The functions below take the contents of a valid JSON string literal, without its quotes,
// as a Cursor finds them (Key, or a string Value without its first and last byte).

// AppendString appends the decoded contents of a JSON string literal to dst: "openai\/gpt-4o"
// (PHP escapes every slash) and "gpt\u002d4o" are openai/gpt-4o and gpt-4o to every JSON
// parser. An escaped UTF-16 pair becomes its rune; a lone surrogate becomes U+FFFD, as
// encoding/json decodes it. Bytes that are not escapes are kept as sent (encoding/json would
// also replace invalid UTF-8 with U+FFFD). Without a backslash it is a plain append.
func AppendString(dst, s []byte) []byte {
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
		c, i = nextEscape(s, i)
		dst = utf8.AppendRune(dst, c)
	}
	return dst
}

// StringIs reports whether the contents of a JSON string literal decode to want, as
// AppendString decodes them: "mod\u0065l" is "model" to every JSON parser, so it is to the
// sidecar too. Without a backslash it is a plain comparison; with one, the escapes are decoded
// as they are compared, without allocating.
func StringIs(s []byte, want string) bool {
	if bytes.IndexByte(s, '\\') < 0 {
		return string(s) == want
	}
	j := 0
	for i := 0; i < len(s); {
		if s[i] != '\\' {
			if j >= len(want) || s[i] != want[j] {
				return false
			}
			i, j = i+1, j+1
			continue
		}
		var c rune
		c, i = nextEscape(s, i)
		var enc [utf8.UTFMax]byte
		n := utf8.EncodeRune(enc[:], c)
		if len(want)-j < n || string(enc[:n]) != want[j:j+n] {
			return false
		}
		j += n
	}
	return j == len(want)
}

// nextEscape decodes the escape at s[i] (a backslash) and returns its rune and the index past
// it: an escaped UTF-16 pair is one rune, a lone surrogate U+FFFD. A truncated or bad escape
// (never in a valid literal) yields U+FFFD and the end of s.
func nextEscape(s []byte, i int) (rune, int) {
	c, i := escapeUnit(s, i)
	if !utf16.IsSurrogate(c) {
		return c, i
	}
	if i+1 < len(s) && s[i] == '\\' && s[i+1] == 'u' {
		if c2, j := escapeUnit(s, i); utf16.DecodeRune(c, c2) != utf8.RuneError {
			return utf16.DecodeRune(c, c2), j
		}
	}
	return utf8.RuneError, i
}

// escapeUnit decodes one escape at s[i] (a backslash): a character, or one UTF-16 code unit
// for \uXXXX, surrogates included.
func escapeUnit(s []byte, i int) (rune, int) {
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
			v := hexValue[h]
			if v < 0 {
				return utf8.RuneError, len(s)
			}
			c = c<<4 | rune(v)
		}
		return c, i + 6
	default: // '"', '\\', '/'
		return rune(e), i + 2
	}
}
