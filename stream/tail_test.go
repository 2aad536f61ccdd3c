package stream

import "testing"

// After commit the tail reads an event's JSON structure as the parser that classifies events
// before commit does: data whose structure breaks before the member the tail looks for (a
// missing comma, mismatched brackets) shows no type, error or finish_reason, before commit as
// after it (README, Streams). Each malformed event is paired with the same event well-formed,
// which the tail does read.
func TestTailReadsMalformedEventsAsTheGateDoes(t *testing.T) {
	for _, tc := range []struct {
		name             string
		family           Family
		data             string
		finished, failed bool
	}{
		{"messages: message_stop after a missing comma does not end the stream", Messages,
			`{"usage":{"output_tokens":1} "type":"message_stop"}`, false, false},
		{"messages: message_stop after a comma ends it", Messages,
			`{"usage":{"output_tokens":1},"type":"message_stop"}`, true, false},
		{"responses: an error after a missing comma is no error event", Responses,
			`{"note":"a" "error":{"message":"x"}}`, false, false},
		{"responses: the error after a comma ends and fails the stream", Responses,
			`{"note":"a","error":{"message":"x"}}`, true, true},
		{"chat: an error after mismatched brackets is no error event", Chat,
			`{"choices":[{"index":0}},"error":{"message":"x"}}`, false, false},
		{"chat: the error after matched brackets fails the stream", Chat,
			`{"choices":[{"index":0}],"error":{"message":"x"}}`, false, true},
		{"chat: a finish_reason after a missing comma does not finish its choice", Chat,
			`{"choices":[{"index":0 "finish_reason":"stop"}]}`, false, false},
		{"chat: the finish_reason after a comma finishes it", Chat,
			`{"choices":[{"index":0,"finish_reason":"stop"}]}`, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			event := []byte("data: " + tc.data + "\n\n")
			var g Gate
			g.Reset(tc.family, 0) // commits at headers: the event is tail
			g.Feed(nil)
			g.Observe(event)
			if g.Finished() != tc.finished || g.Failed() != tc.failed {
				t.Errorf("after commit: finished %v, failed %v; want %v, %v", g.Finished(), g.Failed(), tc.finished, tc.failed)
			}
			g.Reset(tc.family, bigPeek)
			if d := g.Feed(event); (d == Error) != tc.failed {
				t.Errorf("before commit the gate decided %v: it reads the event otherwise", d)
			}
		})
	}
}
