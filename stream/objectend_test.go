package stream

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// objectEndOf feeds b to a fresh objectEnd in pieces cut at splits, and reports whether it
// took b for a whole object.
func objectEndOf(b []byte, splits ...int) bool {
	var o objectEnd
	o.reset()
	last := 0
	for _, s := range splits {
		o.feed(b[last:s])
		last = s
	}
	o.feed(b[last:])
	return o.whole()
}

// objectEndCases are data an event may carry, with whether each is one whole JSON object.
var objectEndCases = []struct {
	data  string
	whole bool
}{
	{`{}`, true},
	{" \t\r\n{\"a\":1} \n", true},
	{`{"a":"}"}`, true},
	{`{"a":"\"}"}`, true},
	{`{"a":"\\"}`, true},
	{`{"a":"\\\"}\\"}`, true},
	{`{"a":"\u007d"}`, true},
	{`{"a":[{"b":[]},{}],"c":{"d":"]"}}`, true},
	{"{\"a\":\"x\"\n,\"b\":2}", true}, // data lines joined with "\n"
	{strings.Repeat(`{"a":`, 63) + `{}` + strings.Repeat(`}`, 63), true},
	{strings.Repeat(`{"a":`, 64) + `{}` + strings.Repeat(`}`, 64), false}, // deeper than followed
	{``, false},
	{` `, false},
	{`[]`, false},
	{`"x"`, false},
	{`1`, false},
	{`[DONE]`, false},
	{`{`, false},
	{`{"a":"}`, false},
	{`{"a":"\"}`, false},
	{`{"a":{"b":1}`, false},
	{`{"a":[1}`, false},
	{`{"a":1]`, false},
	{`{"a":1}}`, false},
	{`{} {}`, false},
	{`{}x`, false},
	{`x{}`, false},
}

// The shape is read the same under any split, and a whole object is told from one cut short.
func TestObjectEnd(t *testing.T) {
	for _, tc := range objectEndCases {
		b := []byte(tc.data)
		if got := objectEndOf(b); got != tc.whole {
			t.Errorf("%q: whole %v, want %v", tc.data, got, tc.whole)
		}
		for i := 0; i <= len(b); i++ {
			for j := i; j <= len(b); j++ {
				if got := objectEndOf(b, i, j); got != tc.whole {
					t.Fatalf("%q split at %d and %d: whole %v, want %v", tc.data, i, j, got, tc.whole)
				}
			}
		}
	}
}

// Every event's data in the fixtures that is a JSON object is whole, and no proper prefix of it
// that ends in something other than whitespace is: a body cut inside such an event is never
// taken for one that only lacks its blank line.
func TestObjectEndOnFixtureEvents(t *testing.T) {
	objects := 0
	for _, path := range fixturePaths(t) {
		for _, ev := range fixtureEvents(t, path) {
			data := bytes.Trim(ev.Data, jsonSpace)
			if !json.Valid(data) || len(data) == 0 || data[0] != '{' {
				continue
			}
			objects++
			if !objectEndOf(data) {
				t.Fatalf("%s: %q not taken for a whole object", path, data)
			}
			for n := range len(data) {
				if objectEndOf(data[:n]) {
					t.Fatalf("%s: the first %d bytes of %q taken for a whole object", path, n, data)
				}
			}
		}
	}
	if objects < 100 {
		t.Fatalf("only %d JSON objects in the fixtures' events", objects)
	}
}

// Against encoding/json: a valid object nested no deeper than followed is whole; none of its
// proper prefixes is; any split reads as the whole does.
func FuzzObjectEnd(f *testing.F) {
	for _, tc := range objectEndCases {
		f.Add([]byte(tc.data), 1)
	}
	f.Fuzz(func(t *testing.T, b []byte, split int) {
		whole := objectEndOf(b)
		if split >= 0 && split <= len(b) && objectEndOf(b, split) != whole {
			t.Fatalf("%q split at %d reads otherwise", b, split)
		}
		data := bytes.Trim(b, jsonSpace)
		if !json.Valid(data) || len(data) == 0 || data[0] != '{' || nesting(data) > maxObjectDepth {
			return
		}
		if !whole {
			t.Fatalf("%q: a valid object not taken for whole", b)
		}
		for n := range len(data) {
			if objectEndOf(data[:n]) {
				t.Fatalf("%q: its first %d bytes taken for a whole object", data, n)
			}
		}
	})
}

// jsonSpace is JSON's whitespace (RFC 8259), narrower than bytes.TrimSpace's.
const jsonSpace = " \t\r\n"

// nesting returns how deep the brackets of valid JSON go.
func nesting(b []byte) int {
	d, most := 0, 0
	dec := json.NewDecoder(bytes.NewReader(b))
	for {
		tok, err := dec.Token()
		if err != nil {
			return most
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			d++
			most = max(most, d)
		case json.Delim('}'), json.Delim(']'):
			d--
		}
	}
}

// Following the shape of a long event allocates nothing.
func TestObjectEndAllocs(t *testing.T) {
	data := []byte(`{"type":"response.completed","response":{"output":[{"content":[{"text":"` +
		strings.Repeat(`Hello, \"world\". `, 100) + `"}]}]}}`)
	var o objectEnd
	if n := testing.AllocsPerRun(100, func() { o.reset(); o.feed(data) }); n != 0 || !o.whole() {
		t.Fatalf("%v allocations, whole %v", n, o.whole())
	}
}

func BenchmarkObjectEnd(b *testing.B) {
	data := []byte(`{"type":"response.completed","sequence_number":12,"response":{"id":"resp_67ccd3a9da748190baa7f1570fe91ac604becb25c455a2b8","object":"response","created_at":1741476777,"status":"completed","error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":"gpt-4o-2024-08-06","output":[{"type":"message","id":"msg_67ccd3acc8d48190a77525dc6de64b4104becb25c455a2b8","status":"completed","role":"assistant","content":[{"type":"output_text","text":"` +
		strings.Repeat("Hello there, this is text. ", 80) + `","annotations":[]}]}],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":null,"summary":null},"store":true,"temperature":1.0,"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":{"input_tokens":37,"output_tokens":11,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":48},"user":null,"metadata":{}}}`)
	var o objectEnd
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		o.reset()
		o.feed(data)
	}
	if !o.whole() {
		b.Fatal("not whole")
	}
}
