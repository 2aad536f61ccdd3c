package budget

import (
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// figures builds what an answer arriving at now reports, from "quota=remaining[/limit][@reset]" words: quota
// as Quota.String names it, reset as a wait from now ("@30s"), absent without "@".
func figures(spec string, now time.Time) RateFigures {
	var f RateFigures
	for word := range strings.FieldsSeq(spec) {
		name, v, _ := strings.Cut(word, "=")
		q := Quota(0)
		for q < NumQuotas && q.String() != name {
			q++
		}
		if q == NumQuotas {
			panic("unknown quota " + name)
		}
		v, reset, hasReset := strings.Cut(v, "@")
		rem, limit, hasLimit := strings.Cut(v, "/")
		fig := &f[q]
		fig.Remaining, fig.HasRemaining = mustInt(rem), true
		if hasLimit {
			fig.Limit, fig.HasLimit = mustInt(limit), true
		}
		if hasReset {
			d, err := time.ParseDuration(reset)
			if err != nil {
				panic(err)
			}
			fig.Reset = now.Add(d)
		}
	}
	return f
}

func mustInt(s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		panic(err)
	}
	return n
}

// TestRateLimit runs scripts against one RateLimit and a ManualClock starting at t0. Ops:
//
//	observe <figures>  Observe an answer arriving now (figures' words): "until +<d from now> began", "until +<d>", or "-"
//	wait <d>           advance the clock
//	usable             "true" or "false"
//	until              Until: "+<d from t0>" or "zero"
func TestRateLimit(t *testing.T) {
	on := &Config{RateLimitAware: true}
	floor := func(f float64) *Config { return &Config{RateLimitAware: true, RateLimitFloor: f} }
	tests := []struct {
		name   string
		config *Config
		script [][2]string // op, want
	}{
		{"a new target is usable", on, [][2]string{{"usable", "true"}, {"until", "zero"}}},
		{"quota left limits nothing", on, [][2]string{
			{"observe requests=4999/5000@12ms tokens=799975/800000@1ms", "-"}, {"usable", "true"}}},
		{"requests spent: limited until their reset", on, [][2]string{
			{"observe requests=0/200@2m59.56s tokens=39812/40000@282ms", "until +2m59.56s began"},
			{"usable", "false"}, {"until", "+2m59.56s"},
			{"wait 2m59.559s", ""}, {"usable", "false"},
			{"wait 1ms", ""}, {"usable", "true"}, {"usable", "true"}}},
		{"tokens spent: limited until theirs", on, [][2]string{
			{"observe requests=87/120@1s tokens=0/20000@8s", "until +8s began"},
			{"wait 7s", ""}, {"usable", "false"}, {"wait 1s", ""}, {"usable", "true"}}},
		{"several spent: until the last of their resets", on, [][2]string{
			{"observe requests=0@5s tokens=0@45s input_tokens=22000/30000@16s output_tokens=0/8000@45s", "until +45s began"},
			{"wait 44s", ""}, {"usable", "false"}, {"wait 1s", ""}, {"usable", "true"}}},
		{"Anthropic's input and output tokens count", on, [][2]string{
			{"observe input_tokens=0@10s", "until +10s began"}}},
		{"a spent quota without a reset: one second, a guess", on, [][2]string{
			{"observe requests=19 tokens=0", "until +1s began"},
			{"wait 999ms", ""}, {"usable", "false"}, {"wait 1ms", ""}, {"usable", "true"}}},
		{"a spent quota whose reset is now limits nothing", on, [][2]string{
			{"observe requests=0@0s", "-"}, {"usable", "true"}, {"until", "zero"}}},
		{"a reset beyond an hour is capped at one", on, [][2]string{
			{"observe requests=9981/10000@1m48s tokens=0/2000000@20h33m14.4s", "until +1h0m0s began"},
			{"wait 59m59s", ""}, {"usable", "false"}, {"wait 1s", ""}, {"usable", "true"}}},
		{"an answer showing quota again ends the limit early", on, [][2]string{
			{"observe requests=0@30s", "until +30s began"}, {"wait 5s", ""},
			{"observe requests=10/100@25s", "-"}, {"usable", "true"}, {"until", "zero"}}},
		{"an answer reporting nothing changes nothing", on, [][2]string{
			{"observe requests=0@30s", "until +30s began"}, {"wait 5s", ""},
			{"observe", "-"}, {"usable", "false"}, {"until", "+30s"}}},
		{"the latest answer's reset wins, shorter or longer", on, [][2]string{
			{"observe requests=0@30s", "until +30s began"}, {"wait 1s", ""},
			{"observe requests=0@5s", "until +5s"}, {"until", "+6s"},
			{"wait 5s", ""}, {"usable", "true"},
			{"observe tokens=0@1m", "until +1m0s began"}, {"wait 10s", ""},
			{"observe tokens=0@2m", "until +2m0s"}, {"until", "+2m16s"}}},
		{"a limit that ran out without Usable asking begins anew", on, [][2]string{
			{"observe requests=0@2s", "until +2s began"}, {"wait 3s", ""},
			{"observe requests=0@2s", "until +2s began"}}},
		{"floor: below floor × limit is spent", floor(0.1), [][2]string{
			{"observe requests=9/100@20s", "until +20s began"}}},
		{"floor: at floor × limit is not", floor(0.1), [][2]string{
			{"observe requests=10/100@20s", "-"}, {"usable", "true"}}},
		{"floor: without a limit, only none left is spent", floor(0.5), [][2]string{
			{"observe requests=1@20s", "-"}, {"observe requests=0@20s", "until +20s began"}}},
		{"floor: a limit of 0 is no limit", floor(0.5), [][2]string{
			{"observe requests=1/0@20s", "-"}, {"observe requests=0/0@20s", "until +20s began"}}},
		{"floor: climbing back above it ends the limit", floor(0.1), [][2]string{
			{"observe tokens=900/10000@20s", "until +20s began"}, {"wait 1s", ""},
			{"observe tokens=1001/10000@19s", "-"}, {"usable", "true"}}},
		{"awareness off: nothing is ever limited", &Config{}, [][2]string{
			{"observe requests=0@30s", "-"}, {"usable", "true"}, {"until", "zero"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewRateLimit(tt.config)
			clock := NewManualClock(t0)
			for i, step := range tt.script {
				now := clock.Now()
				op, arg, _ := strings.Cut(step[0], " ")
				var got string
				switch op {
				case "observe":
					until, began := r.Observe(now, figures(arg, now))
					switch {
					case until.IsZero() && began:
						got = "began without an end"
					case until.IsZero():
						got = "-"
					default:
						got = "until +" + until.Sub(now).String()
						if began {
							got += " began"
						}
					}
				case "wait":
					d, err := time.ParseDuration(arg)
					if err != nil {
						t.Fatal(err)
					}
					clock.Advance(d)
				case "usable":
					got = strconv.FormatBool(r.Usable(now))
				case "until":
					got = "zero"
					if u := r.Until(); !u.IsZero() {
						got = "+" + u.Sub(t0).String()
					}
				default:
					t.Fatalf("unknown op %q", op)
				}
				if got != step[1] {
					t.Fatalf("step %d (%s at +%v): got %q, want %q", i, step[0], now.Sub(t0), got, step[1])
				}
			}
		})
	}
}

// TestRateLimitFigures: the last answer that reported anything is what the table and the gauge show, also while
// awareness is off.
func TestRateLimitFigures(t *testing.T) {
	for _, aware := range []bool{true, false} {
		r := NewRateLimit(&Config{RateLimitAware: aware})
		if got := r.Figures(); got.Reported() {
			t.Errorf("aware=%v: a new target has figures %s", aware, describe(got, t0))
		}
		first := figures("requests=0/200@1s tokens=39812/40000@282ms", t0)
		r.Observe(t0, first)
		r.Observe(t0.Add(time.Second), RateFigures{})
		if got := r.Figures(); got != first {
			t.Errorf("aware=%v: after an answer reporting nothing, Figures() = %s; want the last reported, %s",
				aware, describe(got, t0), describe(first, t0))
		}
		second := figures("output_tokens=8/8000@45s", t0)
		r.Observe(t0.Add(2*time.Second), second)
		if got := r.Figures(); got != second {
			t.Errorf("aware=%v: Figures() = %s; want %s", aware, describe(got, t0), describe(second, t0))
		}
	}
}

// TestRateLimitFromHeaders: what an answer's headers say, read and observed, skips the target until the reset.
func TestRateLimitFromHeaders(t *testing.T) {
	tests := []struct {
		fixture string
		want    time.Duration // how long the target is skipped
	}{
		{"openai-chat", 0},
		{"openai-requests-spent", 2*time.Minute + 59560*time.Millisecond},
		{"openai-daily-spent", time.Hour},
		{"azure-chat", 0},
		{"azure-tokens-spent", 8 * time.Second},
		{"azure-responses-unknown", 0},
		{"anthropic-messages", 0},
		{"anthropic-output-spent", 45 * time.Second},
		{"none", 0},
	}
	for _, tt := range tests {
		t.Run(tt.fixture, func(t *testing.T) {
			r := NewRateLimit(&Config{RateLimitAware: true})
			until, _ := r.Observe(t0, readRateLimit(headerFixture(t, tt.fixture), t0))
			if got := max(until.Sub(t0), 0); got != tt.want {
				t.Errorf("skipped for %v, want %v", got, tt.want)
			}
			if tt.want > 0 && (r.Usable(t0.Add(tt.want-time.Millisecond)) || !r.Usable(t0.Add(tt.want))) {
				t.Errorf("Usable does not turn true exactly at the reset, +%v", tt.want)
			}
		})
	}
}

// TestRateLimitConcurrent: answers, selections and scrapes from many goroutines (run with -race); once a
// quota shows back, the target is usable.
func TestRateLimitConcurrent(t *testing.T) {
	r := NewRateLimit(&Config{RateLimitAware: true, RateLimitFloor: 0.01})
	clock := NewManualClock(t0)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				now := clock.Now()
				switch (g + i) % 4 {
				case 0:
					r.Observe(now, figures("requests=0/100@50ms", now))
				case 1:
					r.Observe(now, figures("requests=50/100@50ms tokens=3/10", now))
				case 2:
					r.Figures()
					r.Until()
				}
				r.Usable(now)
				clock.Advance(time.Millisecond)
			}
		})
	}
	wg.Wait()
	now := clock.Now()
	r.Observe(now, figures("requests=99/100", now))
	if !r.Usable(now) {
		t.Error("after the storm and an answer with quota: not usable")
	}
}

