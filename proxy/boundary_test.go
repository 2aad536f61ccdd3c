package proxy_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	pt "github.com/llm-failover/failover/proxy/proxytest"
	"github.com/llm-failover/failover/proxy/proxytest/sidecar"
)

// sseEvent is one event a strict event-stream reader dispatches.
type sseEvent struct{ name, data string }

// parseSSE reads b as the event-stream standard says a client does: LF, CRLF or lone CR line
// ends, `data:` lines joined with LF, one space after the colon dropped, comments and other
// fields ignored, an event dispatched at its blank line when it has data. rest is the record
// at the end of b whose blank line never came (a client drops it; "" when b ends between
// events). It shares no code with the sidecar's framer.
func parseSSE(b []byte) (events []sseEvent, rest string) {
	var name, data strings.Builder
	hasData, inRecord, recStart := false, false, 0
	for i := 0; i < len(b); {
		j := bytes.IndexAny(b[i:], "\r\n")
		if j < 0 {
			if !inRecord {
				recStart = i
			}
			inRecord = true
			break
		}
		line, next := string(b[i:i+j]), i+j+1
		if b[i+j] == '\r' && next < len(b) && b[next] == '\n' {
			next++
		}
		if line == "" {
			if hasData {
				events = append(events, sseEvent{name.String(), data.String()})
			}
			name.Reset()
			data.Reset()
			hasData, inRecord = false, false
			i = next
			continue
		}
		if !inRecord {
			recStart, inRecord = i, true
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "data":
			if hasData {
				data.WriteByte('\n')
			}
			data.WriteString(value)
			hasData = true
		case "event":
			name.Reset()
			name.WriteString(value)
		}
		i = next
	}
	if inRecord {
		rest = string(b[recStart:])
	}
	return events, rest
}

// checkWholeEvents fails unless body, read strictly, is whole events only, each with JSON data
// (or [DONE]): what an SDK parses without a syntax error.
func checkWholeEvents(t *testing.T, body []byte) []sseEvent {
	t.Helper()
	events, rest := parseSSE(body)
	if rest != "" {
		t.Errorf("the body ends inside an event: %q", rest)
	}
	for _, ev := range events {
		if ev.data != "[DONE]" && !json.Valid([]byte(ev.data)) {
			t.Errorf("an event whose data is not JSON (an SDK raises a syntax error): %q", ev.data)
		}
	}
	return events
}

// checkInterrupted fails unless body is want (the whole events the upstream sent before the
// cut) followed by exactly one event, the sidecar's parseable stream_interrupted error, and
// the body was aborted.
func checkInterrupted(t *testing.T, r sidecar.Response, want string) {
	t.Helper()
	if r.Status != 200 || r.Err == nil {
		t.Fatalf("got %d err=%v, want the committed 200 and an aborted body", r.Status, r.Err)
	}
	if !bytes.HasPrefix(r.Body, []byte(want)) {
		t.Fatalf("the client did not get exactly the whole events first:\n got %q\nwant %q then the error event", r.Body, want)
	}
	events := checkWholeEvents(t, r.Body)
	// The sidecar's event opens with a blank line: anything else first is the cut event's start.
	if rest := r.Body[len(want):]; !bytes.HasPrefix(rest, []byte("\n\n")) {
		t.Fatalf("bytes of the cut event reached the client before the error event: %q", rest)
	}
	after, _ := parseSSE(r.Body[len(want):])
	if len(after) != 1 || !strings.Contains(after[0].data, `"stream_interrupted"`) {
		t.Fatalf("after the whole events, want exactly one stream_interrupted event, got %q (body %q)", after, r.Body)
	}
	if last := events[len(events)-1]; last != after[0] {
		t.Fatalf("the error event is not the last event the client reads: %q", last)
	}
}

