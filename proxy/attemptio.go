package proxy

import (
	"io"
	"time"

	"github.com/llm-failover/failover/classify"
	"github.com/llm-failover/failover/proxy/internal/netio"
	"github.com/llm-failover/failover/proxy/internal/observe"
	"github.com/llm-failover/failover/stream"
)

// clientGone reports whether the client closed its connection: a look at its socket that
// does not wait (netio.Peer.Closed: on Linux one non-blocking peek); once it says so, it says
// so for good (ex.gone).
//
// It is how the client's departure is seen, the one test behind every wait. fasthttp gives no
// signal while a handler runs, so whatever waits asks it at least every netio.PollInterval,
// through the exchange's netio.Stop (stop), and ends with netio.ErrClientGone when it says so
// (or netio.ErrShutdown when Server.abort does):
//
//   - a wait for the upstream (the answer's head, a held body, the peek, a committed stream's
//     idle wait: netio.Conn.Wait, and the reads that follow it) is cut into slices that ask;
//   - a dial or a request's write, which cannot be cut into slices, is watched by a goroutine
//     of netio's that asks and aborts the call (netio.Pool.Get, netio.Conn.Send);
//   - a retry's backoff (sleep) asks between naps;
//   - run asks once more before a retry or a transfer starts.
//
// A committed stream also sees the client leave when a write to it fails (pipe.send).
//
// It writes ex.gone and ex.client. It is called by the exchange's owner (see exchange), or by
// netio's watch goroutine while the owner is blocked in the watched call and reads neither:
// the owner reads them again only after that call returned, once the watch goroutine exited,
// so the two never run at once and the watch's writes happen before the owner's reads. After
// the hijack ctx is gone: startStream looks the client up before it.
func (ex *exchange) clientGone() bool {
	if ex.gone {
		return true
	}
	if !ex.client.Known() {
		ex.client = netio.PeerOf(ex.ctx.Conn())
	}
	ex.gone = ex.client.Closed()
	return ex.gone
}

// stop is the exchange's netio.Stop, made once (ex.stopFn): why a wait must end, the client
// gone or the shutdown timeout passed, or nil.
func (ex *exchange) stop() error {
	switch {
	case ex.clientGone():
		return netio.ErrClientGone
	case ex.srv.abort.Load():
		return netio.ErrShutdown
	}
	return nil
}

// headerDeadline is when the wait for attempt a's response head ends, for a request sent at
// sent: FAILOVER_FIRST_BYTE_TIMEOUT after it for a stream, else the attempt's own deadline.
func (ex *exchange) headerDeadline(a *attempt, sent time.Time) time.Time {
	cfg := &ex.srv.cfg.Server
	if ex.Stream {
		return deadlineAfter(sent, cfg.FirstByteTimeout)
	}
	return deadlineAfter(a.start, cfg.AttemptTimeout)
}

// deadline returns now+d, or the zero time (no deadline) when d is 0.
func deadlineAfter(t time.Time, d time.Duration) time.Time {
	if d <= 0 {
		return time.Time{}
	}
	return t.Add(d)
}

// do performs one attempt up to its verdict: get a connection, send the request, wait for
// the answer, read its head, then hold the body (non-streaming) or peek the stream until the
// gate decides.
func (ex *exchange) do(a *attempt) {
	a.start = time.Now()
	ex.buildRequest(a)
	ex.send(a, ex.stopFn)
}

// send is an attempt's I/O, after buildRequest: everything do does but build the request. It
// reads nothing of the exchange but the request's settings (family, streaming, HEAD), and
// writes only a: a hedge race runs it on a goroutine of its own (hedge.go), with stop its
// own. A client who left (netio.ErrClientGone from stop) is noted in a.gone, for the owner.
func (ex *exchange) send(a *attempt, stop netio.Stop) {
	if a.yielded {
		a.yielded = false
		ex.resumeIO(a, stop)
	} else {
		ex.exchangeIO(a, stop)
	}
	if a.yielded {
		return // it goes on later, on a leg (race)
	}
	if c := a.up.conn; c != nil && !a.yieldAt.IsZero() {
		c.YieldAt(time.Time{}) // a piped answer's waits never give way
	}
	a.leg.hold(nil)
	if ex.srv.cfg.Hedge.After.On() {
		a.done = time.Now() // for its time to commit (hedge.go): read only while hedging is on
	}
}

