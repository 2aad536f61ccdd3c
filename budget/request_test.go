package budget

import (
	"math"
	"testing"
	"time"
)

func TestRequestTransfers(t *testing.T) {
	enabled := func(maxAttempts int) *Config { return &Config{Enabled: true, MaxAttempts: maxAttempts} }
	tests := []struct {
		name          string
		config        *Config
		targets       []int // Begin on each, in order
		wantAttempts  int
		wantTransfers int
		wantRetries   int
		wantTransfer  bool // TransferAllowed afterwards
	}{
		{"nothing begun", enabled(1), nil, 0, 0, 0, true},
		{"first attempt is not a transfer", enabled(1), []int{0}, 1, 0, 0, true},
		{"retries on one target do not count", enabled(1), []int{0, 0, 0}, 3, 0, 2, true},
		{"skipped targets do not count", enabled(1), []int{0, 3}, 2, 1, 0, false},
		{"max attempts 1 allows one transfer", enabled(1), []int{0, 1}, 2, 1, 0, false},
		{"max attempts 2 allows two transfers", enabled(2), []int{0, 1}, 2, 1, 0, true},
		{"each change of target counts", enabled(2), []int{0, 1, 2}, 3, 2, 0, false},
		{"retry counter restarts on the new target", enabled(3), []int{0, 0, 1, 1}, 4, 1, 1, true},
		{"returning to an earlier target is a transfer", enabled(3), []int{0, 1, 0}, 3, 2, 0, true},
		{"max attempts 0 is unlimited", enabled(0), []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 10, 9, 0, true},
		{"disabled allows no transfer", &Config{Enabled: false}, []int{0}, 1, 0, 0, false},
		{"nil config is disabled", nil, []int{0}, 1, 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r Request
			r.Reset(tt.config)
			for i, target := range tt.targets {
				r.Begin(t0.Add(time.Duration(i)*time.Second), target)
			}
			if got := r.Attempts(); got != tt.wantAttempts {
				t.Errorf("Attempts() = %d, want %d", got, tt.wantAttempts)
			}
			if got := r.Transfers(); got != tt.wantTransfers {
				t.Errorf("Transfers() = %d, want %d", got, tt.wantTransfers)
			}
			if got := r.RetriesOnTarget(); got != tt.wantRetries {
				t.Errorf("RetriesOnTarget() = %d, want %d", got, tt.wantRetries)
			}
			if got := r.TransferAllowed(); got != tt.wantTransfer {
				t.Errorf("TransferAllowed() = %v, want %v", got, tt.wantTransfer)
			}
		})
	}
}

func TestRequestRetryAllowed(t *testing.T) {
	tests := []struct {
		name    string
		enabled bool
		targets []int
		limit   int
		want    bool
	}{
		{"first attempt may retry", true, []int{0}, 1, true},
		{"limit reached", true, []int{0, 0}, 1, false},
		{"limit not yet reached", true, []int{0, 0}, 2, true},
		{"zero limit never retries", true, []int{0}, 0, false},
		{"a transfer brings fresh retries", true, []int{0, 0, 1}, 1, true},
		{"disabled never retries", false, []int{0}, 5, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r Request
			r.Reset(&Config{Enabled: tt.enabled})
			for _, target := range tt.targets {
				r.Begin(t0, target)
			}
			if got := r.RetryAllowed(tt.limit); got != tt.want {
				t.Errorf("RetryAllowed(%d) = %v, want %v", tt.limit, got, tt.want)
			}
		})
	}
}

