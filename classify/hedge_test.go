package classify

import "testing"

func TestHedge(t *testing.T) {
	all := HedgeInput{Enabled: true, On: true, TransferFits: true, ElapsedOK: true, Candidate: true,
		HedgeBudgetOK: true, RetryBudgetOK: true}
	for _, tc := range []struct {
		name string
		edit func(*HedgeInput)
		want HedgeReason
	}{
		{"everything allows it", func(*HedgeInput) {}, HedgeOK},
		{"the client left", func(i *HedgeInput) { i.ClientGone = true }, HedgeCancelled},
		{"the sidecar is shutting down", func(i *HedgeInput) { i.ShuttingDown = true }, HedgeCancelled},
		{"FAILOVER_ENABLED=false", func(i *HedgeInput) { i.Enabled = false }, HedgeDisabled},
		{"FAILOVER_HEDGE_AFTER=0", func(i *HedgeInput) { i.On = false }, HedgeOff},
		{"the other family", func(i *HedgeInput) { i.Other = true }, HedgeNotEligible},
		{"an image generation", func(i *HedgeInput) { i.Image = true }, HedgeNotEligible},
		{"a stored response", func(i *HedgeInput) { i.Stored = true }, HedgeStoredResponse},
		{"the attempt is a probe", func(i *HedgeInput) { i.Probe = true }, HedgeProbe},
		{"FAILOVER_MAX_ATTEMPTS spent", func(i *HedgeInput) { i.TransferFits = false }, HedgeTransferLimit},
		{"FAILOVER_MAX_ELAPSED spent", func(i *HedgeInput) { i.ElapsedOK = false }, HedgeElapsedLimit},
		{"no usable candidate", func(i *HedgeInput) { i.Candidate = false }, HedgeNoCandidate},
		{"the hedge budget spent", func(i *HedgeInput) { i.HedgeBudgetOK = false }, HedgeBudgetSpent},
		{"the retry budget spent", func(i *HedgeInput) { i.RetryBudgetOK = false }, HedgeRetryBudgetSpent},
		// The order: a budget is only the reason when everything before it allowed the hedge, so
		// that no token is spent on a hedge that could not happen, and the candidate is looked up
		// only when the limits allow one.
		{"the client left before anything else", func(i *HedgeInput) { *i = HedgeInput{ClientGone: true} }, HedgeCancelled},
		{"disabled before off", func(i *HedgeInput) { i.Enabled, i.On = false, false }, HedgeDisabled},
		{"off before the family", func(i *HedgeInput) { i.On, i.Other = false, true }, HedgeOff},
		{"a stored response before the budgets", func(i *HedgeInput) { i.Stored, i.HedgeBudgetOK, i.RetryBudgetOK = true, false, false }, HedgeStoredResponse},
		{"a probe before the limits", func(i *HedgeInput) { i.Probe, i.TransferFits, i.ElapsedOK = true, false, false }, HedgeProbe},
		{"the limits before the candidate", func(i *HedgeInput) { i.ElapsedOK, i.Candidate = false, false }, HedgeElapsedLimit},
		{"no candidate before the budgets", func(i *HedgeInput) { i.Candidate, i.HedgeBudgetOK, i.RetryBudgetOK = false, false, false }, HedgeNoCandidate},
		{"the hedge budget before the retry budget", func(i *HedgeInput) { i.HedgeBudgetOK, i.RetryBudgetOK = false, false }, HedgeBudgetSpent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := all
			tc.edit(&in)
			if got := Hedge(in); got != tc.want {
				t.Fatalf("Hedge = %v, want %v", got, tc.want)
			}
		})
	}
}

// Each reason has its own name for logs and metrics, and only the budgets' refusals count as
// failover_hedges_total{outcome="not_started"}.
func TestHedgeReasonNames(t *testing.T) {
	notStarted := map[HedgeReason]bool{HedgeBudgetSpent: true, HedgeRetryBudgetSpent: true}
	seen := map[string]HedgeReason{}
	for r := range NumHedgeReasons {
		name := r.String()
		if name == "" || name == "unknown" {
			t.Errorf("reason %d has no name", r)
		}
		if other, dup := seen[name]; dup {
			t.Errorf("reasons %d and %d are both %q", other, r, name)
		}
		seen[name] = r
		if r.NotStarted() != notStarted[r] {
			t.Errorf("%s: NotStarted = %v, want %v", r, r.NotStarted(), notStarted[r])
		}
	}
	if got := NumHedgeReasons.String(); got != "unknown" {
		t.Errorf("a reason past the last is %q, want unknown", got)
	}
	for r, want := range map[HedgeReason]string{HedgeOK: "ok", HedgeBudgetSpent: "hedge_budget", HedgeRetryBudgetSpent: "retry_budget",
		HedgeStoredResponse: "stored_response", HedgeTransferLimit: "transfer_limit"} {
		if r.String() != want {
			t.Errorf("%d is %q, want %q", r, r.String(), want)
		}
	}
}

func TestHedgeAllocs(t *testing.T) {
	in := HedgeInput{Enabled: true, On: true, TransferFits: true, ElapsedOK: true, Candidate: true, HedgeBudgetOK: true}
	var sink HedgeReason
	if n := testing.AllocsPerRun(1000, func() {
		sink = Hedge(in)
		_ = sink.String()
		_ = sink.NotStarted()
	}); n != 0 {
		t.Fatalf("Hedge allocates %v times per call, want 0", n)
	}
	if sink != HedgeRetryBudgetSpent {
		t.Fatalf("Hedge = %v, want retry_budget", sink)
	}
}
