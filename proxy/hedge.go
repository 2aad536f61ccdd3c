package proxy

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llm-failover/failover/budget"
	"github.com/llm-failover/failover/classify"
	"github.com/llm-failover/failover/proxy/internal/netio"
	"github.com/llm-failover/failover/proxy/internal/observe"
	"github.com/llm-failover/failover/stream"
)

// Hedging (docs/streams.md, Hedging): with FAILOVER_HEDGE_AFTER set, an attempt of the sweep
// that has not committed within the hedge delay gets a second attempt beside it, on the
// candidate a transfer would take, and the first of the two to commit wins. Nothing reaches
// the client before a commit, so the other is cut before a byte of it was shown.
//
// An attempt that may be raced runs on the handler's goroutine, as any does, until the delay:
// its waits for the answer give way then (netio.ErrYield) if it has not ended. Only then does
// the race begin (race): it starts the hedge, and runs each attempt's I/O (send) on a goroutine
// of its own, a leg (the first going on where it gave way), while the handler's goroutine
// waits for them, watches the client, and settles each attempt as it ends: the exchange is
// still touched by its owner alone. An attempt that would begin with a dial, which cannot give
// way, runs on a leg from the start, and the hedge starts on the race's timer. A leg writes
// only its attempt, and stops when its leg says so (cut). An attempt that ends before the
// delay, and every attempt with hedging off or of a request that may not be hedged, never
// meets a leg: it costs what it did before hedging.

// A leg is what a hedge race needs of an attempt to run its I/O on a goroutine of its own and to
// cut it from the handler's: why it must stop, and the connection to interrupt. Part of the
// attempt; safe for concurrent use.
type leg struct {
	why    atomic.Uint32 // legRuns, or why it must stop
	conn   atomic.Pointer[netio.Conn]
	stopFn netio.Stop // stop, made once
	abort  *atomic.Bool
}

const (
	legRuns     = iota
	legLost     // the other attempt committed first (errLost)
	legGone     // the client left (netio.ErrClientGone)
	legShutdown // the shutdown timeout passed (netio.ErrShutdown)
)

var legErrors = [...]error{legLost: errLost, legGone: netio.ErrClientGone, legShutdown: netio.ErrShutdown}

// cut reports why a race cut the attempt, or nil.
func (l *leg) cut() error {
	if w := l.why.Load(); w != legRuns {
		return legErrors[w]
	}
	return nil
}

// stop is the leg's netio.Stop: the race's word, and the shutdown timeout. It does not look at
// the client's connection itself: the handler's goroutine does, and cuts the legs.
func (l *leg) stop() error {
	if err := l.cut(); err != nil {
		return err
	}
	if l.abort != nil && l.abort.Load() {
		return netio.ErrShutdown
	}
	return nil
}

// hold tells the leg the connection its I/O uses now (nil: none), so that a cut interrupts it.
// A cut that came before is applied at once.
func (l *leg) hold(c *netio.Conn) {
	l.conn.Store(c)
	if c != nil && l.why.Load() != legRuns {
		c.Interrupt()
	}
}

// stopWith cuts the leg: its I/O ends at once (netio.Conn.Interrupt) with why. The first reason
// given stays.
func (l *leg) stopWith(why uint32) {
	if l.why.CompareAndSwap(legRuns, why) {
		if c := l.conn.Load(); c != nil {
			c.Interrupt()
		}
	}
}

// race state kept by the exchange (pooled with it): the channel the legs report on, the timer
// of a hedge delay that a leg runs out, and the ticker of the handler's look at the client.
type raceState struct {
	once  sync.Once
	ended chan *attempt // each leg sends its attempt when its I/O ended
	timer *time.Timer
	poll  *time.Ticker
}

func (r *raceState) init() {
	r.once.Do(func() {
		r.ended = make(chan *attempt, len(exchange{}.tries))
		r.timer = time.NewTimer(time.Hour)
		r.timer.Stop()
		r.poll = time.NewTicker(time.Hour)
		r.poll.Stop()
	})
}

