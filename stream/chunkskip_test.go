package stream

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// checkSkipIsTheWalks: whenever chunkChangesNothing says a chat chunk cannot change what the
// gate knows of its choices, the walk it spares (noteEnd's) indeed changes nothing, from every
// state of choices seen and done the tests give it.
func checkSkipIsTheWalks(t *testing.T, data []byte) {
	t.Helper()
	data = data[:min(len(data), tailCaptureLimit)]
	for _, st := range [][2]uint64{{1, 0}, {1, 1}, {3, 0}, {3, 1}, {1<<63 | 1, 0}, {0x7, 0x2}} {
		g := &Gate{family: Chat, choicesSeen: st[0], choicesDone: st[1]}
		if !g.chunkChangesNothing(data) {
			continue
		}
		_, _, choices := scanTopLevel(data, true)
		if choices >= 0 {
			g.noteChoices(data, choices)
		}
		if g.choicesSeen != st[0] || g.choicesDone != st[1] {
			t.Fatalf("chunk %q: skipped as changing nothing, but the walk moves seen %b→%b, done %b→%b",
				data, st[0], g.choicesSeen, st[1], g.choicesDone)
		}
	}
}

// The skip's cases, each next to the walk: the common chunks are skipped; a chunk that the walk
// learns something from never is.
func TestChunkChangesNothing(t *testing.T) {
	tests := []struct {
		name string
		data string
		seen uint64
		want bool
	}{
		{"a content chunk of a seen choice", `{"id":"c","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}`, 1, true},
		{"spaces around the colons", `{"choices":[{"index" : 0 ,"delta":{},"finish_reason" : null}]}`, 1, true},
		{"a usage-only chunk", `{"id":"c","choices":[],"usage":{"total_tokens":9}}`, 1, true},
		{"an empty finish_reason", `{"choices":[{"index":0,"finish_reason":""}]}`, 1, true},
		{"the word index as a value", `{"choices":[{"index":0,"delta":{"role":"index"},"finish_reason":null}]}`, 1, true},
		{"the first chunk: choice 0 not seen yet", `{"choices":[{"index":0,"finish_reason":null}]}`, 0, false},
		{"a finish reason", `{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`, 1, false},
		{"a finish reason after spaces", `{"choices":[{"index":0,"finish_reason": "length"}]}`, 1, false},
		{"an unseen choice", `{"choices":[{"index":1,"delta":{"content":"x"},"finish_reason":null}]}`, 1, false},
		{"a seen second choice", `{"choices":[{"index":1,"delta":{"content":"x"},"finish_reason":null}]}`, 3, true},
		{"a tool call's index of an unseen number", `{"choices":[{"index":0,"delta":{"tool_calls":[{"index":2}]},"finish_reason":null}]}`, 1, false},
		{"an index that is not a plain number", `{"choices":[{"index":0.5,"finish_reason":null}]}`, 1, false},
		{"a value cut by the capture", `{"choices":[{"index":0,"finish_reason":`, 1, false},
		{"a finish reason cut after its quote", `{"choices":[{"index":0,"finish_reason":"`, 1, false},
		{"an index cut", `{"choices":[{"index":0`, 1, false},
		{"a finish_reason that is an object", `{"choices":[{"index":0,"finish_reason":{}}]}`, 1, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := &Gate{family: Chat, choicesSeen: tc.seen}
			if got := g.chunkChangesNothing([]byte(tc.data)); got != tc.want {
				t.Fatalf("chunkChangesNothing = %v, want %v", got, tc.want)
			}
			checkSkipIsTheWalks(t, []byte(tc.data))
		})
	}
}

// Every event of every chat fixture, whole and cut at every byte: the skip never says nothing
// changes where the walk would change something.
func TestChunkSkipAgreesWithTheWalkOnFixtures(t *testing.T) {
	files, err := filepath.Glob("../testdata/sse/chat/*.sse")
	if err != nil || len(files) == 0 {
		t.Fatalf("fixtures: %v (%d files)", err, len(files))
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(raw), "\n") {
			data, ok := strings.CutPrefix(line, "data:")
			if !ok {
				continue
			}
			data = strings.TrimSpace(data)
			for cut := 0; cut <= len(data); cut++ {
				checkSkipIsTheWalks(t, []byte(data[:cut]))
			}
		}
	}
}

// FuzzChunkSkip: on any bytes, a skipped chunk is one the walk learns nothing from.
func FuzzChunkSkip(f *testing.F) {
	f.Add([]byte(`{"id":"c","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}`))
	f.Add([]byte(`{"choices":[{"index" : 1 ,"finish_reason" : null},{"index":0,"finish_reason":"stop"}]}`))
	f.Add([]byte(`{"choices":[{"finish_reason":null,"index":2}],"index":0}`))
	f.Add([]byte(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"type":"function"}]},"finish_reason":null}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkSkipIsTheWalks(t, data)
	})
}