// A committed stream reaches the client in whole events: when the upstream is cut in the
// middle of an event (inside a field name, inside the JSON, between the line ends of its blank
// line; LF or CRLF line ends), that event's start never reaches the client, and the sidecar's
// error event follows the last whole event, so a strict reader (an SDK) parses every event and
// raises stream_interrupted rather than a JSON syntax error (docs/streams.md, Streams). It holds for
// events read after commit (one event per read) and for the bytes read with the event that
// committed (the whole body in one read), for a close and a reset, and for a stall the idle
// timeout ends.
func TestStreamCutMidEventShowsWholeEventsThenTheError(t *testing.T) {
	t.Parallel()
	type family struct {
		name, path, body string
		events           []string
		cut              int // the event the upstream is cut in: after commit
	}
	families := []family{
		{"chat", "/chat/completions", streamBody, []string{pt.ChatRole, pt.ChatDelta("Hello"), pt.ChatDelta(" from"), pt.ChatDelta(" there"), pt.ChatFinish, pt.Done}, 3},
		{"messages", "/messages", `{"model":"claude","stream":true,"max_tokens":5,"messages":[]}`, chunkData(pt.AnthropicStream(0, "Hello", " from", " there")), 5},
		{"responses", "/responses", `{"model":"gpt-4o","stream":true,"input":"hi"}`, chunkData(pt.ResponsesStream(0, "Hello", " from", " there")), 6},
	}
	type cut struct {
		name string
		at   func(ev string) int // bytes of the event that arrive
		keep func(ev string) int // of those, the bytes that make a whole event (0: none)
	}
	none := func(string) int { return 0 }
	eventField := cut{"inside the event field name", func(ev string) int {
		if i := strings.Index(ev, "event:"); i >= 0 {
			return i + 3
		}
		return -1 // chat events have no event field
	}, none}
	cuts := []cut{
		eventField,
		{"inside the data field name", func(ev string) int { return strings.Index(ev, "data:") + 2 }, none},
		{"inside the JSON", func(ev string) int { return strings.Index(ev, "data: ") + 20 }, none},
		{"before the data line's LF", func(ev string) int { return len(ev) - 2 }, none},
		{"between the blank line's two LFs", func(ev string) int { return len(ev) - 1 }, none},
	}
	crlfCuts := []cut{
		eventField,
		{"inside the data field name", func(ev string) int { return strings.Index(ev, "data:") + 2 }, none},
		{"inside the JSON", func(ev string) int { return strings.Index(ev, "data: ") + 20 }, none},
		{"between the data line's CR and LF", func(ev string) int { return len(ev) - 3 }, none},
		{"after the data line's CRLF", func(ev string) int { return len(ev) - 2 }, none},
		// The event ends at the CR of its blank line: it is whole, and reaches the client.
		{"between the blank line's CR and LF", func(ev string) int { return len(ev) - 1 }, func(ev string) int { return len(ev) - 1 }},
	}
	type transport struct {
		name  string
		step  func(events []string) pt.Step
		fault pt.Fault
		extra []string
	}
	transports := []transport{
		{"one event per read, close", func(evs []string) pt.Step { return pt.SSE(pt.Events(0, evs...)...) }, pt.FaultCloseAfter, nil},
		{"one event per read, reset", func(evs []string) pt.Step { return pt.SSE(pt.Events(0, evs...)...) }, pt.FaultResetAfter, nil},
		{"whole body in one read, close", func(evs []string) pt.Step {
			return pt.Step{Status: 200, Header: []string{"Content-Type: text/event-stream"}, Body: strings.Join(evs, "")}
		}, pt.FaultCloseAfter, nil},
		{"one event per read, stall", func(evs []string) pt.Step { return pt.SSE(pt.Events(0, evs...)...) }, pt.FaultStallAfter,
			[]string{"FAILOVER_IDLE_TIMEOUT=300ms"}},
	}
	for _, fam := range families {
		for _, crlf := range []bool{false, true} {
			events, list := fam.events, cuts
			if crlf {
				events, list = make([]string, len(fam.events)), crlfCuts
				for i, ev := range fam.events {
					events[i] = strings.ReplaceAll(ev, "\n", "\r\n")
				}
			}
			for _, tr := range transports {
				for _, c := range list {
					if tr.fault == pt.FaultStallAfter && c.name != "inside the JSON" {
						continue // the stall waits for the idle timeout: one cut is enough
					}
					if c.at(events[fam.cut]) < 0 {
						continue
					}
					name := fmt.Sprintf("%s/crlf=%v/%s/%s", fam.name, crlf, tr.name, c.name)
					t.Run(name, func(t *testing.T) {
						t.Parallel()
						ev := events[fam.cut]
						step := tr.step(events)
						before := strings.Join(events[:fam.cut], "")
						step.Fault, step.FaultBytes = tr.fault, pt.RawOffset(step, ev, c.at(ev)-len(ev))
						up := upstream(t, step)
						s := start(t, env(targets(up.URL), noRetries, tr.extra)...)
						r := s.Post(fam.path, fam.body)
						checkInterrupted(t, r, before+ev[:c.keep(ev)])
						if rec := s.WaitLedger(1)[0]; rec["outcome"] != "partial" {
							t.Errorf("record %v, want outcome partial", rec)
						}
					})
				}
			}
		}
	}
}

