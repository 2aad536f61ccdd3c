package stream

import (
	"bytes"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// The seam is where a continuation's text joins the text the client already has (docs/streams.md,
// Resume a cut stream, The seam). A continuation asked by instruction sometimes starts by
// repeating the end of what it was given: its last words, or the last word the cut left
// unfinished. Such an exact repeat is dropped; a paraphrase is not recognised.

// SeamKind is what a continuation's seam took off its text.
type SeamKind uint8

const (
	SeamNone    SeamKind = iota // nothing
	SeamSpace                   // whitespace the delivered text ended with, which the continuation repeated
	SeamWord                    // a repeat of the delivered text's unfinished last word
	SeamOverlap                 // a repeat of the delivered text's last words
)

var seamKindNames = [...]string{"none", "space", "word", "overlap"}

// Seam is what a continuation's seam took off its text: the kind, and the bytes of its
// (JSON-decoded) text dropped, the whitespace around a repeat included.
type Seam struct {
	Kind  SeamKind
	Bytes int
}

// AppendText appends the seam as the request record shows it: "none", or the kind and the bytes
// dropped ("space:1", "word:2", "overlap:12"). It says sizes, never text.
func (s Seam) AppendText(b []byte) []byte {
	b = append(b, seamKindNames[s.Kind]...)
	if s.Kind == SeamNone {
		return b
	}
	b = append(b, ':')
	return strconv.AppendInt(b, int64(s.Bytes), 10)
}

func (s Seam) String() string { return string(s.AppendText(nil)) }

// A repeat of the delivered text's last words is dropped when it holds at least
// minOverlapWords words or minOverlapBytes bytes (Chinese, Japanese and Korean text has no
// spaces to count words by), or is the whole delivered text; a repeat longer than maxOverlap
// bytes is not looked for, so a continuation is held back at most that long.
const (
	minOverlapWords = 3
	minOverlapBytes = 16
	maxOverlap      = 1024
)

// repeatAt says how many bytes at the start of cont, a continuation's text so far, repeat the
// end of delivered (the delivered text without its trailing whitespace) and are to be dropped:
//
//   - the longest end of delivered that starts at a word (after whitespace or punctuation, or
//     anywhere in Chinese, Japanese or Korean text), is at least minOverlapWords words or
//     minOverlapBytes bytes long or is the whole of delivered, and with which cont starts,
//     after whitespace of its own (SeamOverlap, the whitespace included);
//   - else, when wordOK (the delivered text did not end in whitespace) and cont starts with a
//     word that begins with the word delivered ends with and goes on after it: that last word,
//     which the cut left unfinished and the continuation wrote again whole (SeamWord);
//   - else nothing.
//
// decided is false while more of cont could change the answer (a longer repeat may still
// come, or cont so far is the start of the unfinished word); final says that no more comes.
func repeatAt(delivered, cont []byte, wordOK, final bool) (n int, kind SeamKind, decided bool) {
	lead := len(cont) - len(bytes.TrimLeftFunc(cont, unicode.IsSpace))
	c := cont[lead:]
	pending := false
	from := max(0, len(delivered)-maxOverlap)
	for from < len(delivered) && !utf8.RuneStart(delivered[from]) {
		from++
	}
	for i := from; i < len(delivered); {
		r, size := utf8.DecodeRune(delivered[i:])
		if !wordStart(delivered, i, r) {
			i += size
			continue
		}
		s := delivered[i:]
		if i == 0 || len(s) >= minOverlapBytes || wordCount(s) >= minOverlapWords {
			switch {
			case bytes.HasPrefix(c, s):
				if pending && !final {
					return 0, SeamNone, false
				}
				return lead + len(s), SeamOverlap, true
			case len(c) < len(s) && bytes.HasPrefix(s, c):
				pending = true
			}
		}
		i += size
	}
	if pending && !final {
		return 0, SeamNone, false
	}
	if !wordOK || lead > 0 {
		return 0, SeamNone, true
	}
	last := lastWord(delivered)
	if len(last) == 0 || len(last) > maxOverlap {
		return 0, SeamNone, true
	}
	first := cont[:wordEnd(cont)]
	if len(first) == len(cont) && !final && len(first) <= len(last) && bytes.HasPrefix(last, first) {
		return 0, SeamNone, false // the word may go on
	}
	if len(first) > len(last) && bytes.HasPrefix(first, last) {
		return len(last), SeamWord, true
	}
	return 0, SeamNone, true
}

// wordStart reports whether a repeat may start at b[i], whose rune is r: a rune that is not
// whitespace, after whitespace or punctuation (or at b's start), or any rune of a script
// written without spaces.
func wordStart(b []byte, i int, r rune) bool {
	if unicode.IsSpace(r) {
		return false
	}
	if i == 0 || unicode.In(r, unicode.Han, unicode.Hiragana, unicode.Katakana, unicode.Hangul) {
		return true
	}
	prev, _ := utf8.DecodeLastRune(b[:i])
	return !isWordRune(prev)
}

// isWordRune reports whether r is part of a word: a letter, a digit or a combining mark.
func isWordRune(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r) }

// wordCount counts b's words, the runs of runes between whitespace.
func wordCount(b []byte) int {
	n, in := 0, false
	for _, r := range string(b) {
		switch {
		case unicode.IsSpace(r):
			in = false
		case !in:
			in = true
			n++
		}
	}
	return n
}

// lastWord is the run of word runes b ends with.
func lastWord(b []byte) []byte {
	i := len(b)
	for i > 0 {
		r, size := utf8.DecodeLastRune(b[:i])
		if !isWordRune(r) {
			break
		}
		i -= size
	}
	return b[i:]
}

// wordEnd is the length of the run of word runes b starts with.
func wordEnd(b []byte) int {
	i := 0
	for i < len(b) {
		r, size := utf8.DecodeRune(b[i:])
		if !isWordRune(r) {
			break
		}
		i += size
	}
	return i
}
