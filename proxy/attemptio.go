package proxy

import (
	"bytes"
	"errors"
	"io"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llm-failover/failover/classify"
	"github.com/llm-failover/failover/proxy/internal/observe"
	"github.com/llm-failover/failover/stream"
)

// clientGone reports whether the client closed its connection: a look at its socket that
// does not wait (clientPeer.closed: on Linux one non-blocking peek, rawsock.go); once it says
// so, it says so for good (ex.gone).
//
// It is how the client's departure is seen, the one test behind every wait. fasthttp gives no
// signal while a handler runs, so whatever waits asks it at least every pollInterval, and
// ends with errClientGone when it says so (or errShutdown when Server.abort does):
//
//   - a read from the upstream (headers, a held body, the peek, a committed stream's idle wait:
//     waitData, waitIdle) goes through the connection's pollReader, which cuts it into slices
//     of pollInterval and asks between them (pollReader.expired);
//   - a dial or a request write, which cannot be cut into slices, is watched by a goroutine
//     (startWatch) that asks every pollInterval and aborts the call;
//   - a retry's backoff (sleep) asks between naps of pollInterval;
//   - run asks once more before a retry or a transfer starts.
//
// A committed stream also sees the client leave when a write to it fails (pipe.send).
//
// It writes ex.gone and ex.client. It is called by the exchange's owner (see exchange), or by
// a watch goroutine while the owner is blocked in the watched call and reads neither: the
// owner reads them again only after watch.end, which waits for the watch goroutine to exit,
// so the two never run at once and the watch's writes happen before the owner's reads. After
// the hijack ctx is gone: startStream looks the client up before it.
func (ex *exchange) clientGone() bool {
	if ex.gone {
		return true
	}
	if ex.client == peerUnknown {
		ex.client = peerOf(ex.ctx.Conn())
	}
	ex.gone = ex.client.closed()
	return ex.gone
}

// waitData arms c's reads with deadline and the client and shutdown watchers, then blocks
// until the connection has an unread byte, the deadline passes (errDeadline), the client
// leaves (errClientGone) or the shutdown timeout passes (errShutdown); a zero deadline waits
// without limit. Other read errors are left for the following read to report. The reads that
// follow (headers, body, chunk framing) stay armed, so none of them can outlive the deadline
// or the client.
//
// A wait reads the clock at its start and its end (ex.waited; see exchange): start is a
// reading its caller took just before, after its last operation that may wait, which the
// wait starts from; the zero time: it reads the clock itself, and only if it has to wait.
func (ex *exchange) waitData(c *upConn, deadline, start time.Time) error {
	c.rd.arm(deadline, ex.goneFn, ex.stopFn)
	br := c.reader()
	if br.Buffered() > 0 {
		return nil
	}
	if start.IsZero() {
		start = ex.tick()
	}
	c.rd.now = start
	_, err := br.Peek(1)
	ex.waited += ex.tick().Sub(start)
	if err != nil && c.rd.why != nil {
		return c.rd.why
	}
	return nil
}

