package budget

import (
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

// observe records the durations one millisecond apart, from the clock's reading on, and leaves the clock past
// the cache's age so that the next Percentile computes afresh.
func observe(c *CommitTimes, clock *ManualClock, ds ...time.Duration) {
	for _, d := range ds {
		c.Observe(clock.Now(), d)
		clock.Advance(time.Millisecond)
	}
	clock.Advance(commitRecomputeAfter)
}

func millis(from, to int) []time.Duration {
	var ds []time.Duration
	for i := from; i <= to; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	return ds
}

func TestCommitTimesPercentile(t *testing.T) {
	shuffled := millis(1, 100)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	tail := append(slices.Repeat([]time.Duration{500 * time.Millisecond}, 95), slices.Repeat([]time.Duration{10 * time.Second}, 5)...)
	tests := []struct {
		name    string
		samples []time.Duration
		p       int
		want    time.Duration
	}{
		{"p50 of 1..100 ms", millis(1, 100), 50, 50 * time.Millisecond},
		{"p95 of 1..100 ms in any order", shuffled, 95, 95 * time.Millisecond},
		{"p99 of 1..100 ms", millis(1, 100), 99, 99 * time.Millisecond},
		{"nearest rank: p50 of 1..21 ms is the 11th", millis(1, 21), 50, 11 * time.Millisecond},
		{"nearest rank: p90 of 1..25 ms is the 23rd", millis(1, 25), 90, 23 * time.Millisecond},
		{"p95 of a 5% tail is the last fast one", tail, 95, 500 * time.Millisecond},
		{"p96 of a 5% tail is in the tail", tail, 96, 10 * time.Second},
		{"only the last 128 are kept: p50 of 1..200 ms is the 64th of 73..200", millis(1, 200), 50, 136 * time.Millisecond},
		{"p100 is the largest", millis(1, 200), 100, 200 * time.Millisecond},
		{"p above 100 counts as 100", millis(1, 50), 1000, 50 * time.Millisecond},
		{"p below 1 counts as 1", millis(1, 50), -5, time.Millisecond},
		{"a negative time counts as 0", append(millis(1, 30), -time.Second), 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := NewManualClock(t0)
			var c CommitTimes
			observe(&c, clock, tt.samples...)
			if got, ok := c.Percentile(clock.Now(), tt.p); !ok || got != tt.want {
				t.Fatalf("Percentile(%d) = %v, %v; want %v, true", tt.p, got, ok, tt.want)
			}
		})
	}
}

// A percentile needs CommitMinSamples samples in the window: until then ok is false, and from the 20th sample
// on (at once, without waiting for the cache to age) it is there.
func TestCommitTimesTooFewSamples(t *testing.T) {
	clock := NewManualClock(t0)
	var c CommitTimes
	if _, ok := c.Percentile(clock.Now(), 95); ok {
		t.Fatal("a percentile with no sample at all")
	}
	for i := range CommitMinSamples {
		if _, ok := c.Percentile(clock.Now(), 95); ok {
			t.Fatalf("a percentile of %d samples", i)
		}
		c.Observe(clock.Now(), time.Second)
	}
	if d, ok := c.Percentile(clock.Now(), 95); !ok || d != time.Second {
		t.Fatalf("with %d samples: %v, %v; want 1s, true", CommitMinSamples, d, ok)
	}
}

// Samples older than CommitWindow no longer count: when too many leave, the percentile is gone again; the
// rest is read without them.
func TestCommitTimesWindowExpiry(t *testing.T) {
	clock := NewManualClock(t0)
	var c CommitTimes
	observe(&c, clock, slices.Repeat([]time.Duration{10 * time.Second}, 30)...) // at t0 .. t0+29ms
	clock.Set(t0.Add(4 * time.Minute))
	observe(&c, clock, slices.Repeat([]time.Duration{time.Second}, 25)...) // at t0+4m ..
	steps := []struct {
		name string
		at   time.Duration
		p    int
		want time.Duration // 0: no percentile
	}{
		{"all 55 in the window: the 28th is one of the 30 slow ones", 4*time.Minute + time.Second, 50, 10 * time.Second},
		{"the first 11 slow ones left at five minutes: the 22nd of 44 is fast", 5*time.Minute + 10*time.Millisecond, 50, time.Second},
		{"19 slow ones are still there", 5*time.Minute + 10*time.Millisecond, 99, 10 * time.Second},
		{"all 30 left: only the 25 fast ones", 5*time.Minute + time.Second, 99, time.Second},
		{"the fast ones leave too: too few", 9*time.Minute + time.Second, 50, 0},
		{"after a long idle, still nothing", time.Hour, 50, 0},
	}
	for _, st := range steps {
		clock.Set(t0.Add(st.at))
		d, ok := c.Percentile(clock.Now(), st.p)
		if st.want == 0 && ok || st.want != 0 && (!ok || d != st.want) {
			t.Fatalf("%s: %v, %v; want %v", st.name, d, ok, st.want)
		}
	}
	c.Observe(clock.Now(), 3*time.Second)
	if _, ok := c.Percentile(clock.Now(), 50); ok {
		t.Fatal("one new sample after the idle is not enough")
	}
}