// TestRateLimitAllocs: the steady path (read an answer's headers, observe them, ask whether the target is
// usable) allocates nothing, limited or not.
func TestRateLimitAllocs(t *testing.T) {
	for _, fixture := range []string{"openai-chat", "openai-requests-spent", "anthropic-output-spent", "none"} {
		t.Run(fixture, func(t *testing.T) {
			h := headerFixture(t, fixture)
			r := NewRateLimit(&Config{RateLimitAware: true, RateLimitFloor: 0.05})
			f := func() {
				r.Observe(t0, readRateLimit(h, t0))
				r.Usable(t0)
			}
			if got := testing.AllocsPerRun(1000, f); got != 0 {
				t.Errorf("read, Observe and Usable allocate %v times per answer, want 0", got)
			}
		})
	}
	r := NewRateLimit(&Config{RateLimitAware: true})
	if got := testing.AllocsPerRun(1000, func() { r.Figures(); r.Until() }); got != 0 {
		t.Errorf("Figures and Until allocate %v times, want 0", got)
	}
}

func BenchmarkRateLimitObserve(b *testing.B) {
	for _, bb := range []struct{ name, spec string }{
		{"quota left", "requests=4999/5000@12ms tokens=799975/800000@1ms"},
		{"spent", "requests=0/200@2m59.56s tokens=39812/40000@282ms"},
	} {
		b.Run(bb.name, func(b *testing.B) {
			r := NewRateLimit(&Config{RateLimitAware: true})
			f := figures(bb.spec, t0)
			b.ReportAllocs()
			for b.Loop() {
				r.Observe(t0, f)
			}
		})
	}
}

func BenchmarkRateLimitUsable(b *testing.B) {
	b.Run("not limited", func(b *testing.B) {
		r := NewRateLimit(&Config{RateLimitAware: true})
		b.ReportAllocs()
		for b.Loop() {
			r.Usable(t0)
		}
	})
	b.Run("not limited parallel", func(b *testing.B) {
		r := NewRateLimit(&Config{RateLimitAware: true})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				r.Usable(t0)
			}
		})
	})
	b.Run("limited", func(b *testing.B) {
		r := NewRateLimit(&Config{RateLimitAware: true})
		r.Observe(t0, figures("requests=0@1h", t0))
		b.ReportAllocs()
		for b.Loop() {
			r.Usable(t0)
		}
	})
}
