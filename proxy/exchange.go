package proxy

import (
	"bytes"
	"encoding/hex"
	"log/slog"
	"math/rand/v2"
	"net"
	"time"
	"unsafe"

	"github.com/valyala/fasthttp"

	"github.com/llm-failover/failover/budget"
	"github.com/llm-failover/failover/proxy/internal/netio"
	"github.com/llm-failover/failover/proxy/internal/observe"
	"github.com/llm-failover/failover/stream/jsonscan"
)

// exchange is one client request on its way through the sidecar, with every buffer it needs.
// Exchanges are pooled (Server.pool): a request allocates nothing of its own in the steady
// state. Not safe for concurrent use: one goroutine owns an exchange at a time.
//
// Its lifetime, from begin to finish, passes ownership on once at most:
//
//  1. The handler (Server.serveProxy, Server.serveError) takes it from the pool, calls begin,
//     and owns it while it runs: the attempt loop (run), its waits, and the answer.
//  2. When the answer is written by fasthttp (a held response, a sidecar error), the handler
//     ends it itself (handlerDone calls finish) before returning: finish puts the exchange back
//     in the pool, and nothing reads it after that.
//  3. When the answer is piped (startStream: an SSE stream, an image, a body past the response
//     buffer), committedStream is set and the client connection hijacked; handlerDone leaves
//     the exchange alone. After the handler returns, fasthttp calls hijacked on a goroutine of
//     its own, which drops ctx and hands the exchange to a stream worker (Server.streams,
//     serveStream): from then on that worker owns the exchange, and pipe.end calls finish.
//     serveStream reads nothing of the exchange after that.
//
// ctx, and the client's body (reqBody, upBody) with it, is valid only while the handler runs.
// The one other goroutine that touches an exchange is a watch of netio's, which asks the
// exchange's netio.Stop (stop, and clientGone through it) on the owner's behalf while the owner
// is blocked in a dial or a request's write: see clientGone.
//
// Time: the exchange reads the wall clock (time.Now) where it needs a time, and policy time
// (Options.Clock: the health of targets, the budgets) from Server.clock, at every use.
type exchange struct {
	srv *Server
	ctx *fasthttp.RequestCtx

	// The request as its log record shows it, filled as it goes: read once at begin (its
	// path, family, model, whether it streams, its request and trace ids, each in a buffer of
	// the exchange's own, as a stream outlives the handler), each attempt into its Ledger, and
	// the answer (outcome, status, the target that served it, the duration) by the time
	// finish logs it. The path is the normalised one; the model is decoded; the trace id is
	// the client's traceparent's (tracecontext.go), empty when none is valid.
	observe.Record

	// The rest of the request, read once.
	fields      requestFields
	head        bool
	tokenHeader []byte   // the header that carried FAILOVER_INBOUND_TOKEN: never forwarded
	connection  [][]byte // the options the client's Connection lines name (views into its header)
	reqBody     []byte   // the client's body: valid while the handler runs
	uri         []byte

	// The sweep.
	eligible []int
	usable   []int // the eligible targets whose health lets them be used now, for the strategy
	cands    []int
	sweep    budget.Sweep
	budget   budget.Request
	lease    probeLease // the probe the current attempt's target (or a transfer's next) was handed out as

	// The attempts: the sweep's and a resume's use tries[0]; a hedge race uses both (hedge.go).
	tries  [2]attempt
	racing raceState // a hedge race's channel and timer (hedge.go), made at the first race

	// The answer.
	start           time.Time     // the request's arrival
	waited          time.Duration // time spent waiting on upstreams and backoffs, for the overhead figure
	servedBy        *Target       // the target the record's Target names: its answer, or the sidecar's error about it, went back
	committedStream bool          // the answer is piped: the stream goroutine owns the exchange and finishes it
	pipe            pipe
	resume          *resumption // what a stream that may be resumed keeps (resume.go); nil until one was

	client   netio.Peer // the client's connection as clientGone looks at it; the zero Peer until looked up
	gone     bool
	stopFn   netio.Stop         // ex.stop, made once: every wait on an upstream asks it
	acceptFn func(pos int) bool // ex.mayFit, made once
	// hedgeAcceptFn is ex.hedgeAccept, made once.
	hedgeAcceptFn func(pos int) bool
	// tooSmall are the models a context-window error showed too small for the request's
	// prompt: passed over for the rest of the request (mayFit). Views of a target's _MODEL or
	// of ex.Model, both fixed while the request runs.
	tooSmall [][]byte
	hijackFn fasthttp.HijackHandler // ex.hijacked, made once
}

func newExchange(s *Server) *exchange {
	ex := &exchange{srv: s}
	ex.stopFn, ex.hijackFn, ex.acceptFn, ex.hedgeAcceptFn = ex.stop, ex.hijacked, ex.mayFit, ex.hedgeAccept
	return ex
}

