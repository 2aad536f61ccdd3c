package proxy

import (
	"bufio"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llm-failover/failover/proxy/internal/netio"
	"github.com/llm-failover/failover/proxy/internal/observe"
)

// The background probe (docs/decisions.md, Health). A target ejected for timing out keeps every request
// that probes it waiting for the whole timeout, so live requests probe it only every
// FAILOVER_EJECT_SILENT. In between, every FAILOVER_PROBE_INTERVAL, the sidecar itself asks
// it: the path of the request that timed out, with an empty JSON object as the body, the
// target's key and headers, and FAILOVER_PROBE_INTERVAL to answer. Any HTTP answer (a 400 for
// the empty body is the usual one, and costs no tokens) shows that the target answers again:
// its ejection ends, and the next request probes it for real. If that request times out all
// the same, the probe lied, and budget.Health stops believing it until the target is healthy.
//
// One goroutine runs the probes while a target wants them, and none otherwise; each target
// has at most one probe in flight.

// prober runs the background probes of one Server.
type prober struct {
	mu      sync.Mutex
	running bool          // the loop is running
	stop    chan struct{} // closed at Shutdown
	stopped bool
}

// wakeProber starts the probe loop if it is not running. Called after an ejection for timing
// out was recorded, so that the loop, deciding under mu whether to end, sees that ejection.
func (s *Server) wakeProber() {
	if s.cfg.Budget.ProbeInterval <= 0 {
		return
	}
	p := &s.prober
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running || p.stopped {
		return
	}
	p.running = true
	go s.probeLoop()
}

// stopProber ends the probe loop (Shutdown). Probes in flight end within their own deadline.
func (s *Server) stopProber() {
	p := &s.prober
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.stopped {
		p.stopped = true
		close(p.stop)
	}
}

// probeLoop probes, every FAILOVER_PROBE_INTERVAL, each target that wants a background probe,
// and ends when none does.
func (s *Server) probeLoop() {
	interval := s.cfg.Budget.ProbeInterval
	timer := time.NewTimer(interval)
	defer timer.Stop()
	for {
		select {
		case <-s.prober.stop:
			s.prober.mu.Lock()
			s.prober.running = false
			s.prober.mu.Unlock()
			return
		case <-timer.C:
		}
		if !s.startProbes() {
			s.prober.mu.Lock()
			// Looked at again under mu: an ejection recorded since then has called wakeProber,
			// which waits for mu and would find the loop still running.
			if !s.startProbes() {
				s.prober.running = false
				s.prober.mu.Unlock()
				return
			}
			s.prober.mu.Unlock()
		}
		timer.Reset(interval)
	}
}

// startProbes starts a probe of each target that wants one and has none in flight, and reports
// whether any target wants one.
func (s *Server) startProbes() bool {
	now := s.clock.Now()
	wanted := false
	for _, t := range s.targets {
		if !t.health.WantsProbe(now) {
			continue
		}
		wanted = true
		if t.bgProbe.CompareAndSwap(false, true) {
			go func() {
				defer t.bgProbe.Store(false)
				s.probe(t)
			}()
		}
	}
	return wanted
}

// probe asks t once and records an answer.
func (s *Server) probe(t *Target) {
	status, err := s.probeOnce(t)
	if err != nil {
		t.metrics.Probe(observe.ProbeSilent)
		s.log.Debug("target_probe_silent", slog.String("target", t.Name), slog.Int("status", 0))
		return
	}
	t.metrics.Probe(observe.ProbeAnswered)
	if t.health.ProbeAnswered(s.clock.Now()) {
		s.log.Info("target_probe_answered", slog.String("target", t.Name), slog.Int("status", status))
	}
}

// probeOnce sends the probe request and reads the answer's status line and headers.
func (s *Server) probeOnce(t *Target) (status int, err error) {
	req := t.probeReq.Load()
	if req == nil {
		req = &probeRequest{method: "GET", path: "/v1/models"}
	}
	deadline := time.Now().Add(s.cfg.Budget.ProbeInterval)
	// The dial too ends at the probe's deadline (FAILOVER_CONNECT_TIMEOUT may be 0, no limit)
	// or when the shutdown begins.
	c, err := t.pool.Dial(func() error {
		if s.closing.Load() || time.Now().After(deadline) {
			return netio.ErrShutdown
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	defer c.Close()
	c.SetDeadline(deadline)
	if _, err = c.Write(probeHead(t, req)); err != nil {
		return 0, err
	}
	var h fasthttp.ResponseHeader
	if err = h.Read(bufio.NewReaderSize(c, netio.ReadBufferSize)); err != nil {
		return 0, err
	}
	return h.StatusCode(), nil
}

// probeBody is the probe's body for a method that carries one: valid JSON that asks for
// nothing, so a target that answers at all answers at once, and bills nothing.
const probeBody = "{}"

// probeHead is the probe request, body included: the request's own method and path on t, with
// t's key and headers, marked X-Failover-Probe so that the target's logs can tell it apart.
func probeHead(t *Target, req *probeRequest) []byte {
	b := append([]byte(req.method), ' ')
	b = appendUpstreamURI(b, t, []byte(req.path), nil)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, t.host...)
	b = append(b, "\r\nConnection: close\r\nX-Failover-Probe: 1\r\nAccept-Encoding: identity\r\n"...)
	if t.ownKey {
		b = appendHeaderLine(b, t.authName, t.authValue)
	}
	for _, kv := range t.headers {
		b = appendHeaderLine(b, kv[0], kv[1])
	}
	if req.method == "GET" || req.method == "HEAD" {
		return append(b, '\r', '\n')
	}
	b = append(b, "Content-Type: application/json\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(probeBody)), 10)
	b = append(b, "\r\n\r\n"...)
	return append(b, probeBody...)
}