// waitIdle arms c's reads with deadline and the client and shutdown watchers (clientGone), and
// waits for the upstream's next bytes unless some are buffered. On a plain TCP connection it holds no
// read buffer while it waits, where the socket can wait without one (waitsUnbuffered). The reads
// that follow (a chunk's framing split across packets) stay armed. start is the reading the wait
// starts from, as for waitData, but never zero.
func (ex *exchange) waitIdle(c *upConn, deadline, start time.Time) error {
	if !waitsUnbuffered || c.rd.sock == nil || c.buffered() > 0 {
		return ex.waitData(c, deadline, start)
	}
	c.rd.arm(deadline, ex.goneFn, ex.stopFn)
	c.releaseReader()
	c.rd.now = start
	err := c.rd.waitReadable()
	ex.waited += ex.tick().Sub(start)
	if err == nil {
		// The read that follows takes what the wait found, at once: the wait's end is its reading.
		c.rd.now = ex.now
	}
	return err
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

// closeConn drops the current upstream connection, or pools it when its response was read
// to the end.
func (ex *exchange) closeConn() {
	c := ex.conn
	if c == nil {
		return
	}
	ex.conn = nil
	if ex.reusable {
		// Idle from the last reading: every caller comes after a point and no wait (see
		// exchange); one that came late would only make the connection look idle for longer.
		ex.cur.t.pool.put(c, ex.now)
		return
	}
	c.close()
}

// do performs one attempt up to its verdict: connect, send, read the headers, then hold the
// body (non-streaming) or peek the stream until the gate decides.
func (ex *exchange) do(a *attempt) {
	s, t := ex.srv, a.t
	cfg := &s.cfg.Server
	a.start = ex.tick()
	ex.reusable = false
	ex.buildRequest(a)
	writeDeadline := deadlineAfter(a.start, cfg.AttemptTimeout)

	var c *upConn
	for tries := 0; ; tries++ {
		var err error
		var dialed time.Duration
		c, dialed, err = t.pool.get(a.start, ex.goneFn, ex.stopFn)
		ex.waited += dialed // connecting (TCP and TLS) is the target's time, not the sidecar's
		if err != nil {
			ex.fail(a, err)
			return
		}
		if !c.reused {
			ex.tick() // after the dial
		}
		c.rd.watchFrom(a.start)
		// The wait for the answer's head may begin within the request's write (writeRequest):
		// its first slice is armed before the write, from the reading after the last operation
		// that may wait, so it ends no later than the wait's own (waitData) would.
		c.rd.arm(ex.headerDeadline(a, ex.now), ex.goneFn, ex.stopFn)
		if err = c.rd.slice(ex.now); err != nil {
			c.close()
			ex.fail(a, err)
			return
		}
		var wrote time.Duration
		var sent time.Time
		wrote, sent, err = writeRequest(c, ex.upHead, ex.upBody, writeDeadline, ex.now, ex.goneFn, ex.stopFn)
		ex.waited += wrote // a write that had to wait waited for the target to read
		if err != nil {
			c.close()
			if c.reused && tries == 0 && err != errClientGone && err != errShutdown {
				// A pooled connection the far side had closed refused the request, so no
				// server read it whole: once more, on a fresh connection. Once a request is
				// written, a failure is the attempt's (the server may be generating).
				ex.tick() // after the write, which may have waited
				continue
			}
			ex.fail(a, err)
			return
		}
		if sent.IsZero() {
			a.sent = ex.tick()
		} else {
			a.sent = sent
			ex.waited += ex.tick().Sub(sent) // the wait for the answer that began in the write
		}
		if err = ex.waitData(c, ex.headerDeadline(a, a.sent), ex.now); err != nil {
			c.close()
			ex.fail(a, err)
			return
		}
		break
	}
	ex.conn = c
	// waitData ended at the answer's first byte, or at the connection's end: nothing buffered
	// means the target closed or reset it without a byte of answer, at the wait's last reading.
	// How long it had been silent is for classify to judge (README, The decision order, rule 5).
	ended := c.buffered() == 0
	resp := &ex.upResp
	resp.Reset()
	resp.SkipBody = true // the body is read in place (body.go)
	err := resp.Read(c.reader())
	if err != nil && isSmallBuffer(err) && c.growReader() {
		// A header block larger than the pooled reader (many or long headers: cookies, policy
		// headers from a gateway): read it again with room for maxResponseHeaderBytes.
		resp.Reset()
		resp.SkipBody = true
		err = resp.Read(c.reader())
	}
	if err != nil {
		if ended {
			a.silence = ex.now.Sub(a.sent)
		}
		ex.fail(a, c.cause(err))
		return
	}
	ex.body.reset(c, resp, ex.head)
	a.phase = observe.PhaseBeforeContent
	a.status = resp.StatusCode()
	a.ttfb = ex.tick().Sub(a.sent)
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
	case ex.Stream && success && ex.body.has() && hasPrefixFold(resp.Header.ContentType(), valueEventStream):
		// (A HEAD's or a 204's answer has no stream to peek: it is read as a response, and
		// classify sees it as one without a body, not as an empty stream.)
		if enc := resp.Header.ContentEncoding(); len(enc) > 0 && !hasPrefixFold(enc, valueIdentity) {
			// Compressed although the request asked for identity: its events cannot be read,
			// so it cannot be judged before commit. It goes through at headers, as an image
			// does, rather than read as a stream that never shows an event (an "empty" one).
			a.kind, a.truncated, a.pipeRest, a.commitReason = classify.KindResponse, true, true, stream.ReasonHeaders
			return
		}
		ex.peek(a, deadlineAfter(a.sent, cfg.FirstByteTimeout))
	default:
		ex.readBody(a, deadlineAfter(a.start, cfg.AttemptTimeout))
	}
}

// isSmallBuffer reports whether err is fasthttp's "header block larger than the buffer". A
// function of its own: the target errors.As needs escapes, and would be allocated on every
// request if it were declared where the response is read.
func isSmallBuffer(err error) bool {
	var small *fasthttp.ErrSmallBuffer
	return errors.As(err, &small)
}

