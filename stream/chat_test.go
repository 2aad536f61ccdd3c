package stream

import (
	"bytes"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// parsedChat is the slow path's answer for a chat event's data: a fastjson parse,
// classifyChat, and classifyText for what is not JSON. data is trimmed, as classify gives it.
func parsedChat(data, name []byte) Decision {
	g := Gate{family: Chat}
	p := parsers.Get()
	defer parsers.Put(p)
	return g.classifyJSON(p, data, name)
}

// chatNames are the event names that can change a chat event's answer, and one that cannot.
var chatNames = [][]byte{nil, []byte("error"), []byte("message")}

// Provider chunks scanChat must decide on its own, each with its answer.
var chatScanCommon = []struct {
	name, data string
	want       Decision
}{
	{"openai role chunk", `{"id":"chatcmpl-AxT9fake0001","object":"chat.completion.chunk","created":1732874400,"model":"gpt-4o-mini-2024-07-18","service_tier":"default","system_fingerprint":"fp_0aa8d3e20b","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}`, Hold},
	{"openai content chunk", `{"id":"chatcmpl-AxT9fake0001","object":"chat.completion.chunk","created":1732874400,"model":"gpt-4o-mini-2024-07-18","service_tier":"default","system_fingerprint":"fp_0aa8d3e20b","choices":[{"index":0,"delta":{"content":"Hello"},"logprobs":null,"finish_reason":null}],"usage":null}`, Commit},
	{"openai obfuscation", `{"id":"chatcmpl-BbX2","object":"chat.completion.chunk","created":1748000000,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"q"}`, Hold},
	{"openai usage only", `{"id":"chatcmpl-AxTL","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":0,"total_tokens":5,"prompt_tokens_details":{"cached_tokens":0}}}`, Hold},
	{"openai finish chunk", `{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}`, Commit},
	{"openai tool call role chunk", `{"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":null,"refusal":null},"logprobs":null,"finish_reason":null}]}`, Hold},
	{"openai empty tool calls", `{"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":null,"refusal":null,"tool_calls":[]},"logprobs":null,"finish_reason":null}]}`, Hold},
	{"openai tool call", `{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_x","type":"function","function":{"name":"get_weather","arguments":"{\"location\":\"Paris\"}"}}]},"logprobs":null,"finish_reason":null}]}`, Commit},
	{"openai logprobs", `{"id":"c","choices":[{"index":0,"delta":{"content":"Hi"},"logprobs":{"content":[{"token":"Hi","logprob":-0.31,"bytes":[72,105],"top_logprobs":[]}]},"finish_reason":null}]}`, Commit},
	{"openai audio", `{"id":"c","choices":[{"index":0,"delta":{"audio":{"id":"audio_1","transcript":"Hi"}},"finish_reason":null}]}`, Commit},
	{"azure prompt filter", `{"choices":[],"created":0,"id":"","model":"","object":"","prompt_filter_results":[{"prompt_index":0,"content_filter_results":{"hate":{"filtered":false,"severity":"safe"},"self_harm":{"filtered":false,"severity":"safe"}}}]}`, Hold},
	{"azure role chunk", `{"choices":[{"content_filter_results":{},"delta":{"content":"","refusal":null,"role":"assistant"},"finish_reason":null,"index":0,"logprobs":null}],"created":1732874640,"id":"chatcmpl-AxTC","model":"gpt-4o","object":"chat.completion.chunk","system_fingerprint":"fp_b705f0c291"}`, Hold},
	{"azure content chunk", `{"choices":[{"content_filter_results":{"hate":{"filtered":false,"severity":"safe"}},"delta":{"content":"Hi"},"finish_reason":null,"index":0,"logprobs":null}],"created":1732874640,"id":"chatcmpl-AxTC","model":"gpt-4o","object":"chat.completion.chunk"}`, Commit},
	{"groq role chunk", `{"id":"chatcmpl-AxTI","object":"chat.completion.chunk","created":1732875000,"model":"llama-3.3-70b-versatile","system_fingerprint":"fp_fake00groq","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"x_groq":{"id":"req_fake"}}`, Hold},
	{"groq usage", `{"id":"c","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"x_groq":{"id":"req_1","usage":{"queue_time":0.018,"prompt_tokens":9,"prompt_time":1e-3,"total_tokens":18}}}`, Commit},
	{"deepseek role chunk", `{"id":"5f1c0d2e","object":"chat.completion.chunk","created":1732874520,"model":"deepseek-reasoner","system_fingerprint":"fp_7e73fd9a08_prod0225","choices":[{"index":0,"delta":{"role":"assistant","content":null,"reasoning_content":""},"logprobs":null,"finish_reason":null}]}`, Hold},
	{"deepseek reasoning", `{"id":"5f1c0d2e","object":"chat.completion.chunk","created":1732874520,"model":"deepseek-reasoner","choices":[{"index":0,"delta":{"content":null,"reasoning_content":"Okay"},"logprobs":null,"finish_reason":null}]}`, Commit},
	{"openrouter reasoning", `{"id":"gen-1","provider":"Fireworks","model":"m","object":"chat.completion.chunk","created":1732874580,"choices":[{"index":0,"delta":{"role":"assistant","content":"","reasoning":null,"reasoning_details":[]},"finish_reason":null,"native_finish_reason":null,"logprobs":null}]}`, Hold},
	{"error null", `{"id":"c","choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":null}],"error":null}`, Hold},
	{"error object", `{"error":{"message":"Rate limit reached for gpt-4o","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`, Error},
	{"error after choices", `{"choices":[{"delta":{"content":"a"}}],"error":"x"}`, Error},
	{"spaced", "{ \"choices\" : [ { \"delta\" : { \"content\" : \"\" } , \"finish_reason\" : \"\" } ] ,\n\t\"usage\" : { } }", Hold},
	{"a whole completion's message", `{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},"finish_reason":null}]}`, Commit},
	{"an empty message", `{"choices":[{"index":0,"message":{"role":"assistant","content":null},"finish_reason":null}]}`, Hold},
	{"choices not an array", `{"choices":{}}`, Commit},
	{"choices null", `{"choices":null}`, Commit},
	{"no choices", `{"object":"chat.completion.chunk","status":"generating","text":"Hi"}`, Commit},
	{"delta null", `{"choices":[{"index":0,"delta":null,"finish_reason":null}]}`, Hold},
	{"content array", `{"choices":[{"delta":{"content":[{"type":"text","text":"Hi"}]}}]}`, Commit},
	{"empty content array", `{"choices":[{"delta":{"content":[ ]}}]}`, Hold},
	{"content false", `{"choices":[{"delta":{"content":false,"refusal":{}}}]}`, Hold},
	{"content zero", `{"choices":[{"delta":{"content":0}}]}`, Commit},
	{"finish_reason true", `{"choices":[{"finish_reason":true}]}`, Commit},
	{"a choice that is not an object", `{"choices":[1,"x",null,[{"delta":{"content":"Hi"}}]]}`, Hold},
	{"duplicate choices: the first counts", `{"choices":[{"delta":{}}],"choices":[{"delta":{"content":"Hi"}}]}`, Hold},
	{"duplicate error: the first counts", `{"error":null,"error":{"message":"x"},"choices":[]}`, Hold},
	{"duplicate delta: every one counts", `{"choices":[{"delta":{"content":"Hi"},"delta":{}}]}`, Commit},
	{"escaped key below the levels read", `{"choices":[{"delta":{"tool_calls":[{"function":{"n\u0061me":"f"}}]}}],"usage":{"c\u0061ched":1}}`, Commit},
	{"escapes in values", `{"choices":[{"delta":{"content":"\u0000\"\\"}}]}`, Commit},
	{"nested within the bound", `{"choices":[],"x":` + strings.Repeat("[", chatScanDepth) + strings.Repeat("]", chatScanDepth) + `}`, Hold},
	{"not an object", `[{"choices":[]}]`, Commit},
	{"not JSON", `Hello from a server that does not speak JSON`, Commit},
	{"[DONE] as data", `[DONE]`, Commit},
}

// Shapes scanChat must leave to the parse: it could not be sure of the parse's answer.
var chatScanRisky = []struct{ name, data string }{
	{"escaped key at the top", `{"ch\u006fices":[{"delta":{}}]}`},
	{"escaped error key", `{"choices":[],"\u0065rror":{"message":"x"}}`},
	{"escaped key in a choice", `{"choices":[{"d\u0065lta":{"content":"x"}}]}`},
	{"escaped key in a delta", `{"choices":[{"delta":{"c\u006fntent":"x"}}]}`},
	{"escaped other key at the top", `{"\u0069d":"c","choices":[]}`},
	{"nested past the bound", `{"choices":[],"x":` + strings.Repeat("[", chatScanDepth+1) + strings.Repeat("]", chatScanDepth+1) + `}`},
	{"nested past fastjson's limit", `{"choices":[],"x":` + strings.Repeat("[", 400) + strings.Repeat("]", 400) + `}`},
	{"leading zero, which fastjson takes", `{"choices":[],"created":01}`},
	{"plus sign, which fastjson takes", `{"choices":[],"created":+1}`},
	{"NaN, which fastjson takes", `{"choices":[],"x":NaN}`},
	{"a control character in a string", "{\"choices\":[{\"delta\":{\"content\":\"a\tb\"}}]}"},
	{"a bad escape", `{"choices":[],"id":"\x"}`},
	{"trailing garbage", `{"choices":[]}x`},
	{"two objects", `{"choices":[]}{"error":{}}`},
	{"cut", `{"choices":[{"delta":{"content":"Hi"`},
	{"trailing comma", `{"choices":[],}`},
}

// TestScanChatDecidesCommonChunks: the walk decides the provider shapes alone, and as the parse
// decides them.
func TestScanChatDecidesCommonChunks(t *testing.T) {
	for _, tc := range chatScanCommon {
		data := []byte(tc.data)
		for _, name := range chatNames {
			want := tc.want
			if string(name) == "error" {
				if data[0] != '{' {
					continue // the parse tells which (TestScanChatLeavesRiskyChunksToTheParse)
				}
				want = Error
			}
			d, sure := scanChat(data, name)
			if !sure || d != want {
				t.Errorf("%s, event %q: scanChat = %v (sure %v), want %v, sure", tc.name, name, d, sure, want)
			}
			if ref := parsedChat(data, name); ref != want {
				t.Errorf("%s, event %q: the parse says %v, the table %v", tc.name, name, ref, want)
			}
		}
	}
}

// TestScanChatLeavesRiskyChunksToTheParse: where fastjson's reading may differ from the walk's,
// the walk does not decide.
func TestScanChatLeavesRiskyChunksToTheParse(t *testing.T) {
	for _, tc := range chatScanRisky {
		for _, name := range [][]byte{nil, []byte("message")} {
			if d, sure := scanChat([]byte(tc.data), name); sure {
				t.Errorf("%s, event %q: scanChat decided %v, want it unsure (the parse says %v)",
					tc.name, name, d, parsedChat([]byte(tc.data), name))
			}
		}
	}
	// With `event: error`, only the parse tells JSON that is not an object (content) from data
	// that is not JSON (an error).
	for _, data := range []string{`[{"choices":[]}]`, `"x"`, `12`, `[DONE]`, `Hello`} {
		if d, sure := scanChat([]byte(data), nameError); sure {
			t.Errorf("event error, %s: scanChat decided %v, want it unsure (the parse says %v)",
				data, d, parsedChat([]byte(data), nameError))
		}
	}
}

// TestScanChatDecidesFixtures: the walk alone decides every event of every chat fixture, as the
// parse does (but for an `event: error` whose data is not JSON, which only the parse can tell).
func TestScanChatDecidesFixtures(t *testing.T) {
	for _, path := range fixturePaths(t) {
		if filepath.Base(filepath.Dir(path)) != Chat.String() {
			continue
		}
		for _, ev := range fixtureEvents(t, path) {
			data := trimSpace(ev.Data)
			if len(data) == 0 || bytes.Equal(data, done) {
				continue
			}
			d, sure := scanChat(data, ev.Name)
			if !sure && string(ev.Name) == "error" && data[0] != '{' {
				continue // the parse tells which (TestScanChatLeavesRiskyChunksToTheParse)
			}
			if ref := parsedChat(data, ev.Name); !sure || d != ref {
				t.Errorf("%s: %.60s: scanChat = %v (sure %v), the parse %v", filepath.Base(path), data, d, sure, ref)
			}
		}
	}
}

// fixtureEvents frames a fixture and returns its events, copied.
func fixtureEvents(t testing.TB, path string) []Event {
	t.Helper()
	in := readFile(t, path)
	var f Framer
	f.Reset(0)
	var out []Event
	for len(in) > 0 {
		n, ok := f.Next(in)
		in = in[n:]
		if ok {
			ev := f.Event()
			out = append(out, Event{Name: bytes.Clone(ev.Name), Data: bytes.Clone(ev.Data)})
		}
	}
	return out
}

// FuzzScanChat: on any data and event name, scanChat never panics, and whenever it is sure,
// its answer is the parse's. Seeds: every event of every fixture, the tables above, and shapes
// near its edges.
func FuzzScanChat(f *testing.F) {
	for _, path := range fixturePaths(f) {
		for _, ev := range fixtureEvents(f, path) {
			f.Add(ev.Data)
		}
	}
	for _, tc := range chatScanCommon {
		f.Add([]byte(tc.data))
	}
	for _, tc := range chatScanRisky {
		f.Add([]byte(tc.data))
	}
	for _, s := range []string{
		`{"choices":[{"delta":{"content":"\ud83d\ude00"}}]}`,
		`{"choices":[{"delta":{"content":"\ud83d"}}]}`,
		`{"choices":[{"delta":{"content":"\/"}}]}`,
		`{"choices":[{"finish_reason":""}]}`,
		`{"choices":[{"finish_reason":" "}]}`,
		`{"choices":[{"finish_reason":{ }}]}`,
		`{"choices":[{"message":{"role":"assistant","content":"Hi"}}]}`,
		`{"choices":[{"message":[]}]}`,
		`{"choices":[{"delta":"content"}]}`,
		`{"choices":[],"error":false}`,
		`{"choices":[],"error":0}`,
		`{"choices":[],"error":""}`,
		`{"choices":[],"error":[]}`,
		`{"choices":[],"error":nul}`,
		`{"choices":[],"error":null }`,
		`{"choices":[],"x":-0.5e+10,"y":1E-2,"z":-0}`,
		`{"choices":[],"x":1.}`,
		`{"choices":[],"x":.5}`,
		`{"choices":[],"x":-}`,
		`{"choices":[],"x":1e}`,
		`{"choices":[],"x":Infinity}`,
		`{"choices":[],"x":tru}`,
		`{"choices":[],"x":nullx}`,
		`{"choices"  :[]   }`,
		"{\"choices\":[]}\r\n",
		"{\"choices\":[]}\x00",
		"{\"choices\":[\x0c]}",
		`{"choices":[],"\\":1}`,
		`{"":{"":[]}}`,
		`{}`,
		`{`,
		`}`,
		`{"choices":[{"delta":{"content":"Hi"}}]`,
		`{"choices":[{"delta":{"content":"Hi"}}],"choices":`,
		"{\"choices\":[{\"delta\":{\"content\":\"\xff\xfe\"}}]}",
		`{"choices":[],"x":` + strings.Repeat(`{"a":`, 299) + `1` + strings.Repeat(`}`, 299) + `}`,
		`{"choices":[],"x":` + strings.Repeat(`[`, 298) + strings.Repeat(`]`, 298) + `}`,
		// Found by the fuzzer.
		`{"choices":[{"delta":{"":null,"":null}}]}`,
		`{"choices":[{"delta":{},"delta":{}}]}`,
		`{"":{"\\\\\\\\\\\\\\\\\\\\\\"":{}}}`,
		"{                      \r\r\r\r\r\r\r}",
		`{"":0,"":0,"":{"":0,"":0,"":0,"":{"":0,"":0},"":{"":0,"":0,"":0,"":0}}}`,
		`{"":{"":"",` + "\n\n\n\n",
		`{"choices":[0,00`,
		`{"":0e0000`,
		`"":"","":"","":0,"":"","":"","":"","choices":[{"":0,"delta":{"":"","":"","":null},"":null,"":null}],"":null,"":""`,
		`"":[[[[[[[[[[[[[[[[[[[[[[0]]]]]]]]]]]]]]]]]]]]]]`,
		`"":"\"","":"\\"`,
		`"":-0.0,"":0e0,"":0E0,"":0.0000000000000000000000`,
		`"":{},"":{},"":true`,
		"\t\"\":\t0\r\r\r\r",
		`"finish_reason":0`,
	} {
		f.Add([]byte(s))
	}
	var buf []byte
	f.Fuzz(func(t *testing.T, raw []byte) {
		check := func(data []byte) {
			if data = trimSpace(data); len(data) == 0 {
				return // classify decides by the name alone
			}
			for _, name := range chatNames {
				if d, sure := scanChat(data, name); sure {
					if ref := parsedChat(data, name); d != ref {
						t.Fatalf("event %q, data %q: scanChat = %v, the parse %v", name, data, d, ref)
					}
				}
			}
		}
		check(raw)
		// The input also as the members of a chunk, of a choice and of a delta, where it
		// decides more often than alone.
		for _, wrap := range chatFuzzWraps {
			buf = append(append(append(buf[:0], wrap[0]...), raw...), wrap[1]...)
			check(buf)
		}
	})
}

// chatFuzzWraps put a fuzz input where a chunk's members, a choice's and a delta's are.
var chatFuzzWraps = [][2]string{
	{`{`, `}`},
	{`{"choices":[{`, `}]}`},
	{`{"choices":[{"index":0,"delta":{`, `},"finish_reason":null}],"usage":null}`},
}

func TestZeroAllocsScanChat(t *testing.T) {
	var datas [][]byte
	for _, tc := range chatScanCommon {
		datas = append(datas, []byte(tc.data))
	}
	run := func() {
		for _, data := range datas {
			if _, sure := scanChat(data, nil); !sure {
				t.Fatalf("unsure of %s", data)
			}
		}
	}
	if allocs := testing.AllocsPerRun(100, run); allocs != 0 {
		t.Errorf("%v allocations per %d chunks, want 0", allocs, len(datas))
	}
}

// TestGateClassifiesChatWithoutParsing: the gate decides the provider shapes by the walk, not
// the parse: with the pool of parsers emptied (two collections empty a sync.Pool), a parse
// would have to make a parser, and allocate.
func TestGateClassifiesChatWithoutParsing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	g := Gate{family: Chat}
	var events []Event
	for _, tc := range chatScanCommon {
		events = append(events, Event{Data: []byte(tc.data), DataLen: len(tc.data), HasData: true})
	}
	run := func() {
		runtime.GC()
		runtime.GC()
		for _, ev := range events {
			g.classify(ev)
		}
	}
	if allocs := testing.AllocsPerRun(10, run); allocs != 0 {
		t.Errorf("%v allocations classifying %d chunks, want 0 (a parser was made)", allocs, len(events))
	}
}

// BenchmarkClassifyChat classifies the two events a chat stream's gate judges, the role chunk
// and the first content chunk, of each provider shape: by the walk (scanChat), as classify
// does, and by the parse, the slow path.
func BenchmarkClassifyChat(b *testing.B) {
	for _, file := range []string{"content.sse", "azure_filter_first.sse", "reasoning_content.sse", "tool_calls.sse"} {
		var events []Event
		for _, ev := range fixtureEvents(b, filepath.Join(fixtureRoot, "chat", file)) {
			if events = append(events, ev); parsedChat(trimSpace(ev.Data), ev.Name) != Hold {
				break
			}
		}
		for _, how := range []string{"scan", "parse"} {
			b.Run(fmt.Sprintf("%s/%s", file, how), func(b *testing.B) {
				g := Gate{family: Chat}
				b.ReportAllocs()
				for b.Loop() {
					for _, ev := range events {
						if how == "scan" {
							g.classify(ev)
						} else {
							p := parsers.Get()
							g.classifyJSON(p, trimSpace(ev.Data), ev.Name)
							parsers.Put(p)
						}
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(events)), "ns/event")
			})
		}
	}
}
