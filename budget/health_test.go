package budget

import (
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// step is one event in a Health script: at t0+at, do op and expect want.
//
//	op                   want
//	avail                "ok", "probe" or "no"
//	fail                 "ejected <d>" or "-"
//	timeout              as fail, for a SilentFailure
//	wants                WantsProbe: "true" or "false"
//	answered             ProbeAnswered: "true" or "false"
//	state                State: "up", "cooling", "probing" or "ejected"
//	ok                   "restored" or "-"
//	eject                the duration returned
//	cool <d>             "" (Cooldown for d)
//	release              ""
//	ejected              "true" or "false"
//	usable               "true" or "false"
//	limit <d>            "" (an answer reporting no requests left, back in d)
//	quota                "" (an answer reporting requests left)
//	avoided              RateLimit().Avoided()
type step struct {
	at   time.Duration
	op   string
	want string
}

func (s step) run(h *Health) string {
	now := t0.Add(s.at)
	switch op, arg, _ := strings.Cut(s.op, " "); op {
	case "avail":
		switch ok, probe := h.Available(now); {
		case probe && ok:
			return "probe"
		case probe:
			return "probe without ok"
		case ok:
			return "ok"
		}
		return "no"
	case "fail":
		if ejected, d := h.Failure(now); ejected {
			return "ejected " + d.String()
		} else if d != 0 {
			return "not ejected, yet " + d.String()
		}
		return "-"
	case "timeout":
		if ejected, d := h.SilentFailure(now); ejected {
			return "ejected " + d.String()
		}
		return "-"
	case "wants":
		return strconv.FormatBool(h.WantsProbe(now))
	case "answered":
		return strconv.FormatBool(h.ProbeAnswered(now))
	case "state":
		return h.State(now).String()
	case "ok":
		if h.Success(now) {
			return "restored"
		}
		return "-"
	case "eject":
		return h.Eject(now).String()
	case "cool":
		d, err := time.ParseDuration(arg)
		if err != nil {
			panic(err)
		}
		h.Cooldown(now, d)
	case "release":
		h.Release()
	case "ejected":
		return strconv.FormatBool(h.Ejected(now))
	case "usable":
		return strconv.FormatBool(h.Usable(now))
	case "limit":
		h.RateLimit().Observe(now, figures("requests=0@"+arg, now))
	case "quota":
		h.RateLimit().Observe(now, figures("requests=5", now))
	case "avoided":
		return strconv.FormatUint(h.RateLimit().Avoided(), 10)
	default:
		panic("unknown op " + s.op)
	}
	return ""
}

func TestHealth(t *testing.T) {
	const s = time.Second
	config := func(after int, base, max time.Duration) *Config {
		return &Config{EjectAfter: after, EjectBase: base, EjectMax: max}
	}
	std := config(3, 30*s, 300*s)
	rated := &Config{EjectAfter: 3, EjectBase: 30 * s, EjectMax: 300 * s, RateLimitAware: true}
	// defaults is the shipped policy (docs/decisions.md, Health): fast ejections of 10 s, silent ones of 60 s.
	defaults := &Config{EjectAfter: 5, EjectBase: 10 * s, EjectMax: 10 * s, EjectSilent: 60 * s}
	repeat := func(n int, st step) []step {
		out := make([]step, n)
		for i := range out {
			out[i] = st
		}
		return out
	}
	tests := []struct {
		name          string
		config        *Config
		steps         []step
		wantEjections uint64
	}{
		{"new target is available", std, []step{{0, "avail", "ok"}, {0, "ejected", "false"}}, 0},
		{"ejected at EjectAfter consecutive failures", std, []step{
			{0, "fail", "-"}, {0, "fail", "-"}, {0, "fail", "ejected 30s"},
			{s, "avail", "no"}, {s, "ejected", "true"},
		}, 1},
		{"a success between failures resets the count", std, []step{
			{0, "fail", "-"}, {0, "fail", "-"}, {0, "ok", "-"}, {0, "fail", "-"}, {0, "fail", "-"},
			{0, "avail", "ok"}, {0, "fail", "ejected 30s"},
		}, 1},
		{"EjectAfter 0 never ejects on failures", config(0, 30*s, 300*s), append(
			repeat(100, step{0, "fail", "-"}), step{0, "avail", "ok"}), 0},
		{"EjectAfter 0 still ejects on credential failure", config(0, 30*s, 300*s), []step{
			{0, "eject", "30s"}, {0, "avail", "no"},
		}, 1},
		{"credential failure ejects at once", std, []step{
			{0, "eject", "30s"}, {0, "avail", "no"}, {29 * s, "ejected", "true"},
		}, 1},
		{"expired ejection hands out exactly one probe", std, []step{
			{0, "eject", "30s"}, {29 * s, "avail", "no"},
			{30 * s, "avail", "probe"}, {30 * s, "avail", "no"}, {31 * s, "avail", "no"}, {time.Hour, "avail", "no"},
		}, 1},
		{"expired ejection no longer counts as ejected", std, []step{
			{0, "eject", "30s"}, {30 * s, "ejected", "false"}, {30 * s, "avail", "probe"}, {31 * s, "ejected", "false"},
		}, 1},
		{"successful probe restores", std, []step{
			{0, "eject", "30s"}, {30 * s, "avail", "probe"}, {31 * s, "ok", "restored"},
			{31 * s, "avail", "ok"}, {31 * s, "avail", "ok"}, {31 * s, "ejected", "false"},
		}, 1},
		{"failed probe re-ejects for longer", std, []step{
			{0, "eject", "30s"}, {30 * s, "avail", "probe"}, {30 * s, "fail", "ejected 1m0s"},
			{89 * s, "avail", "no"}, {90 * s, "avail", "probe"}, {90 * s, "fail", "ejected 1m30s"},
			{179 * s, "avail", "no"}, {180 * s, "avail", "probe"},
		}, 3},
		{"credential failure on a probe re-ejects for longer", std, []step{
			{0, "eject", "30s"}, {30 * s, "avail", "probe"}, {30 * s, "eject", "1m0s"}, {31 * s, "avail", "no"},
		}, 2},
		{"growth is capped at EjectMax", config(1, 30*s, 100*s), []step{
			{0, "fail", "ejected 30s"}, {30 * s, "avail", "probe"}, {30 * s, "fail", "ejected 1m0s"},
			{90 * s, "avail", "probe"}, {90 * s, "fail", "ejected 1m30s"},
			{180 * s, "avail", "probe"}, {180 * s, "fail", "ejected 1m40s"},
			{280 * s, "avail", "probe"}, {280 * s, "fail", "ejected 1m40s"},
		}, 5},
		{"EjectMax 0 grows without cap", config(1, 30*s, 0), []step{
			{0, "fail", "ejected 30s"}, {30 * s, "avail", "probe"}, {30 * s, "fail", "ejected 1m0s"},
			{90 * s, "avail", "probe"}, {90 * s, "fail", "ejected 1m30s"},
			{180 * s, "avail", "probe"}, {180 * s, "fail", "ejected 2m0s"},
			{300 * s, "avail", "probe"}, {300 * s, "fail", "ejected 2m30s"},
		}, 5},
		{"cap reached exactly", config(1, 30*s, 60*s), []step{
			{0, "fail", "ejected 30s"}, {30 * s, "avail", "probe"}, {30 * s, "fail", "ejected 1m0s"},
			{90 * s, "avail", "probe"}, {90 * s, "fail", "ejected 1m0s"},
		}, 3},
		{"success resets ejection growth", std, []step{
			{0, "eject", "30s"}, {30 * s, "avail", "probe"}, {30 * s, "fail", "ejected 1m0s"},
			{90 * s, "avail", "probe"}, {90 * s, "ok", "restored"}, {91 * s, "eject", "30s"},
		}, 3},
		{"success on an ejected target restores it", std, []step{
			{0, "eject", "30s"}, {s, "ok", "restored"}, {s, "avail", "ok"},
		}, 1},
		{"failures while ejected do not stack", std, []step{
			{0, "eject", "30s"}, {s, "fail", "-"}, {s, "fail", "-"}, {s, "fail", "-"}, {s, "eject", "0s"},
			{29 * s, "avail", "no"}, {30 * s, "avail", "probe"},
		}, 1},
		{"failure after expiry without a probe changes nothing", std, []step{
			{0, "eject", "30s"}, {40 * s, "fail", "-"}, {40 * s, "avail", "probe"},
		}, 1},
		{"release frees the probe without health effect", std, []step{
			{0, "eject", "30s"}, {30 * s, "avail", "probe"}, {30 * s, "avail", "no"}, {31 * s, "release", ""},
			{31 * s, "avail", "probe"}, {31 * s, "fail", "ejected 1m0s"},
		}, 2},
		{"release without a probe does nothing", std, []step{
			{0, "eject", "30s"}, {s, "release", ""}, {s, "avail", "no"}, {30 * s, "avail", "probe"},
		}, 1},
		{"cooldown blocks without ejecting", std, []step{
			{0, "cool 10s", ""}, {5 * s, "avail", "no"}, {5 * s, "ejected", "false"}, {10 * s, "avail", "ok"},
		}, 0},
		{"longer cooldown wins", std, []step{
			{0, "cool 10s", ""}, {0, "cool 2s", ""}, {5 * s, "avail", "no"}, {10 * s, "avail", "ok"},
		}, 0},
		{"later cooldown extends", std, []step{
			{0, "cool 10s", ""}, {5 * s, "cool 10s", ""}, {10 * s, "avail", "no"}, {15 * s, "avail", "ok"},
		}, 0},
		{"zero cooldown does nothing", std, []step{{0, "cool 0s", ""}, {0, "avail", "ok"}}, 0},
		{"cooldown survives a success", std, []step{
			{0, "cool 10s", ""}, {s, "ok", "-"}, {5 * s, "avail", "no"}, {10 * s, "avail", "ok"},
		}, 0},
		{"usable follows Available without taking the probe", std, []step{
			{0, "usable", "true"}, {0, "eject", "30s"}, {29 * s, "usable", "false"},
			{30 * s, "usable", "true"}, {30 * s, "usable", "true"}, {30 * s, "avail", "probe"},
			{30 * s, "usable", "false"}, {31 * s, "release", ""}, {31 * s, "usable", "true"},
			{31 * s, "avail", "probe"}, {31 * s, "ok", "restored"}, {31 * s, "usable", "true"},
			{31 * s, "cool 10s", ""}, {35 * s, "usable", "false"}, {41 * s, "usable", "true"},
		}, 1},
		{"defaults: a target that keeps failing fast is probed every 10 s", defaults, append(repeat(4, step{0, "fail", "-"}),
			step{0, "fail", "ejected 10s"}, step{9 * s, "avail", "no"}, step{10 * s, "avail", "probe"}, step{10 * s, "fail", "ejected 10s"},
			step{20 * s, "avail", "probe"}, step{20 * s, "fail", "ejected 10s"}, step{30 * s, "avail", "probe"}, step{30 * s, "ok", "restored"},
			step{30 * s, "state", "up"}), 3},
		{"defaults: after an hour of fast failures recovery takes 10 s", defaults, func() []step {
			st := append(repeat(4, step{0, "fail", "-"}), step{0, "fail", "ejected 10s"})
			for at := 10 * s; at <= time.Hour; at += 10 * s {
				st = append(st, step{at, "avail", "probe"}, step{at, "fail", "ejected 10s"})
			}
			return append(st, step{time.Hour + 9*s, "avail", "no"}, step{time.Hour + 10*s, "avail", "probe"}, step{time.Hour + 10*s, "ok", "restored"})
		}(), 361},
		{"a timeout ejects for the silent time", defaults, append(repeat(4, step{0, "timeout", "-"}),
			step{0, "timeout", "ejected 1m0s"}, step{0, "state", "ejected"}, step{59 * s, "avail", "no"},
			step{60 * s, "state", "probing"}, step{60 * s, "avail", "probe"}), 1},
		{"fast and silent failures count together; the last decides", defaults, []step{
			{0, "fail", "-"}, {0, "timeout", "-"}, {0, "fail", "-"}, {0, "fail", "-"}, {0, "timeout", "ejected 1m0s"},
		}, 1},
		{"the background probe looks only at silent ejections", defaults, []step{
			{0, "wants", "false"}, {0, "eject", "10s"}, {s, "wants", "false"}, {s, "answered", "false"}, {s, "avail", "no"},
		}, 1},
		{"a background answer ends a silent ejection at once", defaults, append(repeat(4, step{0, "timeout", "-"}),
			step{0, "timeout", "ejected 1m0s"}, step{5 * s, "wants", "true"}, step{5 * s, "avail", "no"},
			step{6 * s, "answered", "true"}, step{6 * s, "wants", "false"}, step{6 * s, "state", "probing"},
			step{6 * s, "avail", "probe"}, step{6 * s, "wants", "false"}, step{7 * s, "ok", "restored"}, step{7 * s, "state", "up"}), 1},
		{"a probe that times out after a background answer stops the background being believed", defaults, []step{
			{0, "eject", "10s"}, {10 * s, "avail", "probe"}, {10 * s, "timeout", "ejected 1m0s"},
			{15 * s, "answered", "true"}, {15 * s, "avail", "probe"}, {20 * s, "timeout", "ejected 1m0s"},
			{25 * s, "wants", "false"}, {25 * s, "answered", "false"}, {79 * s, "avail", "no"},
			{80 * s, "avail", "probe"}, {80 * s, "timeout", "ejected 1m0s"}, {85 * s, "answered", "false"},
			{140 * s, "avail", "probe"}, {141 * s, "ok", "restored"},
			// healthy again: the next outage believes the background probe again
			{142 * s, "eject", "10s"}, {152 * s, "avail", "probe"}, {152 * s, "timeout", "ejected 1m0s"}, {153 * s, "answered", "true"},
		}, 6},
		{"a probe that fails fast after a background answer goes back to fast ejections", defaults, []step{
			{0, "eject", "10s"}, {10 * s, "avail", "probe"}, {10 * s, "timeout", "ejected 1m0s"},
			{15 * s, "answered", "true"}, {15 * s, "avail", "probe"}, {15 * s, "fail", "ejected 10s"},
			{16 * s, "wants", "false"}, {25 * s, "avail", "probe"},
		}, 3},
		{"no background answer while a request probes", defaults, []step{
			{0, "eject", "10s"}, {10 * s, "avail", "probe"}, {10 * s, "timeout", "ejected 1m0s"},
			{70 * s, "avail", "probe"}, {71 * s, "wants", "false"}, {71 * s, "answered", "false"}, {71 * s, "release", ""},
			{71 * s, "avail", "probe"},
		}, 2},
		{"state follows ejection, probe and cooldown", std, []step{
			{0, "state", "up"}, {0, "cool 10s", ""}, {s, "state", "cooling"}, {10 * s, "state", "up"},
			{10 * s, "eject", "30s"}, {11 * s, "state", "ejected"}, {11 * s, "cool 1h", ""}, {12 * s, "state", "ejected"},
			{40 * s, "state", "probing"}, {40 * s, "ok", "restored"}, {40 * s, "state", "cooling"},
		}, 1},
		{"an expired ejection is probing, not up, until a request shows it healthy", std, []step{
			{0, "eject", "30s"}, {30 * s, "state", "probing"}, {30 * s, "ejected", "false"}, {31 * s, "avail", "probe"},
			{31 * s, "state", "probing"}, {32 * s, "release", ""}, {32 * s, "state", "probing"}, {33 * s, "ok", "restored"}, {33 * s, "state", "up"},
		}, 1},
		{"probe waits for the cooldown", std, []step{
			{0, "eject", "30s"}, {0, "cool 1m", ""}, {30 * s, "avail", "no"}, {60 * s, "avail", "probe"},
		}, 1},
		{"a rate limit takes the target out until its reset, counting nothing against it", rated, []step{
			{0, "limit 20s", ""}, {s, "avail", "no"}, {s, "usable", "false"}, {s, "state", "ratelimited"},
			{s, "ejected", "false"}, {s, "ok", "-"}, {2 * s, "avail", "no"}, {19 * s, "usable", "false"},
			{20 * s, "usable", "true"}, {20 * s, "avail", "ok"}, {20 * s, "state", "up"}, {20 * s, "avoided", "2"},
		}, 0},
		{"an answer showing quota again ends the rate limit", rated, []step{
			{0, "limit 1m", ""}, {s, "avail", "no"}, {2 * s, "quota", ""}, {2 * s, "avail", "ok"}, {2 * s, "state", "up"},
		}, 0},
		{"a rate limit keeps an expired ejection's probe back until its reset", rated, []step{
			{0, "eject", "30s"}, {10 * s, "limit 1m", ""}, {20 * s, "state", "ejected"}, {20 * s, "avail", "no"},
			{20 * s, "avoided", "0"}, {30 * s, "state", "ratelimited"}, {30 * s, "usable", "false"}, {30 * s, "avail", "no"},
			{30 * s, "avoided", "1"}, {70 * s, "state", "probing"}, {70 * s, "avail", "probe"}, {70 * s, "state", "probing"},
			{71 * s, "ok", "restored"},
		}, 1},
		{"a cooldown shows before a rate limit; only a refusal for the limit alone counts as avoided", rated, []step{
			{0, "cool 10s", ""}, {0, "limit 1m", ""}, {s, "state", "cooling"}, {s, "avail", "no"}, {s, "avoided", "0"},
			{10 * s, "state", "ratelimited"}, {10 * s, "avail", "no"}, {10 * s, "avoided", "1"}, {60 * s, "avail", "ok"},
		}, 0},
		{"rate-limit awareness off: answers never take the target out", std, []step{
			{0, "limit 1m", ""}, {s, "avail", "ok"}, {s, "usable", "true"}, {s, "state", "up"}, {s, "avoided", "0"},
		}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := NewHealth(tt.config)
			for i, st := range tt.steps {
				if got := st.run(h); got != st.want {
					t.Fatalf("step %d (+%v %s) = %q, want %q", i, st.at, st.op, got, st.want)
				}
			}
			if got := h.Ejections(); got != tt.wantEjections {
				t.Errorf("Ejections() = %d, want %d", got, tt.wantEjections)
			}
		})
	}
}