// chunkData returns the chunks' data, one string each.
func chunkData(chunks []pt.Chunk) []string {
	out := make([]string, len(chunks))
	for i, c := range chunks {
		out[i] = c.Data
	}
	return out
}

// A body that ends properly inside an event whose data is whole (its blank line, or its last
// line end and the blank line, never came: some servers and proxies end a stream so) ends the
// stream as if they had come: the event reaches the client whole, with its blank line, and
// counts for the stream's end (docs/streams.md, Streams). An event cut short (its JSON incomplete) is an
// interruption, as before: its start never reaches the client, which reads the whole events
// and then the error event.
func TestStreamCleanEndInsideAnEvent(t *testing.T) {
	t.Parallel()
	chat := []string{pt.ChatRole, pt.ChatDelta("Hello"), pt.ChatFinish}
	messages := chunkData(pt.AnthropicStream(0, "Hello"))
	messagesBody := `{"model":"claude","stream":true,"max_tokens":5,"messages":[]}`
	finishNoBlank := strings.TrimSuffix(pt.ChatFinish, "\n")
	stopNoBlank := strings.TrimSuffix(messages[len(messages)-1], "\n")
	// A Responses stream ends with response.completed, which carries the whole answer: far more
	// than the 512 bytes of an event the sidecar keeps after commit, and here than it holds back.
	responses := chunkData(pt.ResponsesStream(0, "Hello", strings.Repeat(" there", 200)))
	responsesHuge := chunkData(pt.ResponsesStream(0, "Hello", strings.Repeat(" there", 16<<10)))
	responsesBody := `{"model":"gpt-4o","stream":true,"input":"hi"}`
	completedNoBlank := strings.TrimSuffix(responses[len(responses)-1], "\n")
	hugeNoBlank := strings.TrimSuffix(responsesHuge[len(responsesHuge)-1], "\n")
	tests := []struct {
		name, path, body string
		whole            []string // the whole events
		last             string   // the event the body ends inside
		ended            string   // what the client gets of it: "" when the stream is interrupted
	}{
		{"chat: [DONE] without its line end", "/chat/completions", streamBody, chat, "data: [DONE]", "data: [DONE]\n\n"},
		{"chat: [DONE] without its blank line", "/chat/completions", streamBody, chat, "data: [DONE]\n", "data: [DONE]\n\n"},
		{"chat: [DONE] without its blank line, CRLF", "/chat/completions", streamBody, chat, "data: [DONE]\r\n", "data: [DONE]\r\n\n"},
		{"chat: [DONE] ended by a CR", "/chat/completions", streamBody, chat, "data: [DONE]\r", "data: [DONE]\r\r"},
		{"chat: the finish chunk without its blank line", "/chat/completions", streamBody, chat[:2], finishNoBlank, finishNoBlank + "\n"},
		{"chat: the finish chunk without its line end", "/chat/completions", streamBody, chat[:2], strings.TrimSuffix(finishNoBlank, "\n"), finishNoBlank + "\n"},
		{"messages: message_stop without its blank line", "/messages", messagesBody, messages[:len(messages)-1], stopNoBlank, stopNoBlank + "\n"},
		{"responses: a long response.completed without its blank line", "/responses", responsesBody, responses[:len(responses)-1], completedNoBlank, completedNoBlank + "\n"},
		{"responses: a long response.completed without its line end", "/responses", responsesBody, responses[:len(responses)-1], strings.TrimSuffix(completedNoBlank, "\n"), completedNoBlank + "\n"},
		{"responses: a response.completed over 64 KiB without its blank line", "/responses", responsesBody, responsesHuge[:len(responsesHuge)-1], hugeNoBlank, hugeNoBlank + "\n"},
		// Cut short: the data is not whole, so the event does not count and never goes out.
		{"responses: a long response.completed cut inside its JSON", "/responses", responsesBody, responses[:len(responses)-1], completedNoBlank[:len(completedNoBlank)-3], ""},
		{"chat: the finish chunk cut inside its JSON", "/chat/completions", streamBody, chat[:2], finishNoBlank[:len(finishNoBlank)-20], ""},
		{"chat: [DONE] cut", "/chat/completions", streamBody, chat, "data: [DO", ""},
		{"chat: a field name cut", "/chat/completions", streamBody, chat, "dat", ""},
		{"messages: message_stop's event line only", "/messages", messagesBody, messages[:len(messages)-1], "event: message_stop\n", ""},
		{"messages: message_stop's event name cut", "/messages", messagesBody, messages[:len(messages)-1], "event: message_st", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// The last event comes on its own, after commit, and the body then ends properly.
			chunks := append(pt.Events(0, tc.whole...), pt.Chunk{Data: tc.last, Delay: 50 * time.Millisecond})
			up := upstream(t, pt.SSE(chunks...))
			s := start(t, targets(up.URL)...)
			r := s.Post(tc.path, tc.body)
			if tc.ended == "" {
				checkInterrupted(t, r, strings.Join(tc.whole, ""))
				if rec := s.WaitLedger(1)[0]; rec["outcome"] != "partial" {
					t.Errorf("record %v, want outcome partial", rec)
				}
				return
			}
			if want := strings.Join(tc.whole, "") + tc.ended; r.Status != 200 || r.Err != nil || string(r.Body) != want {
				t.Fatalf("got %d err=%v body %q\nwant a clean end with %q", r.Status, r.Err, r.Body, want)
			}
			checkWholeEvents(t, r.Body)
			if rec := s.WaitLedger(1)[0]; rec["outcome"] != "ok" {
				t.Errorf("record %v, want outcome ok", rec)
			}
		})
	}
}

