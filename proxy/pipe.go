package proxy

import (
	"io"
	"net"
	"strconv"
	"time"

	"github.com/llm-failover/failover/classify"
	"github.com/llm-failover/failover/proxy/internal/bufpool"
	"github.com/llm-failover/failover/proxy/internal/netio"
	"github.com/llm-failover/failover/proxy/internal/observe"
	"github.com/llm-failover/failover/stream"
)

// pipe is a committed body that is still arriving: an SSE stream, an image, a response past
// FAILOVER_MAX_RESPONSE_BYTES. The held bytes go first, byte for byte, then the rest of the
// upstream body as it arrives, one chunk per read, and an interruption the client must see.
//
// It is written outside fasthttp's response writer: the handler hijacks the client connection
// (keeping it), and the stream runs on a stream worker (workers), a goroutine that runs only
// streams, and writes the chunked body itself. While it waits for the upstream it holds no read
// or write buffer, no request context and a stack of a stream's depth (the deepest stream the
// worker ran, until the garbage collector shrinks it); with fasthttp's SetBodyStream an idle
// stream kept its worker goroutine's grown stack, a copy buffer, a write buffer and the request
// context for its whole life. A clean end hands the connection back to the server for the
// client's next request, served on a worker of its own.
// Part of the exchange; owned with it by the stream goroutine from the hijack on (see exchange).
type pipe struct {
	ex        *exchange
	a         *attempt
	held      []byte
	sse       bool
	chunked   bool // HTTP/1.1 client: chunked framing; else the body ends when the connection closes
	keepAlive bool // the connection serves the client's next request after a clean end
	head      []byte
	tail      []byte // the final error event, once the stream is interrupted

	// An SSE stream goes out in whole events (docs/streams.md, Streams): the start of an event whose
	// blank line has not arrived is held in a buffer lent from holdBuffers while it holds
	// bytes, and goes out with the event's end. An event that outgrows holdLimit goes out as
	// it comes (passing) until it ends.
	hold    *[]byte
	passing bool

	// writeBy is the write deadline set on the client's connection (armWrite); zero: none yet.
	writeBy time.Time

	interrupted bool
	cut         bool // the sidecar interrupted it (the shutdown timeout): no failure of the target's

	// res is set while the stream may be resumed on another target when it is cut (resume.go);
	// nil otherwise, and then nothing of resume is done.
	res *resumption
	// cont: a is the continuation of a cut stream; attemptEnded: a's health effect and ledger
	// entry are final (endAttempt).
	cont, attemptEnded bool
}

// startStream sends attempt a's answer as a stream: headers now, the body from the stream
// goroutine once the handler returns. It hands the exchange over (see exchange): the handler
// must not finish it, and after the hijack the stream goroutine owns it.
func (ex *exchange) startStream(a *attempt) {
	ctx := ex.ctx
	p := &ex.pipe
	*p = pipe{ex: ex, a: a, sse: a.sse, head: p.head[:0], tail: p.tail[:0]}
	if a.sse {
		p.held = a.up.gate.Held()
		ex.srv.metrics.StreamCommit(a.commitReason)
	} else {
		p.held = a.body
		if a.commitReason == stream.ReasonHeaders { // an image, a compressed stream
			ex.srv.metrics.StreamCommit(stream.ReasonHeaders)
		}
	}
	// Chunked even when the upstream sent a Content-Length: a failure after commit must reach
	// the client as a broken body, not as a complete one that happens to be short.
	h := &ctx.Response.Header
	p.chunked = ctx.Request.Header.IsHTTP11()
	p.keepAlive = p.chunked && !ctx.Request.Header.ConnectionClose()
	if p.chunked {
		h.SetContentLength(-1)
	} else {
		h.SetContentLength(-2)
	}
	if !p.keepAlive {
		h.SetConnectionClose()
	}
	p.head = h.AppendBytes(p.head[:0])
	if !ex.client.Known() {
		ex.client = netio.PeerOf(ctx.Conn())
	}
	if a.sse && ex.srv.cfg.Resume.On() {
		p.res = ex.prepareResume() // nil unless the request may be resumed
	}
	ex.reqBody, a.up.body = nil, nil // released with the request context; only a resume follows a commit
	ex.committedStream = true
	// Whatever verdict let it out (a commit, or a stop or an exhausted sweep whose answer is
	// larger than the response buffer), a piped answer is committed: its bytes reach the client
	// before the upstream is done, and a failure from here on ends it as interrupted.
	if r := ex.Ledger.Last(); r != nil {
		r.Phase = observe.PhaseCommitted
	}
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(ex.hijackFn)
}

