package budget

import (
	"math"
	"sync/atomic"
	"time"
)

// The window of the retry and hedge budgets: ten buckets of one second, as Linkerd's and Finagle's budgets keep
// ten seconds.
const (
	budgetBuckets = 10
	budgetBucket  = time.Second
)

// RetryBudget limits retries and transfers across all requests, in the manner of Linkerd's retry budget and
// Envoy's retry_budget: over a sliding window of ten one-second buckets, retries plus transfers may not exceed
// ratio × first attempts in the window + minPerSecond × 10. It keeps a failing upstream from being hit by a
// storm of retries multiplied by every request in flight, while the floor lets a quiet sidecar still recover.
// Ratio 0 means unlimited.
//
// One RetryBudget per process, shared by every request: safe for concurrent use, lock-free and allocation-free
// (ratioWindow).
type RetryBudget struct {
	ratio float64 // <= 0: unlimited
	floor float64 // minPerSecond × window seconds
	w     ratioWindow
}

// NewRetryBudget returns a budget allowing ratio retries and transfers per first attempt plus minPerSecond per
// second, over ten seconds. clock is read once, for the origin of the bucket seconds (so buckets follow the
// monotonic clock, not wall-clock jumps); nil means SystemClock. The now given to Request and Withdraw must come
// from the same clock.
func NewRetryBudget(ratio float64, minPerSecond int, clock Clock) *RetryBudget {
	return &RetryBudget{
		ratio: ratio,
		floor: float64(max(minPerSecond, 0)) * budgetBuckets,
		w:     newRatioWindow(clock),
	}
}

// Request records that a request arrived (its first attempt): it adds ratio to what retries may spend.
func (b *RetryBudget) Request(now time.Time) {
	if b.ratio > 0 {
		b.w.request(now)
	}
}

// Withdraw asks for a retry or transfer starting now. true means it is allowed and has been counted; false means
// the budget is spent, and the current error goes back to the client (log retry_budget_exhausted).
func (b *RetryBudget) Withdraw(now time.Time) bool {
	if !(b.ratio > 0) {
		return true
	}
	return b.w.withdraw(now, b.ratio, b.floor)
}

// Refund gives back a withdrawal made at now whose attempt was not made after all (a hedge that found
// no candidate). A refund in a later second than its withdrawal gives nothing back.
func (b *RetryBudget) Refund(now time.Time) {
	if b.ratio > 0 {
		b.w.refund(now)
	}
}

// ratioWindow is the mechanism of RetryBudget and HedgeBudget: it counts first attempts and withdrawals in ten
// one-second buckets, and admits a withdrawal while the withdrawals in the window stay within ratio × the first
// attempts in the window + floor.
//
// Safe for concurrent use, lock-free and allocation-free. Each bucket counter is one 64-bit word holding the
// bucket's second (high 32 bits) and its count (low 32), so a bucket moves to a new second and counts in one
// compare-and-swap, and the limit is never overshot under concurrency.
type ratioWindow struct {
	origin time.Time

	requests [budgetBuckets]atomic.Uint64
	spent    [budgetBuckets]atomic.Uint64
}

// newRatioWindow reads clock (nil: SystemClock) once, for the origin of the bucket seconds.
func newRatioWindow(clock Clock) ratioWindow {
	if clock == nil {
		clock = SystemClock{}
	}
	return ratioWindow{origin: clock.Now()}
}

// request counts a first attempt at now.
func (w *ratioWindow) request(now time.Time) {
	s := w.second(now)
	bump(&w.requests[s%budgetBuckets], s)
}

// withdraw counts a withdrawal at now and reports true if the window admits it; a refused one is taken back.
func (w *ratioWindow) withdraw(now time.Time, ratio, floor float64) bool {
	s := w.second(now)
	cur := s % budgetBuckets
	var requests, others uint64
	for i := range uint32(budgetBuckets) {
		requests += count(w.requests[i].Load(), s)
		if i != cur {
			others += count(w.spent[i].Load(), s)
		}
	}
	// The epsilon keeps 0.29 × 100 = 28.999999999999996 from losing a withdrawal to rounding.
	allowed := uint64(ratio*float64(requests) + floor + 1e-9)
	word := bump(&w.spent[cur], s)
	// Only the current bucket changes under us, and every withdrawal judges by its own increment of it, so the
	// first one past the limit and all later ones are refused: no overshoot.
	if others+uint64(uint32(word)) > allowed {
		unbump(&w.spent[cur], word)
		return false
	}
	return true
}

// refund takes back one withdrawal counted in now's second, if that bucket still holds one.
func (w *ratioWindow) refund(now time.Time) {
	s := w.second(now)
	unbump(&w.spent[s%budgetBuckets], uint64(s)<<32)
}

// second returns now's one-second bucket number since the origin (0 for a time before it).
func (w *ratioWindow) second(now time.Time) uint32 {
	return uint32(max(now.Sub(w.origin), 0) / budgetBucket)
}

// count returns the count in bucket word w if its second is within the window ending at second s.
func count(w uint64, s uint32) uint64 {
	if s-uint32(w>>32) < budgetBuckets {
		return uint64(uint32(w))
	}
	return 0
}

// bump adds one to the bucket word for second s, first restarting it if it holds an older second, and returns
// the new word. An event late enough that the bucket has already moved on is counted in the newer second.
func bump(a *atomic.Uint64, s uint32) uint64 {
	for {
		old := a.Load()
		next := uint64(s)<<32 | 1
		if sec := uint32(old >> 32); sec == s || int32(sec-s) > 0 {
			if uint32(old) == math.MaxUint32 {
				return old
			}
			next = old + 1
		}
		if a.CompareAndSwap(old, next) {
			return next
		}
	}
}

// unbump takes back the increment that produced word w, unless its bucket has moved to another second since
// (which dropped the count anyway).
func unbump(a *atomic.Uint64, w uint64) {
	for {
		old := a.Load()
		if old>>32 != w>>32 || uint32(old) == 0 {
			return
		}
		if a.CompareAndSwap(old, old-1) {
			return
		}
	}
}