// TestEjectionTimeSaturates: base × consecutive ejections, with or without a cap, never overflows.
func TestEjectionTimeSaturates(t *testing.T) {
	const s = time.Second
	tests := []struct {
		name        string
		base, limit time.Duration
		n           int
		want        time.Duration
	}{
		{"first ejection is base", 30 * s, 300 * s, 1, 30 * s},
		{"capped", 30 * s, 100 * s, 4, 100 * s},
		{"no cap grows", 30 * s, 0, 20, 600 * s},
		{"no cap with huge count saturates", 30 * s, 0, math.MaxInt, maxDuration},
		{"no cap with huge base saturates", maxDuration / 2, 0, 3, maxDuration},
		{"huge count under a cap stops at the cap", 30 * s, 300 * s, math.MaxInt, 300 * s},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ejectFor(tt.base, tt.limit, tt.n); got != tt.want {
				t.Errorf("ejectFor(%v, %v, %d) = %v, want %v", tt.base, tt.limit, tt.n, got, tt.want)
			}
		})
	}
}

// TestHealthOneProbeUnderConcurrency: many requests asking at once after an ejection expires get one probe
// between them. Run with -race.
func TestHealthOneProbeUnderConcurrency(t *testing.T) {
	h := NewHealth(&Config{EjectAfter: 1, EjectBase: time.Second, EjectMax: time.Minute})
	h.Failure(t0)
	now := t0.Add(time.Hour)
	for round := range 20 {
		var wg sync.WaitGroup
		var mu sync.Mutex
		gotOK, gotProbe := 0, 0
		start := make(chan struct{})
		for range 64 {
			wg.Go(func() {
				<-start
				ok, probe := h.Available(now)
				mu.Lock()
				if ok {
					gotOK++
				}
				if probe {
					gotProbe++
				}
				mu.Unlock()
			})
		}
		close(start)
		wg.Wait()
		if gotOK != 1 || gotProbe != 1 {
			t.Fatalf("round %d: %d ok and %d probes among 64 concurrent callers, want 1 and 1", round, gotOK, gotProbe)
		}
		h.Release()
	}
}

