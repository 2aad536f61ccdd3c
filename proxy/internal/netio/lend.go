package netio

import (
	"github.com/llm-failover/failover/proxy/internal/bufpool"
	"github.com/valyala/fasthttp"
)

// bodyBuffers recycles the buffers that held answers: an exchange reads an answer's body into
// its buffer, gives it to fasthttp as the answer's body (LendBody), and takes another from
// here; the connection puts it back once the answer is written (TakeBack). Each is a *[]byte,
// so that putting one allocates nothing.
//
// fasthttp's own way (Response.SwapBody) hands the buffer to fasthttp's pool of body buffers,
// which keeps only buffers up to a size it learns from the answers it sees: after many small
// chat answers it drops each larger one (a stream sent whole, a long completion), and every
// such answer then allocated twice, a new buffer for fasthttp and a larger one for the next
// body. Here a buffer is kept whatever its size, up to maxPooledBody.
var bodyBuffers = bufpool.New(0, maxPooledBody)

// maxPooledBody is the largest buffer bodyBuffers keeps, as the exchange's own limit.
const maxPooledBody = 1 << 20

// LendBody makes b the answer's body without copying it (fasthttp writes it after the handler
// returns, when the exchange that read it may serve another request), keeps b until the
// answer is written, and returns a buffer (empty, possibly nil) for the exchange to read its
// next body into.
func (c *ClientConn) LendBody(resp *fasthttp.Response, b []byte) []byte {
	c.takeBack() // not expected: one answer per request, and the last was taken back
	resp.SetBodyRaw(b)
	h := bodyBuffers.Get()
	spare := *h
	*h = b
	c.lent.Store(h)
	return spare
}

// takeBack puts the lent body back into bodyBuffers. It is called where the answer has been
// written: when the connection reads again, when its next request begins (Begin: a request
// that was already read, behind the one answered, is served without a read), and when it
// closes.
func (c *ClientConn) takeBack() {
	if c.lent.Load() == nil {
		return
	}
	bodyBuffers.Put(c.lent.Swap(nil))
}
