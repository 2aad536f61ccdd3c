package budget

import (
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestHedgeBudget(t *testing.T) {
	tests := []struct {
		name     string
		ratio    float64
		requests int
		hedges   int
		want     int // hedges allowed
	}{
		{"the floor admits 10 with no traffic", 0.05, 0, 50, 10},
		{"ratio of recent requests plus the floor", 0.05, 1000, 100, 60},
		{"fractional allowance rounds down, not below", 0.29, 100, 100, 29 + 10},
		{"ratio 1 admits a hedge per request and the floor", 1, 30, 100, 40},
		{"ratio 0 refuses every hedge, floor included", 0, 1000, 50, 0},
		{"a negative ratio refuses every hedge", -1, 1000, 50, 0},
		{"NaN refuses every hedge", math.NaN(), 1000, 50, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := NewManualClock(t0)
			b := NewHedgeBudget(tt.ratio, clock)
			for range tt.requests {
				b.Request(clock.Now())
			}
			got, refused, allowedAfterRefusal := 0, false, false
			for range tt.hedges {
				if !b.Withdraw(clock.Now()) {
					refused = true
					continue
				}
				got++
				allowedAfterRefusal = allowedAfterRefusal || refused
			}
			if got != tt.want || allowedAfterRefusal {
				t.Errorf("allowed %d of %d hedges (allowed after a refusal: %v), want %d", got, tt.hedges, allowedAfterRefusal, tt.want)
			}
		})
	}
}

// TestHedgeBudgetWindowSlides: first attempts and hedges count for ten seconds, each second's bucket dropping
// out on its own.
func TestHedgeBudgetWindowSlides(t *testing.T) {
	clock := NewManualClock(t0)
	b := NewHedgeBudget(0.1, clock)
	steps := []struct {
		name     string
		at       time.Duration
		requests int
		hedges   int
		want     int
	}{
		{"500 requests at second 0 allow 50 and the floor's 10", 0, 500, 100, 60},
		{"spent until the window moves", 9999 * time.Millisecond, 0, 10, 0},
		{"second 0 expires: only the floor, which nothing in the window spends", 10 * time.Second, 0, 100, 10},
		{"new requests add to the allowance", 12 * time.Second, 300, 100, 30},
		{"long idle: old buckets with the same index are not taken for new ones", 112 * time.Second, 0, 100, 10},
	}
	for _, st := range steps {
		clock.Set(t0.Add(st.at))
		for range st.requests {
			b.Request(clock.Now())
		}
		got := 0
		for range st.hedges {
			if b.Withdraw(clock.Now()) {
				got++
			}
		}
		if got != st.want {
			t.Fatalf("%s: allowed %d of %d, want %d", st.name, got, st.hedges, st.want)
		}
	}
}

// TestHedgeBudgetSlowdown: a provider-wide slowdown in which every request wants a hedge. At a steady rate of
// R requests a second the budget grants at most ratio + HedgeFloorPerSecond/R of the requests a hedge, over the
// whole run and over every ten-second window of it, and (past the first window) no less than the ratio: the
// budget limits hedges, it does not stop them.
func TestHedgeBudgetSlowdown(t *testing.T) {
	const ratio = 0.05
	for _, rate := range []int{2, 10, 100, 1000} {
		t.Run(time.Duration(int(time.Second)/rate).String()+" apart", func(t *testing.T) {
			clock := NewManualClock(t0)
			b := NewHedgeBudget(ratio, clock)
			gap := time.Second / time.Duration(rate)
			const seconds = 60
			granted := make([]bool, 0, seconds*rate)
			for range seconds * rate {
				now := clock.Now()
				b.Request(now)
				granted = append(granted, b.Withdraw(now))
				clock.Advance(gap)
			}
			limit := ratio + float64(HedgeFloorPerSecond)/float64(rate)
			window := 10 * rate
			hedges := 0
			for i, g := range granted {
				if g {
					hedges++
				}
				if i >= window && granted[i-window] {
					hedges--
				}
				if i+1 >= window && float64(hedges) > limit*float64(window)+1e-9 {
					t.Fatalf("%d hedges in the ten seconds up to request %d: more than %.3f of %d requests", hedges, i, limit, window)
				}
			}
			total := 0
			for _, g := range granted[window:] {
				if g {
					total++
				}
			}
			frac := float64(total) / float64(len(granted)-window)
			if frac > limit+1e-9 || frac < min(ratio, limit) {
				t.Fatalf("granted %.4f of the requests a hedge after the first window, want between %.4f and %.4f", frac, min(ratio, limit), limit)
			}
		})
	}
}

// TestHedgeBudgetNeverOvershoots: concurrent hedges get exactly the allowance between them. Run with -race.
func TestHedgeBudgetNeverOvershoots(t *testing.T) {
	clock := NewManualClock(t0)
	b := NewHedgeBudget(0.05, clock)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for range 50 {
				b.Request(clock.Now())
			}
		})
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
	if got, want := allowed.Load(), int64(0.05*1600+HedgeFloorPerSecond*10); got != want {
		t.Errorf("%d hedges allowed among 32 goroutines, want exactly %d", got, want)
	}
}

func TestHedgeBudgetAllocs(t *testing.T) {
	clock := NewManualClock(t0)
	b := NewHedgeBudget(0.05, clock)
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

func BenchmarkHedgeBudgetParallel(b *testing.B) {
	budget := NewHedgeBudget(0.05, nil)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			now := time.Now()
			budget.Request(now)
			budget.Withdraw(now)
		}
	})
}

// A refund gives a withdrawal back in its own second, and nothing in a later one: a hedge that
// was not started after all does not spend the budget.
func TestHedgeAndRetryBudgetRefund(t *testing.T) {
	type budget interface {
		Withdraw(time.Time) bool
		Refund(time.Time)
	}
	for name, mk := range map[string]func(Clock) budget{
		"hedge": func(c Clock) budget { return NewHedgeBudget(0.05, c) },                  // the floor: 10 over the window
		"retry": func(c Clock) budget { return NewRetryBudget(0.2, 10/budgetBuckets, c) }, // 1 a second: 10 over the window
	} {
		t.Run(name, func(t *testing.T) {
			clock := NewManualClock(t0)
			b := mk(clock)
			for i := range 10 {
				if !b.Withdraw(clock.Now()) {
					t.Fatalf("withdrawal %d refused within the floor", i+1)
				}
			}
			if b.Withdraw(clock.Now()) {
				t.Fatal("an 11th withdrawal allowed")
			}
			b.Refund(clock.Now())
			if !b.Withdraw(clock.Now()) {
				t.Fatal("the refunded withdrawal is not available again")
			}
			clock.Advance(time.Second)
			b.Refund(clock.Now()) // the withdrawals were a second ago: nothing to give back
			if b.Withdraw(clock.Now()) {
				t.Fatal("a refund in a later second gave a withdrawal back")
			}
		})
	}
}
