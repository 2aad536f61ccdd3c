package jsonscan

import (
	"fmt"
	"strings"
	"testing"
)

// members walks the container at the start of text and describes each element as key=value
// (the value "..." when Next reported it and Value found it cut or malformed), then how the
// walk ended: "end N" or "broken".
func members(text string) string {
	b := []byte(text)
	var c Cursor
	if !c.OpenObject(b, 0) && !c.OpenArray(b, 0) {
		return "no container"
	}
	var out []string
	for c.Next() {
		key, v := c.Key(), c.Value()
		if v == nil {
			v = []byte("...")
		}
		if key != nil {
			out = append(out, fmt.Sprintf("%s=%s", key, v))
		} else {
			out = append(out, string(v))
		}
	}
	if c.End() < 0 {
		return strings.Join(append(out, "broken"), " ")
	}
	return strings.Join(append(out, fmt.Sprintf("end %d", c.End())), " ")
}

func TestCursor(t *testing.T) {
	for _, tc := range []struct{ name, text, want string }{
		{"members of an object", ` { "a" : 1 , "b":[2,{"c":"}"}] }x`, `a=1 b=[2,{"c":"}"}] end 32`},
		{"values of an array", `[1,"x",null,{}]`, `1 "x" null {} end 15`},
		{"empty object", `{}`, `end 2`},
		{"empty array", `[ ]`, `end 3`},
		{"keys are as sent", `{"mod\u0065l":"m"}`, `mod\u0065l="m" end 18`},
		{"a cut text ends the walk after the members begun", `{"type":"x","error":{"message":"lo`, `type="x" error=... broken`},
		{"a cut key reports nothing", `{"type":"x","err`, `type="x" broken`},
		{"a value must begin in the text", `{"type":"x","error":`, `type="x" broken`},
		{"a number at the end of the text may be cut", `{"index":12`, `index=... broken`},
		{"a number followed by a byte is whole", `{"index":12 `, `index=12 broken`},
		{"a string at the end of the text is whole", `{"type":"x"`, `type="x" broken`},
		{"a literal at the end of the text is whole", `[true`, `true broken`},
		{"a missing comma ends the walk", `{"a":[1 2],"type":"error"}`, `a=... broken`},
		{"a missing comma between members ends the walk", `{"a":1 "type":"error"}`, `a=1 broken`},
		{"a comma before the closing bracket ends the walk", `[1,]`, `1 broken`},
		{"a comma before the first member ends the walk", `{,"a":1}`, `broken`},
		{"a raw control character ends the walk", "{\"a\":\"x\ty\",\"b\":1}", `a=... broken`},
		{"mismatched brackets end the walk", `{"a":[1},"b":2}`, `a=... broken`},
		{"no container", ` "x"`, `no container`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := members(tc.text); got != tc.want {
				t.Errorf("%s:\n got %s\nwant %s", tc.text, got, tc.want)
			}
		})
	}
}

// TestCursorSkipped: a value the caller walked itself is not walked again, and the walk goes
// on from where the caller says it ended.
func TestCursorSkipped(t *testing.T) {
	b := []byte(`[{"index":1,"x":[]},{"index":2}]`)
	var arr Cursor
	var got []string
	for ok := arr.OpenArray(b, 0); ok && arr.Next(); {
		var obj Cursor
		if !obj.OpenObject(b, arr.Start()) {
			t.Fatalf("no object at %d", arr.Start())
		}
		for obj.Next() {
			got = append(got, string(obj.Key())+"="+string(obj.Value()))
		}
		arr.Skipped(obj.End())
	}
	if want := "index=1 x=[] index=2"; strings.Join(got, " ") != want || arr.End() != len(b) {
		t.Errorf("got %q ending at %d, want %q ending at %d", got, arr.End(), want, len(b))
	}
	var c Cursor
	c.OpenArray(b, 0)
	c.Next()
	if c.Skipped(-1); c.Next() || c.End() != -1 {
		t.Error("the walk went on after Skipped(-1)")
	}
}

func TestSkipValueNesting(t *testing.T) {
	nest := func(n int) string { return strings.Repeat(`{"a":[`, n/2) + "0" + strings.Repeat("]}", n/2) }
	for _, tc := range []struct {
		name  string
		value string
		whole bool
	}{
		{"64 deep, within the first stack word", nest(64), true},
		{"66 deep, past the first stack word", nest(66), true},
		{"at the limit", nest(MaxDepth), true},
		{"over the limit", nest(MaxDepth + 2), false},
		{"past the first stack word, mismatched", strings.Repeat("[", 100) + "}", false},
		{"deep and cut", strings.Repeat(`{"a":[`, 100), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			end := SkipValue([]byte(tc.value), 0)
			if whole := end == len(tc.value); whole != tc.whole || !whole && end != -1 {
				t.Errorf("SkipValue = %d of %d bytes, want whole = %v", end, len(tc.value), tc.whole)
			}
		})
	}
	// In a walked container the container is the first level.
	inner := nest(MaxDepth - 2)
	if text := `{"x":[` + inner + `]}`; !strings.HasSuffix(members(text), fmt.Sprintf("end %d", len(text))) {
		t.Errorf("an object nesting %d deep: %.40s", MaxDepth, members(text))
	}
	if got := members(`{"x":[[` + inner + `]]}`); got != "x=... broken" {
		t.Errorf("an object nesting %d deep: %.40s", MaxDepth+1, got)
	}
}

// TestSkipValueDepth: a value nested deeper than the depth asked for is not taken, however
// valid; one within it is skipped as SkipValue skips it.
func TestSkipValueDepth(t *testing.T) {
	for _, tc := range []struct {
		value string
		depth int
		whole bool
	}{
		{`"a"`, 0, true},
		{`12 `, 0, true},
		{`[]`, 0, false},
		{`[]`, 1, true},
		{`{"a":[1,{"b":null}],"c":{}}`, 3, true},
		{`{"a":[1,{"b":null}],"c":{}}`, 2, false},
		{`[[1],[2],[3]]`, 2, true},
		{strings.Repeat("[", 64) + strings.Repeat("]", 64), 64, true},
		{strings.Repeat("[", 65) + strings.Repeat("]", 65), 64, false},
		{strings.Repeat("[", 65) + strings.Repeat("]", 65), MaxDepth + 1, true},
		{`{"a":[1}`, 5, false},
	} {
		end := SkipValueDepth([]byte(tc.value), 0, tc.depth)
		if whole := end == len(strings.TrimSpace(tc.value)); whole != tc.whole || !whole && end != -1 {
			t.Errorf("SkipValueDepth(%.20s, %d) = %d, want whole = %v", tc.value, tc.depth, end, tc.whole)
		}
	}
}

func TestZeroAllocsScan(t *testing.T) {
	chunk := []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hi \"there\""},"finish_reason":null}],"usage":null}`)
	deep := []byte(`{"x":` + strings.Repeat("[", 500) + strings.Repeat("]", 500) + `,"model":"gpt-4o\u002dmini"}`)
	var dst []byte
	run := func() {
		for _, b := range [][]byte{chunk, deep} {
			var c Cursor
			for ok := c.OpenObject(b, 0); ok && c.Next(); {
				if v := c.Value(); StringIs(c.Key(), "model") {
					dst = AppendString(dst[:0], v[1:len(v)-1])
				}
			}
			if c.End() != len(b) {
				t.Fatalf("walk ended at %d", c.End())
			}
		}
	}
	run()
	if allocs := testing.AllocsPerRun(100, run); allocs != 0 {
		t.Errorf("%v allocations per walk, want 0", allocs)
	}
}
