package classify

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
)

// DefaultPhrases is FAILOVER_RETRY_ON_ERRORS when unset. The names, meanings and defaults
// match GoModel's failover settings, so its users can move over unchanged.
const DefaultPhrases = "model not found, model does not exist, model unsupported, model unavailable, " +
	"model not available, model deprecated, model retired, model disabled, upstream failed, " +
	"upstream error, upstream unavailable, upstream timed out, upstream timeout, 404 unsupported, " +
	"404 unavailable, 404 not available, 404 deprecated, 404 retired, 404 disabled"

// Phrases is a list of error phrases. A phrase matches an error when every word of it occurs
// (substring, ASCII case-insensitive) in the error's code, type or message; a word that is a
// status or class ("404", "4xx") constrains the status instead. Phrases is immutable after
// parsing and safe for concurrent use.
type Phrases struct {
	list []phrase
	text string
	set  bool // configured (even as "none"), as opposed to left to the default
}

type phrase struct {
	words    [][]byte  // lower-cased, without status words
	statuses StatusSet // empty = any status
}

// UnmarshalText parses a comma list of phrases (for caarlos0/env).
func (p *Phrases) UnmarshalText(text []byte) error {
	parsed, err := ParsePhrases(string(text))
	if err != nil {
		return err
	}
	*p = parsed
	return nil
}

// String returns the normalised list.
func (p Phrases) String() string { return p.text }

// Len returns the number of phrases.
func (p *Phrases) Len() int { return len(p.list) }

// ParsePhrases parses a comma list of phrases. Words are separated by spaces. A phrase made
// only of status words, or an empty phrase, is an error. A blank list gives unset Phrases (the
// default applies); "none" gives a configured, empty list.
func ParsePhrases(list string) (Phrases, error) {
	var p Phrases
	switch strings.ToLower(strings.TrimSpace(list)) {
	case "":
		return p, nil
	case "none":
		return Phrases{text: "none", set: true}, nil
	}
	var errs []error
	var norm []string
	for _, raw := range strings.Split(list, ",") {
		words := strings.Fields(strings.ToLower(raw))
		if len(words) == 0 {
			errs = append(errs, errors.New("empty phrase (two commas in a row, or a trailing comma?)"))
			continue
		}
		var ph phrase
		for _, w := range words {
			if lo, hi, ok := isStatusWord(w); ok {
				ph.statuses.add(lo, hi)
				continue
			}
			ph.words = append(ph.words, []byte(w))
		}
		if len(ph.words) == 0 {
			errs = append(errs, fmt.Errorf("phrase %q has only status words: add a word to match in the error", strings.Join(words, " ")))
			continue
		}
		p.list = append(p.list, ph)
		norm = append(norm, strings.Join(words, " "))
	}
	if len(errs) > 0 {
		return Phrases{}, errors.Join(errs...)
	}
	p.text = strings.Join(norm, ", ")
	p.set = true
	return p, nil
}

// Match reports whether any phrase matches an error with this status, code, type and message.
// It never allocates.
func (p *Phrases) Match(status int, code, typ, message []byte) bool {
	for i := range p.list {
		ph := &p.list[i]
		if !ph.statuses.Empty() && !ph.statuses.Has(status) {
			continue
		}
		all := true
		for _, w := range ph.words {
			// A word has no spaces, and the fields are joined by a space, so a word matches the
			// joined text exactly when it matches one of the fields.
			if !containsFold(code, w) && !containsFold(typ, w) && !containsFold(message, w) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

// containsFold reports whether lower (already lower-case ASCII) occurs in s, ignoring ASCII case.
// Candidate positions are found with bytes.IndexByte (vectorised) for both cases of the
// first byte, so a miss costs a couple of fast scans, not a loop per byte.
func containsFold(s, lower []byte) bool {
	n := len(lower)
	if n == 0 {
		return true
	}
	first := lower[0]
	upper := first
	if first >= 'a' && first <= 'z' {
		upper = first - 'a' + 'A'
	}
	for len(s) >= n {
		i := bytes.IndexByte(s[:len(s)-n+1], first)
		if upper != first {
			if j := bytes.IndexByte(s[:len(s)-n+1], upper); j >= 0 && (i < 0 || j < i) {
				i = j
			}
		}
		if i < 0 {
			return false
		}
		if equalFoldRest(s[i+1:i+n], lower[1:]) {
			return true
		}
		s = s[i+1:]
	}
	return false
}

func equalFoldRest(s, lower []byte) bool {
	for j, c := range s {
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[j] {
			return false
		}
	}
	return true
}
