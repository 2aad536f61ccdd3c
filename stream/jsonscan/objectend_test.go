package jsonscan

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// ObjectEnd reads, of a text fed in pieces, what SkipValue reads of it kept whole: the tests
// below check the two agree on every object SkipValue takes (nested no deeper than ObjectEnd
// follows) and on every cut of one, under any split into pieces.

// objectEndOf feeds b to a fresh ObjectEnd in pieces cut at splits, and reports whether it
// took b for a whole object.
func objectEndOf(b []byte, splits ...int) bool {
	var o ObjectEnd
	last := 0
	for _, s := range splits {
		o.Feed(b[last:s])
		last = s
	}
	o.Feed(b[last:])
	return o.Whole()
}

// skippedObject reports that SkipValue takes b, trimmed of JSON whitespace, for one object
// nested no deeper than ObjectEnd follows: the texts ObjectEnd must take for whole.
func skippedObject(b []byte) bool {
	return len(b) > 0 && b[0] == '{' && SkipValueDepth(b, 0, objectEndDepth) == len(b)
}

// checkObjectEndAgrees checks ObjectEnd against SkipValue on b: when SkipValue takes it for one
// object, ObjectEnd does, whole and under the split given, and takes none of its proper
// prefixes (cut where an event's data may be) for whole.
func checkObjectEndAgrees(t *testing.T, b []byte, split int) {
	t.Helper()
	whole := objectEndOf(b)
	if split >= 0 && split <= len(b) && objectEndOf(b, split) != whole {
		t.Fatalf("%q split at %d reads otherwise", b, split)
	}
	data := bytes.Trim(b, jsonSpace)
	if !skippedObject(data) {
		return
	}
	if !whole {
		t.Fatalf("%q: an object SkipValue takes, not taken for whole", b)
	}
	for n := range len(data) {
		if objectEndOf(data[:n]) {
			t.Fatalf("%q: its first %d bytes taken for a whole object", data, n)
		}
	}
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
	{strings.Repeat(`{"a":`, 64) + `{}` + strings.Repeat(`}`, 64), false}, // deeper than followed (objectEndDepth)
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

// Every event's data in the SSE fixtures (testdata/sse) that SkipValue takes for an object is
// whole, and no proper prefix of it that ends in something other than whitespace is: a body
// cut inside such an event is never taken for one that only lacks its blank line.
func TestObjectEndOnFixtureEvents(t *testing.T) {
	paths, err := filepath.Glob("../../testdata/sse/*/*.sse")
	if err != nil || len(paths) == 0 {
		t.Fatalf("fixtures: %v (%d files)", err, len(paths))
	}
	objects := 0
	for _, path := range paths {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, data := range eventData(raw) {
			if skippedObject(bytes.Trim(data, jsonSpace)) {
				objects++
			}
			checkObjectEndAgrees(t, data, len(data)/2)
		}
	}
	if objects < 100 {
		t.Fatalf("only %d JSON objects in the fixtures' events", objects)
	}
}

// eventData returns the data of each event of an SSE stream: its data lines' values joined
// with "\n", as the event-stream standard reads them (the fixtures have no byte-order mark).
func eventData(raw []byte) [][]byte {
	raw = bytes.ReplaceAll(raw, []byte("\r\n"), []byte("\n"))
	raw = bytes.ReplaceAll(raw, []byte("\r"), []byte("\n"))
	var out [][]byte
	for _, record := range bytes.Split(raw, []byte("\n\n")) {
		var data []byte
		seen := false
		for _, line := range bytes.Split(record, []byte("\n")) {
			v, ok := bytes.CutPrefix(line, []byte("data:"))
			if !ok {
				continue
			}
			if seen {
				data = append(data, '\n')
			}
			seen = true
			data = append(data, bytes.TrimPrefix(v, []byte(" "))...)
		}
		if seen {
			out = append(out, data)
		}
	}
	return out
}

// FuzzObjectEnd: on any text and any split into two pieces, ObjectEnd agrees with SkipValue
// (checkObjectEndAgrees). Seeds: the table above, FuzzScan's corpus (testdata/fuzz/FuzzScan:
// requests, events and the scanner's edge cases) and its own, testdata/fuzz/FuzzObjectEnd.
func FuzzObjectEnd(f *testing.F) {
	for _, tc := range objectEndCases {
		f.Add([]byte(tc.data), 1)
	}
	for _, b := range corpus(f, "FuzzScan") {
		f.Add(b, len(b)/2)
	}
	f.Fuzz(checkObjectEndAgrees)
}

// corpus returns the []byte argument of each input in the fuzz corpus of target (files of the
// form "go test fuzz v1", then one Go literal a line), so that another target's inputs can
// seed a test.
func corpus(t testing.TB, target string) [][]byte {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("testdata", "fuzz", target, "*"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("the corpus of %s: %v (%d files)", target, err, len(paths))
	}
	var out [][]byte
	for _, path := range paths {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(raw), "\n") {
			if lit, ok := strings.CutPrefix(line, "[]byte("); ok {
				s, err := strconv.Unquote(strings.TrimSuffix(lit, ")"))
				if err != nil {
					t.Fatalf("%s: %v", path, err)
				}
				out = append(out, []byte(s))
			}
		}
	}
	return out
}

// jsonSpace is JSON's whitespace (RFC 8259), narrower than bytes.TrimSpace's.
const jsonSpace = " \t\r\n"

// Following the shape of a long event allocates nothing.
func TestObjectEndAllocs(t *testing.T) {
	data := []byte(`{"type":"response.completed","response":{"output":[{"content":[{"text":"` +
		strings.Repeat(`Hello, \"world\". `, 100) + `"}]}]}}`)
	var o ObjectEnd
	if n := testing.AllocsPerRun(100, func() { o.Reset(); o.Feed(data) }); n != 0 || !o.Whole() {
		t.Fatalf("%v allocations, whole %v", n, o.Whole())
	}
}

func BenchmarkObjectEnd(b *testing.B) {
	data := []byte(`{"type":"response.completed","sequence_number":12,"response":{"id":"resp_67ccd3a9da748190baa7f1570fe91ac604becb25c455a2b8","object":"response","created_at":1741476777,"status":"completed","error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":"gpt-4o-2024-08-06","output":[{"type":"message","id":"msg_67ccd3acc8d48190a77525dc6de64b4104becb25c455a2b8","status":"completed","role":"assistant","content":[{"type":"output_text","text":"` +
		strings.Repeat("Hello there, this is text. ", 80) + `","annotations":[]}]}],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":null,"summary":null},"store":true,"temperature":1.0,"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":{"input_tokens":37,"output_tokens":11,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":48},"user":null,"metadata":{}}}`)
	var o ObjectEnd
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		o.Reset()
		o.Feed(data)
	}
	if !o.Whole() {
		b.Fatal("not whole")
	}
}
