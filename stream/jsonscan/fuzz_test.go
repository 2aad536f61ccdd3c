package jsonscan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
	"unicode/utf8"
)

// FuzzScan checks the scanner against encoding/json, on any input: it never panics; SkipValue
// takes a text for one valid JSON value exactly when json.Valid does (a space is appended, so
// that a number at the end is known to end); on a valid object or array, a Cursor walks the
// elements encoding/json reads, with the same keys (StringIs and AppendString decode them as
// encoding/json does) and the same value bytes, and ends where SkipValue ends; and on every
// prefix of it, the walk reports the elements that begin in the prefix, as the whole text has
// them, and no value the prefix cuts. Seeds: testdata/fuzz/FuzzScan.
func FuzzScan(f *testing.F) {
	for _, s := range []string{
		`{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
		`{"choices":[{"index":1,"delta":{},"finish_reason":"stop"}],"usage":null}`,
		`[1, -0.5e+10, "a\"b", true, false, null, {}, []]`,
		`{"mod\u0065l":"x","k\ud83d\ude00":1,"\ud83d":2}`,
		`{"a":[1 2],"type":"error"}`,
		`{"a":1,}`,
		`12`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		spaced := append(b[:len(b):len(b)], ' ')
		end := SkipValue(spaced, SkipSpace(spaced, 0))
		valid := end >= 0 && SkipSpace(spaced, end) == len(spaced)
		if valid != json.Valid(b) {
			t.Fatalf("SkipValue takes it for one JSON value: %v; json.Valid: %v\n%s", valid, !valid, show(b))
		}
		whole := walk(t, b)
		if !valid {
			return
		}
		i := SkipSpace(b, 0)
		if b[i] != '{' && b[i] != '[' {
			return
		}
		want := decode(t, b)
		if len(whole.elems) != len(want) || whole.end != end {
			t.Fatalf("the walk read %d elements and ended at %d; encoding/json reads %d, SkipValue ends at %d\n%s",
				len(whole.elems), whole.end, len(want), end, show(b))
		}
		for n, e := range whole.elems {
			w := want[n]
			if !bytes.Equal(e.value, w.value) {
				t.Fatalf("element %d: value %s, encoding/json %s\n%s", n, e.value, w.value, show(b))
			}
			if e.key == nil || !utf8.Valid(e.key) {
				continue // encoding/json replaces invalid UTF-8; AppendString keeps it as sent
			}
			if got := AppendString(nil, e.key); string(got) != w.key || !StringIs(e.key, w.key) {
				t.Fatalf("element %d: key %q decodes to %q (StringIs %v); encoding/json %q", n, e.key, got, StringIs(e.key, w.key), w.key)
			}
		}
		// Prefixes: every cut of a short text, an even spread of cuts of a long one.
		step := max(1, len(b)/64)
		for k := 0; k < len(b); k += step {
			checkPrefix(t, b, k, whole)
		}
	})
}

type element struct {
	key   []byte // nil for an array's values
	start int
	value []byte // nil when the text cuts it
}

type walked struct {
	elems []element
	end   int
}

// walk reads every element of the container b starts with, checking what any walk must look
// like, whatever b holds.
func walk(t *testing.T, b []byte) walked {
	t.Helper()
	var c Cursor
	i := SkipSpace(b, 0)
	if !c.OpenObject(b, i) && !c.OpenArray(b, i) {
		if c.End() != -1 || c.Next() {
			t.Fatalf("a walk of no container went on\n%s", show(b))
		}
		return walked{end: -1}
	}
	var w walked
	for c.Next() {
		e := element{key: c.Key(), start: c.Start()}
		if e.start <= i || e.start >= len(b) || !valueStart[b[e.start]] {
			t.Fatalf("a value starts at %d\n%s", e.start, show(b))
		}
		if e.value = c.Value(); e.value != nil && (&e.value[0] != &b[e.start] || SkipValue(b, e.start) != e.start+len(e.value)) {
			t.Fatalf("value %q at %d is not the value SkipValue finds there\n%s", e.value, e.start, show(b))
		}
		w.elems = append(w.elems, e)
		i = e.start
	}
	w.end = c.End()
	if c.Next() || c.Key() != nil || c.Value() != nil {
		t.Fatalf("the walk went on after its end\n%s", show(b))
	}
	if w.end >= 0 && (w.end > len(b) || b[w.end-1] != '}' && b[w.end-1] != ']') {
		t.Fatalf("the walk ended at %d, past no closing bracket\n%s", w.end, show(b))
	}
	return w
}

// checkPrefix checks the walk of b[:k] against the walk of the whole valid text b.
func checkPrefix(t *testing.T, b []byte, k int, whole walked) {
	t.Helper()
	cut := walk(t, b[:k:k])
	begun := 0 // the elements whose value begins before k
	for _, e := range whole.elems {
		if e.start < k {
			begun++
		}
	}
	if n := len(cut.elems); n != begun {
		t.Fatalf("cut at %d: the walk read %d elements, %d begin before the cut\n%s", k, n, begun, show(b))
	}
	for n, e := range cut.elems {
		w := whole.elems[n]
		if !bytes.Equal(e.key, w.key) || e.start != w.start || e.value != nil && !bytes.Equal(e.value, w.value) {
			t.Fatalf("cut at %d, element %d: %q at %d = %s; the whole text has %q at %d = %s", k, n, e.key, e.start, e.value, w.key, w.start, w.value)
		}
		if e.value != nil && e.start+len(e.value) == k && b[k-1] >= '0' && b[k-1] <= '9' {
			t.Fatalf("cut at %d: the number %s was taken as whole", k, e.value)
		}
	}
	if want := whole.end; k < want && cut.end != -1 || k >= want && cut.end != want {
		t.Fatalf("cut at %d: the walk ended at %d; the container ends at %d", k, cut.end, want)
	}
}

// decode reads the elements of a valid JSON object or array with encoding/json: decoded keys
// and raw values.
func decode(t *testing.T, b []byte) []struct {
	key   string
	value []byte
} {
	t.Helper()
	var out []struct {
		key   string
		value []byte
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	open, err := dec.Token()
	if err != nil {
		t.Fatal(err)
	}
	for dec.More() {
		var key string
		if open == json.Delim('{') {
			tok, err := dec.Token()
			if err != nil {
				t.Fatal(err)
			}
			key = tok.(string)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		out = append(out, struct {
			key   string
			value []byte
		}{key, v})
	}
	return out
}

// show quotes a text for a failure message, cut to a readable length.
func show(b []byte) string {
	if len(b) > 300 {
		return fmt.Sprintf("%q... (%d bytes)", b[:300], len(b))
	}
	return fmt.Sprintf("%q", b)
}
