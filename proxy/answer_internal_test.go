package proxy

import (
	"testing"
	"unsafe"
)

// A stream that arrived whole before commit is answered with the gate's buffer as the body,
// and the gate takes the body's old storage: the exchange, back in the pool when the handler
// returns (before fasthttp writes the answer), must not hold the buffer the answer is written
// from, or its next stream would be read into it.
func TestWholeStreamAnswerIsNotTheGatesBuffer(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items at random: the exchange looked at would not be the one used")
	}
	h := newHandlerBench(t, true)
	for range 3 { // the first answers grow the buffers; every one must be apart
		h.serve(t)
		if h.ctx.Response.IsBodyStream() {
			t.Fatal("the stream was piped, not answered whole")
		}
		body := h.ctx.Response.Body()
		ex := h.srv.pool.Get().(*exchange) // the one serveProxy just put back
		held := ex.tries[0].up.gate.Held()
		h.srv.pool.Put(ex)
		if len(body) == 0 || cap(held) > 0 && unsafe.SliceData(held[:cap(held)]) == unsafe.SliceData(body) {
			t.Fatalf("the pooled exchange's gate holds the answer's body (%d bytes)", len(body))
		}
	}
}