// serveStream writes the committed stream to the client connection c, ends the request, and
// then hands the connection to a worker that serves its next requests (or closes it).
func (ex *exchange) serveStream(c net.Conn) {
	s, p := ex.srv, &ex.pipe
	w := c
	if u, ok := c.(interface{ UnsafeConn() net.Conn }); ok {
		w = u.UnsafeConn() // fasthttp's wrapper reads through its buffer; writes go to the socket
	}
	clean, clientLeft := p.run(w)
	keepAlive := clean && !clientLeft && p.keepAlive
	p.end(clientLeft) // finishes the exchange: nothing of it (p included) is read below
	if keepAlive && !s.closing.Load() {
		w.SetWriteDeadline(time.Time{}) // fasthttp sets none of its own: the stream's must not stay
		serve := c
		if cc, ok := w.(*netio.ClientConn); ok {
			// The client connection itself is served, not fasthttp's wrapper of it: the next
			// stream's hijack would wrap that wrapper, one level deeper per stream for as long
			// as the client keeps the connection, and the handler's ctx.Conn() would hide the
			// socket that tells when the client leaves (netio.PeerOf).
			if !cc.Reclaim(c) {
				c.Close()
				return
			}
			serve = cc
		}
		if !s.closing.Load() {
			s.handedBack.do(serve) // served on a worker of its own: this one stays a stream's
			return
		}
	}
	c.Close()
}

// streamJob is a committed stream for a stream worker: its exchange and the hijacked connection.
type streamJob struct {
	ex *exchange
	c  net.Conn
}

// shed lets go of the exchange's buffers that a past request grew beyond shedAbove and that
// a committed stream, its held bytes sent, no longer needs: the stream keeps its exchange for
// its whole life, and an idle stream should hold what it uses, not the largest response or
// prompt its exchange once carried.
func (a *attempt) shed() {
	up := &a.up
	if cap(up.held) > shedAbove {
		up.held = nil
	}
	if cap(up.sub) > shedAbove {
		up.sub = nil
	}
	if cap(up.head) > shedAbove {
		up.head = nil
	}
	up.gate.Shed(shedAbove)
}

// shedAbove is the capacity past which shed drops a buffer.
const shedAbove = 4 << 10

// streamWriteSize bounds one write of a committed stream (the held bytes can be larger).
const streamWriteSize = 16 << 10

// streamBuffers lend the buffer a stream's writes are framed in, for one write at a time.
var streamBuffers = bufpool.New(streamWriteSize+256, 4*streamWriteSize)

// holdLimit bounds the start of an event a committed SSE stream holds back until the event's
// end arrives (docs/streams.md, Streams). The largest events providers send are the Responses API's
// last ones (response.output_text.done, response.completed), which repeat the whole answer
// and echo the request's instructions: 64 KiB covers answers of several thousand tokens,
// and is half of what the default peek holds per stream before commit. A larger event goes
// out as it comes, as every event did before.
const holdLimit = 64 << 10

// holdBuffers lend the buffer that holds the start of an event, only while it holds one: a
// stream waiting between events holds none.
var holdBuffers = bufpool.New(netio.ReadBufferSize, 2*holdLimit)

// run writes the stream and reports how it ended: clean (the upstream body ended properly,
// the stream complete: docs/streams.md, Streams), or the client left (a write failed, or the client's
// connection closed while the upstream was silent). Anything else was an interruption, which
// the client has been shown. An interruption the stream may be resumed from goes on with the
// continuation (tryResume).
func (p *pipe) run(w net.Conn) (clean, clientLeft bool) {
	defer p.release()
	whole := len(p.held)
	if p.sse {
		whole = p.a.up.gate.HeldWhole()
	}
	if err := p.forward(w, p.head, p.held, whole); err != nil {
		return false, true
	}
	p.held, p.a.body = nil, nil
	p.a.shed()
	for {
		err := p.pump(w)
		if p.res != nil {
			switch step, left := p.tryResume(w, err); step {
			case resumeContinues:
				continue
			case resumeEnded:
				return false, left
			}
		}
		return p.finishBody(w, err)
	}
}