// hedgeDelay is how long an attempt on t runs before a hedge may start beside it: the fixed
// FAILOVER_HEDGE_AFTER, or the percentile of t's recent times to commit it names, never below
// FAILOVER_HEDGE_AFTER_MIN, and budget.HedgeDelayDefault while t has too few.
func (s *Server) hedgeDelay(t *Target) time.Duration {
	h := &s.cfg.Hedge
	if h.After.Percentile == 0 {
		return h.After.Fixed
	}
	return t.commits.HedgeDelay(time.Now(), h.After.Percentile, h.AfterMin)
}

// hedgeInput describes the request, and attempt a, for classify.Hedge. The limits, the budgets
// and the candidate are taken as allowing it: raceable looks for the candidate before the race,
// startHedge measures them all when the delay has passed.
func (ex *exchange) hedgeInput(a *attempt) classify.HedgeInput {
	s := ex.srv
	return classify.HedgeInput{
		Enabled: s.cfg.Budget.Enabled, On: s.cfg.Hedge.After.On(),
		Other: ex.Family == stream.Other, Image: ex.Family == stream.Image,
		Stored:       ex.Family == stream.Responses && !ex.fields.noStore,
		ClientGone:   ex.gone,
		ShuttingDown: s.closing.Load(),
		Probe:        ex.lease.held() && ex.lease.h == a.t.health,
		TransferFits: true, ElapsedOK: true, Candidate: true, HedgeBudgetOK: true, RetryBudgetOK: true,
	}
}

// raceable reports whether the sweep's attempt a may be raced by a hedge, and after how long.
func (ex *exchange) raceable(a *attempt) (time.Duration, bool) {
	if !ex.srv.cfg.Hedge.After.On() {
		return 0, false
	}
	// A request with no candidate up at its attempt's start is not raced: a hedge could go only
	// to a target that comes back within the delay (docs/streams.md, Hedging), and the attempt
	// runs as with hedging off.
	in := ex.hedgeInput(a)
	in.Candidate = ex.hedgeCandidateLeft(ex.policyNow())
	if classify.Hedge(in) != classify.HedgeOK {
		return 0, false
	}
	return ex.srv.hedgeDelay(a.t), true
}

// race makes the sweep's attempt a, raced by a hedge if it has not committed once delay has
// passed. Until then a runs on the handler's goroutine as any attempt does (step), and one that
// ends in time is settled as any: nothing of the race runs, and it costs nothing more. When the
// delay passes first, a's I/O gives way (netio.ErrYield, attempt.yieldAt) and goes on on a leg,
// beside the hedge (startHedge); with no hedge to start, it goes on where it is.
//
// A race settles each of its attempts through the step's settle as it ends, with the other
// beside it while that one still runs: the first to commit wins and the other is cut and
// recorded as lost; one that fails while the other runs is settled as any (its health effect,
// its record) but starts nothing. The one that ends the race, by a commit or as the last to
// end, returns its verdict for the sweep to execute. The client leaving, or the shutdown
// timeout, cuts both, which are then settled as such.
func (ex *exchange) race(a *attempt, delay time.Duration) (classify.Verdict, *Target, *attempt) {
	s := ex.srv
	if s.abort.Load() {
		v, next := ex.step(a, resumeTry{}) // no attempt starts: step says so
		return v, next, a
	}
	ex.budget.Begin(ex.policyNow(), a.t.Index)
	a.start = time.Now()
	ex.buildRequest(a)
	hedgeAt := a.start.Add(delay)
	a.yieldAt = hedgeAt
	ex.send(a, ex.stopFn)
	a.yieldAt = time.Time{} // what goes on, on a leg or here, never gives way again
	if !a.yielded {
		ex.absorb(a)
		v, next := ex.settle(a, resumeTry{}, nil)
		return v, next, a
	}
	r := &ex.racing
	r.init()       // before a leg may report on it
	var b *attempt // the hedge, once started
	if a.ioAt != ioStart {
		// The delay passed: the hedge starts now.
		if b = ex.startHedge(a); b == nil {
			ex.send(a, ex.stopFn) // no hedge: the attempt goes on where it is
			ex.absorb(a)
			v, next := ex.settle(a, resumeTry{}, nil)
			return v, next, a
		}
	} else {
		// It gave way before a dial: the hedge starts on the timer, the attempt on a leg.
		r.timer.Reset(time.Until(hedgeAt))
		defer r.timer.Stop()
	}
	// The legs' waits overlap: the race counts its own time as waiting on the targets, once
	// (the overhead figure leaves it out), instead of each leg's (absorbLeg).
	defer func(begun time.Time) { ex.waited += time.Since(begun) }(a.start)
	ex.launch(a) // its I/O goes on where it yielded
	r.poll.Reset(netio.PollInterval)
	defer r.poll.Stop()
	poll := r.poll
	running := 1
	if b != nil {
		running++
	}
	for {
		select {
		case <-r.timer.C:
			if b == nil && running == 1 {
				if b = ex.startHedge(a); b != nil {
					running++
				}
			}
		case <-poll.C:
			switch {
			case ex.clientGone():
				ex.cutLegs(a, b, legGone)
			case s.abort.Load():
				ex.cutLegs(a, b, legShutdown)
			}
		case d := <-r.ended:
			running--
			ex.absorbLeg(d)
			var beside *attempt // the other, while it runs
			if running > 0 {
				beside = a
				if d == a {
					beside = b
				}
			}
			if b != nil {
				d.mark = observe.HedgeMarkEnded // won, if settle finds a commit (record)
			}
			if d == b && beside == nil {
				ex.budget.Follow(b.t.Index) // its verdict's retry is one on the hedge's target
			}
			v, next := ex.settle(d, resumeTry{}, beside)
			if beside != nil && v.Action != classify.ActionCommit {
				continue // it lost, or was cut: the other goes on
			}
			if b != nil {
				if d == b && v.Action == classify.ActionCommit {
					b.t.metrics.Hedge(observe.HedgeWon)
				} else {
					b.t.metrics.Hedge(observe.HedgeLost)
				}
			}
			return v, next, d
		}
	}
}

