package jsonscan

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestAppendString was proxy's TestAppendJSONString, moved here with the function.
func TestAppendString(t *testing.T) {
	for raw, want := range map[string]string{
		`plain`:            "plain",
		`a\/b`:             "a/b",
		`\"\\\b\f\n\r\t`:   "\"\\\b\f\n\r\t",
		`\u00e9\u4e2d`:     "é中",
		`\ud83d\ude00`:     "😀",
		`x\ud83dy`:         "x\ufffdy",
		`\ud83d\u0041`:     "\ufffdA",
		`\ude00\ud83d`:     "\ufffd\ufffd",
		`\ud83d`:           "\ufffd",
		`caf\u00E9 \u002D`: "café -",
	} {
		if got := string(AppendString([]byte("<"), []byte(raw))); got != "<"+want {
			t.Errorf("%s: %q, want %q", raw, got, "<"+want)
		}
	}
}

func TestStringIs(t *testing.T) {
	for _, tc := range []struct {
		raw, want string
		is        bool
	}{
		{`model`, "model", true},
		{`mod\u0065l`, "model", true},
		{`\u006D\u006f\u0064\u0065\u006c`, "model", true},
		{`model\n`, "model", false},
		{`mode`, "model", false},
		{`model\u0000`, "model", false},
		{`Model`, "model", false},
		{`caf\u00e9`, "café", true},
		{`\ud83d\ude00`, "😀", true},
		{`\ud83d`, "\ufffd", true},
		{`a\/b`, "a/b", true},
		{``, "", true},
	} {
		if got := StringIs([]byte(tc.raw), tc.want); got != tc.is {
			t.Errorf("StringIs(%s, %q) = %v, want %v", tc.raw, tc.want, got, tc.is)
		}
	}
}

// AppendQuote writes each string as a JSON string that reads back as encoding/json's writing
// of it does (invalid UTF-8 replaced byte by byte), with the byte to escape at every place
// around the eight-byte steps.
func TestAppendQuoteReadsBack(t *testing.T) {
	check := func(s string) {
		t.Helper()
		var ours, theirs string
		if err := json.Unmarshal(AppendQuote(nil, s), &ours); err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		want, _ := json.Marshal(s)
		if err := json.Unmarshal(want, &theirs); err != nil || ours != theirs {
			t.Fatalf("%q: reads back as %q, want %q", s, ours, theirs)
		}
	}
	for _, special := range []string{`"`, `\`, "\x00", "\x1f", "\x7f", "é", "\xff", "\u2028", "日"} {
		for n := range 20 {
			for at := 0; at <= n; at++ {
				check(strings.Repeat("a", at) + special + strings.Repeat("b", n-at))
			}
		}
	}
}

func FuzzAppendQuote(f *testing.F) {
	f.Add("4bf92f3577b34da6a3ce929d0e0e4736")
	f.Add("/v1/chat/\"completions\"\x00\xff")
	f.Fuzz(func(t *testing.T, s string) {
		var ours, theirs string
		want, _ := json.Marshal(s)
		if err := json.Unmarshal(AppendQuote(nil, s), &ours); err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		if json.Unmarshal(want, &theirs); ours != theirs {
			t.Fatalf("%q: reads back as %q, want %q", s, ours, theirs)
		}
	})
}
