package budget

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestRetryBudget(t *testing.T) {
	tests := []struct {
		name        string
		ratio       float64
		min         int
		requests    int
		withdrawals int
		want        int // withdrawals allowed
	}{
		{"floor admits min × 10 with no traffic", 0.2, 10, 0, 150, 100},
		{"ratio of recent requests plus the floor", 0.2, 10, 1000, 400, 300},
		{"ratio alone without a floor", 0.2, 0, 1000, 400, 200},
		{"no floor and no traffic refuses everything", 0.2, 0, 0, 10, 0},
		{"ratio above 1 admits several retries per request", 2.5, 0, 10, 40, 25},
		{"fractional allowance rounds down, not below", 0.29, 0, 100, 40, 29},
		{"ratio 0 is unlimited", 0, 0, 0, 10000, 10000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := NewManualClock(t0)
			b := NewRetryBudget(tt.ratio, tt.min, clock)
			for range tt.requests {
				b.Request(clock.Now())
			}
			got, refused, allowedAfterRefusal := 0, false, false
			for range tt.withdrawals {
				if !b.Withdraw(clock.Now()) {
					refused = true
					continue
				}
				got++
				allowedAfterRefusal = allowedAfterRefusal || refused
			}
			if got != tt.want || allowedAfterRefusal {
				t.Errorf("allowed %d of %d withdrawals (allowed after a refusal: %v), want %d", got, tt.withdrawals, allowedAfterRefusal, tt.want)
			}
		})
	}
}

// TestRetryBudgetWindowSlides: each one-second bucket drops out of the ten-second window on its own.
func TestRetryBudgetWindowSlides(t *testing.T) {
	clock := NewManualClock(t0)
	b := NewRetryBudget(0.2, 0, clock)
	withdraw := func(n int) int {
		ok := 0
		for range n {
			if b.Withdraw(clock.Now()) {
				ok++
			}
		}
		return ok
	}
	requests := func(n int) {
		for range n {
			b.Request(clock.Now())
		}
	}
	steps := []struct {
		name     string
		at       time.Duration
		requests int
		withdraw int
		want     int
	}{
		{"500 requests at second 0 allow 100", 0, 500, 40, 40},
		{"another 500 at second 5 allow the rest of 200", 5 * time.Second, 500, 1000, 160},
		{"still in the window just before second 10", 9999 * time.Millisecond, 0, 10, 0},
		{"second 0 expires: 100 allowed, 160 spent at second 5 still count", 10 * time.Second, 0, 10, 0},
		{"all expired, no traffic, no floor", 15 * time.Second, 0, 10, 0},
		{"new traffic is admitted afresh", 15 * time.Second, 100, 30, 20},
		{"long idle: old buckets with the same index are not mistaken for new ones", 115 * time.Second, 0, 10, 0},
	}
	for _, st := range steps {
		clock.Set(t0.Add(st.at))
		requests(st.requests)
		if got := withdraw(st.withdraw); got != st.want {
			t.Fatalf("%s: allowed %d of %d, want %d", st.name, got, st.withdraw, st.want)
		}
	}
}

func TestRetryBudgetBeforeOriginCountsAsFirstSecond(t *testing.T) {
	clock := NewManualClock(t0)
	b := NewRetryBudget(1, 0, clock)
	b.Request(t0.Add(-time.Hour))
	if !b.Withdraw(t0) || b.Withdraw(t0) {
		t.Error("a request stamped before the origin should allow exactly one retry at the origin")
	}
}

// TestRetryBudgetNeverOvershoots: concurrent withdrawals get exactly the allowance between them. Run with -race.
func TestRetryBudgetNeverOvershoots(t *testing.T) {
	clock := NewManualClock(t0)
	b := NewRetryBudget(0.2, 10, clock)
	var wg sync.WaitGroup
	for range 500 {
		wg.Go(func() { b.Request(clock.Now()) })
	}
	wg.Wait()
	var allowed atomic.Int64
	for range 32 {
		wg.Go(func() {
			for range 50 {
				if b.Withdraw(clock.Now()) {
					allowed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if got, want := allowed.Load(), int64(0.2*500+10*10); got != want {
		t.Errorf("%d withdrawals allowed among 32 goroutines, want exactly %d", got, want)
	}
}

func TestRetryBudgetAllocs(t *testing.T) {
	clock := NewManualClock(t0)
	b := NewRetryBudget(0.2, 10, clock)
	now := clock.Now()
	tests := []struct {
		name string
		f    func()
	}{
		{"Request", func() { b.Request(now) }},
		{"Withdraw", func() { b.Withdraw(now) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := testing.AllocsPerRun(1000, tt.f); got != 0 {
				t.Errorf("%s allocates %v times per call, want 0", tt.name, got)
			}
		})
	}
}

func BenchmarkRetryBudgetRequest(b *testing.B) {
	budget := NewRetryBudget(0.2, 10, nil)
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		budget.Request(now)
	}
}

func BenchmarkRetryBudgetWithdraw(b *testing.B) {
	budget := NewRetryBudget(0.2, 10, nil)
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		budget.Withdraw(now)
	}
}

func BenchmarkRetryBudgetParallel(b *testing.B) {
	budget := NewRetryBudget(0.2, 10, nil)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			now := time.Now()
			budget.Request(now)
			budget.Withdraw(now)
		}
	})
}