// pump pipes the upstream body to the client until it ends, and returns how: io.EOF at its
// proper end, the error that cut it (netio.ErrDeadline for the idle timeout),
// netio.ErrShutdown, netio.ErrClientGone when a write to the client failed or the client left
// while the upstream was silent, or why a stream that may be resumed stopped
// (resumption.stopped). The upstream's waits hold no read buffer where the socket can wait
// without one (netio.Conn.ExpectLongWaits): an idle stream waits minutes between events.
func (p *pipe) pump(w net.Conn) error {
	ex := p.ex
	c, body := p.a.up.conn, &p.a.up.answer
	if c == nil {
		return p.bodyEnded(w, io.EOF)
	}
	c.ExpectLongWaits()
	idle := ex.srv.cfg.Server.IdleTimeout
	// A non-streaming request's answer (past the response buffer, or an image) is still one
	// attempt, which FAILOVER_ATTEMPT_TIMEOUT bounds whole, whatever the idle timeout says.
	var end time.Time
	if !ex.Stream {
		end = deadlineAfter(p.a.start, ex.srv.cfg.Server.AttemptTimeout)
	}
	for {
		if p.res != nil && p.res.stopped() {
			return p.res.stopErr()
		}
		if ex.srv.abort.Load() {
			return netio.ErrShutdown
		}
		if !body.Ended() {
			deadline := deadlineAfter(time.Now(), idle) // after the last write to the client, which may have waited
			if !end.IsZero() && (deadline.IsZero() || end.Before(deadline)) {
				deadline = end
			}
			waited, err := c.Wait(deadline, ex.stopFn)
			ex.waited += waited
			if err != nil {
				return err
			}
		}
		data, err := body.Next()
		if len(data) == 0 {
			return p.bodyEnded(w, err)
		}
		whole := len(data)
		if p.sse {
			whole = p.a.up.gate.Observe(data)
		}
		err = p.forward(w, nil, data, whole)
		body.Consume(len(data))
		if err != nil {
			return netio.ErrClientGone
		}
	}
}

// bodyEnded is pump's return when the upstream body ended with err. When it ended properly
// (io.EOF) inside an SSE event whose data is whole (Gate.OpenEventEnd: a JSON object, or
// [DONE]), the writer left out only the event's blank line, as some servers and proxies do:
// the missing line ends are read and forwarded as if they had come, so that the event reaches
// the client whole and counts for the stream's end (docs/streams.md, Streams); so also for an event too
// large to hold, whose start already went out. An event cut short is left as it is: the stream
// was cut, and its start, if held, never goes out.
func (p *pipe) bodyEnded(w net.Conn, err error) error {
	if err != io.EOF || !p.sse {
		return err
	}
	end := p.a.up.gate.OpenEventEnd()
	if end == nil {
		return err
	}
	if ferr := p.forward(w, nil, end, p.a.up.gate.Observe(end)); ferr != nil {
		return netio.ErrClientGone
	}
	if p.res != nil && p.res.stopped() {
		return p.res.stopErr() // the event was an error event, held back for the resume
	}
	return err
}

// finishBody ends the stream after the upstream body ended with err: io.EOF once the stream is
// complete (Gate.Finished: its terminal event or, for chat and other, the finish_reason or
// ".done" event before the end) ends it cleanly; anything else is an interruption the client
// must see. A body that ended inside an event did not complete the stream, unless that event
// was whole but for its line ends (bodyEnded ended it): the event's start, held back, never
// goes out (while an event's start is held the gate is inside a record, and a gate inside a
// record is not Finished for any family the sidecar reads as SSE).
func (p *pipe) finishBody(w net.Conn, err error) (clean, clientLeft bool) {
	switch {
	case err == netio.ErrClientGone:
		return false, true
	case err == netio.ErrShutdown:
		p.cut = true
		return p.interrupt(w, "the sidecar is shutting down")
	}
	if msg := p.interruption(err); msg != "" {
		return p.interrupt(w, msg)
	}
	if p.sse && p.a.up.gate.Failed() {
		// The upstream's own error event reached the client, which needs no second one; the
		// body is still left unterminated, even after a proper final event, so that a client
		// reading only the transport sees the failure too.
		p.interrupted = true
		return false, false
	}
	if err := p.send(w, nil, true); err != nil {
		return false, true
	}
	return true, false
}

