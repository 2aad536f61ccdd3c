package stream

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const fixtureRoot = "../testdata/sse"

// bigPeek is a peek limit no fixture reaches.
const bigPeek = 1 << 20

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func fixture(t testing.TB, f Family, name string) []byte {
	t.Helper()
	return readFile(t, filepath.Join(fixtureRoot, f.String(), name))
}

func fixturePaths(t testing.TB) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(fixtureRoot, "*", "*.sse"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no fixtures under %s: %v", fixtureRoot, err)
	}
	return paths
}

// recordEnd returns the offset just past the n-th record of an LF-only
// fixture: fixtures separate records with exactly one blank line, so that is
// the n-th "\n\n". It is computed without the Framer on purpose.
func recordEnd(t *testing.T, in []byte, n int) int {
	t.Helper()
	off := 0
	for range n {
		i := bytes.Index(in[off:], []byte("\n\n"))
		if i < 0 {
			t.Fatalf("fixture has fewer than %d records", n)
		}
		off += i + 2
	}
	return off
}

const allHeld = -1

type gateCase struct {
	name    string
	family  Family
	file    string
	want    Decision
	reason  CommitReason // checked when want is Commit
	events  int          // records in Events(); allHeld: Events() == Held()
	errData string       // exact ErrorData when want is Error
	end     bool         // the stream ends (End) after the one Feed
	cut     int          // feed only the first cut records (0: the whole file)
	// finished is Finished() after the one Feed, when want is Commit.
	finished bool
}

var gateCases = []gateCase{
	// chat
	{name: "role-only chunk holds, content delta commits", family: Chat, file: "content.sse",
		want: Commit, events: 2, finished: true},
	{name: "finish_reason past byte 256, then usage, finishes without [DONE]", family: Chat, file: "finish_no_done.sse",
		want: Commit, events: 2, finished: true},
	{name: "content without finish_reason or [DONE] does not finish", family: Chat, file: "finish_no_done.sse", cut: 3,
		want: Commit, events: 2},
	{name: "n=2: every choice's finish_reason finishes without [DONE]", family: Chat, file: "n2_no_done.sse",
		want: Commit, events: 3, finished: true},
	{name: "n=2: one choice finished, the other still going, does not finish", family: Chat, file: "n2_no_done.sse", cut: 6,
		want: Commit, events: 3},
	{name: "null content and tool_calls hold, tool_calls delta commits", family: Chat, file: "tool_calls.sse",
		want: Commit, events: 2, finished: true},
	{name: "empty reasoning_content holds, reasoning_content delta commits", family: Chat, file: "reasoning_content.sse",
		want: Commit, events: 2, finished: true},
	{name: "comments and null reasoning hold, reasoning delta commits", family: Chat, file: "reasoning_openrouter.sse",
		want: Commit, events: 4, finished: true},
	{name: "choices [] filter chunk holds", family: Chat, file: "azure_filter_first.sse",
		want: Commit, events: 3, finished: true},
	{name: "refusal delta commits", family: Chat, file: "refusal.sse",
		want: Commit, events: 2, finished: true},
	{name: "function_call in the first chunk commits", family: Chat, file: "function_call.sse",
		want: Commit, events: 1, finished: true},
	{name: "audio delta commits", family: Chat, file: "audio.sse",
		want: Commit, events: 2, finished: true},
	{name: "finish_reason without content commits", family: Chat, file: "finish_only.sse",
		want: Commit, events: 2, finished: true},
	{name: "comments and empty data hold", family: Chat, file: "keepalive_then_content.sse",
		want: Commit, events: 5, finished: true},
	{name: "non-JSON data commits", family: Chat, file: "not_json.sse",
		want: Commit, events: 2, finished: true},
	{name: "unrecognised object commits", family: Chat, file: "unrecognised_object.sse",
		want: Commit, events: 1, finished: true},
	{name: "content then error in one feed commits", family: Chat, file: "content_then_error.sse",
		want: Commit, events: 1, finished: false},
	{name: "error chunk after role chunk errors", family: Chat, file: "role_then_error.sse",
		want: Error, events: 2,
		errData: `{"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":"server_error"}}`},
	{name: "error under event: error errors", family: Chat, file: "error_event.sse",
		want: Error, events: 2,
		errData: `{"error":{"message":"Rate limit reached for gpt-4o in organization org-fake on tokens per min (TPM): Limit 30000, Used 29876, Requested 512.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`},
	{name: "event: error with text data errors", family: Chat, file: "event_error_no_json.sse",
		want: Error, events: 1, errData: `upstream connect error or disconnect/reset before headers`},
	// llama.cpp's server sent a streamed failure as a non-standard `error:` field followed by
	// `data: [DONE]` until ggml-org/llama.cpp#16109 (tools/server/server.cpp:
	// server_sent_event(sink, "error", error_data)); the bytes are those quoted in
	// coddy-project/coddy-agent#106 (llama.cpp b5966, a prompt over the context size).
	{name: "llama.cpp error field errors", family: Chat, file: "llamacpp_error_field.sse",
		want: Error, events: 1,
		errData: `{"code":400,"message":"the request exceeds the available context size. try increasing the context size or enable context shift","type":"invalid_request_error"}`},
	{name: "multi-line error data is joined", family: Chat, file: "error_multiline.sse",
		want: Error, events: 1,
		errData: "{\"error\": {\n  \"code\": 429,\n  \"message\": \"Resource has been exhausted (e.g. check quota).\",\n  \"status\": \"RESOURCE_EXHAUSTED\"\n}}"},
	{name: "[DONE] only is empty", family: Chat, file: "done_only.sse",
		want: Empty, events: 1},
	{name: "null content and empty tool_calls then [DONE] is empty", family: Chat, file: "null_content_done.sse",
		want: Empty, events: 3},
	{name: "usage-only chunk then [DONE] is empty", family: Chat, file: "usage_only.sse",
		want: Empty, events: 2},
	{name: "trailing error without blank line errors at End", family: Chat, file: "truncated_error.sse",
		want: Error, events: allHeld, end: true,
		errData: `{"error":{"message":"Upstream request timed out","type":"upstream_error","param":null,"code":"upstream_timeout"}}`},
	{name: "trailing content without blank line is empty at End", family: Chat, file: "truncated_content.sse",
		want: Empty, events: 1, end: true},
	{name: "EOF after opening chunks is empty", family: Chat, file: "usage_only.sse",
		want: Empty, events: 1, end: true, cut: 1},

	// responses
	{name: "created, in_progress, message item and empty part hold; output_text delta commits", family: Responses, file: "text.sse",
		want: Commit, events: 5, finished: true},
	{name: "reasoning item and empty summary part hold; summary delta commits", family: Responses, file: "reasoning_summary.sse",
		want: Commit, events: 5, finished: true},
	{name: "hidden reasoning item added and done hold", family: Responses, file: "reasoning_hidden.sse",
		want: Commit, events: 7, finished: true},
	{name: "function_call item commits", family: Responses, file: "function_call.sse",
		want: Commit, events: 3, finished: true},
	{name: "empty arguments delta holds, arguments delta commits", family: Responses, file: "function_call_args_delta.sse",
		want: Commit, events: 3},
	{name: "web_search_call item commits", family: Responses, file: "web_search.sse",
		want: Commit, events: 3},
	{name: "response.queued holds", family: Responses, file: "queued.sse",
		want: Commit, events: 6},
	{name: "empty output_text delta holds", family: Responses, file: "empty_delta.sse",
		want: Commit, events: 5},
	{name: "unknown event type commits", family: Responses, file: "unknown_event.sse",
		want: Commit, events: 2},
	{name: "response.incomplete commits and finishes", family: Responses, file: "incomplete.sse",
		want: Commit, events: 5, finished: true},
	{name: "response.completed commits and finishes", family: Responses, file: "completed_only.sse",
		want: Commit, events: 2, finished: true},
	{name: "error event errors", family: Responses, file: "error_event.sse",
		want: Error, events: 3,
		errData: `{"type":"error","sequence_number":2,"code":"server_error","message":"The server had an error processing your request. Sorry about that! You can retry your request.","param":null}`},
	{name: "response.failed errors", family: Responses, file: "failed.sse",
		want: Error, events: 3,
		errData: `{"type":"response.failed","sequence_number":2,"response":{"id":"resp_fake0000000000000000000001","object":"response","created_at":1732875400,"model":"gpt-4.1-mini-2025-04-14","status":"failed","error":{"code":"server_error","message":"The model failed to generate a response."},"incomplete_details":null,"output":[],"usage":null}}`},
	{name: "top-level error without event name errors", family: Responses, file: "top_level_error.sse",
		want: Error, events: 1,
		errData: `{"error":{"message":"Upstream provider returned 503 Service Unavailable","type":"upstream_error","param":null,"code":"upstream_unavailable"}}`},
	{name: "EOF after response.created is empty", family: Responses, file: "completed_only.sse",
		want: Empty, events: 1, end: true, cut: 1},

	// messages
	{name: "message_start, empty text block and ping hold; text delta commits", family: Messages, file: "text.sse",
		want: Commit, events: 4, finished: true},
	{name: "empty thinking block holds, thinking delta commits", family: Messages, file: "thinking.sse",
		want: Commit, events: 3, finished: true},
	{name: "tool_use block commits", family: Messages, file: "tool_use.sse",
		want: Commit, events: 2, finished: true},
	{name: "server_tool_use block commits", family: Messages, file: "server_tool_use.sse",
		want: Commit, events: 2},
	{name: "redacted_thinking block commits", family: Messages, file: "redacted_thinking.sse",
		want: Commit, events: 2},
	{name: "empty input_json_delta holds, partial_json commits", family: Messages, file: "input_json_delta.sse",
		want: Commit, events: 3},
	{name: "citations delta commits", family: Messages, file: "citations_delta.sse",
		want: Commit, events: 2},
	{name: "content_block_stop holds, message_delta with stop_reason commits", family: Messages, file: "stop_reason_only.sse",
		want: Commit, events: 4, finished: true},
	{name: "message_delta without stop_reason holds", family: Messages, file: "usage_delta_then_text.sse",
		want: Commit, events: 3},
	{name: "message_stop commits and finishes", family: Messages, file: "message_stop_only.sse",
		want: Commit, events: 2, finished: true},
	{name: "message_start with content commits", family: Messages, file: "prefilled_start.sse",
		want: Commit, events: 1, finished: true},
	{name: "unknown event holds, text block with text commits", family: Messages, file: "unknown_events.sse",
		want: Commit, events: 3},
	{name: "overloaded_error event errors", family: Messages, file: "overloaded.sse",
		want: Error, events: 3,
		errData: `{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}`},
	{name: "overloaded_error as the first event errors", family: Messages, file: "overloaded_first.sse",
		want: Error, events: 1,
		errData: `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_fake011CV5abcdefghijklmnop"}`},
	{name: "type error without event name errors", family: Messages, file: "api_error_data_only.sse",
		want: Error, events: 1,
		errData: `{"type":"error","error":{"type":"api_error","message":"Internal server error"}}`},

	// image
	{name: "image commits at headers", family: Image, file: "partial_image.sse",
		want: Commit, reason: ReasonHeaders, events: 0, finished: true},

	// other
	{name: "comments and empty data hold, completion data commits", family: Other, file: "completions.sse",
		want: Commit, events: 3, finished: true},
	{name: "speech audio delta commits, speech.audio.done finishes", family: Other, file: "speech.sse",
		want: Commit, events: 1, finished: true},
	{name: "speech audio delta alone does not finish", family: Other, file: "speech.sse", cut: 1,
		want: Commit, events: 1},
	{name: "transcript delta commits, transcript.text.done finishes", family: Other, file: "transcription.sse",
		want: Commit, events: 1, finished: true},
	{name: "transcript deltas alone do not finish", family: Other, file: "transcription.sse", cut: 3,
		want: Commit, events: 1},
	{name: "completion text commits, finish_reason then usage finishes without [DONE]", family: Other, file: "completions_no_done.sse",
		want: Commit, events: 1, finished: true},
	{name: "top-level error errors", family: Other, file: "error.sse",
		want: Error, events: 2,
		errData: `{"error":{"message":"The server is overloaded or not ready yet.","type":"server_error","param":null,"code":null}}`},
	{name: "[DONE] after a comment is empty", family: Other, file: "done_only.sse",
		want: Empty, events: 2},
}