// TestHealthConcurrentReports: reports racing with Available keep the state machine consistent. Run with -race.
func TestHealthConcurrentReports(t *testing.T) {
	h := NewHealth(&Config{EjectAfter: 2, EjectBase: time.Second, EjectMax: 4 * time.Second})
	clock := NewManualClock(t0)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				now := clock.Now()
				if ok, probe := h.Available(now); ok {
					switch (g + i) % 4 {
					case 0:
						h.Success(now)
					case 1, 2:
						h.Failure(now)
					default:
						if probe {
							h.Release()
						}
					}
				}
				h.Ejected(now)
				clock.Advance(time.Millisecond)
			}
		})
	}
	wg.Wait()
	h.Success(clock.Now())
	if ok, probe := h.Available(clock.Now()); !ok || probe {
		t.Errorf("after the storm and a success: Available() = %v, %v; want true, false", ok, probe)
	}
}

func TestHealthAllocs(t *testing.T) {
	h := NewHealth(&Config{EjectAfter: 5, EjectBase: time.Second, EjectMax: time.Minute})
	ejected := NewHealth(&Config{EjectAfter: 1, EjectBase: time.Hour, EjectMax: time.Hour})
	ejected.Eject(t0)
	limited := NewHealth(&Config{EjectAfter: 5, EjectBase: time.Second, EjectMax: time.Minute, RateLimitAware: true})
	limited.RateLimit().Observe(t0, figures("tokens=0@1h", t0))
	tests := []struct {
		name string
		f    func()
	}{
		{"Available healthy", func() { h.Available(t0) }},
		{"Available ejected", func() { ejected.Available(t0) }},
		{"Success", func() { h.Success(t0) }},
		{"Failure", func() { h.Failure(t0) }},
		{"Ejected", func() { ejected.Ejected(t0) }},
		{"Usable ejected", func() { ejected.Usable(t0) }},
		{"Available rate-limited", func() { limited.Available(t0) }},
		{"Usable rate-limited", func() { limited.Usable(t0) }},
		{"State rate-limited", func() { limited.State(t0) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := testing.AllocsPerRun(1000, tt.f); got != 0 {
				t.Errorf("%s allocates %v times per call, want 0", tt.name, got)
			}
		})
	}
}