// exchangeIO is send's work: the request out, the answer's head in, its body held or its stream
// peeked until the gate decides.
func (ex *exchange) exchangeIO(a *attempt, stop netio.Stop) {
	s, t := ex.srv, a.t
	cfg := &s.cfg.Server
	up := &a.up
	up.reusable = false
	writeBy := deadlineAfter(a.start, cfg.AttemptTimeout)
	var c *netio.Conn
	for tries := a.refused; ; tries++ {
		var err error
		var dialed, waited time.Duration
		if a.yieldAt.IsZero() {
			c, dialed, err = t.pool.Get(stop)
		} else if c = t.pool.TryGet(); c == nil {
			// A dial cannot give way at the hedge delay as a wait does: the race runs this
			// attempt on a leg from here, and starts the hedge on its own clock.
			a.yield(ioStart, 0)
			return
		}
		up.waited += dialed // connecting (TCP and TLS) is the target's time, not the sidecar's
		if err != nil {
			ex.fail(a, err)
			return
		}
		a.leg.hold(c) // a race may cut the attempt from now on (hedge.go)
		c.YieldAt(a.yieldAt)
		// The wait for the answer may begin within the write, bounded as the answer's own
		// wait is, from a reading taken just before it.
		a.sent, waited, err = c.Send(up.head, up.body, writeBy, ex.headerDeadline(a, time.Now()), stop)
		up.waited += waited // a write that had to wait waited for the target to read, or to answer
		if err != nil {
			c.Close()
			// A wait that ended before the write (its deadline, its Stop) is no refusal.
			refused := err != netio.ErrClientGone && err != netio.ErrShutdown && err != netio.ErrDeadline
			if c.Reused() && tries == 0 && refused {
				// A pooled connection the far side had closed refused the request, so no
				// server read it whole: once more, on a fresh connection. Once a request is
				// written, a failure is the attempt's (the server may be generating).
				if !a.yieldAt.IsZero() {
					a.refused = 1 // the once more is taken, from the leg (above)
					a.yield(ioStart, 0)
					return
				}
				continue
			}
			ex.fail(a, err)
			return
		}
		break
	}
	up.conn = c
	ex.headIO(a, stop)
}

// resumeIO goes on with the I/O of attempt a, which yielded (netio.ErrYield), where it stopped,
// without a yield to come.
func (ex *exchange) resumeIO(a *attempt, stop netio.Stop) {
	if a.ioAt == ioStart {
		ex.exchangeIO(a, stop)
		return
	}
	a.up.conn.YieldAt(time.Time{})
	switch a.ioAt {
	case ioHead:
		ex.headIO(a, stop)
	case ioBody:
		ex.bodyLoop(a, deadlineAfter(a.start, ex.srv.cfg.Server.AttemptTimeout), stop)
	case ioPeek:
		ex.peekLoop(a, deadlineAfter(a.sent, ex.srv.cfg.Server.FirstByteTimeout), stop)
	}
}

// yield notes that attempt a's I/O gave way at phase, its last wait having waited quiet: it
// goes on there (resumeIO).
func (a *attempt) yield(phase ioPhase, quiet time.Duration) {
	a.yielded, a.ioAt, a.quiet = true, phase, quiet
}