func TestGateFixtures(t *testing.T) {
	used := map[string]bool{}
	for _, tc := range gateCases {
		t.Run(tc.name, func(t *testing.T) {
			in := fixture(t, tc.family, tc.file)
			if tc.cut > 0 {
				in = in[:recordEnd(t, in, tc.cut)]
			}
			used[filepath.Join(tc.family.String(), tc.file)] = true
			var g Gate
			g.Reset(tc.family, bigPeek)
			got := g.Feed(in)
			if tc.end {
				if got != Hold {
					t.Fatalf("Feed = %v before End, want hold", got)
				}
				got = g.End()
			}
			checkGate(t, &g, in, tc, got)
		})
	}
	t.Run("every fixture has a case", func(t *testing.T) {
		for _, p := range fixturePaths(t) {
			rel, _ := filepath.Rel(fixtureRoot, p)
			if !used[rel] {
				t.Errorf("fixture %s is not in gateCases", rel)
			}
		}
	})
}

func checkGate(t *testing.T, g *Gate, in []byte, tc gateCase, got Decision) {
	t.Helper()
	if got != tc.want {
		t.Fatalf("decision = %v, want %v (Events %q)", got, tc.want, g.Events())
	}
	if !bytes.Equal(g.Held(), in) {
		t.Fatalf("Held() is not the fed bytes")
	}
	wantEvents := len(in)
	if tc.events != allHeld {
		wantEvents = recordEnd(t, in, tc.events)
	}
	if len(g.Events()) != wantEvents {
		t.Fatalf("Events() = %q\nwant the first %d bytes: %q", g.Events(), wantEvents, in[:wantEvents])
	}
	switch tc.want {
	case Commit:
		if g.Reason() != tc.reason {
			t.Fatalf("Reason() = %v, want %v", g.Reason(), tc.reason)
		}
		if g.Finished() != tc.finished {
			t.Fatalf("Finished() = %v, want %v", g.Finished(), tc.finished)
		}
		if g.ErrorData() != nil {
			t.Fatalf("ErrorData() = %q after commit", g.ErrorData())
		}
	case Error:
		if string(g.ErrorData()) != tc.errData {
			t.Fatalf("ErrorData() = %q\nwant %q", g.ErrorData(), tc.errData)
		}
	default:
		if g.ErrorData() != nil {
			t.Fatalf("ErrorData() = %q after %v", g.ErrorData(), got)
		}
	}
}

