package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	pt "github.com/llm-failover/failover/proxy/proxytest"
)

// Messages with anthropic-sdk-go, streamed through client.Messages.NewStreaming and
// Message.Accumulate, as the SDK's README shows.
func TestMessages(t *testing.T) {
	overloaded := pt.AnthropicStreamError("overloaded_error", "Overloaded")
	play(t, anthropicGo, []conversation{
		{
			name:    "a whole stream",
			targets: [][]pt.Step{{messagesStream("t0")}},
			text:    "Hello from t0",
			seen:    []string{"msg_t0"},
		},
		{
			name:    "an overloaded_error event before content transfers",
			targets: [][]pt.Step{{messagesEvents("t0", pt.AnthropicStream(0)[0].Data, overloaded)}, {messagesStream("t1")}},
			text:    "Hello from t1",
			seen:    []string{"msg_t1"},
		},
		{
			name:    "a 529 transfers",
			targets: [][]pt.Step{{pt.Overloaded()}, {messagesStream("t1")}},
			text:    "Hello from t1",
			seen:    []string{"msg_t1"},
		},
		{
			// docs/streams.md, Streams: a body that ends properly inside an event whose data is whole
			// (here message_stop, its blank line missing) ends as if the line end had come.
			name:    "a stream whose message_stop lacks its blank line",
			targets: [][]pt.Step{{messagesEvents("t0", lastWithoutBlankLine(chunkData(pt.AnthropicStream(0, "Hello", " from", " t0")))...)}},
			text:    "Hello from t0",
			seen:    []string{"msg_t0"},
		},
		{
			// docs/streams.md, "When a stream is cut after output began": the whole events reach the
			// app, then the sidecar's final event, which anthropic-sdk-go raises from
			// stream.Err() with the stream's status, 200.
			name:    "a cut inside an event after content",
			targets: [][]pt.Step{{cutAfter(messagesStream("t0"), `"text":" from"`)}, {}},
			text:    "Hello",
			seen:    []string{"msg_t0"},
			err:     &errorObject{status: 200, typ: "api_error", code: "stream_interrupted"},
		},
		{
			// docs/streams.md, Resume a cut stream: the continuation's message_start is dropped and its
			// text goes on in the open block, so the message accumulates as one.
			name: "an overloaded_error after content resumed on another target",
			targets: [][]pt.Step{{messagesEvents("t0", append(chunkData(pt.AnthropicStream(0, "Hello"))[:4], overloaded)...)},
				{messagesWordsFrom("t1", " from", " t1")}},
			env:  resumeEnv,
			text: "Hello from t1",
			seen: []string{"msg_t0"},
		},
		{
			name:    "a cut stream resumed on another target",
			targets: [][]pt.Step{{cutAfter(messagesStream("t0"), `"text":" from"`)}, {messagesWordsFrom("t1", " from", " t1")}},
			env:     resumeEnv,
			text:    "Hello from t1",
			seen:    []string{"msg_t0"},
		},
		{
			// docs/streams.md, Resume a cut stream: asked by instruction, the continuation starts over
			// with the text the app has ("Hello"), which the seam drops.
			name:    "a cut stream resumed by instruction",
			targets: [][]pt.Step{{cutAfter(messagesStream("t0"), `"text":" from"`)}, {messagesWordsFrom("t1", "Hello", " from", " t1")}},
			env:     instructEnv,
			text:    "Hello from t1",
			seen:    []string{"msg_t0"},
		},
		{
			// auto on Claude 4.6 and later: the prefill refused with a 400, then asked by instruction.
			name:    "a cut stream resumed by instruction after a refused prefill",
			targets: [][]pt.Step{{cutAfter(messagesStream("t0"), `"text":" from"`)}, {pt.AnthropicPrefillRefusal(), messagesWordsFrom("t1", " from", " t1")}},
			env:     autoEnv,
			text:    "Hello from t1",
			seen:    []string{"msg_t0"},
		},
	})
}