// absorbLeg is absorb for an attempt of a race: a client who left, but not its waits, which
// overlap the other leg's (race counts the race's time once).
func (ex *exchange) absorbLeg(a *attempt) {
	a.up.waited = 0
	ex.gone = ex.gone || a.gone
}

// launch runs attempt a's I/O on a leg: a goroutine (one of Server.legs) that reports on the
// race's channel when it ended, once it waits for its next job (workers.after). The request was built (buildRequest) on the handler's goroutine.
func (ex *exchange) launch(a *attempt) {
	a.leg.why.Store(legRuns)
	if a.leg.stopFn == nil {
		a.leg.stopFn, a.leg.abort = a.leg.stop, &ex.srv.abort
	}
	ex.srv.legs.do(legJob{ex, a})
}

// legJob is an attempt of a race, for a leg to run.
type legJob struct {
	ex *exchange
	a  *attempt
}

// cutLegs cuts the attempts still running with why (the client left, the shutdown).
func (ex *exchange) cutLegs(a, b *attempt, why uint32) {
	a.leg.stopWith(why)
	if b != nil {
		b.leg.stopWith(why)
	}
}

// cutLost cuts attempt x, which the other attempt of its race beat, waits for its I/O to end,
// and records it as lost: no health effect (its target was only slower), its connection closed,
// never pooled, and its time so far kept among its target's times to commit as a lower bound
// (budget.CommitTimes.ObserveLost).
func (ex *exchange) cutLost(x *attempt) {
	x.leg.stopWith(legLost)
	for d := range ex.racing.ended {
		ex.absorbLeg(d)
		if d == x {
			break
		}
	}
	x.up.reusable = false
	x.closeConn()
	if !x.sent.IsZero() && ex.srv.cfg.Hedge.After.On() {
		x.t.commits.ObserveLost(time.Now(), x.done.Sub(x.sent))
	}
	x.mark = observe.HedgeMarkLost
	ex.record(x, cutVerdict)
}