// TestRequestElapsed: the elapsed budget runs from the first attempt's start and is asked before each attempt
// (sleep 0) and before each backoff (the sleep about to start). Nothing in Request can stop an attempt that has
// begun: an attempt that ran past the budget is only felt by the next question.
func TestRequestElapsed(t *testing.T) {
	const budget = 10 * time.Second
	tests := []struct {
		name       string
		maxElapsed time.Duration
		begun      []time.Duration // Begin at t0 plus each
		at         time.Duration   // asked at t0 plus this
		sleep      time.Duration
		want       bool
		wantSpent  time.Duration
	}{
		{"no limit", 0, []time.Duration{0}, time.Hour, time.Hour, true, time.Hour},
		{"before the first attempt", budget, nil, time.Hour, time.Hour, true, 0},
		{"attempt within budget", budget, []time.Duration{0}, 9 * time.Second, 0, true, 9 * time.Second},
		{"attempt at the deadline refused", budget, []time.Duration{0}, budget, 0, false, budget},
		{"attempt past the deadline refused", budget, []time.Duration{0}, time.Minute, 0, false, time.Minute},
		{"backoff that fits allowed", budget, []time.Duration{0}, 8 * time.Second, 1999 * time.Millisecond, true, 8 * time.Second},
		{"backoff ending at the deadline refused", budget, []time.Duration{0}, 8 * time.Second, 2 * time.Second, false, 8 * time.Second},
		{"backoff that would overrun refused", budget, []time.Duration{0}, 8 * time.Second, 3 * time.Second, false, 8 * time.Second},
		{"huge sleep does not overflow", budget, []time.Duration{0}, time.Second, math.MaxInt64, false, time.Second},
		{"negative sleep counts as none", budget, []time.Duration{0}, time.Second, -time.Hour, true, time.Second},
		{"origin is the first attempt, not Reset", budget, []time.Duration{5 * time.Second}, 14 * time.Second, 0, true, 9 * time.Second},
		{"later attempts do not move the origin", budget, []time.Duration{0, 5 * time.Second, 9 * time.Second}, 10 * time.Second, 0, false, budget},
		{"an attempt that ran past the budget is only felt by the next question", budget, []time.Duration{0, 9 * time.Second}, 40 * time.Second, 0, false, 40 * time.Second},
		{"clock going backwards counts as no time spent", budget, []time.Duration{0}, -time.Hour, 0, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r Request
			r.Reset(&Config{Enabled: true, MaxElapsed: tt.maxElapsed})
			for _, at := range tt.begun {
				r.Begin(t0.Add(at), 0)
			}
			now := t0.Add(tt.at)
			if got := r.ElapsedAllows(now, tt.sleep); got != tt.want {
				t.Errorf("ElapsedAllows(+%v, %v) = %v, want %v", tt.at, tt.sleep, got, tt.want)
			}
			if got := r.Elapsed(now); got != tt.wantSpent {
				t.Errorf("Elapsed(+%v) = %v, want %v", tt.at, got, tt.wantSpent)
			}
		})
	}
}

func TestRequestResetForgetsThePreviousRequest(t *testing.T) {
	var r Request
	r.Reset(&Config{Enabled: true, MaxAttempts: 1, MaxElapsed: time.Second})
	r.Begin(t0, 0)
	r.Begin(t0, 0)
	r.Begin(t0, 1)
	r.Reset(&Config{Enabled: true, MaxAttempts: 1, MaxElapsed: time.Second})
	if r.Attempts() != 0 || r.Transfers() != 0 || r.RetriesOnTarget() != 0 || !r.TransferAllowed() {
		t.Errorf("after Reset: attempts %d, transfers %d, retries %d, transfer allowed %v; want 0, 0, 0, true",
			r.Attempts(), r.Transfers(), r.RetriesOnTarget(), r.TransferAllowed())
	}
	if !r.ElapsedAllows(t0.Add(time.Hour), 0) {
		t.Error("after Reset the elapsed budget still runs from the previous request")
	}
	r.Begin(t0.Add(time.Hour), 1)
	if r.Transfers() != 0 {
		t.Errorf("first attempt after Reset counted as a transfer from the previous request's target")
	}
}

// A hedge beside the running attempt counts as an attempt and a transfer, but the running
// attempt's target keeps its retries until the race ends; Follow moves to the hedge's target
// when its verdict is the one the sweep goes on from.
func TestRequestBeginBesideAndFollow(t *testing.T) {
	var r Request
	r.Reset(&Config{Enabled: true})
	now := t0
	r.Begin(now, 0)
	r.Begin(now, 0) // a retry on target 0
	r.BeginBeside(now)
	if r.Attempts() != 3 || r.Transfers() != 1 || r.RetriesOnTarget() != 1 {
		t.Fatalf("after the hedge: attempts %d, transfers %d, retries %d; want 3, 1, 1", r.Attempts(), r.Transfers(), r.RetriesOnTarget())
	}
	if r.RetryAllowed(1) {
		t.Fatal("target 0 has used its one retry; the hedge beside it gave it another")
	}
	r.Begin(now, 0) // the first attempt ended the race with a retry: still target 0's
	if r.RetriesOnTarget() != 2 || r.Transfers() != 1 {
		t.Fatalf("retries %d, transfers %d; want 2, 1", r.RetriesOnTarget(), r.Transfers())
	}
	r.Follow(1) // the hedge on target 1 ended the race
	if r.RetriesOnTarget() != 0 || !r.RetryAllowed(1) || r.Attempts() != 4 {
		t.Fatalf("after Follow: retries %d, attempts %d", r.RetriesOnTarget(), r.Attempts())
	}
	r.Begin(now, 1) // its retry
	if r.RetriesOnTarget() != 1 || r.Transfers() != 1 {
		t.Fatalf("the hedge's retry: retries %d, transfers %d; want 1, 1", r.RetriesOnTarget(), r.Transfers())
	}
}
