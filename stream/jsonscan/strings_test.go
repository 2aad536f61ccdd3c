package jsonscan

import "testing"

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
