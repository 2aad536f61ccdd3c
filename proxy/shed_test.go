package proxy

import (
	"strings"
	"testing"

	"github.com/llm-failover/failover/stream"
)

// A committed stream keeps its exchange for its whole life: shed drops the buffers a past
// request grew (a large response, a substituted prompt, a large peek) and keeps small ones.
func TestShedDropsGrownBuffers(t *testing.T) {
	a := &attempt{}
	up := &a.up
	up.held = make([]byte, 10, 1<<20)
	up.sub = make([]byte, 10, 64<<10)
	up.head = make([]byte, 10, 1<<10)
	up.gate.Reset(stream.Chat, 1<<20)
	up.gate.Feed([]byte(": " + strings.Repeat("p", 8<<10) + "\n\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n"))
	a.shed()
	if up.held != nil || up.sub != nil {
		t.Errorf("grown buffers kept: held cap %d, sub cap %d", cap(up.held), cap(up.sub))
	}
	if cap(up.head) != 1<<10 {
		t.Errorf("a small buffer was dropped: head cap %d", cap(up.head))
	}
	if len(up.gate.Held()) != 0 {
		t.Errorf("the gate kept %d held bytes", len(up.gate.Held()))
	}
}
