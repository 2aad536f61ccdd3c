package proxy

import (
	"bytes"
	"context"
	"crypto/subtle"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llm-failover/failover/budget"
	"github.com/llm-failover/failover/classify"
	"github.com/llm-failover/failover/proxy/internal/config"
	"github.com/llm-failover/failover/proxy/internal/netio"
	"github.com/llm-failover/failover/proxy/internal/observe"
	"github.com/llm-failover/failover/proxy/internal/procs"
	"github.com/llm-failover/failover/stream/jsonscan"
)

// maxHeaderBytes bounds a request's header block (docs/decisions.md, Errors the sidecar makes: 431 above 16 KiB).
const maxHeaderBytes = 16 << 10

// clientTimeout is the client side's timeouts. A sidecar serves its own pod over loopback, so
// they only stop a stuck or hostile client from holding a connection: a request (headers and
// body) must arrive within it, and an idle keep-alive connection is closed after it. One value
// for both, so that the deadline fasthttp sets at a request's first byte is (within a second)
// the one it set for the idle wait, and the client connection need not move it
// (netio.ClientConn.SetReadDeadline).
const clientTimeout = 120 * time.Second

// Server is the sidecar: the proxy listener's handler and the metrics listener's handler,
// sharing one immutable policy. Safe for concurrent use; create it with New.
type Server struct {
	cfg      *config.Config
	policy   *classify.Policy
	targets  []*Target
	strategy strategy
	log      *slog.Logger
	metrics  *observe.Metrics
	clock    budget.Clock // policy time (Options.Clock)
	retries  *budget.RetryBudget
	hedges   *budget.HedgeBudget // FAILOVER_HEDGE_BUDGET_RATIO (hedge.go)

	inboundToken []byte
	instruction  []byte // FAILOVER_RESUME_INSTRUCTION as a JSON string (resume.go)
	maxRequest   int
	maxResponse  int
	peek         int

	proxy  *fasthttp.Server
	probes *fasthttp.Server
	pool   sync.Pool // *exchange
	// active counts the requests being served; Shutdown waits for it to reach zero. Not a
	// sync.WaitGroup: a keep-alive connection may start a request while Shutdown waits, and
	// a WaitGroup's Add from zero must happen before its Wait.
	active  atomic.Int64
	closing atomic.Bool // shutdown began: not ready, no new attempts after the current ones
	// leakedProbes counts exchanges that finished with a probe lease still held (a bug: see
	// exchange.finish). LeakedProbes reads it.
	leakedProbes atomic.Int64
	// conns are the open client connections: Shutdown closes those that wait for a request,
	// and every waitTick tend ends the waits after an answer that have lasted since its last
	// tick (netio.Conns.EndLongWaits).
	conns    netio.Conns
	waitTick time.Duration
	abort    atomic.Bool   // the shutdown timeout passed: end what remains
	prober   prober        // the background probe of targets ejected for timing out
	quit     chan struct{} // closed at Shutdown: ends AdaptProcs and tend
	quitOnce sync.Once
	// streams run committed streams (exchange.serveStream), and handedBack serve the
	// connections a stream hands back after its clean end: goroutines kept, not made anew
	// for each stream (workers).
	streams    *workers[streamJob]
	handedBack *workers[net.Conn]
	// legs run the attempts of hedge races (hedge.go), also on goroutines kept: every request
	// hedging may race runs its attempt on one, hedged or not.
	legs *workers[legJob]
}

// Options are the parts of a Server that tests and the drill replace.
type Options struct {
	Logger *slog.Logger
	// Clock is policy time, and only that: the health of targets (ejections, cooldowns, which
	// request probes), the background probe's decisions, the retry budget and the elapsed
	// budget (FAILOVER_MAX_ELAPSED) all read it, through Server.clock. Everything else reads the
	// wall clock: socket deadlines and the waits they bound, a retry's backoff (slept, not
	// simulated), a Retry-After date (the upstream's wall clock), and the durations measured
	// for logs, metrics and least-latency's samples. nil: the system clock. The drill sets a
	// budget.ManualClock to show a target recovering without waiting out its ejection.
	Clock budget.Clock
	// RootCAs verifies https targets' certificates; nil: the system roots (SSL_CERT_FILE,
	// SSL_CERT_DIR). Tests give the CA of their loopback TLS servers.
	RootCAs *x509.CertPool
	// Build labels failover_build_info; zero: ReadBuild("", ""), the binary's own build
	// information.
	Build Build
}

