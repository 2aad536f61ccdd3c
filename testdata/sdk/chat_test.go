package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"

	pt "github.com/llm-failover/failover/proxy/proxytest"
)

// Chat completions with openai-go, streamed through client.Chat.Completions.NewStreaming and
// openai.ChatCompletionAccumulator, as the SDK's README shows.
func TestChatCompletions(t *testing.T) {
	serverError := pt.ChatError("The server had an error while processing your request.", "server_error", "server_error")
	overloaded := pt.JSON(503, pt.OpenAIError("The server is overloaded.", "server_error", ""))
	play(t, openaiGo, []conversation{
		{
			name:    "a whole stream",
			targets: [][]pt.Step{{chatStream("t0")}},
			text:    "Hello from t0",
			seen:    []string{"chatcmpl-t0"},
		},
		{
			name:    "an error event before content transfers",
			targets: [][]pt.Step{{chatEvents("t0", pt.ChatRole, serverError)}, {chatStream("t1")}},
			text:    "Hello from t1",
			seen:    []string{"chatcmpl-t1"},
		},
		{
			name:    "a 503 transfers",
			targets: [][]pt.Step{{overloaded}, {chatStream("t1")}},
			text:    "Hello from t1",
			seen:    []string{"chatcmpl-t1"},
		},
		{
			// docs/streams.md, Streams: a chunk with a finish_reason for every choice completes a chat
			// stream; several OpenAI-compatible servers send no [DONE].
			name: "a stream ending at its finish_reason without [DONE]",
			targets: [][]pt.Step{
				{chatEvents("t0", pt.ChatRole, pt.ChatDelta("Hello"), pt.ChatDelta(" from"), pt.ChatDelta(" t0"), pt.ChatFinish)},
				{},
			},
			text: "Hello from t0",
			seen: []string{"chatcmpl-t0"},
		},
		{
			// docs/streams.md, Streams: a body that ends properly inside an event whose data is whole
			// (here the finish chunk, its blank line missing) ends as if the line end had come.
			name: "a stream whose last event lacks its blank line",
			targets: [][]pt.Step{
				{chatEvents("t0", pt.ChatRole, pt.ChatDelta("Hello"), pt.ChatDelta(" from"), pt.ChatDelta(" t0"), strings.TrimSuffix(pt.ChatFinish, "\n"))},
				{},
			},
			text: "Hello from t0",
			seen: []string{"chatcmpl-t0"},
		},
		{
			// docs/streams.md, "When a stream is cut after output began": the whole events reach the
			// app, then the sidecar's final event, which openai-go raises from stream.Err(),
			// with no status.
			name:    "a cut inside an event after content",
			targets: [][]pt.Step{{cutAfter(chatStream("t0"), `"content":" from"`)}, {}},
			text:    "Hello",
			seen:    []string{"chatcmpl-t0"},
			err:     &errorObject{typ: "failover_error", code: "stream_interrupted"},
		},
		{
			// docs/streams.md, Resume a cut stream: the continuation's chunks carry the first stream's id,
			// so the accumulator takes them, and its text follows the text the app had.
			name:    "a cut stream resumed on another target",
			targets: [][]pt.Step{{cutAfter(chatStream("t0"), `"content":" from"`)}, {chatWordsFrom("t1", " from", " t1")}},
			env:     resumeEnv,
			text:    "Hello from t1",
			seen:    []string{"chatcmpl-t0"},
		},
		{
			// docs/streams.md, Resume a cut stream: asked by instruction, the continuation starts over
			// with the text the app has ("Hello"), which the seam drops.
			name:    "a cut stream resumed by instruction",
			targets: [][]pt.Step{{cutAfter(chatStream("t0"), `"content":" from"`)}, {chatWordsFrom("t1", "Hello", " from", " t1")}},
			env:     instructEnv,
			text:    "Hello from t1",
			seen:    []string{"chatcmpl-t0"},
		},
		{
			// auto: the prefill refused with Anthropic's 400, then asked by instruction.
			name:    "a cut stream resumed by instruction after a refused prefill",
			targets: [][]pt.Step{{cutAfter(chatStream("t0"), `"content":" from"`)}, {pt.AnthropicPrefillRefusal(), chatWordsFrom("t1", " from", " t1")}},
			env:     autoEnv,
			text:    "Hello from t1",
			seen:    []string{"chatcmpl-t0"},
		},
		{
			name: "a resume the target refuses leaves the app the original error",
			targets: [][]pt.Step{{cutAfter(chatStream("t0"), `"content":" from"`)},
				{pt.JSON(400, pt.OpenAIError("assistant prefill is not supported", "invalid_request_error", "invalid_value"))}},
			env:  resumeEnv,
			text: "Hello",
			seen: []string{"chatcmpl-t0"},
			err:  &errorObject{typ: "failover_error", code: "stream_interrupted"},
		},
		{
			name:    "a non-streaming request transfers",
			single:  true,
			targets: [][]pt.Step{{overloaded}, {relabel(pt.JSON(200, pt.ChatCompletion("Hello from t1")), "chatcmpl-test", "chatcmpl-t1")}},
			text:    "Hello from t1",
			seen:    []string{"chatcmpl-t1"},
		},
	})
}