// Events that arrive in pieces (the upstream writes half an event, pauses, writes the rest;
// an event larger than a read; one larger than the sidecar holds back) reach the client
// unchanged, byte for byte, and the stream ends cleanly.
func TestStreamEventsSplitAcrossReadsArriveUnchanged(t *testing.T) {
	t.Parallel()
	mid := strings.Repeat("m", 20<<10)  // held back across several reads
	huge := strings.Repeat("h", 96<<10) // more than the sidecar holds back: goes out as it comes
	families := []struct {
		name, path, body string
		events           []string
	}{
		{"chat", "/chat/completions", streamBody, chunkData(pt.ChatStream(0, "Hello", mid, " from", huge, " there"))},
		{"messages", "/messages", `{"model":"claude","stream":true,"max_tokens":5,"messages":[]}`, chunkData(pt.AnthropicStream(0, "Hello", mid, " from", huge, " there"))},
		{"responses", "/responses", `{"model":"gpt-4o","stream":true,"input":"hi"}`, chunkData(pt.ResponsesStream(0, "Hello", mid, " from", huge, " there"))},
	}
	for _, fam := range families {
		for _, crlf := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/crlf=%v", fam.name, crlf), func(t *testing.T) {
				t.Parallel()
				var chunks []pt.Chunk
				var want strings.Builder
				for _, ev := range fam.events {
					if crlf {
						ev = strings.ReplaceAll(ev, "\n", "\r\n")
					}
					half := len(ev) / 2
					chunks = append(chunks, pt.Chunk{Data: ev[:half]}, pt.Chunk{Data: ev[half:], Delay: 10 * time.Millisecond})
					want.WriteString(ev)
				}
				up := upstream(t, pt.SSE(chunks...))
				s := start(t, targets(up.URL)...)
				r := s.Post(fam.path, fam.body)
				if r.Status != 200 || r.Err != nil || string(r.Body) != want.String() {
					t.Fatalf("got %d err=%v, %d bytes; want the %d bytes the upstream sent, unchanged", r.Status, r.Err, len(r.Body), want.Len())
				}
				checkWholeEvents(t, r.Body)
				if rec := s.WaitLedger(1)[0]; rec["outcome"] != "ok" {
					t.Errorf("record %v, want outcome ok", rec)
				}
			})
		}
	}
}