// messagesWordsFrom is a whole Messages stream of these words from the target who, in a message
// with the id msg_<who>.
func messagesWordsFrom(who string, words ...string) pt.Step {
	return relabel(pt.SSE(pt.AnthropicStream(0, words...)...), "msg_test", "msg_"+who)
}

// chunkData is the data of each chunk.
func chunkData(chunks []pt.Chunk) []string {
	out := make([]string, len(chunks))
	for i, c := range chunks {
		out[i] = c.Data
	}
	return out
}

// messagesStream is a whole Messages stream from the target who: "Hello from <who>", in a
// message with the id msg_<who>.
func messagesStream(who string) pt.Step {
	return relabel(pt.SSE(pt.AnthropicStream(0, "Hello", " from", " "+who)...), "msg_test", "msg_"+who)
}

// messagesEvents is a Messages stream of these events from the target who, its message
// carrying the id msg_<who>.
func messagesEvents(who string, events ...string) pt.Step {
	return relabel(pt.SSE(pt.Events(0, events...)...), "msg_test", "msg_"+who)
}

var anthropicGo = client{run: runMessages, errorObject: messagesErrorObject}

func runMessages(t *testing.T, addr string, single bool) (string, []string, error) {
	c := anthropic.NewClient(option.WithBaseURL("http://"+addr+"/"), option.WithAPIKey(dummyKey),
		option.WithMaxRetries(0)) // the sidecar, not the SDK, must recover
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	params := anthropic.MessageNewParams{
		Model:     "claude-test",
		MaxTokens: 64,
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Say hello"))},
	}
	if single {
		msg, err := c.Messages.New(ctx, params)
		if err != nil {
			return "", nil, err
		}
		return messageText(msg), []string{msg.ID}, nil
	}

	stream := c.Messages.NewStreaming(ctx, params)
	defer stream.Close()
	var msg anthropic.Message
	var seen []string
	for stream.Next() {
		event := stream.Current()
		if event.Type == "message_start" && (len(seen) == 0 || seen[len(seen)-1] != event.Message.ID) {
			seen = append(seen, event.Message.ID)
		}
		if err := msg.Accumulate(event); err != nil {
			t.Errorf("the message did not accumulate a %s event: %v", event.Type, err)
		}
	}
	return messageText(&msg), seen, stream.Err()
}

// messageText joins the message's text blocks.
func messageText(msg *anthropic.Message) string {
	text := ""
	for _, block := range msg.Content {
		if block.Type == "text" {
			text += block.Text
		}
	}
	return text
}

// messagesErrorObject reads anthropic-sdk-go's errors. docs/streams.md's row (When a stream is cut after
// output began): stream.Err() is an *anthropic.Error with StatusCode 200 (the stream's status)
// and Type() the event's error type, and the event is its RawJSON().
func messagesErrorObject(err error) (obj errorObject, ok bool, shape []string) {
	var ae *anthropic.Error
	if !errors.As(err, &ae) {
		return obj, false, nil
	}
	var doc struct {
		Type  string
		Error struct{ Type, Code string } `json:"error"`
	}
	if json.Unmarshal([]byte(ae.RawJSON()), &doc) != nil {
		return obj, false, nil
	}
	if doc.Type != "error" {
		shape = append(shape, fmt.Sprintf("RawJSON() has the type %q, not an error event's", doc.Type))
	}
	if string(ae.Type()) != doc.Error.Type {
		shape = append(shape, fmt.Sprintf("Type() is %q, RawJSON() has %q", ae.Type(), doc.Error.Type))
	}
	return errorObject{status: ae.StatusCode, typ: doc.Error.Type, code: doc.Error.Code}, true, shape
}

// lastWithoutBlankLine is events with the last one's blank line left out.
func lastWithoutBlankLine(events []string) []string {
	events[len(events)-1] = strings.TrimSuffix(events[len(events)-1], "\n")
	return events
}