// headIO waits for the answer to the request sent on a.up.conn, reads its head, then holds the
// body or peeks the stream.
func (ex *exchange) headIO(a *attempt, stop netio.Stop) {
	s, t := ex.srv, a.t
	cfg := &s.cfg.Server
	up := &a.up
	c := up.conn
	waited, err := c.Wait(ex.headerDeadline(a, a.sent), stop)
	up.waited += waited
	if err == netio.ErrYield {
		a.yield(ioHead, 0)
		return
	}
	if err != nil {
		ex.fail(a, err)
		return
	}
	resp := &up.resp
	if silent, err := c.ReadHead(resp); err != nil {
		if silent {
			// The target closed or reset the connection without a byte of answer. How long
			// it had been silent is for classify to judge (docs/decisions.md, The decision
			// order, rule 5).
			a.silence = time.Since(a.sent)
		}
		ex.fail(a, err)
		return
	}
	up.answer.Reset(c, resp, ex.head)
	a.phase = observe.PhaseBeforeContent
	a.status = resp.StatusCode()
	a.ttfb = time.Since(a.sent)
	t.metrics.FirstByte(a.ttfb)
	t.observeAnswer(a.ttfb)
	ex.observeHead(a)

	success := a.status >= 200 && a.status < 300
	switch {
	case a.status < 200:
		// A final informational answer (an unasked-for 101: fasthttp reads past 100 and 103).
		// What follows on the connection is no HTTP the sidecar can read: it is never pooled,
		// and classify judges the answer a bad one.
		a.kind = classify.KindResponse
	case ex.Family == stream.Image && success:
		// A generated image is never paid for twice: commit at headers.
		a.kind, a.truncated, a.pipeRest, a.commitReason = classify.KindResponse, true, true, stream.ReasonHeaders
	case ex.Stream && success && up.answer.Has() && hasPrefixFold(resp.Header.ContentType(), valueEventStream):
		// (A HEAD's or a 204's answer has no stream to peek: it is read as a response, and
		// classify sees it as one without a body, not as an empty stream.)
		if enc := resp.Header.ContentEncoding(); len(enc) > 0 && !hasPrefixFold(enc, valueIdentity) {
			// Compressed although the request asked for identity: its events cannot be read,
			// so it cannot be judged before commit. It goes through at headers, as an image
			// does, rather than read as a stream that never shows an event (an "empty" one).
			a.kind, a.truncated, a.pipeRest, a.commitReason = classify.KindResponse, true, true, stream.ReasonHeaders
			return
		}
		ex.peek(a, deadlineAfter(a.sent, cfg.FirstByteTimeout), stop)
	default:
		ex.readBody(a, deadlineAfter(a.start, cfg.AttemptTimeout), stop)
	}
}

// failAfter is fail for a read of the answer's body before commit that the target ended after
// quiet of silence: when it closed or reset the connection, that silence is for classify to
// judge, as a silence before any byte of answer is (docs/decisions.md, The decision order,
// rule 5).
func (ex *exchange) failAfter(a *attempt, err error, quiet time.Duration) {
	if netio.Closed(err) {
		a.silence = quiet
	}
	ex.fail(a, err)
}

// fail records an attempt that lost its connection or waited too long.
func (ex *exchange) fail(a *attempt, err error) {
	if a.up.conn != nil {
		a.up.conn.Close()
		a.up.conn = nil
	}
	a.kind = classify.KindTransport
	if why := a.leg.cut(); why != nil {
		err = why // a race cut it: the error the cut socket gave says nothing of the target
	}
	switch err {
	case netio.ErrClientGone:
		a.gone = true
		a.transport = classify.TransportOther
	case errLost:
		a.transport, a.lost = classify.TransportOther, true
	case netio.ErrShutdown:
		a.transport, a.cut = classify.TransportOther, true
	default:
		a.transport = transportOf(err)
		// For least-latency a failure is a slow sample, never a fast one: a refused or reset
		// connection fails in microseconds, and as its own time it would make a dead target
		// the favourite. The client leaving or the shutdown say nothing about the target.
		a.t.observeLatency(max(time.Since(a.start), failedAttemptLatency(ex.srv.cfg.Server.ConnectTimeout)))
	}
}

// failedAttemptLatency is the least-latency sample for an attempt that got no answer, or an
// answer the sweep cannot use (applyHealth): at least FAILOVER_CONNECT_TIMEOUT (10 s when that
// is disabled), slower than any target that answers well in time.
func failedAttemptLatency(connectTimeout time.Duration) time.Duration {
	if connectTimeout <= 0 {
		return 10 * time.Second
	}
	return connectTimeout
}

// transports name netio's connection failures for the decision function.
var transports = [...]classify.Transport{
	netio.FailureOther:   classify.TransportOther,
	netio.FailureTimeout: classify.TransportTimeout,
	netio.FailureDNS:     classify.TransportDNS,
	netio.FailureRefused: classify.TransportRefused,
	netio.FailureTLS:     classify.TransportTLS,
	netio.FailureReset:   classify.TransportReset,
}

// transportOf names a transport failure for the decision function.
func transportOf(err error) classify.Transport { return transports[netio.FailureOf(err)] }