// startHedge starts the hedge of attempt a, when classify.Hedge lets it: on the candidate a
// transfer would take, if it is up (never one ejected, cooling down, rate-limited, or to be tried
// as its probe), within FAILOVER_MAX_ATTEMPTS and FAILOVER_MAX_ELAPSED, and with a token of the
// hedge budget and of the retry budget. It returns the hedge, or nil.
func (ex *exchange) startHedge(a *attempt) *attempt {
	s := ex.srv
	now := ex.policyNow()
	in := ex.hedgeInput(a)
	in.TransferFits = ex.budget.TransferAllowed()
	in.ElapsedOK = ex.budget.ElapsedAllows(now, 0)
	in.Candidate = ex.hedgeCandidateLeft(now)
	why := classify.Hedge(in)
	if why == classify.HedgeOK {
		if in.HedgeBudgetOK = s.hedges.Withdraw(now); in.HedgeBudgetOK {
			if in.RetryBudgetOK = s.retries.Withdraw(now); !in.RetryBudgetOK {
				s.hedges.Refund(now) // not started: the hedge budget keeps its token
			}
		}
		why = classify.Hedge(in)
	}
	if why != classify.HedgeOK {
		if why.NotStarted() {
			a.t.metrics.Hedge(observe.HedgeNotStarted)
			ex.event(slog.LevelInfo, "hedge_not_started", a, slog.String("reason", why.String()))
		}
		return nil
	}
	t := ex.takeHedgeCandidate(now)
	if t == nil {
		// Taken by another request meanwhile, or only to be had as its probe: no hedge, and
		// both budgets keep their tokens.
		s.hedges.Refund(now)
		s.retries.Refund(now)
		return nil
	}
	b := &ex.tries[1]
	b.begin(t, a.n+1)
	b.offset = time.Since(ex.start)
	ex.budget.BeginBeside(now)
	b.start = time.Now()
	ex.buildRequest(b)
	ex.launch(b)
	ex.event(slog.LevelInfo, "hedge_started", b, slog.String("beside", a.t.Name),
		slog.Float64("after_ms", float64(time.Since(a.start).Microseconds())/1000))
	return b
}

// hedgeCandidateLeft reports, taking nothing, whether a candidate the sweep has not tried yet is
// up now (budget.StateUp) and may take the request's model.
func (ex *exchange) hedgeCandidateLeft(now time.Time) bool {
	from, to := ex.sweep.Untried()
	for pos := from; pos < to; pos++ {
		if ex.hedgeAccept(pos) {
			return true
		}
	}
	return false
}

// hedgeAccept reports whether the candidate at pos may be hedged to: up, and sending a model no
// context-window error showed too small.
func (ex *exchange) hedgeAccept(pos int) bool {
	return ex.mayFit(pos) && ex.healthAt(pos).State(ex.policyNow()) == budget.StateUp
}

// takeHedgeCandidate takes the next candidate that is up from the sweep, as a transfer would
// take it; nil when there is none after all. One handed out as its probe is given back: a hedge
// is never a probe.
func (ex *exchange) takeHedgeCandidate(now time.Time) *Target {
	pos, probe, ok := ex.sweep.NextWhere(now, ex.healthAt, ex.hedgeAcceptFn)
	if !ok {
		return nil
	}
	t := ex.srv.targets[ex.cands[pos]]
	if probe {
		// Its ejection ran out meanwhile, and it was handed out as its probe: the lease takes
		// it only to give it back, where every probe ends.
		ex.lease.take(t.health)
		ex.settleProbe(nil)
		return nil
	}
	return t
}

// observeCommit keeps attempt a's time to commit, from its request sent to its commit, as one of
// its target's (hedgeDelay reads them) and in failover_upstream_time_to_first_chunk_seconds.
// Only while hedging is on: nothing else reads them.
func (ex *exchange) observeCommit(a *attempt) {
	if ex.srv.cfg.Hedge.After.On() && !a.sent.IsZero() {
		ex.observeCommitTime(a.t, a.done.Sub(a.sent))
	}
}

func (ex *exchange) observeCommitTime(t *Target, d time.Duration) {
	if !ex.srv.cfg.Hedge.After.On() {
		return
	}
	t.commits.Observe(time.Now(), d)
	t.metrics.Commit(d)
}