// fail records an attempt that lost its connection or waited too long.
func (ex *exchange) fail(a *attempt, err error) {
	if ex.conn != nil {
		ex.conn.close()
		ex.conn = nil
	}
	a.kind = classify.KindTransport
	switch err {
	case errClientGone:
		ex.gone = true
		a.transport = classify.TransportOther
	case errShutdown:
		a.transport, a.cut = classify.TransportOther, true
	default:
		a.transport = transportOf(err)
		// For least-latency a failure is a slow sample, never a fast one: a refused or reset
		// connection fails in microseconds, and as its own time it would make a dead target
		// the favourite. The client leaving or the shutdown say nothing about the target.
		a.t.observeLatency(max(ex.tick().Sub(a.start), failedAttemptLatency(ex.srv.cfg.Server.ConnectTimeout)))
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

// readBody holds a non-streaming response up to FAILOVER_MAX_RESPONSE_BYTES for the decision.
// Past it, the response will commit and the rest is streamed through.
func (ex *exchange) readBody(a *attempt, deadline time.Time) {
	resp, c, body := &ex.upResp, ex.conn, &ex.body
	a.kind = classify.KindResponse
	b := ex.respBody[:0]
	limit := ex.srv.maxResponse
	cl := resp.Header.ContentLength()
	if body.has() && cl > 0 && cap(b) < cl && (limit <= 0 || cl <= limit) {
		b = make([]byte, 0, cl)
	}
	for {
		if limit > 0 && len(b) > limit {
			a.truncated, a.pipeRest = true, true
			break
		}
		if !body.done {
			if err := ex.waitData(c, deadline, time.Time{}); err != nil {
				ex.respBody = b
				ex.fail(a, err)
				return
			}
		}
		p, err := body.next()
		if len(p) > 0 {
			if limit > 0 {
				p = p[:min(len(p), limit+1-len(b))] // one byte past the limit tells that the body is larger
			}
			b = append(b, p...)
			body.consume(len(p))
			continue
		}
		if err == io.EOF {
			ex.reusable = body.reusable() && !resp.ConnectionClose()
			break
		}
		ex.respBody = b
		ex.fail(a, c.cause(err))
		return
	}
	ex.respBody = b
	a.body = b
}

// peek holds an SSE stream until the gate decides: commit, error, or empty (README,
// Streams: the pre-commit peek).
func (ex *exchange) peek(a *attempt, deadline time.Time) {
	g, c, body := &ex.gate, ex.conn, &ex.body
	g.Reset(ex.Family, ex.srv.peek)
	a.sse = true
	if ex.srv.peek <= 0 {
		g.Feed(nil)
		a.kind, a.commitReason = classify.KindStreamCommit, stream.ReasonHeaders
		return
	}
	for {
		if !body.done {
			if err := ex.waitData(c, deadline, time.Time{}); err != nil {
				ex.fail(a, err)
				return
			}
		}
		p, err := body.next()
		if len(p) > 0 {
			verdict := g.Feed(p)
			body.consume(len(p))
			switch verdict {
			case stream.Commit:
				a.kind, a.body, a.commitReason = classify.KindStreamCommit, g.Events(), g.Reason()
				a.ended = g.Finished() && ex.bodyEnds()
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
			ex.reusable = body.reusable() && !ex.upResp.ConnectionClose()
			return
		}
		ex.fail(a, c.cause(err))
		return
	}
}

// bodyEnds reports whether the stream's body ends with what the connection's buffer already
// holds: its last event arrived with the end of the body (the common case for a short answer),
// so the stream can go out as one write. It reads only what is buffered, never waits.
func (ex *exchange) bodyEnds() bool {
	body := &ex.body
	switch body.mode {
	case bodyLength:
		return body.done
	case bodyChunked:
		if body.done {
			return true
		}
		// The end of a chunked body is the last chunk's CRLF, "0", CRLF and the empty line:
		// only worth parsing when all of it is there. Parsing reads whole lines, so what is
		// buffered must end with the empty line: a line cut short ("0;ext=1" whose CRLF is
		// still on its way) would make the parse wait for the upstream.
		n := ex.conn.buffered()
		if body.left != 0 || n < len("0\r\n\r\n") {
			return false
		}
		if b, _ := ex.conn.reader().Peek(n); !bytes.HasSuffix(b, []byte("\n\r\n")) && !bytes.HasSuffix(b, []byte("\n\n")) {
			return false
		}
		_, err := body.next()
		return err == io.EOF
	}
	return false
}