// begin reads what the sidecar needs from the request.
func (ex *exchange) begin(ctx *fasthttp.RequestCtx) {
	ex.ctx = ctx
	ex.start = time.Now()
	ex.Path = append(ex.Path[:0], ctx.Path()...)
	ex.Family = familyOf(ex.Path)
	ex.head = ctx.IsHead()
	ex.reqBody = ctx.PostBody()
	ex.fields = scanRequest(ex.reqBody)
	ex.Model = jsonscan.AppendString(ex.Model[:0], ex.fields.model)
	// The three headers read here are found in one walk over the lines: a lookup per name
	// normalises the name and walks them all. The first line of a name counts, as a lookup's.
	var accept, id, parent []byte
	var hasAccept, hasID, hasParent bool
	for k, v := range ctx.Request.Header.All() {
		switch {
		case !hasAccept && bytes.EqualFold(k, headerAccept):
			accept, hasAccept = v, true
		case !hasID && bytes.EqualFold(k, headerRequestID):
			id, hasID = v, true
		case !hasParent && bytes.EqualFold(k, headerTraceparent):
			parent, hasParent = v, true
		}
	}
	ex.Stream = ex.fields.stream || acceptsEventStream(accept)
	if validRequestID(id) {
		ex.RequestID = append(ex.RequestID[:0], id...)
	} else {
		var b [16]byte
		putUint64(b[:8], rand.Uint64())
		putUint64(b[8:], rand.Uint64())
		ex.RequestID = hex.AppendEncode(ex.RequestID[:0], b[:])
	}
	ex.TraceID = append(ex.TraceID[:0], traceIDOf(parent)...)
	ex.Ledger.Reset()
	ex.Outcome, ex.Status, ex.Target, ex.servedBy, ex.ServedModel = observe.OutcomeRejected, 0, "", nil, nil
	ex.waited, ex.committedStream, ex.gone, ex.client, ex.tokenHeader = 0, false, false, netio.Peer{}, nil
}

// policyNow is policy time (Options.Clock): what health, the budgets and the retry budget read.
func (ex *exchange) policyNow() time.Time { return ex.srv.clock.Now() }

// b2s views b as a string without copying; the string must not outlive b's contents.
func b2s(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

func putUint64(b []byte, v uint64) {
	for i := range 8 {
		b[i] = byte(v >> (8 * i))
	}
}

// validRequestID accepts a client's X-Request-Id when it is short and printable.
func validRequestID(id []byte) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for _, c := range id {
		if c <= ' ' || c >= 0x7f || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// handlerDone is the handler's last word on the exchange: it finishes a request whose answer
// fasthttp writes, and leaves one whose answer is piped to the stream goroutine, which owns it
// from the hijack on (see exchange).
func (ex *exchange) handlerDone() {
	if !ex.committedStream {
		ex.finish()
	}
}

// hijacked runs in the goroutine fasthttp starts for a hijacked connection, after the handler
// returned: it hands the exchange to a stream worker (Server.streams) and returns, so fasthttp
// releases the request context (and the client's request body) now rather than when the
// stream ends.
func (ex *exchange) hijacked(c net.Conn) {
	ex.ctx = nil
	ex.srv.streams.do(streamJob{ex, c})
}

// finish ends the request: metrics, the ledger record, and the exchange goes back to the pool.
// Called once per begin, by the exchange's owner (see exchange); the caller must not touch the
// exchange afterwards.
func (ex *exchange) finish() {
	s := ex.srv
	now := time.Now()
	for i := range ex.tries {
		ex.tries[i].closeConn()
	}
	if ex.lease.held() {
		// Every lease ends in the attempt step (settleProbe): one held here is a bug, which
		// would keep its target from every request for ever if it were not given back.
		s.leakedProbes.Add(1)
		observe.TargetEvent(s.log, slog.LevelError, "probe_lease_leaked", targetName(ex.lease.h, s.targets), ex.RequestID)
	}
	ex.settleProbe(nil)
	ex.Duration = now.Sub(ex.start)
	m := s.metrics
	m.Request(ex.Family, ex.Outcome, ex.Duration, max(ex.Duration-ex.waited, 0))
	ex.Log(s.log, now) // the time finish measured
	ex.ctx, ex.reqBody = nil, nil
	ex.pipe = pipe{head: ex.pipe.head[:0], tail: ex.pipe.tail[:0]}
	for i := range ex.tries {
		up := &ex.tries[i].up
		up.body = nil
		if cap(up.held) > 1<<20 {
			up.held = nil
		}
		if cap(up.sub) > 1<<20 {
			up.sub = nil
		}
	}
	if ex.resume != nil {
		ex.resume.shed()
	}
	m.Inflight.Add(-1)
	s.active.Add(-1)
	s.pool.Put(ex)
}
