package budget

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func TestBackoffBounds(t *testing.T) {
	const ms = time.Millisecond
	tests := []struct {
		name      string
		base, max time.Duration
		n         int
		ceiling   time.Duration // the largest sleep; -1 = rnd must not be called
	}{
		{"first retry is up to base", 200 * ms, 5 * time.Second, 0, 200 * ms},
		{"second retry doubles", 200 * ms, 5 * time.Second, 1, 400 * ms},
		{"fifth retry is base times 16", 200 * ms, 5 * time.Second, 4, 3200 * ms},
		{"capped at max", 200 * ms, 5 * time.Second, 5, 5 * time.Second},
		{"exactly reaching max", 1 * ms, 1024 * ms, 10, 1024 * ms},
		{"base above max is capped", 10 * time.Second, 5 * time.Second, 0, 5 * time.Second},
		{"negative n counts as the first retry", 200 * ms, 5 * time.Second, -3, 200 * ms},
		{"n 62 does not overflow", 1, math.MaxInt64, 62, 1 << 62},
		{"n 63 saturates at max", 1, math.MaxInt64, 63, math.MaxInt64 - 1},
		{"huge n saturates at max", 200 * ms, 5 * time.Second, math.MaxInt, 5 * time.Second},
		{"huge n with huge base", math.MaxInt64 / 3, math.MaxInt64 / 2, 1 << 40, math.MaxInt64 / 2},
		{"zero base never sleeps", 0, 5 * time.Second, 3, -1},
		{"negative base never sleeps", -ms, 5 * time.Second, 3, -1},
		{"zero max is no cap", 200 * ms, 0, 10, 200 * ms << 10},
		{"zero max with n 62 does not overflow", 1, 0, 62, 1 << 62},
		{"zero max with huge n saturates", 200 * ms, 0, math.MaxInt, math.MaxInt64 - 1},
		{"zero max with a huge base saturates", math.MaxInt64 / 3, 0, 2, math.MaxInt64 - 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var asked int64 = -1
			top := func(k int64) int64 { asked = k; return k - 1 }
			got := Backoff(tt.base, tt.max, tt.n, top)
			if tt.ceiling < 0 {
				if got != 0 || asked != -1 {
					t.Errorf("Backoff() = %v (rnd asked for %d), want 0 without calling rnd", got, asked)
				}
				return
			}
			if got != tt.ceiling {
				t.Errorf("Backoff() with the highest draw = %v, want %v", got, tt.ceiling)
			}
			if got := Backoff(tt.base, tt.max, tt.n, func(int64) int64 { return 0 }); got != 0 {
				t.Errorf("Backoff() with the lowest draw = %v, want 0", got)
			}
		})
	}
}

// TestBackoffCoversWholeRange draws many times with a seeded generator: every value of [0, ceiling] comes up,
// and nothing outside it.
func TestBackoffCoversWholeRange(t *testing.T) {
	tests := []struct {
		name      string
		base, max time.Duration
		n         int
		ceiling   time.Duration
	}{
		{"first retry", 4, 100, 0, 4},
		{"third retry", 4, 100, 2, 16},
		{"capped", 4, 20, 5, 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rnd := rand.New(rand.NewPCG(1, 2))
			seen := make(map[time.Duration]bool)
			for range 20000 {
				d := Backoff(tt.base, tt.max, tt.n, rnd.Int64N)
				if d < 0 || d > tt.ceiling {
					t.Fatalf("Backoff() = %v, outside [0, %v]", d, tt.ceiling)
				}
				seen[d] = true
			}
			for d := time.Duration(0); d <= tt.ceiling; d++ {
				if !seen[d] {
					t.Errorf("%v never drawn from [0, %v]", d, tt.ceiling)
				}
			}
		})
	}
}

func TestBackoffNilRandStaysInBounds(t *testing.T) {
	for n := range 10 {
		if d := Backoff(time.Millisecond, 20*time.Millisecond, n, nil); d < 0 || d > min(20*time.Millisecond, time.Millisecond<<n) {
			t.Errorf("Backoff(n=%d, nil rnd) = %v, out of bounds", n, d)
		}
	}
}

func TestBackoffAllocs(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2)).Int64N
	if got := testing.AllocsPerRun(1000, func() { Backoff(200*time.Millisecond, 5*time.Second, 3, rnd) }); got != 0 {
		t.Errorf("Backoff allocates %v times per call, want 0", got)
	}
}

func BenchmarkBackoff(b *testing.B) {
	rnd := rand.New(rand.NewPCG(1, 2)).Int64N
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		Backoff(200*time.Millisecond, 5*time.Second, i&7, rnd)
	}
}