// The sidecar holds back at most 64 KiB of an event (docs/streams.md, Streams): a larger event goes out
// as it comes, and a cut inside it shows the client its start, closed by the blank line that
// opens the error event, as every cut did before.
func TestStreamCutInsideAnEventTooLargeToHold(t *testing.T) {
	t.Parallel()
	huge := pt.ChatDelta(strings.Repeat("h", 96<<10))
	events := []string{pt.ChatRole, pt.ChatDelta("Hello"), huge, pt.ChatFinish, pt.Done}
	step := pt.SSE(pt.Events(0, events...)...)
	sent := 80 << 10 // bytes of the large event that arrive
	step.Fault, step.FaultBytes = pt.FaultCloseAfter, pt.RawOffset(step, huge, sent-len(huge))
	up := upstream(t, step)
	s := start(t, targets(up.URL)...)
	r := s.Post("/chat/completions", streamBody)
	want := strings.Join(events[:2], "") + huge[:sent]
	if r.Status != 200 || r.Err == nil || !bytes.HasPrefix(r.Body, []byte(want)) {
		t.Fatalf("got %d err=%v, %d bytes; want the whole events and the large event's %d bytes first", r.Status, r.Err, len(r.Body), sent)
	}
	after, rest := parseSSE(r.Body[len(want):])
	if !bytes.HasPrefix(r.Body[len(want):], []byte("\n\n")) || len(after) != 1 || !strings.Contains(after[0].data, `"stream_interrupted"`) || rest != "" {
		t.Fatalf("after the large event's start, want its closing blank line and one stream_interrupted event: %q", r.Body[len(want):])
	}
}

// The whole stream in one read, its [DONE] without the blank line: the stream is judged before
// commit, and then ends as it does when the last event comes on its own.
func TestStreamInOneReadEndingInsideAnEvent(t *testing.T) {
	t.Parallel()
	whole := pt.ChatRole + pt.ChatDelta("Hello") + pt.ChatFinish
	for _, tc := range []struct{ name, last, want string }{
		{"[DONE] without its blank line", "data: [DONE]\n", whole + "data: [DONE]\n\n"},
		{"[DONE] cut", "data: [DO", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up := upstream(t, pt.SSE(pt.Chunk{Data: whole + tc.last}))
			s := start(t, targets(up.URL)...)
			r := s.Post("/chat/completions", streamBody)
			if tc.want == "" {
				checkInterrupted(t, r, whole)
				return
			}
			if r.Status != 200 || r.Err != nil || string(r.Body) != tc.want {
				t.Fatalf("got %d err=%v body %q\nwant a clean end with %q", r.Status, r.Err, r.Body, tc.want)
			}
			if rec := s.WaitLedger(1)[0]; rec["outcome"] != "ok" {
				t.Errorf("record %v, want outcome ok", rec)
			}
		})
	}
}