// New builds the server from a validated configuration.
func New(cfg *config.Config, opts Options) (*Server, error) {
	s := &Server{cfg: cfg, log: opts.Logger, clock: opts.Clock, waitTick: waitTick}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.clock == nil {
		s.clock = budget.SystemClock{}
	}
	for i := range cfg.Targets {
		t, err := newTarget(i, &cfg.Targets[i], &cfg.Server, &cfg.Budget, opts.RootCAs)
		if err != nil {
			return nil, fmt.Errorf("FAILOVER_TARGET_%d: %w", i, err)
		}
		s.targets = append(s.targets, t)
	}
	s.policy = classify.NewPolicy(cfg.Classify, cfg.StopRules, cfg.SuccessRules, cfg.Budget.RetryAfterMax).
		WithConnectTimeout(cfg.Server.ConnectTimeout)
	if s.strategy = newStrategy(cfg.Server.Strategy, s.targets, cfg.Server.StickyHeader); s.strategy == nil {
		// Load refuses it; a configuration built in code must not run another strategy instead.
		return nil, fmt.Errorf("FAILOVER_STRATEGY=%q: must be one of %s", cfg.Server.Strategy, strings.Join(strategyNames(), ", "))
	}
	if opts.Build == (Build{}) {
		opts.Build = ReadBuild("", "")
	}
	series := make([]observe.Target, len(s.targets))
	for i, t := range s.targets {
		series[i] = observe.Target{Name: t.Name, Health: t.health}
	}
	s.metrics = observe.NewMetrics(series, s.clock, observe.Build{Version: opts.Build.Version, Revision: opts.Build.Revision, GoVersion: opts.Build.GoVersion})
	for i, t := range s.targets {
		t.metrics = s.metrics.Target(i)
	}
	s.retries = budget.NewRetryBudget(cfg.Budget.RetryBudgetRatio, cfg.Budget.RetryBudgetMin, s.clock)
	s.hedges = budget.NewHedgeBudget(cfg.Hedge.BudgetRatio, s.clock)
	s.inboundToken = []byte(cfg.Server.InboundToken)
	s.instruction = jsonscan.AppendQuote(nil, cfg.Resume.EffectiveInstruction())
	s.maxRequest = sizeLimit(cfg.Server.MaxRequestBytes)
	s.maxResponse = int(cfg.Server.MaxResponseBytes)
	s.peek = int(cfg.Server.PeekBytes)
	s.pool.New = func() any { return newExchange(s) }
	s.prober.stop = make(chan struct{})
	s.quit = make(chan struct{})
	s.streams = newWorkers(func(j streamJob) { j.ex.serveStream(j.c) })
	s.handedBack = newWorkers(func(c net.Conn) { s.proxy.ServeConn(c) }) // the connection's own end: nothing to report
	s.legs = newWorkers(func(j legJob) { j.ex.send(j.a, j.a.leg.stopFn) })
	s.legs.after = func(j legJob) { j.ex.racing.ended <- j.a } // its report to the race

	s.proxy = &fasthttp.Server{
		Handler:                       s.serveProxy,
		ErrorHandler:                  s.serveError,
		Name:                          "failover",
		ReadBufferSize:                maxHeaderBytes,
		MaxRequestBodySize:            s.maxRequest,
		ReadTimeout:                   clientTimeout,
		IdleTimeout:                   clientTimeout,
		NoDefaultServerHeader:         true,
		NoDefaultDate:                 true,
		NoDefaultContentType:          true,
		DisableHeaderNamesNormalizing: false,
		// fasthttp parses a multipart body of known length into a form by default (spilling
		// files over 16 MiB to the temporary directory) and PostBody then re-encodes the form:
		// fields first, in map order, without their own part headers. An upload must reach the
		// target byte for byte, and a container whose temporary directory is read-only must
		// not answer a large audio file with 400.
		DisablePreParseMultipartForm: true,
		CloseOnShutdown:              true,
		// The 16 KiB read buffer (sized for the header limit) is only needed while a request
		// is read: released before the handler runs, an idle committed stream does not hold it.
		ReduceMemoryUsage: true,
		// A committed stream hijacks its connection and hands it back with ServeConn after a
		// clean end (commit.go): fasthttp must not close it when the hijack handler returns.
		KeepHijackedConns: true,
		WriteBufferSize:   netio.WriteBufferSize,
		Logger:            quietLogger{},
	}
	s.probes = &fasthttp.Server{
		Handler:               s.serveProbes,
		Name:                  "failover-metrics",
		ReadTimeout:           clientTimeout,
		IdleTimeout:           clientTimeout,
		NoDefaultServerHeader: true,
		CloseOnShutdown:       true,
		Logger:                quietLogger{},
	}
	return s, nil
}