// TestGateRules covers single rules of the table with small inline streams,
// where a fixture would only repeat one line.
func TestGateRules(t *testing.T) {
	tests := []struct {
		name   string
		family Family
		in     string
		want   Decision
	}{
		{"chat: empty delta holds", Chat, `data: {"choices":[{"index":0,"delta":{}}]}` + "\n\n", Hold},
		{"chat: choice without delta holds", Chat, `data: {"choices":[{"index":0}]}` + "\n\n", Hold},
		{"chat: empty string finish_reason holds", Chat, `data: {"choices":[{"delta":{"role":"assistant"},"finish_reason":""}]}` + "\n\n", Hold},
		{"chat: provider metadata in the delta holds", Chat, `data: {"choices":[{"delta":{"role":"assistant","content":"","token_id":42}}]}` + "\n\n", Hold},
		{"chat: whitespace content commits", Chat, `data: {"choices":[{"delta":{"content":"\n"}}]}` + "\n\n", Commit},
		{"chat: message instead of delta commits", Chat, `data: {"choices":[{"message":{"role":"assistant","content":"Hi"}}]}` + "\n\n", Commit},
		{"chat: content in a second choice commits", Chat, `data: {"choices":[{"index":0,"delta":{"role":"assistant"}},{"index":1,"delta":{"content":"b"}}]}` + "\n\n", Commit},
		{"chat: error null is not an error", Chat, `data: {"choices":[],"error":null}` + "\n\n", Hold},
		{"chat: nested error is not top-level", Chat, `data: {"choices":[{"delta":{"role":"assistant"},"error":{"x":1}}]}` + "\n\n", Hold},
		{"chat: choices null is unrecognised and commits", Chat, `data: {"choices":null}` + "\n\n", Commit},
		{"chat: JSON array commits", Chat, `data: [1,2]` + "\n\n", Commit},
		{"chat: JSON string commits", Chat, `data: "hi"` + "\n\n", Commit},
		{"chat: a named event without data holds", Chat, "event: ping\n\n", Hold},
		{"chat: event error without data errors", Chat, "event: error\n\n", Error},
		{"chat: event error with a JSON message errors", Chat, "event: error\ndata: {\"message\":\"overloaded\"}\n\n", Error},
		{"chat: llama.cpp error field with CRLF errors", Chat, "error: {\"code\":500,\"message\":\"x\"}\r\n\r\ndata: [DONE]\r\n\r\n", Error},
		{"chat: llama.cpp error field after the role chunk errors", Chat, `data: {"choices":[{"delta":{"role":"assistant","content":null}}]}` + "\n\nerror: {\"code\":500}\n\n", Error},
		{"messages: error field errors", Messages, "error: {\"code\":529,\"message\":\"busy\"}\n\n", Error},
		{"responses: error field errors", Responses, "error: {\"code\":500,\"message\":\"x\"}\n\n", Error},
		// A stream may open with a UTF-8 BOM (WHATWG event-stream grammar: stream = [ bom ] *event;
		// see also openai/openai-python#3819): it must not cost the first event its data.
		{"chat: content after a leading BOM commits", Chat, "\xEF\xBB\xBF" + `data: {"choices":[{"delta":{"content":"Hi"},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n", Commit},
		{"chat: an error after a leading BOM errors", Chat, "\xEF\xBB\xBF" + `data: {"error":{"message":"bad","type":"invalid_request_error"}}` + "\n\ndata: [DONE]\n\n", Error},
		{"chat: [DONE] with spaces is empty", Chat, "data:  [DONE] \n\n", Empty},
		{"chat: id-only record holds", Chat, "id: 1\nretry: 10\n\n", Hold},
		{"chat: half an error event holds", Chat, `data: {"error":{"message":"boom"}}` + "\n", Hold},
		{"chat: error then content errors", Chat, `data: {"error":"x"}` + "\n\n" + `data: {"choices":[{"delta":{"content":"a"}}]}` + "\n\n", Error},

		{"responses: created with nested error null holds", Responses, `data: {"type":"response.created","response":{"error":null}}` + "\n\n", Hold},
		{"responses: event name used when data has no type", Responses, "event: response.in_progress\ndata: {\"response\":{}}\n\n", Hold},
		{"responses: data type wins over event name", Responses, "event: response.created\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"x\"}\n\n", Commit},
		{"responses: name-only created holds", Responses, "event: response.created\n\n", Hold},
		{"responses: name-only delta holds", Responses, "event: response.output_text.delta\ndata:\n\n", Hold},
		{"responses: response.error errors", Responses, `data: {"type":"response.error","error":{"message":"x"}}` + "\n\n", Error},
		{"responses: event error with text data errors", Responses, "event: error\ndata: oops\n\n", Error},
		{"responses: text data without name commits", Responses, "data: hello\n\n", Commit},
		{"responses: JSON without type or name commits", Responses, `data: {"foo":1}` + "\n\n", Commit},
		{"responses: message item with text commits", Responses, `data: {"type":"response.output_item.added","item":{"type":"message","content":[{"type":"output_text","text":"Hi"}]}}` + "\n\n", Commit},
		{"responses: custom_tool_call item commits", Responses, `data: {"type":"response.output_item.added","item":{"type":"custom_tool_call","input":""}}` + "\n\n", Commit},
		{"responses: content part with text commits", Responses, `data: {"type":"response.content_part.added","part":{"type":"output_text","text":"a"}}` + "\n\n", Commit},
		{"responses: empty refusal part holds", Responses, `data: {"type":"response.content_part.added","part":{"type":"refusal","refusal":""}}` + "\n\n", Hold},
		{"responses: refusal delta commits", Responses, `data: {"type":"response.refusal.delta","delta":"No"}` + "\n\n", Commit},
		{"responses: audio delta commits", Responses, `data: {"type":"response.audio.delta","delta":"AAAA"}` + "\n\n", Commit},
		{"responses: reasoning item with summary text commits", Responses, `data: {"type":"response.output_item.added","item":{"type":"reasoning","summary":[{"type":"summary_text","text":"x"}]}}` + "\n\n", Commit},
		{"responses: [DONE] is empty", Responses, "data: [DONE]\n\n", Empty},
		{"responses: the type decides over a top-level error", Responses, `data: {"type":"response.in_progress","error":{"code":"x"}}` + "\n\n", Hold},
		{"responses: type not first still decides", Responses, `data: {"sequence_number":1,"response":{"error":null},"type":"response.in_progress"}` + "\n\n", Hold},
		{"responses: top-level error without type errors under any name", Responses, "event: response.output_text.delta\ndata: {\"error\":{\"message\":\"x\"}}\n\n", Error},
		{"responses: invalid JSON with an error name errors", Responses, "event: response.failed\ndata: {oops\n\n", Error},

		{"messages: ping holds", Messages, "event: ping\ndata: {\"type\": \"ping\"}\n\n", Hold},
		{"messages: content_block_stop holds", Messages, "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n", Hold},
		{"messages: name-only unknown event holds", Messages, "event: something_new\n\n", Hold},
		{"messages: text data without JSON holds", Messages, "data: hello\n\n", Hold},
		{"messages: event error with text data errors", Messages, "event: error\ndata: Overloaded\n\n", Error},
		{"messages: event error without data errors", Messages, "event: error\n\n", Error},
		{"messages: data type wins over event name", Messages, "event: error\ndata: {\"type\":\"ping\"}\n\n", Hold},
		{"messages: the type decides over a top-level error", Messages, `data: {"type":"ping","error":{"type":"x"}}` + "\n\n", Hold},
		{"messages: message_start with text content commits when type is not first", Messages, `data: {"message":{"content":[{"type":"text","text":"a"}]},"type":"message_start"}` + "\n\n", Commit},
		{"messages: top-level error without type errors", Messages, `data: {"error":{"type":"api_error","message":"x"}}` + "\n\n", Error},
		{"messages: text block with text commits", Messages, `data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":"a"}}` + "\n\n", Commit},
		{"messages: thinking block with text commits", Messages, `data: {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"a"}}` + "\n\n", Commit},
		{"messages: empty text delta holds", Messages, `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":""}}` + "\n\n", Hold},
		{"messages: signature delta commits", Messages, `data: {"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"Eq"}}` + "\n\n", Commit},
		{"messages: message_delta with null stop_reason holds", Messages, `data: {"type":"message_delta","delta":{"stop_reason":null},"usage":{"output_tokens":3}}` + "\n\n", Hold},
		{"messages: message_stop by name only commits", Messages, "event: message_stop\n\n", Commit},

		{"other: empty data holds", Other, "data:\n\n", Hold},
		{"other: comment holds", Other, ": x\n\n", Hold},
		{"other: error null commits", Other, `data: {"error":null,"data":[1]}` + "\n\n", Commit},
		{"other: text commits", Other, "data: x\n\n", Commit},
		{"other: event error errors", Other, "event: error\ndata: {\"message\":\"x\"}\n\n", Error},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var g Gate
			g.Reset(tt.family, bigPeek)
			if got := g.Feed([]byte(tt.in)); got != tt.want {
				t.Fatalf("Feed = %v, want %v", got, tt.want)
			}
			// Same verdict fed byte by byte.
			g.Reset(tt.family, bigPeek)
			got := Hold
			for i := 0; i < len(tt.in) && got == Hold; i++ {
				got = g.Feed([]byte{tt.in[i]})
			}
			if got != tt.want {
				t.Fatalf("byte by byte: Feed = %v, want %v", got, tt.want)
			}
		})
	}
}

// errorFixtures are error streams of each family with the ErrorData the one-Feed case yields.
var errorFixtures = []struct {
	family Family
	file   string
}{
	{Chat, "role_then_error.sse"},
	{Chat, "error_event.sse"},
	{Chat, "error_multiline.sse"},
	{Responses, "error_event.sse"},
	{Responses, "failed.sse"},
	{Messages, "overloaded.sse"},
	{Messages, "overloaded_first.sse"},
	{Other, "error.sse"},
}

func TestGateErrorUnderAnySplit(t *testing.T) {
	for _, ef := range errorFixtures {
		base := fixture(t, ef.family, ef.file)
		var ref Gate
		ref.Reset(ef.family, bigPeek)
		if d := ref.Feed(base); d != Error {
			t.Fatalf("%s/%s: one Feed = %v, want error", ef.family, ef.file, d)
		}
		want := string(ref.ErrorData())
		for _, v := range lineEndVariants(base) {
			name := fmt.Sprintf("%s/%s/%s", ef.family, ef.file, v.name)
			t.Run(name, func(t *testing.T) {
				var g Gate
				feed := func(how string, chunks [][]byte) {
					t.Helper()
					g.Reset(ef.family, bigPeek)
					d := Hold
					for _, c := range chunks {
						if d = g.Feed(c); d != Hold {
							break
						}
					}
					if d == Hold {
						d = g.End()
					}
					if d != Error || string(g.ErrorData()) != want {
						t.Fatalf("%s: %v with ErrorData %q\nwant error with %q", how, d, g.ErrorData(), want)
					}
				}
				s := string(v.data)
				feed("whole", whole(s))
				feed("byte by byte", byteByByte(s))
				for i := range len(s) + 1 {
					feed(fmt.Sprintf("split at %d", i), splitAt(s, i))
				}
			})
		}
	}
}

func TestGateHalfAnErrorIsNotAnError(t *testing.T) {
	in := fixture(t, Messages, "overloaded_first.sse")
	end := bytes.Index(in, []byte("\n\n"))
	for i := range end + 1 {
		var g Gate
		g.Reset(Messages, bigPeek)
		if d := g.Feed(in[:i]); d != Hold {
			t.Fatalf("Feed of the first %d bytes = %v, want hold", i, d)
		}
		if g.ErrorData() != nil {
			t.Fatalf("ErrorData %q before the event completed", g.ErrorData())
		}
	}
	// Cut inside the JSON: End must not call half a payload an error.
	var g Gate
	g.Reset(Messages, bigPeek)
	g.Feed(in[:end-10])
	if d := g.End(); d != Empty {
		t.Fatalf("End after half an error = %v, want empty", d)
	}
}

func TestGateEndWithTrailingErrorRecord(t *testing.T) {
	for _, ef := range errorFixtures {
		in := bytes.TrimRight(fixture(t, ef.family, ef.file), "\n")
		var g Gate
		g.Reset(ef.family, bigPeek)
		if d := g.Feed(in); d != Hold {
			t.Fatalf("%s/%s without its blank line: Feed = %v, want hold", ef.family, ef.file, d)
		}
		if d := g.End(); d != Error {
			t.Fatalf("%s/%s without its blank line: End = %v, want error", ef.family, ef.file, d)
		}
		if !bytes.Equal(g.Events(), in) {
			t.Fatalf("%s/%s: Events() should include the trailing error record", ef.family, ef.file)
		}
	}
	// A trailing record named error but without JSON data is not enough.
	var g Gate
	g.Reset(Messages, bigPeek)
	g.Feed([]byte("event: error\ndata: Overloaded"))
	if d := g.End(); d != Empty {
		t.Fatalf("trailing text error record: End = %v, want empty", d)
	}
}

func TestGateEndWithNothing(t *testing.T) {
	for f := Chat; f <= Other; f++ {
		if f == Image {
			continue
		}
		var g Gate
		g.Reset(f, bigPeek)
		if d := g.End(); d != Empty {
			t.Fatalf("%v: End with nothing fed = %v, want empty", f, d)
		}
		g.Reset(f, bigPeek)
		g.Feed([]byte(": keep-alive\n\n"))
		if d := g.End(); d != Empty {
			t.Fatalf("%v: End after a comment = %v, want empty", f, d)
		}
	}
}

