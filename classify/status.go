package classify

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// StatusSet is a set of HTTP statuses from 100 to 599, parsed from a comma list of
// exact codes ("429") and classes ("5xx"). The zero value is empty. A StatusSet is a
// plain value: copying it copies the set, and reading it is safe from any goroutine.
type StatusSet struct {
	bits [10]uint64 // bit i of the 640-bit map is status i+100 (only 100..599 are used)
	text string     // normalised source list, for the effective-policy print
	set  bool       // configured (even as "none"), as opposed to left to the default
}

// Has reports whether status is in the set. It never allocates.
func (s *StatusSet) Has(status int) bool {
	i := status - 100
	if i < 0 || i >= 500 {
		return false
	}
	return s.bits[i>>6]&(1<<(uint(i)&63)) != 0
}

// Empty reports whether the set holds no status.
func (s *StatusSet) Empty() bool { return s.bits == [10]uint64{} }

func (s *StatusSet) add(lo, hi int) {
	for st := lo; st <= hi; st++ {
		i := st - 100
		s.bits[i>>6] |= 1 << (uint(i) & 63)
	}
}

// String returns the list as configured, normalised ("429,5xx").
func (s StatusSet) String() string { return s.text }

// UnmarshalText parses a comma list of three-character status tokens, case-insensitive:
// "100"–"599" or "1xx"–"5xx". Spaces around tokens are ignored; an empty token is an error.
// It lets caarlos0/env read a StatusSet directly.
func (s *StatusSet) UnmarshalText(text []byte) error {
	parsed, err := ParseStatusSet(string(text))
	if err != nil {
		return err
	}
	*s = parsed
	return nil
}

// ParseStatusSet parses a comma list of status tokens (see UnmarshalText). A blank list
// gives an unset StatusSet (the default applies); "none" gives a configured, empty one.
func ParseStatusSet(list string) (StatusSet, error) {
	var s StatusSet
	switch strings.ToLower(strings.TrimSpace(list)) {
	case "":
		return s, nil
	case "none":
		return StatusSet{text: "none", set: true}, nil
	}
	var errs []error
	var norm []string
	for _, raw := range strings.Split(list, ",") {
		tok := strings.ToLower(strings.TrimSpace(raw))
		lo, hi, err := parseStatusToken(tok)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s.add(lo, hi)
		norm = append(norm, tok)
	}
	if len(errs) > 0 {
		return StatusSet{}, errors.Join(errs...)
	}
	s.text = strings.Join(norm, ",")
	s.set = true
	return s, nil
}

// parseStatusToken turns "503" into 503..503 and "5xx" into 500..599.
func parseStatusToken(tok string) (lo, hi int, err error) {
	if tok == "" {
		return 0, 0, errors.New("empty status token (two commas in a row, or a trailing comma?)")
	}
	if len(tok) != 3 || tok[0] < '1' || tok[0] > '5' {
		return 0, 0, fmt.Errorf("%q is not a status: use 100-599 or a class 1xx-5xx", tok)
	}
	if tok[1:] == "xx" {
		c := int(tok[0]-'0') * 100
		return c, c + 99, nil
	}
	n, perr := strconv.Atoi(tok)
	if perr != nil || n < 100 || n > 599 {
		return 0, 0, fmt.Errorf("%q is not a status: use 100-599 or a class 1xx-5xx", tok)
	}
	return n, n, nil
}

// isStatusWord reports whether a phrase word is a status or class token, and parses it.
func isStatusWord(w string) (lo, hi int, ok bool) {
	lo, hi, err := parseStatusToken(w)
	return lo, hi, err == nil
}