// interruption says why the upstream body's end with err interrupts the stream (the message of
// the final error event), or "" when it does not: a clean end, the client gone, the shutdown
// (finishBody deals with it), or an end after the upstream's own error event reached the client.
func (p *pipe) interruption(err error) string {
	switch {
	case err == netio.ErrClientGone || err == netio.ErrShutdown:
		return ""
	case err == netio.ErrDeadline:
		return "the upstream stalled longer than FAILOVER_IDLE_TIMEOUT"
	case err == errUpstreamEvent:
		return "the upstream sent an error event after output began"
	case err == errUnspliceable:
		return "the continuation sent an event too large to splice"
	case err != io.EOF:
		return "the upstream connection failed after output began"
	case p.sse && p.a.up.gate.Failed():
		return ""
	case p.sse && !p.a.up.gate.Finished():
		return "the upstream ended the stream without its final event"
	}
	return ""
}

// interrupt writes the family's final error event (SSE) and leaves the body unterminated: the
// connection is closed without the last chunk, so the client sees an error, never a clean end.
// The start of an event held back is dropped: the error event follows whole events (unless
// an event too large to hold was going out). When the upstream's own error event already
// reached the client, that one is the final event, however the upstream then failed (a
// reset, a stall): no second one is added.
func (p *pipe) interrupt(w net.Conn, msg string) (clean, clientLeft bool) {
	p.interrupted = true
	if p.sse && (!p.a.up.gate.Failed() || p.res != nil && len(p.res.errEvent) > 0) {
		return p.sendInterruption(w, msg)
	}
	return false, false
}

// sendInterruption writes an SSE stream's final error event: the upstream's own, when it was
// held back for a resume that did not happen (resume.go), else the family's with msg.
func (p *pipe) sendInterruption(w net.Conn, msg string) (clean, clientLeft bool) {
	p.interrupted = true
	var ev []byte
	if p.res != nil && len(p.res.errEvent) > 0 {
		ev = p.res.errEvent
	} else {
		p.tail = appendInterruptedEvent(p.tail[:0], p.ex.Family, msg)
		ev = p.tail
	}
	if err := p.send(w, nil, false, ev); err != nil {
		return false, true
	}
	return false, false
}

// forward sends a read's bytes data, of which the first whole end between events (all of
// them unless the read ended inside an SSE event: Gate.Observe), after pre. Whole events go
// out now, after the held start of the event they complete; the start of an event whose end
// has not arrived is held until it does, unless the event outgrows holdLimit. A read of whole
// events with nothing held, the common case (providers write whole events), is sent from
// where it was read.
func (p *pipe) forward(w net.Conn, pre, data []byte, whole int) error {
	if p.res != nil && p.res.reading() {
		return p.forwardResumable(w, pre, data, whole)
	}
	if p.passing {
		if whole == 0 {
			return p.send(w, pre, false, data) // more of an event too large to hold
		}
		p.passing = false // it ended in data[:whole]
	}
	var held []byte
	if p.hold != nil {
		held = *p.hold
	}
	if whole == len(data) && held == nil {
		return p.send(w, pre, false, data)
	}
	rest := data[whole:]
	if len(rest) > holdLimit || whole == 0 && len(held)+len(data) > holdLimit {
		// The event data ends inside is too large to hold: it goes out as it comes.
		p.passing = true
		err := p.send(w, pre, false, held, data)
		p.release()
		return err
	}
	var err error
	if whole > 0 {
		err = p.send(w, pre, false, held, data[:whole])
		held = held[:0]
	} else if pre != nil {
		err = p.send(w, pre, false) // the headers: the replayed bytes are all an event's start
	}
	p.keep(held, rest)
	return err
}

// keep holds the start of an event whose end has not arrived: held (what the hold buffer
// holds, or nothing) followed by rest.
func (p *pipe) keep(held, rest []byte) {
	if len(held)+len(rest) == 0 {
		p.release()
		return
	}
	if p.hold == nil {
		p.hold = holdBuffers.Get()
		held = (*p.hold)[:0]
	}
	*p.hold = append(held, rest...)
}

// release gives the buffer that held the start of an event back: what it held is dropped.
func (p *pipe) release() {
	if p.hold == nil {
		return
	}
	holdBuffers.Put(p.hold)
	p.hold = nil
}