// sizeLimit turns a configured request limit into fasthttp's: 0 means no limit, which
// fasthttp cannot express (<= 0 is its 4 MiB default), so it becomes the largest int.
func sizeLimit(s config.Size) int {
	if s <= 0 {
		return int(^uint(0) >> 1)
	}
	return int(s)
}

// quietLogger drops fasthttp's own log lines: they can quote request data, and every
// request is already logged once, by the ledger.
type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}

// Serve answers proxy requests on ln until Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	go s.tend()
	return s.proxy.Serve(netio.Listener{Listener: ln, Conns: &s.conns, Closing: &s.closing})
}

// tend is the server's periodic look, every waitTick until Shutdown, with or without traffic:
// it retires the stream path's workers that have waited longer than workerIdle, and ends the
// waits after an answer that have lasted since its last tick (netio.Conns.EndLongWaits: a
// client connection waits so for between one and two ticks at most).
func (s *Server) tend() {
	tick := time.NewTicker(s.waitTick)
	defer tick.Stop()
	for {
		select {
		case <-s.quit:
			return
		case now := <-tick.C:
			s.streams.retire(now)
			s.handedBack.retire(now)
			s.legs.retire(now)
			s.conns.EndLongWaits()
		}
	}
}

// waitTick is how often tend looks: a connection whose client is idle after an answer holds
// its write buffer for less than twice as long, and a request the wait after an answer missed
// (a client that sent it before the answer, though it had waited for the answer before) waits
// as long at most. A variable for tests (read by New).
var waitTick = 50 * time.Millisecond

// ServeProbes answers /metrics, /targets, /healthz and /readyz on ln until Shutdown.
func (s *Server) ServeProbes(ln net.Listener) error { return s.probes.Serve(ln) }

// AdaptProcs runs the processor control (package procs) until Shutdown: half the runtime's
// default processors while few requests are in flight, all of them while many are. The caller
// (main) calls it only when GOMAXPROCS is not set in the environment. It reports the count it
// started at, 0 when there is nothing to control.
func (s *Server) AdaptProcs() int { return procs.Adapt(s.quit, &s.metrics.Inflight, &s.metrics.Procs) }

// Shutdown stops accepting at once, lets in-flight requests and streams finish until ctx
// ends, then ends what remains: a committed stream gets the family's interrupted-stream error,
// a request still waiting on an upstream gets a 503. It returns when every request is done.
func (s *Server) Shutdown(ctx context.Context) {
	s.closing.Store(true)
	s.stopProber()
	s.quitOnce.Do(func() {
		close(s.quit)
		s.streams.stop()
		s.handedBack.stop()
		s.legs.stop()
	})
	done, quit := make(chan struct{}), make(chan struct{})
	defer close(quit)
	go func() {
		defer close(done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for s.active.Load() > 0 {
			select {
			case <-quit:
				return
			case <-tick.C:
			}
		}
	}()
	// fasthttp closes an idle keep-alive connection at shutdown, but counts one it was handed
	// with ServeConn (after a stream) as idle only 5 s after the handover, and one whose answer
	// waits for the next request in its last write (netio.ClientConn) not at all: every
	// connection that waits for a request is closed here, until the drain is over.
	stopIdle := make(chan struct{})
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			s.conns.CloseIdle()
			select {
			case <-stopIdle:
				return
			case <-tick.C:
			}
		}
	}()
	defer close(stopIdle)
	var wg sync.WaitGroup
	for _, srv := range []*fasthttp.Server{s.proxy} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			srv.ShutdownWithContext(ctx) // the deadline is handled below
		}()
	}
	select {
	case <-done:
	case <-ctx.Done():
		s.abort.Store(true)
		select {
		case <-done:
		case <-time.After(2 * netio.PollInterval):
		}
	}
	wg.Wait()
	s.probes.Shutdown() // nothing is left to wait for
	for _, t := range s.targets {
		t.pool.CloseIdle()
	}
}

// LeakedProbes reports how many requests finished with a target's probe still leased: always
// 0 unless the attempt step has a bug. The tests' sidecars and the drill's invariants check it.
func (s *Server) LeakedProbes() int64 { return s.leakedProbes.Load() }

