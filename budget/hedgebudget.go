package budget

import "time"

// HedgeFloorPerSecond is the hedge budget's floor: one hedge a second, ten over the window, whatever the
// traffic (docs/streams.md#hedging). Without it a quiet sidecar could never hedge: at one request a minute,
// 5% of the first attempts in ten seconds is no hedge at all. It is what a slowdown of every request costs a
// quiet sidecar beyond the ratio: at R requests a second, at most ratio + 1/R more upstream requests.
const HedgeFloorPerSecond = 1

// HedgeBudget limits hedges (docs/streams.md#hedging) across all requests: over a sliding window of ten
// one-second buckets, hedges may not exceed ratio × first attempts in the window + HedgeFloorPerSecond × 10.
// A provider-wide slowdown, in which every attempt is slow to commit and every request would hedge, then costs
// at most that fraction more upstream requests, never double.
//
// Ratio 0 (or below, or NaN) allows no hedge at all, floor included: the budget refuses every one
// (failover_hedges_total's not_started), as a way to stop hedging while FAILOVER_HEDGE_AFTER stays set.
//
// One HedgeBudget per process, shared by every request: safe for concurrent use, lock-free and allocation-free,
// and never overshot under concurrency (the retry budget's window, ratioWindow).
type HedgeBudget struct {
	ratio float64 // <= 0: no hedge
	w     ratioWindow
}

// NewHedgeBudget returns a budget allowing ratio hedges per first attempt plus HedgeFloorPerSecond per second,
// over ten seconds. clock is read once, for the origin of the bucket seconds; nil means SystemClock. The now
// given to Request and Withdraw must come from the same clock.
func NewHedgeBudget(ratio float64, clock Clock) *HedgeBudget {
	return &HedgeBudget{ratio: ratio, w: newRatioWindow(clock)}
}

// Request records that a request arrived (its first attempt): it adds ratio to what hedges may spend.
func (b *HedgeBudget) Request(now time.Time) {
	if b.ratio > 0 {
		b.w.request(now)
	}
}

// Withdraw asks for a hedge starting now. true means it is allowed and has been counted; false means the budget
// is spent (or the ratio is 0), and the request goes on with the attempt it has.
func (b *HedgeBudget) Withdraw(now time.Time) bool {
	if !(b.ratio > 0) {
		return false
	}
	return b.w.withdraw(now, b.ratio, HedgeFloorPerSecond*budgetBuckets)
}

// Refund gives back a hedge withdrawn at now that was not started after all (the retry budget refused it, or
// no candidate was left). A refund in a later second than its withdrawal gives nothing back.
func (b *HedgeBudget) Refund(now time.Time) {
	if b.ratio > 0 {
		b.w.refund(now)
	}
}
