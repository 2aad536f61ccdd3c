package classify

// HedgeInput is what the proxy knows when an attempt has not committed within the hedge delay
// (docs/streams.md#hedging): the request, the sidecar's state, and what the limits and budgets
// still permit. The proxy looks up the candidate only when everything before it allows the hedge,
// and asks the budgets last, the hedge budget before the retry budget (HedgeBudgetOK first), so
// that no token goes to a hedge that cannot happen. A hedge token taken when the retry budget then
// refuses, or both when the candidate is gone by the time it is taken, are given back (Refund).
type HedgeInput struct {
	Enabled bool // FAILOVER_ENABLED: false allows one attempt, and no hedge either
	On      bool // FAILOVER_HEDGE_AFTER is set (not 0)
	// Other: the request is of the other family, never hedged: an unknown API may have side
	// effects two attempts would repeat.
	Other bool
	// Image: an image generation, never hedged: an image is generated (and paid for) once, and
	// a second attempt would be paid for too.
	Image bool
	// Stored: a Responses API request that does not say "store": false. The stored response is a
	// server-side object, and two attempts would create two.
	Stored       bool
	ClientGone   bool // the client left
	ShuttingDown bool // the sidecar is shutting down: a new attempt would be cut too
	Probe        bool // the running attempt is its target's probe: it alone tells whether the target is back
	TransferFits bool // FAILOVER_MAX_ATTEMPTS allows one more attempt on another target
	ElapsedOK    bool // FAILOVER_MAX_ELAPSED allows starting an attempt now
	// Candidate: a next candidate is usable now: the one a transfer would take, never an ejected,
	// cooling-down or rate-limited one, nor one that would be tried as its probe (a hedge may be cut
	// as lost, which would tell nothing of whether the target is back).
	Candidate     bool
	HedgeBudgetOK bool // the hedge budget (FAILOVER_HEDGE_BUDGET_RATIO) admits one more hedge
	RetryBudgetOK bool // the retry budget admits one more attempt (a hedge counts in it like a transfer)
}

// HedgeReason says whether a slow attempt is hedged, and why not. Its String names it in logs and
// metrics.
type HedgeReason uint8

const (
	HedgeOK               HedgeReason = iota // start the hedge
	HedgeCancelled                           // the client left or the sidecar is shutting down
	HedgeDisabled                            // FAILOVER_ENABLED=false
	HedgeOff                                 // FAILOVER_HEDGE_AFTER is 0
	HedgeNotEligible                         // the other family, or an image generation
	HedgeStoredResponse                      // a Responses API request that stores its response
	HedgeProbe                               // the running attempt is a probe
	HedgeTransferLimit                       // FAILOVER_MAX_ATTEMPTS is spent
	HedgeElapsedLimit                        // FAILOVER_MAX_ELAPSED is spent
	HedgeNoCandidate                         // no next candidate is usable
	HedgeBudgetSpent                         // the hedge budget is spent
	HedgeRetryBudgetSpent                    // the retry budget is spent
	NumHedgeReasons
)

var hedgeReasonNames = [NumHedgeReasons]string{"ok", "cancelled", "disabled", "off", "not_eligible", "stored_response",
	"probe", "transfer_limit", "elapsed_limit", "no_candidate", "hedge_budget", "retry_budget"}

func (r HedgeReason) String() string {
	if r < NumHedgeReasons {
		return hedgeReasonNames[r]
	}
	return "unknown"
}

// NotStarted reports whether the reason is a budget's refusal of a hedge that was otherwise due
// (HedgeBudgetSpent, HedgeRetryBudgetSpent): failover_hedges_total counts these as outcome
// not_started. The other refusals say that the request is not one to hedge, or cannot be, and are
// not counted.
func (r HedgeReason) NotStarted() bool { return r == HedgeBudgetSpent || r == HedgeRetryBudgetSpent }

// Hedge decides whether an attempt that has not committed within the hedge delay gets a second
// attempt beside it: only when the client is still there and the sidecar is not shutting down, with
// failover enabled and hedging on, for a request that may be sent twice (not other, not a stored
// response), not while the attempt is a probe, within FAILOVER_MAX_ATTEMPTS and FAILOVER_MAX_ELAPSED,
// with a candidate to go to, and within the hedge and retry budgets, in that order.
func Hedge(in HedgeInput) HedgeReason {
	switch {
	case in.ClientGone || in.ShuttingDown:
		return HedgeCancelled
	case !in.Enabled:
		return HedgeDisabled
	case !in.On:
		return HedgeOff
	case in.Other || in.Image:
		return HedgeNotEligible
	case in.Stored:
		return HedgeStoredResponse
	case in.Probe:
		return HedgeProbe
	case !in.TransferFits:
		return HedgeTransferLimit
	case !in.ElapsedOK:
		return HedgeElapsedLimit
	case !in.Candidate:
		return HedgeNoCandidate
	case !in.HedgeBudgetOK:
		return HedgeBudgetSpent
	case !in.RetryBudgetOK:
		return HedgeRetryBudgetSpent
	}
	return HedgeOK
}