// The computed percentile is kept until it is 100 ms old or 16 samples behind; a request does not sort.
func TestCommitTimesCache(t *testing.T) {
	clock := NewManualClock(t0)
	var c CommitTimes
	observe(&c, clock, slices.Repeat([]time.Duration{time.Second}, 40)...)
	if d, _ := c.Percentile(clock.Now(), 99); d != time.Second {
		t.Fatalf("p99 = %v, want 1s", d)
	}
	for range commitRecomputeSamples - 1 {
		c.Observe(clock.Now(), time.Minute)
	}
	clock.Advance(commitRecomputeAfter - time.Millisecond)
	if d, _ := c.Percentile(clock.Now(), 99); d != time.Second {
		t.Fatalf("p99 = %v within 100 ms and 15 samples of the last computation, want the cached 1s", d)
	}
	clock.Advance(time.Millisecond)
	if d, _ := c.Percentile(clock.Now(), 99); d != time.Minute {
		t.Fatalf("p99 = %v 100 ms after the last computation, want 1m", d)
	}
	for range commitRecomputeSamples {
		c.Observe(clock.Now(), time.Hour)
	}
	if d, _ := c.Percentile(clock.Now(), 99); d != time.Hour {
		t.Fatalf("p99 = %v 16 samples after the last computation, want 1h", d)
	}
}

func TestCommitTimesHedgeDelay(t *testing.T) {
	clock := NewManualClock(t0)
	var c CommitTimes
	if got := c.HedgeDelay(clock.Now(), 95, 500*time.Millisecond); got != HedgeDelayDefault {
		t.Errorf("with no samples: %v, want the default %v", got, HedgeDelayDefault)
	}
	if got := c.HedgeDelay(clock.Now(), 95, 5*time.Second); got != 5*time.Second {
		t.Errorf("the default below the minimum: %v, want the minimum 5s", got)
	}
	observe(&c, clock, millis(1, 100)...)
	if got := c.HedgeDelay(clock.Now(), 95, 0); got != 95*time.Millisecond {
		t.Errorf("p95 of 1..100 ms: %v, want 95ms", got)
	}
	if got := c.HedgeDelay(clock.Now(), 95, 500*time.Millisecond); got != 500*time.Millisecond {
		t.Errorf("p95 below the minimum: %v, want the minimum 500ms", got)
	}
}

// Concurrent observers and readers: run with -race. Every percentile read is one of the observed values.
func TestCommitTimesConcurrent(t *testing.T) {
	var c CommitTimes
	start := time.Now()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 2000 {
				c.Observe(start.Add(time.Duration(i)*time.Millisecond), time.Duration(1+(i+g)%100)*time.Millisecond)
			}
		})
		wg.Go(func() {
			for i := range 2000 {
				if d, ok := c.Percentile(start.Add(time.Duration(i)*time.Millisecond), 50+g*10); ok && (d < time.Millisecond || d > 100*time.Millisecond) {
					t.Errorf("percentile %v: never observed", d)
					return
				}
			}
		})
	}
	wg.Wait()
	if _, ok := c.Percentile(start.Add(2*time.Second), 95); !ok {
		t.Error("no percentile after 8000 samples")
	}
}

func TestCommitTimesAllocs(t *testing.T) {
	clock := NewManualClock(t0)
	var c CommitTimes
	observe(&c, clock, millis(1, 200)...)
	now := clock.Now()
	tests := []struct {
		name string
		f    func()
	}{
		{"Observe", func() { c.Observe(now, time.Second) }},
		{"Percentile from the cache", func() { c.Percentile(now, 95) }},
		{"Percentile computed again", func() {
			now = now.Add(commitRecomputeAfter)
			c.Observe(now, time.Second)
			c.Percentile(now, 95)
		}},
		{"HedgeDelay", func() { c.HedgeDelay(now, 95, 500*time.Millisecond) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := testing.AllocsPerRun(1000, tt.f); got != 0 {
				t.Errorf("%s allocates %v times per call, want 0", tt.name, got)
			}
		})
	}
}

func BenchmarkCommitTimes(b *testing.B) {
	var c CommitTimes
	start := time.Now()
	for i := range CommitSamples {
		c.Observe(start, time.Duration(i)*time.Millisecond)
	}
	b.Run("Observe", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			c.Observe(start, time.Second)
		}
	})
	b.Run("Percentile", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			c.Percentile(start, 95)
		}
	})
	b.Run("Percentile computed again", func(b *testing.B) {
		b.ReportAllocs()
		now := start
		for b.Loop() {
			now = now.Add(commitRecomputeAfter)
			c.Observe(now, time.Second)
			c.Percentile(now, 95)
		}
	})
}

// A lost attempt counts in the rank as at least its time, but a percentile never returns it: a
// rank that falls on one walks down to the nearest commit. Else each hedge would raise the next
// one's delay by what the hedge itself took.
func TestCommitTimesLostAttemptsCountButAreNeverTheDelay(t *testing.T) {
	var c CommitTimes
	now := time.Unix(1000, 0)
	for i := range 90 {
		c.Observe(now, time.Duration(400+i)*time.Millisecond) // 400..489 ms
	}
	for i := range 10 {
		c.ObserveLost(now, time.Duration(1000+100*i)*time.Millisecond) // cut after 1 s and more
	}
	if d, ok := c.Percentile(now, 50); !ok || d != 449*time.Millisecond {
		t.Errorf("p50 = %v, %v; want 449ms (the lost ones count in the rank, above the commits)", d, ok)
	}
	if d, ok := c.Percentile(now, 95); !ok || d != 489*time.Millisecond {
		t.Errorf("p95 = %v, %v; want the largest commit, 489ms, not a lost attempt's time", d, ok)
	}
	var lost CommitTimes
	for range CommitMinSamples {
		lost.ObserveLost(now, time.Second)
	}
	if d, ok := lost.Percentile(now, 95); ok {
		t.Errorf("p95 of lost attempts alone = %v; want none (no commit to read)", d)
	}
	if d := lost.HedgeDelay(now, 95, 0); d != HedgeDelayDefault {
		t.Errorf("HedgeDelay = %v with only lost attempts, want the default", d)
	}
}