func TestGatePeekLimit(t *testing.T) {
	in := fixture(t, Responses, "text.sse")
	first := recordEnd(t, in, 1)
	second := recordEnd(t, in, 2)
	tests := []struct {
		name   string
		peek   int
		chunks [][]byte
		want   Decision
		reason CommitReason
		events int // len(Events())
	}{
		{"peek limit reached by opening events commits with the events within it", first + 1, [][]byte{in[:second]},
			Commit, ReasonPeekLimit, first},
		{"peek limit reached mid-record commits with complete events only", first + 1, [][]byte{in[:first+10]},
			Commit, ReasonPeekLimit, first},
		{"peek limit reached exactly commits", first, [][]byte{in[:first]},
			Commit, ReasonPeekLimit, first},
		{"below the peek limit holds", first + 1, [][]byte{in[:first]},
			Hold, 0, first},
		{"peek limit across feeds commits", second, [][]byte{in[:first], in[first:second]},
			Commit, ReasonPeekLimit, second},
		{"content before the limit commits for content", len(in), [][]byte{in},
			Commit, ReasonContent, recordEnd(t, in, 5)},
		{"a decisive event ending at the limit wins over it", recordEnd(t, in, 5), [][]byte{in},
			Commit, ReasonContent, recordEnd(t, in, 5)},
		{"a decisive event ending past the limit is not judged, even in the same feed", recordEnd(t, in, 5) - 1, [][]byte{in},
			Commit, ReasonPeekLimit, recordEnd(t, in, 4)},
		{"peek limit 0 commits at headers", 0, [][]byte{in[:10]},
			Commit, ReasonHeaders, 0},
		{"negative peek limit commits at headers even on an empty feed", -1, [][]byte{nil},
			Commit, ReasonHeaders, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var g Gate
			g.Reset(Responses, tt.peek)
			d := Hold
			for _, c := range tt.chunks {
				d = g.Feed(c)
			}
			if d != tt.want {
				t.Fatalf("decision %v, want %v", d, tt.want)
			}
			if d == Commit && g.Reason() != tt.reason {
				t.Fatalf("reason %v, want %v", g.Reason(), tt.reason)
			}
			if len(g.Events()) != tt.events {
				t.Fatalf("len(Events()) = %d, want %d", len(g.Events()), tt.events)
			}
		})
	}
}

// TestGatePeekLimitIndependentOfReads feeds the same bytes in one read, split in two at
// every position, and byte by byte: only events that end within the peek limit are judged,
// so the decision never depends on where the reads were cut (docs/streams.md, Streams: the pre-commit
// peek, "Reaching FAILOVER_PEEK_BYTES commits").
func TestGatePeekLimitIndependentOfReads(t *testing.T) {
	const comment = ": keep-alive padding padding padding\n\n"
	pad := strings.Repeat(comment, 2048/len(comment)+1)
	errEv := `data: {"error":{"message":"late","code":500}}` + "\n\n"
	content := `data: {"choices":[{"delta":{"content":"x"}}]}` + "\n\n"
	crlf := func(s string) string { return strings.ReplaceAll(s, "\n", "\r\n") }
	lastEndWithin := func(peek int) int { return peek / len(comment) * len(comment) }
	tests := []struct {
		name     string
		in       string
		peek     int
		want     Decision
		reason   CommitReason
		events   int
		failed   bool // the error event went by as tail after the commit
		finished bool
	}{
		{"opening events cross the limit, then an error: the limit commits", pad + errEv, 1024,
			Commit, ReasonPeekLimit, lastEndWithin(1024), true, false},
		{"an error ending exactly at the limit is judged", pad + errEv, len(pad + errEv),
			Error, 0, len(pad + errEv), false, false},
		{"an error ending one byte past the limit is not judged", pad + errEv, len(pad+errEv) - 1,
			Commit, ReasonPeekLimit, len(pad), true, false},
		{"an opening event ending exactly at the limit commits for the limit", pad + errEv, 2 * len(comment),
			Commit, ReasonPeekLimit, 2 * len(comment), true, false},
		{"content past the limit commits for the limit, not for content", pad + content, 1024,
			Commit, ReasonPeekLimit, lastEndWithin(1024), false, false},
		{"content past the limit then [DONE]: the tail sees the end", pad + content + "data: [DONE]\n\n", 1024,
			Commit, ReasonPeekLimit, lastEndWithin(1024), false, true},
		// With CRLF an event ends at the CR of its blank line: the LF after it is not part of it.
		{"CRLF: an error ending at its blank line's CR within the limit is judged", crlf(pad + errEv), len(crlf(pad+errEv)) - 1,
			Error, 0, len(crlf(pad+errEv)) - 1, false, false},
		{"CRLF: an error ending one byte past the limit is not judged", crlf(pad + errEv), len(crlf(pad+errEv)) - 2,
			Commit, ReasonPeekLimit, len(crlf(pad)) - 1, true, false},
	}
	type result struct {
		d        Decision
		reason   CommitReason
		events   int
		errData  string
		failed   bool
		finished bool
	}
	var g Gate
	run := func(peek int, in []byte, chunks [][]byte) result {
		g.Reset(Chat, peek)
		d := Hold
		for _, c := range chunks {
			d = g.Feed(c) // after Commit, Feed watches the tail
		}
		if d == Hold {
			d = g.End()
		}
		if !bytes.HasPrefix(in, g.Held()) || !bytes.HasPrefix(g.Held(), g.Events()) {
			t.Fatalf("Held is not a prefix of the input, or Events not one of Held")
		}
		r := result{d: d, events: len(g.Events()), errData: string(g.ErrorData()), failed: g.Failed(), finished: g.Finished()}
		if d == Commit {
			r.reason = g.Reason()
		}
		return r
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := []byte(tt.in)
			want := result{d: tt.want, reason: tt.reason, events: tt.events, failed: tt.failed, finished: tt.finished}
			if tt.want == Error {
				want.errData = `{"error":{"message":"late","code":500}}`
			}
			if got := run(tt.peek, in, [][]byte{in}); got != want {
				t.Fatalf("one read: %+v, want %+v", got, want)
			}
			for i := 0; i <= len(in); i++ {
				if got := run(tt.peek, in, [][]byte{in[:i], in[i:]}); got != want {
					t.Fatalf("split at %d: %+v, want %+v", i, got, want)
				}
			}
			if got := run(tt.peek, in, byteByByte(tt.in)); got != want {
				t.Fatalf("byte by byte: %+v, want %+v", got, want)
			}
		})
	}
}

func TestGateImageCommitsAtHeaders(t *testing.T) {
	var g Gate
	g.Reset(Image, bigPeek)
	// Even an error event does not stop an image stream once headers came.
	if d := g.Feed([]byte(`data: {"error":{"message":"x"}}` + "\n\n")); d != Commit || g.Reason() != ReasonHeaders {
		t.Fatalf("image Feed = %v/%v, want commit/headers", d, g.Reason())
	}
	if !g.Finished() {
		t.Fatal("image stream should always be finished")
	}
}

