package proxy

import "testing"

// A Responses API request stores its response unless its top-level "store" is the literal false
// (docs/streams.md#hedging): scanRequest says which, as any JSON parser reads the body.
func TestScanRequestStore(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		noStore    bool
	}{
		{"store false", `{"model":"gpt-4o","input":"hi","store":false}`, true},
		{"store false with spaces", `{ "store" : false , "model":"gpt-4o"}`, true},
		{"store false with an escaped key", `{"st\u006fre":false}`, true},
		{"absent is stored", `{"model":"gpt-4o","input":"hi"}`, false},
		{"store true", `{"model":"gpt-4o","store":true}`, false},
		{"the string false is not the literal", `{"store":"false"}`, false},
		{"null is not false", `{"store":null}`, false},
		{"0 is not false", `{"store":0}`, false},
		{"a nested store does not count", `{"metadata":{"store":false},"text":[{"store":false}]}`, false},
		{"the last of two wins: false", `{"store":true,"store":false}`, true},
		{"the last of two wins: true", `{"store":false,"store":true}`, false},
		{"a key that only starts with store", `{"stored":false,"store_id":false}`, false},
		{"not JSON after a store false", `{"store":false,}`, false},
		{"not an object", `[{"store":false}]`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := scanRequest([]byte(tc.body)).noStore; got != tc.noStore {
				t.Fatalf("%s: noStore = %v, want %v", tc.body, got, tc.noStore)
			}
		})
	}
}

// Reading "store" costs the scan no allocation.
func TestScanRequestAllocs(t *testing.T) {
	body := []byte(`{"model":"gpt-4o-mini","input":[{"role":"user","content":"Say hello"}],"store":false,"stream":true}`)
	var f requestFields
	if n := testing.AllocsPerRun(200, func() { f = scanRequest(body) }); n != 0 {
		t.Fatalf("scanRequest allocates %v times per call, want 0", n)
	}
	if !f.json || !f.noStore || !f.stream || string(f.model) != "gpt-4o-mini" {
		t.Fatalf("%+v", f)
	}
}