// Ready reports whether at least one target is not ejected, and the server is not shutting
// down: /readyz (docs/operations.md, Deployment, Kubernetes sidecar).
func (s *Server) Ready() bool {
	if s.closing.Load() {
		return false
	}
	now := s.clock.Now()
	for _, t := range s.targets {
		if !t.health.Ejected(now) {
			return true
		}
	}
	return len(s.targets) == 0
}

var (
	pathHealthz = []byte("/healthz")
	pathReadyz  = []byte("/readyz")
	pathMetrics = []byte("/metrics")
	pathTargets = []byte("/targets")
	prefixV1    = []byte("/v1/")
)

// serveProbes answers the metrics listener.
func (s *Server) serveProbes(ctx *fasthttp.RequestCtx) {
	switch path := ctx.Path(); {
	case bytes.Equal(path, pathMetrics):
		ctx.SetContentType("text/plain; version=0.0.4; charset=utf-8")
		s.metrics.Write(ctx)
	case bytes.Equal(path, pathTargets):
		s.serveTargets(ctx)
	case s.serveHealth(ctx, path):
	default:
		ctx.SetStatusCode(fasthttp.StatusNotFound)
		ctx.SetBodyString("not found: /metrics, /targets, /healthz and /readyz are served here\n")
	}
}

// serveHealth answers /healthz and /readyz on either listener.
func (s *Server) serveHealth(ctx *fasthttp.RequestCtx, path []byte) bool {
	switch {
	case bytes.Equal(path, pathHealthz):
		ctx.SetContentType("text/plain; charset=utf-8")
		ctx.SetBodyString("ok\n")
	case bytes.Equal(path, pathReadyz):
		ctx.SetContentType("text/plain; charset=utf-8")
		if s.Ready() {
			ctx.SetBodyString("ready\n")
		} else {
			ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
			ctx.SetBodyString("not ready: every target is ejected, or the sidecar is shutting down\n")
		}
	default:
		return false
	}
	return true
}

// serveProxy is the proxy listener's handler. An answer fasthttp writes, to a client that
// waits for its answers, on a request that ended at its last byte, waits for the client's next
// request in its last write (netio.ClientConn.Begin, AwaitAfter); a stream writes its answer
// itself, and a request read with bytes of the next one has that one in fasthttp's buffer
// already.
func (s *Server) serveProxy(ctx *fasthttp.RequestCtx) {
	cc, _ := ctx.Conn().(*netio.ClientConn)
	mayWait := cc != nil && cc.Begin(len(ctx.Request.Body()))
	s.serveRequest(ctx)
	if mayWait && !ctx.Hijacked() {
		cc.AwaitAfter(&ctx.Response.Header)
	}
}

// serveRequest answers a request on the proxy listener.
func (s *Server) serveRequest(ctx *fasthttp.RequestCtx) {
	path := ctx.Path()
	unframed := len(ctx.PostBody()) == 0 && identityCoded(ctx.Request.Header.RawHeaders())
	if !unframed && !bytes.HasPrefix(path, prefixV1) && s.serveHealth(ctx, path) {
		return // probes are not requests: no ledger record
	}
	s.active.Add(1)
	inflight := s.metrics.Inflight.Add(1)
	ex := s.pool.Get().(*exchange)
	ex.begin(ctx)
	switch {
	case unframed:
		ctx.SetConnectionClose() // what follows on the connection is this request's body
		ex.reject(fasthttp.StatusBadRequest, codeBadRequest, "malformed HTTP request: a Transfer-Encoding other than chunked")
	case !bytes.HasPrefix(path, prefixV1):
		ex.reject(fasthttp.StatusNotFound, codeNotFound, "only /v1/... is proxied (and /healthz, /readyz)")
	case ctx.IsTrace() || ctx.IsConnect():
		// No LLM API takes them. A TRACE that a target echoes would hand the client the
		// target's own key, which the sidecar added to the request (docs/decisions.md, Errors).
		ctx.Response.Header.Set("Allow", "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS")
		ex.reject(fasthttp.StatusMethodNotAllowed, codeMethodNotAllowed, "TRACE and CONNECT are not proxied")
	case s.closing.Load():
		ex.reject(fasthttp.StatusServiceUnavailable, codeShuttingDown, "the sidecar is shutting down")
	case s.cfg.Server.MaxInflight > 0 && inflight > int64(s.cfg.Server.MaxInflight):
		ctx.Response.Header.Set("Retry-After", "1")
		ex.reject(fasthttp.StatusServiceUnavailable, codeOverloaded, "too many requests in flight in the failover sidecar; retry shortly")
	case !ex.authorized():
		ex.reject(fasthttp.StatusUnauthorized, codeUnauthorized, "missing or wrong token for the failover sidecar (FAILOVER_INBOUND_TOKEN)")
	case !ex.readConnection():
		ex.reject(fasthttp.StatusBadRequest, codeBadRequest, fmt.Sprintf("the Connection header names more than %d options", maxConnectionOptions))
	default:
		ex.run()
	}
	ex.handlerDone()
}