// send writes pre as it is, then each of data framed as chunks (as it is without chunking),
// then the last chunk when last is set, in one write unless data holds more than
// streamWriteSize bytes.
func (p *pipe) send(w net.Conn, pre []byte, last bool, data ...[]byte) error {
	p.armWrite(w)
	bp := streamBuffers.Get()
	b := append((*bp)[:0], pre...)
	var err error
	room := streamWriteSize // data bytes the buffer takes before it is written
write:
	for _, d := range data {
		for len(d) > 0 {
			if room == 0 {
				if _, err = w.Write(b); err != nil {
					break write
				}
				b, room = b[:0], streamWriteSize
			}
			n := min(len(d), room)
			if p.chunked {
				b = strconv.AppendInt(b, int64(n), 16)
				b = append(b, "\r\n"...)
			}
			b = append(b, d[:n]...)
			if p.chunked {
				b = append(b, "\r\n"...)
			}
			d, room = d[n:], room-n
		}
	}
	if last && p.chunked {
		b = append(b, "0\r\n\r\n"...)
	}
	if err == nil && len(b) > 0 {
		_, err = w.Write(b)
	}
	*bp = b
	streamBuffers.Put(bp)
	return err
}

// armWrite gives the client FAILOVER_IDLE_TIMEOUT to take the write that follows, from a
// reading of its own: a read from the upstream that may have waited comes before it. A client
// that stops reading is taken as gone, and its upstream closed, rather than holding the
// stream, the upstream connection and the provider's generation for ever.
//
// The deadline is moved only when the one set would come sooner than that, and then to
// writeSlack later: a stream's events come milliseconds apart, and moving the runtime's timer
// for each (a lock, the timer heap, a clock reading of its own) is a share of a paced stream's
// user time worth keeping (BENCHMARKS.md, The tail and the stream path). A client that reads
// nothing is taken as gone after the idle timeout and at most writeSlack more.
func (p *pipe) armWrite(w net.Conn) {
	idle := p.ex.srv.cfg.Server.IdleTimeout
	if idle <= 0 {
		return
	}
	want := time.Now().Add(idle)
	if !p.writeBy.IsZero() && !p.writeBy.Before(want) {
		return
	}
	p.writeBy = want.Add(writeSlack(idle))
	w.SetWriteDeadline(p.writeBy) // a closed connection fails the write that follows
}

// writeSlack is how much later than the idle timeout armWrite's deadline may come: a second,
// or an eighth of a shorter timeout.
func writeSlack(idle time.Duration) time.Duration { return min(time.Second, idle/8) }

// end records how the stream ended: the final outcome goes through the decision function like
// every other, then the request is finished (the exchange goes back to the pool).
func (p *pipe) end(clientLeft bool) {
	ex := p.ex
	clientLeft = clientLeft || ex.gone
	if p.sse && p.a.up.gate.Failed() {
		// The upstream's own error event reached the client: the stream failed after output
		// began, however it ended (finishBody does not terminate such a body).
		p.interrupted = true
	}
	v := p.endAttempt(clientLeft)
	switch {
	case clientLeft:
		ex.Outcome, ex.Status = observe.OutcomeCancelled, v.Status
	case p.interrupted:
		ex.Outcome = observe.OutcomePartial
	}
	up := &p.a.up
	up.reusable = !clientLeft && up.answer.Reusable() && !up.resp.ConnectionClose()
	p.a.closeConn()
	ex.finish()
}

// endAttempt decides how the attempt the stream comes from (p.a) ended, and, the first time,
// applies it: an interruption counts against the target and is its last error (unless the
// sidecar cut the stream), and the attempt's ledger entry gets its duration and class: the
// attempt ends now.
func (p *pipe) endAttempt(clientLeft bool) classify.Verdict {
	ex := p.ex
	o := classify.Outcome{Kind: classify.KindFinished, Status: ex.Status, Committed: true, ClientGone: clientLeft}
	if p.interrupted {
		o.Kind = classify.KindInterrupted
	}
	v := ex.judge(&o)
	if p.attemptEnded {
		return v
	}
	p.attemptEnded = true
	if v.Health == classify.HealthFailure && !p.cut {
		p.a.t.noteError(v.Class, ex.policyNow()) // a failure of the target's, as in its health (docs/operations.md, The target table)
		ex.applyHealth(p.a, v)
	}
	if r := ex.Ledger.Last(); r != nil {
		r.Duration = time.Since(p.a.start)
		if v.Class != classify.ClassNone {
			r.Class, r.Reason = v.Class, v.Reason
		}
	}
	if p.cont {
		if r := ex.Ledger.Last(); r != nil && r.Continued && p.res != nil {
			r.Seam = p.res.tr.Seam()
		}
		outcome := observe.ResumeOK
		if p.interrupted && !p.cut && !clientLeft {
			outcome = observe.ResumeInterrupted
		}
		p.a.t.metrics.Resume(outcome)
	}
	return v
}