func BenchmarkHealthAvailable(b *testing.B) {
	b.Run("healthy", func(b *testing.B) {
		h := NewHealth(&Config{EjectAfter: 5, EjectBase: time.Second, EjectMax: time.Minute})
		b.ReportAllocs()
		for b.Loop() {
			h.Available(t0)
		}
	})
	b.Run("healthy parallel", func(b *testing.B) {
		h := NewHealth(&Config{EjectAfter: 5, EjectBase: time.Second, EjectMax: time.Minute})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				h.Available(t0)
			}
		})
	})
	b.Run("ejected", func(b *testing.B) {
		h := NewHealth(&Config{EjectAfter: 5, EjectBase: time.Hour, EjectMax: time.Hour})
		h.Eject(t0)
		b.ReportAllocs()
		for b.Loop() {
			h.Available(t0)
		}
	})
	b.Run("rate-limited", func(b *testing.B) {
		h := NewHealth(&Config{EjectAfter: 5, EjectBase: time.Second, EjectMax: time.Minute, RateLimitAware: true})
		h.RateLimit().Observe(t0, figures("requests=0@1h", t0))
		b.ReportAllocs()
		for b.Loop() {
			h.Available(t0)
		}
	})
}

func BenchmarkHealthSuccess(b *testing.B) {
	h := NewHealth(&Config{EjectAfter: 5, EjectBase: time.Second, EjectMax: time.Minute})
	b.ReportAllocs()
	for b.Loop() {
		h.Success(t0)
	}
}

func BenchmarkHealthFailure(b *testing.B) {
	h := NewHealth(&Config{EjectAfter: 0, EjectBase: time.Second, EjectMax: time.Minute})
	b.ReportAllocs()
	for b.Loop() {
		h.Failure(t0)
	}
}