// chatStream is a whole chat stream from the target who: "Hello from <who>", its chunks
// carrying the id chatcmpl-<who>.
func chatStream(who string) pt.Step {
	return relabel(pt.SSE(pt.ChatStream(0, "Hello", " from", " "+who)...), "chatcmpl-test", "chatcmpl-"+who)
}

// chatWordsFrom is a whole chat stream of these words from the target who, its chunks carrying
// the id chatcmpl-<who>.
func chatWordsFrom(who string, words ...string) pt.Step {
	return relabel(pt.SSE(pt.ChatStream(0, words...)...), "chatcmpl-test", "chatcmpl-"+who)
}

// chatEvents is a chat stream of these events from the target who, its chunks carrying the id
// chatcmpl-<who>.
func chatEvents(who string, events ...string) pt.Step {
	return relabel(pt.SSE(pt.Events(0, events...)...), "chatcmpl-test", "chatcmpl-"+who)
}

var openaiGo = client{run: runChat, errorObject: chatErrorObject}

func runChat(t *testing.T, addr string, single bool) (string, []string, error) {
	c := openai.NewClient(option.WithBaseURL("http://"+addr+"/v1/"), option.WithAPIKey(dummyKey),
		option.WithMaxRetries(0)) // the sidecar, not the SDK, must recover
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	params := openai.ChatCompletionNewParams{
		Model:    "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello")},
	}
	if single {
		completion, err := c.Chat.Completions.New(ctx, params)
		if err != nil {
			return "", nil, err
		}
		if len(completion.Choices) == 0 {
			return "", []string{completion.ID}, nil
		}
		return completion.Choices[0].Message.Content, []string{completion.ID}, nil
	}

	stream := c.Chat.Completions.NewStreaming(ctx, params)
	defer stream.Close()
	var acc openai.ChatCompletionAccumulator
	var seen []string
	for n := 0; stream.Next(); n++ {
		chunk := stream.Current()
		if len(seen) == 0 || seen[len(seen)-1] != chunk.ID {
			seen = append(seen, chunk.ID)
		}
		if !acc.AddChunk(chunk) {
			t.Errorf("the accumulator refused chunk %d", n)
		}
	}
	text := ""
	if len(acc.Choices) > 0 {
		text = acc.Choices[0].Message.Content
	}
	return text, seen, stream.Err()
}

// chatErrorObject reads openai-go's errors. docs/streams.md's row (When a stream is cut after output
// began): stream.Err() is a *ssestream.StreamError, not an *openai.Error, with no status and the
// message "received error while streaming: {...}", and the error object is in its Event.Data.
func chatErrorObject(err error) (obj errorObject, ok bool, shape []string) {
	var oe *openai.Error
	if errors.As(err, &oe) { // an error answer, with its status
		return errorObject{status: oe.StatusCode, typ: oe.Type, code: oe.Code}, true, nil
	}
	var se *ssestream.StreamError
	if !errors.As(err, &se) {
		return obj, false, nil
	}
	var event struct {
		Error struct{ Type, Code string } `json:"error"`
	}
	if json.Unmarshal(se.Event.Data, &event) != nil {
		return obj, false, nil
	}
	if !strings.HasPrefix(se.Message, streamErrorPrefix) {
		shape = append(shape, fmt.Sprintf("the StreamError's message does not begin %q", streamErrorPrefix))
	}
	return errorObject{typ: event.Error.Type, code: event.Error.Code}, true, shape
}

// streamErrorPrefix begins the message of openai-go's StreamError, the error event's JSON after it.
const streamErrorPrefix = "received error while streaming: {"