// prefixTransferEncoding starts a Transfer-Encoding line (fasthttp refuses a space before
// the colon).
var prefixTransferEncoding = []byte("transfer-encoding:")

// identityCoded reports whether a request's raw header block has a Transfer-Encoding line
// that does not say chunked. fasthttp refuses every coding but chunked and identity, and reads
// identity as no coding at all: with no Content-Length it reads no body, and the body's bytes
// would be read as the client's next request, where a proxy in front sent them as this one's
// body (request smuggling). RFC 9112 section 6.3: the length cannot be known, so 400, then
// close. Called only for a request whose body is empty, so it costs a request with a body
// nothing; an empty chunked body ("0" CRLF CRLF) is framing, and served.
func identityCoded(raw []byte) bool {
	for len(raw) > 0 {
		var line []byte
		line, raw = cutList(raw, '\n')
		if hasPrefixFold(line, prefixTransferEncoding) && !bytes.EqualFold(bytes.TrimSpace(line[len(prefixTransferEncoding):]), valueChunked) {
			return true
		}
	}
	return false
}

// serveError answers what fasthttp rejects before the handler: bodies over the limit (413),
// header blocks over 16 KiB (431) and malformed requests (400). Each still gets a ledger record.
func (s *Server) serveError(ctx *fasthttp.RequestCtx, err error) {
	var small *fasthttp.ErrSmallBuffer
	status, code, msg := fasthttp.StatusBadRequest, codeBadRequest, "malformed HTTP request"
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		status, code = fasthttp.StatusRequestEntityTooLarge, codeTooLarge
		msg = fmt.Sprintf("request body larger than FAILOVER_MAX_REQUEST_BYTES (%s)", s.cfg.Server.MaxRequestBytes)
	case errors.As(err, &small):
		status, code, msg = fasthttp.StatusRequestHeaderFieldsTooLarge, codeHeadersTooLarge, "request headers larger than 16 KiB"
	case errors.Is(err, netio.ErrBareLF):
		msg = "malformed HTTP request: a line of the request head ends in LF without CR (HTTP/1.1 lines end in CRLF)"
	case netio.IsTimeout(err):
		status, code, msg = fasthttp.StatusRequestTimeout, "request_timeout", "the request was not received in time"
	}
	ctx.SetConnectionClose()
	s.active.Add(1)
	s.metrics.Inflight.Add(1)
	ex := s.pool.Get().(*exchange)
	ex.begin(ctx)
	if cc, ok := ctx.Conn().(*netio.ClientConn); ok && len(ex.Path) <= 1 {
		// fasthttp reset the request before this handler (headers too large, a chunked body
		// over the limit): the request line it came from still names the family.
		ex.Family = familyOf(cc.RequestTarget())
	}
	ex.reject(status, code, msg)
	ex.handlerDone()
}

// authorized checks FAILOVER_INBOUND_TOKEN (Authorization: Bearer or x-api-key) in constant
// time and remembers which header carried it, so it is never forwarded.
func (ex *exchange) authorized() bool {
	tok := ex.srv.inboundToken
	if len(tok) == 0 {
		return true
	}
	h := &ex.ctx.Request.Header
	if v := h.Peek("Authorization"); len(v) > 7 && strings.EqualFold(string(v[:7]), "bearer ") &&
		subtle.ConstantTimeCompare(bytes.TrimSpace(v[7:]), tok) == 1 {
		ex.tokenHeader = headerAuthorization
		return true
	}
	if v := h.Peek("X-Api-Key"); subtle.ConstantTimeCompare(bytes.TrimSpace(v), tok) == 1 {
		ex.tokenHeader = headerXAPIKey
		return true
	}
	return false
}