func TestGateAfterDecision(t *testing.T) {
	var g Gate
	g.Reset(Chat, bigPeek)
	if d := g.Feed(fixture(t, Chat, "done_only.sse")); d != Empty {
		t.Fatalf("Feed = %v", d)
	}
	if d := g.Feed([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n")); d != Empty {
		t.Fatalf("Feed after Empty = %v, want empty again", d)
	}
	if d := g.End(); d != Empty {
		t.Fatalf("End after Empty = %v", d)
	}
	if len(g.Held()) != len(fixture(t, Chat, "done_only.sse")) {
		t.Fatal("Feed after a decision must not hold more bytes")
	}

	// After Commit, Feed observes the tail and keeps returning Commit.
	in := fixture(t, Chat, "content.sse")
	cut := recordEnd(t, in, 2)
	g.Reset(Chat, bigPeek)
	if d := g.Feed(in[:cut]); d != Commit {
		t.Fatalf("Feed = %v", d)
	}
	if d := g.Feed(in[cut:]); d != Commit || !g.Finished() {
		t.Fatalf("Feed after commit = %v, Finished %v", d, g.Finished())
	}
	if len(g.Held()) != cut {
		t.Fatalf("Held() grew after commit to %d bytes", len(g.Held()))
	}
}

func TestGateResetReuses(t *testing.T) {
	var g Gate
	g.Reset(Messages, bigPeek)
	if d := g.Feed(fixture(t, Messages, "overloaded.sse")); d != Error {
		t.Fatalf("Feed = %v", d)
	}
	g.Reset(Chat, bigPeek)
	if g.ErrorData() != nil || len(g.Held()) != 0 || len(g.Events()) != 0 || g.Finished() {
		t.Fatal("Reset left state behind")
	}
	// Nor do the choices a previous stream finished.
	g.Reset(Chat, bigPeek)
	if d := g.Feed([]byte(`data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n")); d != Commit || !g.Finished() {
		t.Fatalf("finish chunk: %v, finished %v", d, g.Finished())
	}
	g.Reset(Chat, bigPeek)
	if d := g.Feed([]byte(`data: {"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}]}` + "\n\n")); d != Commit || g.Finished() {
		t.Fatalf("after Reset, content alone: %v, finished %v", d, g.Finished())
	}
	// A partial record of the previous stream must not leak into the next.
	g.Reset(Chat, bigPeek)
	g.Feed([]byte("data: {\"error\":"))
	g.Reset(Chat, bigPeek)
	if d := g.Feed(fixture(t, Chat, "content.sse")); d != Commit {
		t.Fatalf("Feed after Reset = %v, want commit", d)
	}
}

// terminalStreams are committed streams that end properly, for Finished. from,
// when set, is in the record whose end first finishes the stream (a chunk with
// the last finish_reason, a ".done" type) before its terminal record, if any:
// every record end from there on finishes it too.
var terminalStreams = []struct {
	family Family
	file   string
	from   string
}{
	{Chat, "content.sse", `"finish_reason":"stop"`},
	{Chat, "tool_calls.sse", `"finish_reason":"tool_calls"`},
	{Chat, "reasoning_openrouter.sse", `"finish_reason":"stop"`},
	{Chat, "finish_no_done.sse", `"finish_reason":"stop"`},
	{Chat, "n2_no_done.sse", `"index":1,"delta":{},"logprobs":null,"finish_reason":"stop"`},
	{Other, "completions.sse", `"finish_reason":"stop"`},
	{Other, "completions_no_done.sse", `"finish_reason":"length"`},
	{Other, "speech.sse", `"type":"speech.audio.done"`},
	{Other, "transcription.sse", `"type":"transcript.text.done"`},
	{Responses, "text.sse", ""},
	{Responses, "function_call.sse", ""},
	{Responses, "incomplete.sse", ""},
	{Messages, "text.sse", ""},
	{Messages, "thinking.sse", ""},
	{Messages, "tool_use.sse", ""},
}

// feedStream feeds chunks before commit and observes them after, as the
// proxy does, and returns the final decision.
func feedStream(g *Gate, chunks [][]byte) Decision {
	d := Hold
	for _, c := range chunks {
		if d == Commit {
			g.Observe(c)
			continue
		}
		d = g.Feed(c)
	}
	return d
}

func TestGateFinished(t *testing.T) {
	for _, ts := range terminalStreams {
		in := fixture(t, ts.family, ts.file)
		t.Run(fmt.Sprintf("%s/%s", ts.family, ts.file), func(t *testing.T) {
			lastStart := bytes.LastIndex(in[:len(in)-2], []byte("\n\n")) + 2
			for _, v := range lineEndVariants(in) {
				for _, size := range []int{1, 2, 3, 5, 16, 64, 1000, len(in)} {
					var g Gate
					g.Reset(ts.family, bigPeek)
					if d := feedStream(&g, chunked(v.data, size)); d != Commit {
						t.Fatalf("%s, %d-byte chunks: decision %v", v.name, size, d)
					}
					if !g.Finished() {
						t.Fatalf("%s, %d-byte chunks: not Finished", v.name, size)
					}
				}
			}
			// Cut anywhere before the terminal record's blank line ends: not
			// finished, except that a chat or other stream is finished at the
			// end of the record that finishes it (its last finish_reason, a
			// ".done" type) and of each record after it (a usage chunk), never
			// inside one. Every cut point is tried.
			finishEnd := len(in)
			if ts.from != "" {
				finishEnd = bytes.Index(in, []byte(ts.from))
				finishEnd += bytes.Index(in[finishEnd:], []byte("\n\n")) + 2
			}
			for cut := recordEnd(t, in, 1); cut < len(in); cut++ {
				var g Gate
				g.Reset(ts.family, bigPeek)
				if d := feedStream(&g, chunked(in[:cut], 7)); d != Commit {
					continue // cut before the commit point: the proxy calls End, not Finished
				}
				want := cut >= finishEnd && string(in[cut-2:cut]) == "\n\n"
				if g.Finished() != want {
					t.Fatalf("cut at %d of %d (terminal record starts at %d, finish_reason record ends at %d): Finished %v, want %v",
						cut, len(in), lastStart, finishEnd, g.Finished(), want)
				}
			}
		})
	}
}

func TestGateFinishedRules(t *testing.T) {
	content := map[Family]string{
		Chat:      `data: {"choices":[{"delta":{"content":"x"}}]}` + "\n\n",
		Responses: `data: {"type":"response.output_text.delta","delta":"x"}` + "\n\n",
		Messages:  `data: {"type":"content_block_delta","delta":{"type":"text_delta","text":"x"}}` + "\n\n",
		Other:     `data: {"type":"speech.audio.delta","audio":"SUQzBAAAAAAAI1RTU0UAAAAPAAAD"}` + "\n\n",
	}
	big := strings.Repeat("x", 10000)
	// A chat chunk of OpenAI's shape, with this id and these choices.
	chunk := func(id, choices string) string {
		return `data: {"id":"` + id + `","object":"chat.completion.chunk","created":1748000000,"model":"gpt-4o-mini-2024-07-18",` +
			`"service_tier":"default","system_fingerprint":"fp_0aa8d3e20b","choices":[` + choices + `],"usage":null}` + "\n\n"
	}
	const id = "chatcmpl-BbX2fakeNoDone0000000000000001"
	finish := func(i int, reason string) string {
		return fmt.Sprintf(`{"index":%d,"delta":{},"logprobs":null,"finish_reason":%s}`, i, reason)
	}
	delta := func(i int, text string) string {
		return fmt.Sprintf(`{"index":%d,"delta":{"content":%q},"logprobs":null,"finish_reason":null}`, i, text)
	}
	usage := `data: {"id":"x","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":9,"total_tokens":18}}` + "\n\n"
	tests := []struct {
		name   string
		family Family
		tail   string
		want   bool
	}{
		{"chat: [DONE] finishes", Chat, "data: [DONE]\n\n", true},
		{"chat: finish_reason finishes", Chat, `data: {"choices":[{"delta":{},"finish_reason":"stop"}]}` + "\n\n", true},
		{"chat: finish_reason then a usage-only chunk finishes", Chat, chunk(id, finish(0, `"stop"`)) + usage, true},
		{"chat: finish_reason then a comment finishes", Chat, chunk(id, finish(0, `"length"`)) + ": keep-alive\n\n", true},
		{"chat: finish_reason then half a record does not finish", Chat, chunk(id, finish(0, `"stop"`)) + usage[:40], false},
		{"chat: finish_reason then a record without its blank line does not finish", Chat, chunk(id, finish(0, `"stop"`)) + strings.TrimSuffix(usage, "\n"), false},
		{"chat: a null finish_reason does not finish", Chat, chunk(id, delta(0, "more")), false},
		{"chat: an empty finish_reason does not finish", Chat, chunk(id, finish(0, `""`)), false},
		{"chat: a usage-only chunk alone does not finish", Chat, usage, false},
		{"chat: content after the finish chunk keeps it finished", Chat, chunk(id, finish(0, `"stop"`)) + chunk(id, delta(0, "late")), true},
		{"chat: finish_reason past byte 256 of the chunk finishes", Chat, chunk(id+strings.Repeat("0", 40), finish(0, `"stop"`)), true},
		{"chat: finish_reason past the capture limit does not finish", Chat, chunk(id+strings.Repeat("0", tailCaptureLimit), finish(0, `"stop"`)), false},
		{"chat: finish_reason after long content past the capture limit does not finish", Chat,
			chunk(id, `{"index":0,"delta":{"content":"`+strings.Repeat("w", tailCaptureLimit)+`"},"finish_reason":"stop"}`), false},
		{"chat: finish_reason cut inside its value does not finish", Chat,
			`data: {"pad":"` + strings.Repeat("p", tailCaptureLimit-len(`{"pad":"","choices":[{"finish_reason":"`)) + `","choices":[{"finish_reason":"stop"}]}` + "\n\n", false},
		{"chat: finish_reason whose first letter is captured finishes", Chat,
			`data: {"pad":"` + strings.Repeat("p", tailCaptureLimit-len(`{"pad":"","choices":[{"finish_reason":"s`)) + `","choices":[{"finish_reason":"stop"}]}` + "\n\n", true},
		{"chat: a nested finish_reason outside choices does not finish", Chat, `data: {"meta":{"choices":[{"finish_reason":"stop"}]},"choices":[]}` + "\n\n", false},
		{"chat: n=2, one choice finished, the other not seen again, finishes", Chat, chunk(id, finish(0, `"stop"`)), true},
		{"chat: n=2, one choice finished, the other still going, does not finish", Chat, chunk(id, delta(1, "b")) + chunk(id, finish(0, `"stop"`)), false},
		{"chat: n=2, both choices finished in turn, finishes", Chat, chunk(id, delta(1, "b")) + chunk(id, finish(0, `"stop"`)) + chunk(id, finish(1, `"length"`)) + usage, true},
		{"chat: n=2 in one chunk, both finished, finishes", Chat, chunk(id, delta(1, "b")) + chunk(id, finish(0, `"stop"`)+","+finish(1, `"stop"`)), true},
		{"chat: n=2 in one chunk, one finished, does not finish", Chat, chunk(id, finish(0, `"stop"`)+","+delta(1, "b")), false},
		{"chat: n=2, the second choice cut by the capture limit, does not finish", Chat,
			chunk(id, finish(0, `"stop"`)+`,{"index":1,"delta":{"content":"`+strings.Repeat("w", tailCaptureLimit)+`"},"finish_reason":"stop"}`), false},
		{"chat: a choice without index counts as index 0", Chat, `data: {"choices":[{"index":3,"delta":{"content":"b"}}]}` + "\n\n" + `data: {"choices":[{"finish_reason":"stop"}]}` + "\n\n", false},
		{"chat: indexes from 63 up share a bit", Chat, chunk(id, finish(0, `"stop"`)) + chunk(id, delta(70, "b")) + chunk(id, finish(63, `"stop"`)), true},
		{"chat: a .done type does not finish chat", Chat, `data: {"type":"speech.audio.done"}` + "\n\n", false},
		{"other: [DONE] finishes", Other, "data: [DONE]\n\n", true},
		{"other: a .done type finishes", Other, `data: {"type":"speech.audio.done","usage":{"input_tokens":14,"output_tokens":101,"total_tokens":115}}` + "\n\n", true},
		{"other: a .done type after a long member finishes", Other, `data: {"text":"` + strings.Repeat("t", 100) + `","type":"transcript.text.done"}` + "\n\n", true},
		{"other: a .done event name without a type finishes", Other, "event: transcript.text.done\ndata: {\"text\":\"hi\"}\n\n", true},
		{"other: the data type wins over a .done event name", Other, "event: x.done\ndata: {\"type\":\"speech.audio.delta\"}\n\n", false},
		{"other: a .done type then a comment finishes", Other, `data: {"type":"speech.audio.done"}` + "\n\n: ping\n\n", true},
		{"other: a delta after a .done type does not finish", Other, `data: {"type":"speech.audio.done"}` + "\n\n" + `data: {"type":"speech.audio.delta","audio":"AAAA"}` + "\n\n", false},
		{"other: data after a .done type does not finish", Other, `data: {"type":"speech.audio.done"}` + "\n\ndata: x\n\n", false},
		{"other: a .done type nested in the data does not finish", Other, `data: {"type":"speech.audio.delta","item":{"type":"x.done"}}` + "\n\n", false},
		{"other: a type that only contains .done does not finish", Other, `data: {"type":"speech.audio.done_partial"}` + "\n\n", false},
		{"other: a completions finish_reason finishes", Other, `data: {"id":"cmpl-1","object":"text_completion","choices":[{"text":"!","index":0,"logprobs":null,"finish_reason":"stop"}]}` + "\n\n", true},
		{"other: data without a finish does not finish", Other, "data: x\n\n", false},
		{"responses: a .done type does not finish", Responses, `data: {"type":"response.output_text.done","text":"x"}` + "\n\n", false},
		{"chat: an error chunk does not finish", Chat, `data: {"error":{"message":"x"}}` + "\n\n", false},
		{"chat: [DONE] inside a longer data does not finish", Chat, "data: [DONE]\ndata: more\n\n", false},
		{"chat: a long event then [DONE] finishes", Chat, "data: " + big + "\n\ndata: [DONE]\n\n", true},
		{"chat: [DONE] cut out of a long padded data does not finish", Chat, "data: [DONE]" + strings.Repeat(" ", tailCaptureLimit+44) + "x\n\n", false},
		{"responses: response.completed finishes", Responses, "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"output\":[\"" + big + "\"]}}\n\n", true},
		{"responses: completed known from the name when type is past the capture", Responses, "event: response.completed\ndata: {\"response\":{\"output\":[\"" + big + "\"]},\"type\":\"response.completed\"}\n\n", true},
		{"responses: response.failed finishes", Responses, `data: {"type":"response.failed","response":{"error":{"code":"server_error"}}}` + "\n\n", true},
		{"responses: error finishes", Responses, "event: error\ndata: {\"type\":\"error\",\"code\":\"server_error\"}\n\n", true},
		{"responses: top-level error finishes", Responses, `data: {"error":{"message":"x"}}` + "\n\n", true},
		{"responses: output_item.done does not finish", Responses, `data: {"type":"response.output_item.done","item":{"type":"message"}}` + "\n\n", false},
		{"responses: a nested completed type does not finish", Responses, `data: {"type":"response.output_text.delta","item":{"type":"response.completed"}}` + "\n\n", false},
		{"messages: message_stop finishes", Messages, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", true},
		{"messages: error finishes", Messages, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\"}}\n\n", true},
		{"messages: message_delta with stop_reason does not finish", Messages, `data: {"type":"message_delta","delta":{"stop_reason":"end_turn"}}` + "\n\n", false},
		{"messages: the first type member counts, as in the parser", Messages, `data: {"type":"message_stop","type":"ping"}` + "\n\n", true},
		{"messages: the first type member counts when it is not first either", Messages, `data: {"index":0,"type":"message_stop","type":"ping"}` + "\n\n", true},
		{"messages: a type after a nested object is found", Messages, `data: {"meta":{"type":"ping","x":[1,{"y":"}"}]},"type":"message_stop"}` + "\n\n", true},
		{"messages: a top-level error without type finishes", Messages, `data: {"error":{"type":"overloaded_error"}}` + "\n\n", true},
		{"messages: a null top-level error without type does not finish", Messages, `data: {"error":null,"x":1}` + "\n\n", false},
		{"messages: a top-level error cut by the capture limit finishes", Messages, `data: {"error":{"type":"overloaded_error","message":"` + big + `"}}` + "\n\n", true},
		{"responses: a top-level error cut by the capture limit finishes", Responses, `data: {"error":{"code":"server_error","message":"` + big + `"}}` + "\n\n", true},
		{"messages: data type wins over the event name", Messages, "event: message_stop\ndata: {\"type\":\"ping\"}\n\n", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var g Gate
			g.Reset(tt.family, bigPeek)
			if d := g.Feed([]byte(content[tt.family])); d != Commit {
				t.Fatalf("content Feed = %v", d)
			}
			if g.Finished() {
				t.Fatal("Finished before the tail")
			}
			// Observe in 100-byte pieces: the capture limit must not matter.
			for _, c := range chunked([]byte(tt.tail), 100) {
				g.Observe(c)
			}
			if g.Finished() != tt.want {
				t.Fatalf("Finished() = %v, want %v", g.Finished(), tt.want)
			}
		})
	}
}

func TestGateFailed(t *testing.T) {
	content := map[Family]string{
		Chat:      `data: {"choices":[{"delta":{"content":"x"}}]}` + "\n\n",
		Responses: `data: {"type":"response.output_text.delta","delta":"x"}` + "\n\n",
		Messages:  `data: {"type":"content_block_delta","delta":{"type":"text_delta","text":"x"}}` + "\n\n",
		Other:     "data: x\n\n",
	}
	long := strings.Repeat("x", 2*tailCaptureLimit)
	tests := []struct {
		name   string
		family Family
		tail   string
		want   bool
	}{
		{"chat: an error chunk after content fails", Chat, `data: {"error":{"message":"x"}}` + "\n\ndata: [DONE]\n\n", true},
		{"chat: event: error fails", Chat, "event: error\ndata: boom\n\n", true},
		{"chat: content mentioning \"error\" does not fail", Chat, `data: {"choices":[{"delta":{"content":"\"error\": fine"}}]}` + "\n\ndata: [DONE]\n\n", false},
		{"chat: a null error member does not fail", Chat, `data: {"error":null,"choices":[]}` + "\n\n", false},
		// vLLM's stream generators send a failure as {"error": {...}} then [DONE]
		// (vllm/entrypoints/openai/serving_chat.py, create_streaming_error_response), and
		// the message is the exception's text: the capture limit cuts a long one.
		{"chat: an error cut by the capture limit fails", Chat, `data: {"error": {"message": "` + long + `", "type": "BadRequestError", "param": null, "code": 400}}` + "\n\ndata: [DONE]\n\n", true},
		{"chat: an error past long members, cut by the capture limit, fails", Chat, `data: {"id":"gen-1","object":"chat.completion.chunk","created":1,"model":"m","provider":"p","error":{"code":502,"message":"` + long + `"}}` + "\n\n", true},
		{"chat: a null error cut by the capture limit does not fail", Chat, `data: {"pad":"` + strings.Repeat("p", tailCaptureLimit-len(`{"pad":"","error":nu`)) + `","error":null,"choices":[]}` + "\n\ndata: [DONE]\n\n", false},
		{"other: an error cut by the capture limit fails", Other, `data: {"error": {"message": "` + long + `", "type": "BadRequestError", "param": null, "code": 400}}` + "\n\ndata: [DONE]\n\n", true},
		{"chat: a clean end does not fail", Chat, `data: {"choices":[{"delta":{},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n", false},
		{"responses: response.failed fails", Responses, `data: {"type":"response.failed","response":{"error":{"code":"server_error"}}}` + "\n\n", true},
		{"responses: error fails", Responses, "event: error\ndata: {\"type\":\"error\",\"code\":\"server_error\"}\n\n", true},
		{"responses: completed with a null nested error does not fail", Responses, `data: {"type":"response.completed","response":{"error":null}}` + "\n\n", false},
		{"responses: a top-level error without type fails", Responses, `data: {"error":{"message":"x"}}` + "\n\n", true},
		{"messages: an error event fails", Messages, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\n\n", true},
		{"messages: message_stop does not fail", Messages, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", false},
		{"other: a top-level error fails", Other, `data: {"error":{"message":"x"}}` + "\n\n", true},
		{"chat: an error after the finish chunk fails", Chat, `data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n" + `data: {"error":{"message":"x"}}` + "\n\n", true},
		{"other: an error after a .done type fails", Other, `data: {"type":"speech.audio.done"}` + "\n\n" + `data: {"error":{"message":"x"}}` + "\n\n", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var g Gate
			g.Reset(tt.family, bigPeek)
			if d := g.Feed([]byte(content[tt.family])); d != Commit {
				t.Fatalf("content Feed = %v", d)
			}
			for _, c := range chunked([]byte(tt.tail), 7) {
				g.Observe(c)
			}
			if g.Failed() != tt.want {
				t.Fatalf("Failed() = %v, want %v", g.Failed(), tt.want)
			}
		})
	}
}

// What finishes a chat or other stream counts in the held bytes as after commit: the finish
// chunk may be the event that commits, come after it in the same read, or (a choice's
// opening) be held before it.
func TestGateFinishBeforeCommit(t *testing.T) {
	role := func(i int) string {
		return fmt.Sprintf(`data: {"choices":[{"index":%d,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`, i) + "\n\n"
	}
	content := func(i int) string {
		return fmt.Sprintf(`data: {"choices":[{"index":%d,"delta":{"content":"Hi"},"finish_reason":null}]}`, i) + "\n\n"
	}
	finish := func(i int) string {
		return fmt.Sprintf(`data: {"choices":[{"index":%d,"delta":{},"finish_reason":"stop"}]}`, i) + "\n\n"
	}
	tests := []struct {
		name   string
		family Family
		held   string // fed in one read before commit
		tail   string // observed after
		want   bool
	}{
		{"chat: the finish chunk commits", Chat, role(0) + finish(0), "", true},
		{"chat: the finish chunk comes with the committing one", Chat, role(0) + content(0) + finish(0), "", true},
		{"chat: the finish chunk comes after commit", Chat, role(0) + content(0), finish(0), true},
		{"chat: no finish chunk", Chat, role(0) + content(0), ": keep-alive\n\n", false},
		{"chat: n=2, a held opening of choice 1 keeps it open", Chat, role(0) + role(1) + content(0) + finish(0), "", false},
		{"chat: n=2, choice 1 finishes after commit", Chat, role(0) + role(1) + content(0) + finish(0), finish(1), true},
		{"other: a .done type comes with the committing event", Other,
			`data: {"type":"transcript.text.delta","delta":"I"}` + "\n\n" + `data: {"type":"transcript.text.done","text":"I"}` + "\n\n", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var g Gate
			g.Reset(tt.family, bigPeek)
			if d := g.Feed([]byte(tt.held)); d != Commit {
				t.Fatalf("Feed = %v, want commit", d)
			}
			g.Observe([]byte(tt.tail))
			if g.Finished() != tt.want || g.Failed() {
				t.Fatalf("Finished() = %v, Failed() = %v; want finished %v", g.Finished(), g.Failed(), tt.want)
			}
		})
	}
}

func TestGateObserveBeforeCommitIsIgnored(t *testing.T) {
	var g Gate
	g.Reset(Chat, bigPeek)
	g.Observe([]byte("data: [DONE]\n\n"))
	if g.Finished() || len(g.Held()) != 0 {
		t.Fatal("Observe before commit changed the gate")
	}
	if d := g.Feed(fixture(t, Chat, "content.sse")[:recordEnd(t, fixture(t, Chat, "content.sse"), 2)]); d != Commit {
		t.Fatalf("Feed = %v", d)
	}
	if g.Finished() {
		t.Fatal("[DONE] observed before commit was counted")
	}
}

func TestGateObserveDoesNotBuffer(t *testing.T) {
	var g Gate
	g.Reset(Chat, bigPeek)
	g.Feed(fixture(t, Chat, "content.sse")[:recordEnd(t, fixture(t, Chat, "content.sse"), 2)])
	held := len(g.Held())
	chunk := bytes.Repeat([]byte("y"), 64<<10)
	g.Observe([]byte("data: "))
	for range 64 {
		g.Observe(chunk)
	}
	g.Observe([]byte("\n\n"))
	if cap(g.fr.data) > 64<<10 {
		t.Fatalf("tail framing kept %d bytes of a 4 MiB event", cap(g.fr.data))
	}
	if len(g.Held()) != held {
		t.Fatal("Observe appended to Held()")
	}
}

func TestNames(t *testing.T) {
	tests := []struct{ got, want string }{
		{Chat.String(), "chat"}, {Responses.String(), "responses"}, {Messages.String(), "messages"},
		{Image.String(), "image"}, {Other.String(), "other"}, {Family(99).String(), "unknown"},
		{Hold.String(), "hold"}, {Commit.String(), "commit"}, {Error.String(), "error"}, {Empty.String(), "empty"},
		{Decision(9).String(), "unknown"},
		{ReasonContent.String(), "content"}, {ReasonPeekLimit.String(), "peek_limit"},
		{ReasonHeaders.String(), "headers"}, {CommitReason(9).String(), "unknown"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

// ReplaceHeld takes another buffer for the held bytes after commit only, and the Gate never
// writes into the one it gave up, however it is reused: the proxy sends that one as an answer's
// body after the Gate has moved on to the next stream.
func TestGateReplaceHeld(t *testing.T) {
	var g Gate
	g.Reset(Chat, bigPeek)
	role := "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"
	content := "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n"
	if d := g.Feed([]byte(role)); d != Hold {
		t.Fatalf("before content: %v, want Hold", d)
	}
	spare := make([]byte, 0, 1<<10)
	g.ReplaceHeld(spare)
	if string(g.Held()) != role {
		t.Fatalf("ReplaceHeld before commit: held %q", g.Held())
	}
	whole := role + content + "data: [DONE]\n\n"
	if d := g.Feed([]byte(content + "data: [DONE]\n\n")); d != Commit {
		t.Fatalf("content: %v, want Commit", d)
	}
	given := g.Held()
	if string(given) != whole {
		t.Fatalf("held %q, want the whole stream", given)
	}
	g.ReplaceHeld(spare)
	if len(g.Held()) != 0 || len(g.Events()) != 0 {
		t.Fatalf("after ReplaceHeld: %d held bytes, %d of events", len(g.Held()), len(g.Events()))
	}
	if !g.Finished() || g.Failed() {
		t.Fatalf("after ReplaceHeld: finished %v, failed %v", g.Finished(), g.Failed())
	}
	// The next stream is held in spare's storage, and the buffer given up keeps its bytes.
	g.Reset(Chat, bigPeek)
	other := strings.Replace(whole, "hi", "yo", 1)
	if d := g.Feed([]byte(other)); d != Commit {
		t.Fatalf("next stream: %v, want Commit", d)
	}
	if string(g.Held()) != other || &g.Held()[0] != &spare[:1][0] {
		t.Fatalf("next stream held %q, in spare's storage: %v", g.Held(), &g.Held()[0] == &spare[:1][0])
	}
	if string(given) != whole {
		t.Fatalf("the buffer given up was written to: %q", given)
	}
}

// Shed drops a large held buffer after commit only; watching the tail goes on as before.
func TestGateShed(t *testing.T) {
	var g Gate
	g.Reset(Chat, bigPeek)
	role := "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"
	pad := ": " + strings.Repeat("p", 8<<10) + "\n\n" // a comment: held, never an event
	if d := g.Feed([]byte(role + pad)); d != Hold {
		t.Fatalf("before content: %v, want Hold", d)
	}
	g.Shed(4 << 10)
	if len(g.Held()) == 0 {
		t.Fatal("Shed before commit dropped the held bytes")
	}
	content := "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n"
	if d := g.Feed([]byte(content)); d != Commit {
		t.Fatalf("content: %v, want Commit", d)
	}
	g.Shed(64 << 10)
	if len(g.Held()) == 0 {
		t.Fatal("Shed dropped a buffer under its limit")
	}
	g.Shed(4 << 10)
	if len(g.Held()) != 0 || len(g.Events()) != 0 {
		t.Fatalf("after Shed: %d held bytes, %d of events", len(g.Held()), len(g.Events()))
	}
	if g.Finished() {
		t.Fatal("finished before [DONE]")
	}
	g.Observe([]byte("data: [DONE]\n\n"))
	if !g.Finished() || g.Failed() {
		t.Fatalf("after [DONE]: finished %v, failed %v", g.Finished(), g.Failed())
	}
	g.Reset(Chat, bigPeek) // a gate that shed its buffer holds a new stream as before
	if d := g.Feed([]byte(role + content)); d != Commit || !bytes.Equal(g.Held(), []byte(role+content)) {
		t.Fatalf("after reuse: %v, held %q", d, g.Held())
	}
}

// openRecords returns, for each e from 0 to len(in), where the record that in[:e] ends inside
// begins (its first line; blank lines and line ends before it belong to no record), or e when
// in[:e] ends between records. A reference for Observe and HeldWhole, written from the
// event-stream grammar: LF, CRLF or lone CR line ends, a record ended by a blank line. (No
// leading byte-order mark.)
func openRecords(in []byte) []int {
	open := make([]int, len(in)+1)
	start := -1 // where the open record began; -1: none
	lineHas, afterCR := false, false
	for e := 0; ; e++ {
		open[e] = e
		if start >= 0 {
			open[e] = start
		}
		if e == len(in) {
			return open
		}
		switch c := in[e]; {
		case c == '\n' && afterCR: // the LF of a CRLF
			afterCR = false
		case c == '\r' || c == '\n':
			if !lineHas {
				start = -1 // a blank line ends the record
			}
			lineHas, afterCR = false, c == '\r'
		default:
			if start < 0 {
				start = e
			}
			lineHas, afterCR = true, false
		}
	}
}

// openRecord is openRecords(in)[len(in)].
func openRecord(in []byte) int { return openRecords(in)[len(in)] }

// Observe reports which bytes of each read end between events, however the stream is cut
// into reads and whatever its line ends: after each read, the bytes sent so far (each read's
// whole prefix, after what was held) are the stream up to the start of the record it ends
// inside.
func TestGateObserveWhole(t *testing.T) {
	for _, ts := range terminalStreams {
		in := fixture(t, ts.family, ts.file)
		for _, v := range lineEndVariants(in) {
			for _, size := range []int{1, 2, 3, 5, 7, 16, 64, 1000} {
				var g Gate
				g.Reset(ts.family, 0) // commits at headers
				g.Feed(nil)
				sent, off, open := 0, 0, openRecords(v.data)
				for _, c := range chunked(v.data, size) {
					whole := g.Observe(c)
					if whole < 0 || whole > len(c) {
						t.Fatalf("%s/%s %s, %d-byte reads: whole %d of a %d-byte read", ts.family, ts.file, v.name, size, whole, len(c))
					}
					if whole > 0 {
						sent = off + whole
					}
					off += len(c)
					if want := open[off]; sent != want {
						t.Fatalf("%s/%s %s, %d-byte reads: after %d bytes, %d are whole; want %d", ts.family, ts.file, v.name, size, off, sent, want)
					}
				}
			}
		}
	}
	// Once the terminal event went by, nothing is framed: a read is whole.
	var g Gate
	g.Reset(Chat, 0)
	g.Feed(nil)
	read := []byte("data: [DONE]\n\ndata: {\"late")
	if w := g.Observe(read); w != len(read) || !g.Finished() {
		t.Fatalf("after [DONE]: whole %d, finished %v; want the whole read", w, g.Finished())
	}
}

// HeldWhole is where the held bytes stop being whole events on commit: the read that decided
// may end inside the next event, also when the peek limit decided inside an event.
func TestGateHeldWhole(t *testing.T) {
	for _, ts := range terminalStreams {
		in := fixture(t, ts.family, ts.file)
		for _, v := range lineEndVariants(in) {
			for _, peek := range []int{bigPeek, 100, 333, 1000} {
				for _, size := range []int{7, 64, 1000, len(v.data)} {
					var g Gate
					g.Reset(ts.family, peek)
					for _, c := range chunked(v.data, size) {
						d := g.Feed(c)
						if d == Hold {
							continue
						}
						want := openRecord(g.Held())
						if g.finished {
							want = len(g.Held()) // nothing is framed past the terminal event
						}
						if d == Commit && g.HeldWhole() != want {
							t.Fatalf("%s/%s %s, peek %d, %d-byte reads: %d of %d held bytes whole, want %d",
								ts.family, ts.file, v.name, peek, size, g.HeldWhole(), len(g.Held()), want)
						}
						break
					}
				}
			}
		}
	}
}

// OpenEventEnd: at a proper end of the body inside an event whose data is whole, the bytes that
// end it, which make it count when observed; nil for an event cut short, or none open.
func TestOpenEventEnd(t *testing.T) {
	opening := "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n"
	finish := `data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`
	long := strings.Repeat("a", tailCaptureLimit)
	tests := []struct {
		name, tail, want string
		finished         bool // after the end is observed
	}{
		{"[DONE] without its blank line", "data: [DONE]\n", "\n", true},
		{"[DONE] without its line end", "data: [DONE]", "\n\n", true},
		{"[DONE] after a CR", "data: [DONE]\r", "\r", true},
		{"the finish chunk without its line end", finish, "\n\n", true},
		{"a content chunk without its blank line", strings.TrimSuffix(opening, "\n"), "\n", false},
		{"a comment after the data", finish + "\n: bye", "\n\n", true},
		{"JSON cut short", finish[:len(finish)-3], "", false},
		{"[DONE] cut", "data: [DO", "", false},
		{"no data yet", "event: x\n", "", false},
		{"an event name cut", "data: [DONE]\nevent: mess", "", false},
		{"a field name cut", "data: [DONE]\nda", "", false},
		{"an object past the capture", "data: {\"x\":\"" + long + "\"}\n", "\n", false},
		{"the finish chunk past the capture", finish[:len(finish)-1] + `,"x":"` + long + `"}`, "\n\n", true},
		{"data lines past the capture", "data: {\"x\":\"" + long + "\",\ndata: \"y\":[1]}", "\n\n", false},
		{"an object past the capture cut short", "data: {\"x\":{\"y\":\"" + long + "\"}", "", false},
		{"cut inside a string past the capture", "data: {\"x\":\"" + long + `\"}`, "", false},
		{"an array past the capture", "data: [\"" + long + "\"]\n", "", false},
		{"bytes after an object past the capture", "data: {\"x\":\"" + long + "\"} x\n", "", false},
		{"many data lines past the capture", "data: {\"x\":\"" + long + "\",\ndata: \"a\":1,\ndata: \"b\":2,\ndata: \"c\":3,\ndata: \"d\":[4]}", "\n\n", false},
		{"many data lines past the capture, cut", "data: {\"x\":\"" + long + "\",\ndata: \"a\":1,\ndata: \"b\":2,\ndata: \"c\":3,\ndata: \"d\":[4]", "", false},
		{"between events", "", "", false},
	}
	for _, tc := range tests {
		for _, bytewise := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/bytewise=%v", tc.name, bytewise), func(t *testing.T) {
				var g Gate
				g.Reset(Chat, 1<<20)
				if g.Feed([]byte(opening)) != Commit {
					t.Fatal("the opening did not commit")
				}
				if bytewise {
					for i := range len(tc.tail) {
						g.Observe([]byte(tc.tail[i : i+1]))
					}
				} else {
					g.Observe([]byte(tc.tail))
				}
				checkOpenEventEnd(t, &g, tc.want, tc.finished)
			})
		}
	}
}

// A long last event the peek limit cut while it was held before commit: its shape is followed
// from the bytes held, so that the body ending inside it with the object whole still ends the
// stream (a Responses stream's response.completed carries the whole answer).
func TestOpenEventEndAfterPeekLimit(t *testing.T) {
	completed := `event: response.completed` + "\n" + `data: {"type":"response.completed","response":{"output":[{"type":"message","content":[{"type":"output_text","text":"` +
		strings.Repeat("Hello. ", 200) + `"}]}]}}`
	for _, tc := range []struct {
		name, tail, want string
		finished         bool
	}{
		{"whole", completed + "\n", "\n", true},
		{"cut short", completed[:len(completed)-2], "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var g Gate
			g.Reset(Responses, 1024)
			if d := g.Feed([]byte(tc.tail)); d != Commit || g.Reason() != ReasonPeekLimit {
				t.Fatalf("Feed = %v (%v), want a commit at the peek limit", d, g.Reason())
			}
			checkOpenEventEnd(t, &g, tc.want, tc.finished)
		})
	}
}

// A body that ends anywhere inside a long last event, however the event's bytes were split into
// reads, gets an end only once the event's object closed: a cut is never taken for an event
// that only lacks its blank line.
func TestOpenEventEndAtEveryCut(t *testing.T) {
	opening := fixture(t, Responses, "text.sse")
	opening = opening[:bytes.Index(opening, []byte("event: response.completed"))]
	last := "event: response.completed\ndata: " + `{"type":"response.completed","response":{"output":[{"content":[{"text":"` +
		strings.Repeat(`Say \"hi\" {[\\`, 60) + `"}],"x":[[{}],{"y":"}"}]}]}}` + "\n"
	closed := strings.LastIndexByte(last, '}') + 1
	for n := 0; n <= len(last); n++ {
		for _, split := range []int{0, n / 3, n - 1} {
			split = max(split, 0)
			var g Gate
			g.Reset(Responses, bigPeek)
			if g.Feed(opening) != Commit {
				t.Fatal("the opening did not commit")
			}
			g.Observe([]byte(last[:split]))
			g.Observe([]byte(last[split:n]))
			end := g.OpenEventEnd()
			switch want := n >= closed; {
			case want && end == nil:
				t.Fatalf("cut after %d of %d bytes (split at %d): no end, the object closed at %d", n, len(last), split, closed)
			case !want && end != nil:
				t.Fatalf("cut after %d of %d bytes (split at %d): end %q before the object closed at %d", n, len(last), split, end, closed)
			}
			if end != nil && (g.Observe(end) != len(end) || !g.Finished()) {
				t.Fatalf("cut after %d: the end did not finish the stream", n)
			}
		}
	}
}

// checkOpenEventEnd checks what OpenEventEnd gives on g, and that the end, observed, ends the
// event with the stream finished or not.
func checkOpenEventEnd(t *testing.T, g *Gate, want string, finished bool) {
	t.Helper()
	end := g.OpenEventEnd()
	if string(end) != want {
		t.Fatalf("OpenEventEnd = %q, want %q", end, want)
	}
	if end == nil {
		return
	}
	if whole := g.Observe(end); whole != len(end) || !g.fr.betweenRecords() && !g.fr.cr {
		t.Fatalf("observing %q: whole %d, the event still open", end, whole)
	}
	if g.Finished() != finished {
		t.Fatalf("Finished = %v after the end, want %v", g.Finished(), finished)
	}
	if g.OpenEventEnd() != nil {
		t.Fatal("an end again after the event ended")
	}
}