// readBody holds a non-streaming response up to FAILOVER_MAX_RESPONSE_BYTES for the decision.
// Past it, the response will commit and the rest is streamed through.
func (ex *exchange) readBody(a *attempt, deadline time.Time, stop netio.Stop) {
	up := &a.up
	resp, body := &up.resp, &up.answer
	a.kind = classify.KindResponse
	b := up.held[:0]
	limit := ex.srv.maxResponse
	cl := resp.Header.ContentLength()
	if body.Has() && cl > 0 && cap(b) < cl && (limit <= 0 || cl <= limit) {
		b = make([]byte, 0, cl)
	}
	up.held = b
	a.quiet = 0
	ex.bodyLoop(a, deadline, stop)
}

// bodyLoop is readBody's reading, from what is held (up.held).
func (ex *exchange) bodyLoop(a *attempt, deadline time.Time, stop netio.Stop) {
	up := &a.up
	resp, c, body := &up.resp, up.conn, &up.answer
	b := up.held
	limit := ex.srv.maxResponse
	quiet := a.quiet // how long the last wait waited: the silence before what ended it
	for {
		if limit > 0 && len(b) > limit {
			a.truncated, a.pipeRest = true, true
			break
		}
		if !body.Ended() {
			waited, err := c.Wait(deadline, stop)
			up.waited, quiet = up.waited+waited, quiet+waited
			if err == netio.ErrYield {
				up.held = b
				a.yield(ioBody, quiet)
				return
			}
			if err != nil {
				up.held = b
				ex.failAfter(a, err, quiet)
				return
			}
		}
		p, err := body.Next()
		if len(p) > 0 {
			if limit > 0 {
				p = p[:min(len(p), limit+1-len(b))] // one byte past the limit tells that the body is larger
			}
			b = append(b, p...)
			body.Consume(len(p))
			quiet = 0
			continue
		}
		if err == io.EOF {
			up.reusable = body.Reusable() && !resp.ConnectionClose()
			break
		}
		up.held = b
		ex.failAfter(a, err, quiet)
		return
	}
	up.held = b
	a.body = b
}

// peek holds an SSE stream until the gate decides: commit, error, or empty (docs/streams.md,
// Streams: the pre-commit peek).
func (ex *exchange) peek(a *attempt, deadline time.Time, stop netio.Stop) {
	g := &a.up.gate
	g.Reset(ex.Family, ex.srv.peek)
	a.sse = true
	if ex.srv.peek <= 0 {
		g.Feed(nil)
		a.kind, a.commitReason = classify.KindStreamCommit, stream.ReasonHeaders
		return
	}
	a.quiet = 0
	ex.peekLoop(a, deadline, stop)
}

// peekLoop is peek's reading, into the gate as it stands.
func (ex *exchange) peekLoop(a *attempt, deadline time.Time, stop netio.Stop) {
	up := &a.up
	g, c, body := &up.gate, up.conn, &up.answer
	quiet := a.quiet // how long the last wait waited: the silence before what ended it
	for {
		if !body.Ended() {
			waited, err := c.Wait(deadline, stop)
			up.waited, quiet = up.waited+waited, quiet+waited
			if err == netio.ErrYield {
				a.yield(ioPeek, quiet)
				return
			}
			if err != nil {
				ex.failAfter(a, err, quiet)
				return
			}
		}
		p, err := body.Next()
		if len(p) > 0 {
			quiet = 0
			verdict := g.Feed(p)
			body.Consume(len(p))
			switch verdict {
			case stream.Commit:
				a.kind, a.body, a.commitReason = classify.KindStreamCommit, g.Events(), g.Reason()
				a.ended = g.Finished() && body.EndsInBuffer() // it can go out as one write
				return
			case stream.Error:
				a.kind, a.body = classify.KindStreamError, g.ErrorData()
				return
			case stream.Empty:
				a.kind = classify.KindStreamEmpty
				return
			}
			continue
		}
		if err == io.EOF {
			if g.End() == stream.Error {
				a.kind, a.body = classify.KindStreamError, g.ErrorData()
			} else {
				a.kind = classify.KindStreamEmpty
			}
			up.reusable = body.Reusable() && !up.resp.ConnectionClose()
			return
		}
		ex.failAfter(a, err, quiet)
		return
	}
}
