package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
	"unicode/utf8"

	"github.com/llm-failover/failover/stream/jsonscan"
)

// FuzzScanRequest checks the request scanner against encoding/json: it says json=true
// exactly for a body that is a valid JSON object; on such a body its model, stream and noStore
// are the document's top-level "model" (raw string contents, escapes as sent, and decoded as
// encoding/json decodes it), "stream" (the literal true) and "store" (the literal false), later
// duplicates winning; on any other body it reads nothing; and substituting the model changes the model's string literal
// and not another byte. It never panics. Seeds: testdata/fuzz/FuzzScanRequest.
func FuzzScanRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
		` { "stream" : false , "model" : "a\"b" } `,
		`{"model":"x","model":{"y":1}}`,
		`{}`,
		`[]`,
		`{"a":[1,{"b":"]"}],"stream":true}`,
		`{"mod\u0065l":"gpt-4o","str\u0065am":true,"m\u006fdel\n":"x","model\u0000":"y"}`,
		`{"model":"openai\/gpt\u002d4o \ud83d\ude00 \ud83d\u0041 \ude00 \"\\\b\f\n\r\t"}`,
		`{"model":"gpt-4o","store":false,"input":"hi","stream":true}`,
		`{"store":false,"metadata":{"store":true},"st\u006fre":"false"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got := scanRequest(body)
		checkScanShape(t, body, got)

		object := isJSONObject(body)
		if got.json != object {
			t.Fatalf("scanRequest says json=%v, encoding/json says a valid object=%v:\n%s", got.json, object, show(body))
		}
		if !object {
			return
		}
		model, hasModel, stream, noStore := topLevel(t, body)
		switch {
		case hasModel && (got.modelStart < 0 || !bytes.Equal(got.model, model)):
			t.Fatalf("model: scanned %q (at %d), the document has %q:\n%s", got.model, got.modelStart, model, show(body))
		case !hasModel && got.modelStart >= 0:
			t.Fatalf("model: scanned %q, the document has no string model:\n%s", got.model, show(body))
		case got.stream != stream:
			t.Fatalf("stream: scanned %v, the document has %v:\n%s", got.stream, stream, show(body))
		case got.noStore != noStore:
			t.Fatalf("store: scanned noStore=%v, the document's store is false: %v:\n%s", got.noStore, noStore, show(body))
		}
		if !hasModel {
			return
		}
		var decoded string
		if err := json.Unmarshal(body[got.modelStart:got.modelEnd], &decoded); err != nil {
			t.Fatalf("the model literal: %v", err)
		}
		if dec := jsonscan.AppendString(nil, got.model); utf8.Valid(got.model) && string(dec) != decoded {
			t.Fatalf("model decoded as %q, encoding/json decodes %q:\n%s", dec, decoded, show(body))
		}
		const sub = "fuzz-model"
		out := appendSubstitutedBody(nil, body, &got, []byte(sub))
		want := append(append(append([]byte(nil), body[:got.modelStart]...), `"`+sub+`"`...), body[got.modelEnd:]...)
		if !bytes.Equal(out, want) {
			t.Fatalf("substitution changed other bytes:\n%s\n%s", show(body), show(out))
		}
		again := scanRequest(out)
		if !again.json || string(again.model) != sub || again.stream != got.stream || again.noStore != got.noStore || !isJSONObject(out) {
			t.Fatalf("after substitution: json=%v model=%q stream=%v noStore=%v:\n%s", again.json, again.model, again.stream, again.noStore, show(out))
		}
		var before, after map[string]json.RawMessage
		if json.Unmarshal(body, &before) != nil || json.Unmarshal(out, &after) != nil {
			t.Fatalf("substitution broke the document:\n%s", show(out))
		}
		for k, v := range before {
			if k != "model" && !bytes.Equal(after[k], v) {
				t.Fatalf("substitution changed %q: %q → %q", k, v, after[k])
			}
		}
	})
}

// checkScanShape checks what any scan result must look like, whatever the body.
func checkScanShape(t *testing.T, body []byte, f requestFields) {
	t.Helper()
	if !f.json {
		if f.model != nil || f.modelStart != -1 || f.stream || f.noStore {
			t.Fatalf("fields read from a body that is not a JSON object: model=%q start=%d stream=%v noStore=%v\n%s", f.model, f.modelStart, f.stream, f.noStore, show(body))
		}
		return
	}
	if f.modelStart < 0 {
		if f.model != nil {
			t.Fatalf("a model without a position: %q", f.model)
		}
		return
	}
	if f.modelStart >= f.modelEnd || f.modelEnd > len(body) || body[f.modelStart] != '"' || body[f.modelEnd-1] != '"' ||
		!bytes.Equal(f.model, body[f.modelStart+1:f.modelEnd-1]) {
		t.Fatalf("model %q at [%d,%d) is not a string literal of the body:\n%s", f.model, f.modelStart, f.modelEnd, show(body))
	}
}

// show quotes a body for a failure message, cut to a readable length.
func show(b []byte) string {
	if len(b) > 300 {
		return fmt.Sprintf("%q... (%d bytes)", b[:300], len(b))
	}
	return fmt.Sprintf("%q", b)
}

// isJSONObject reports whether b is one valid JSON document whose value is an object.
func isJSONObject(b []byte) bool {
	if !json.Valid(b) {
		return false
	}
	return bytes.HasPrefix(bytes.TrimLeft(b, " \t\r\n"), []byte("{"))
}

// topLevel decodes a valid JSON object's top-level "model" (the raw contents of its string
// literal, when it is a string; the last one wins), "stream" (whether it is the literal true)
// and "store" (whether it is the literal false), their keys however they are spelt
// ("mod\u0065l" is "model").
func topLevel(t *testing.T, body []byte) (model []byte, hasModel, stream, noStore bool) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not an object: %v %v", tok, err)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("key: %v", err)
		}
		key := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("value: %v", err)
		}
		switch key {
		case "model":
			hasModel = len(v) >= 2 && v[0] == '"'
			model = nil
			if hasModel {
				model = v[1 : len(v)-1]
			}
		case "stream":
			stream = string(v) == "true"
		case "store":
			noStore = string(v) == "false"
		}
	}
	return model, hasModel, stream, noStore
}

func TestScanErrorShape(t *testing.T) {
	for _, tc := range []struct {
		payload      string
		shaped, bare bool
	}{
		{`{"error":{"message":"x"}}`, true, false},
		{`{"type":"error","error":{"type":"overloaded_error","message":"x"}}`, true, false},
		{`{"code":400,"message":"too long","type":"invalid_request_error"}`, false, true},
		{` {"message":"x"} `, false, true},
		{`{"message":7}`, false, false},
		{`{"error":null,"message":"x"}`, false, true},
		{`{"message":"x"`, false, false},
		{`{"message":"x"} trailing`, false, false},
		{`["message"]`, false, false},
		{`not json`, false, false},
	} {
		if shaped, bare := scanErrorShape([]byte(tc.payload)); shaped != tc.shaped || bare != tc.bare {
			t.Errorf("%s: shaped %v bare %v, want %v %v", tc.payload, shaped, bare, tc.shaped, tc.bare)
		}
	}
}
