package classify

import (
	"regexp"
	"testing"
)

// emptyChoicesOracle is what hasEmptyArrayToken(b, keyChoices) must report: the token
// `"choices" : [ ]` with JSON whitespace anywhere between its parts.
var emptyChoicesOracle = regexp.MustCompile(`"choices"[ \t\n\r]*:[ \t\n\r]*\[[ \t\n\r]*\]`)

func TestHasEmptyArrayToken(t *testing.T) {
	for _, body := range []string{
		`{"choices":[]}`,
		`{"choices" : [ ] }`,
		"{\"choices\"\r\n:\t[\n]}",
		`{"id":"x","choices":[{"index":0}],"usage":{}}`,
		`{"choices":[{"message":{"content":"[]"}}]}`,
		`{"choices":[[]]}`,                        // an empty array inside, not the key's
		`{"a":[],"choices":[1]}`,                  // another key's empty array
		`{"x":"choices":[]}`,                      // the word ends a value: no opening quote of its own
		`{"nochoices":[]}`,                        // a longer key ending in choices
		`{"choices":[]`,                           // cut: still the token
		`]]]`, `[]`, `:[]`, `"choices"]`, ``, `]`, // fragments
		`{"choices":{"a":[]}}`,
		`{"choices"::[]}`,
		`{"choices"x[]}`, `{"choices" [ ]}`,
		`{"choices":[ x ]}`,
	} {
		want := emptyChoicesOracle.MatchString(body)
		if got := hasEmptyArrayToken([]byte(body), keyChoices); got != want {
			t.Errorf("hasEmptyArrayToken(%q) = %v, want %v", body, got, want)
		}
	}
}

func FuzzHasEmptyArrayToken(f *testing.F) {
	f.Add(`{"choices":[]}`)
	f.Add(`{"choices" :[ ]}`)
	f.Add(`{"id":"x","choices":[{"index":0}],"usage":{}}`)
	f.Fuzz(func(t *testing.T, body string) {
		want := emptyChoicesOracle.MatchString(body)
		if got := hasEmptyArrayToken([]byte(body), keyChoices); got != want {
			t.Errorf("hasEmptyArrayToken(%q) = %v, want %v", body, got, want)
		}
	})
}
