package proxy

import (
	"strings"
	"testing"

	"github.com/llm-failover/failover/stream"
)

// A committed stream keeps its exchange for its whole life: shed drops the buffers a past
// request grew (a large response, a substituted prompt, a large peek) and keeps small ones.
func TestShedDropsGrownBuffers(t *testing.T) {
	ex := &exchange{}
	ex.respBody = make([]byte, 10, 1<<20)
	ex.subBody = make([]byte, 10, 64<<10)
	ex.upHead = make([]byte, 10, 1<<10)
	ex.gate.Reset(stream.Chat, 1<<20)
	ex.gate.Feed([]byte(": " + strings.Repeat("p", 8<<10) + "\n\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n"))
	ex.shed()
	if ex.respBody != nil || ex.subBody != nil {
		t.Errorf("grown buffers kept: respBody cap %d, subBody cap %d", cap(ex.respBody), cap(ex.subBody))
	}
	if cap(ex.upHead) != 1<<10 {
		t.Errorf("a small buffer was dropped: upHead cap %d", cap(ex.upHead))
	}
	if len(ex.gate.Held()) != 0 {
		t.Errorf("the gate kept %d held bytes", len(ex.gate.Held()))
	}
}
