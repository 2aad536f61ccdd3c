package budget

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestSweep(t *testing.T) {
	cfg := &Config{EjectAfter: 1, EjectBase: 30 * time.Second, EjectMax: 300 * time.Second, RateLimitAware: true}
	// Candidate states: "up", "ejected", "expired" (ejection over, probe free), "probing" (another request
	// holds the probe), "cooling", "ratelimited", "nil" (no Health).
	health := func(state string) *Health {
		h := NewHealth(cfg)
		switch state {
		case "up":
		case "ejected":
			h.Eject(t0)
		case "expired":
			h.Eject(t0.Add(-time.Hour))
		case "probing":
			h.Eject(t0.Add(-time.Hour))
			h.Available(t0)
		case "cooling":
			h.Cooldown(t0, time.Minute)
		case "ratelimited":
			h.RateLimit().Observe(t0, figures("requests=0@1m", t0))
		case "nil":
			return nil
		default:
			panic(state)
		}
		return h
	}
	tests := []struct {
		name         string
		states       []string
		want         string // positions handed out, "p" marking a probe
		wantFallback bool
	}{
		{"all up, in order", []string{"up", "up", "up"}, "0 1 2", false},
		{"ejected candidates are skipped", []string{"ejected", "up", "ejected", "up"}, "1 3", false},
		{"cooling candidates are skipped", []string{"cooling", "up"}, "1", false},
		{"rate-limited candidates are skipped", []string{"ratelimited", "up", "ratelimited", "up"}, "1 3", false},
		{"every candidate rate-limited: all tried anyway, in order", []string{"ratelimited", "ratelimited"}, "0 1", true},
		{"a candidate being probed elsewhere is skipped", []string{"probing", "up"}, "1", false},
		{"an expired ejection is handed out as a probe", []string{"ejected", "expired", "up"}, "1p 2", false},
		{"every candidate ejected: all tried anyway, in order", []string{"ejected", "ejected", "ejected"}, "0 1 2", true},
		{"every candidate unavailable for any reason: all tried anyway", []string{"cooling", "ejected", "probing"}, "0 1 2", true},
		{"no fallback once a candidate was handed out", []string{"ejected", "up", "ejected"}, "1", false},
		{"nil health is always available", []string{"nil", "ejected"}, "0", false},
		{"no candidates", nil, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hs := make([]*Health, len(tt.states))
			for i, st := range tt.states {
				hs[i] = health(st)
			}
			var s Sweep
			s.Reset(len(hs))
			var got []string
			for range 2*len(hs) + 2 {
				pos, probe, ok := s.Next(t0, func(i int) *Health { return hs[i] })
				if !ok {
					break
				}
				got = append(got, fmt.Sprint(pos)+map[bool]string{true: "p"}[probe])
			}
			if g := strings.Join(got, " "); g != tt.want {
				t.Errorf("handed out %q, want %q", g, tt.want)
			}
			if s.Fallback() != tt.wantFallback {
				t.Errorf("Fallback() = %v, want %v", s.Fallback(), tt.wantFallback)
			}
			if _, _, ok := s.Next(t0, func(i int) *Health { return hs[i] }); ok {
				t.Error("Next() after exhaustion handed out another candidate")
			}
		})
	}
}

// NextWhere passes over the candidates accept refuses, in both passes, and they do not count as handed out.
func TestSweepNextWhere(t *testing.T) {
	cfg := &Config{EjectAfter: 1, EjectBase: 30 * time.Second, EjectMax: 300 * time.Second}
	up, ejected := NewHealth(cfg), NewHealth(cfg)
	ejected.Eject(t0)
	tests := []struct {
		name   string
		hs     []*Health
		accept string // "y" or "n" per position
		want   string
	}{
		{"refused candidates are passed over", []*Health{up, up, up, up}, "nyny", "1 3"},
		{"none accepted", []*Health{up, up}, "nn", ""},
		{"accepted but ejected: the fallback tries only the accepted ones", []*Health{up, ejected, ejected}, "nyy", "1 2"},
		{"a refused healthy candidate does not stop the fallback", []*Health{up, ejected}, "ny", "1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s Sweep
			s.Reset(len(tt.hs))
			var got []string
			for {
				pos, _, ok := s.NextWhere(t0, func(i int) *Health { return tt.hs[i] }, func(i int) bool { return tt.accept[i] == 'y' })
				if !ok {
					break
				}
				got = append(got, fmt.Sprint(pos))
			}
			if g := strings.Join(got, " "); g != tt.want {
				t.Errorf("handed out %q, want %q", g, tt.want)
			}
		})
	}
}

func TestSweepResetStartsOver(t *testing.T) {
	hs := []*Health{NewHealth(&Config{EjectBase: time.Second, EjectMax: time.Second})}
	var s Sweep
	s.Reset(1)
	s.Next(t0, func(i int) *Health { return hs[i] })
	s.Reset(1)
	if pos, _, ok := s.Next(t0, func(i int) *Health { return hs[i] }); !ok || pos != 0 {
		t.Errorf("after Reset Next() = %d, %v; want 0, true", pos, ok)
	}
}

func TestSweepAllocs(t *testing.T) {
	cfg := &Config{EjectBase: time.Second, EjectMax: time.Second}
	hs := []*Health{NewHealth(cfg), NewHealth(cfg), NewHealth(cfg)}
	hs[0].Eject(t0)
	var s Sweep
	got := testing.AllocsPerRun(1000, func() {
		s.Reset(len(hs))
		for {
			if _, _, ok := s.Next(t0, func(i int) *Health { return hs[i] }); !ok {
				break
			}
		}
	})
	if got != 0 {
		t.Errorf("a sweep allocates %v times, want 0", got)
	}
}

func TestSweepUntried(t *testing.T) {
	hs := []*Health{NewHealth(&Config{EjectBase: time.Second}), NewHealth(&Config{EjectBase: time.Second})}
	hs[0].Eject(t0)
	hs[1].Eject(t0)
	var s Sweep
	s.Reset(2)
	if from, to := s.Untried(); from != 0 || to != 2 {
		t.Fatalf("before the first pick: [%d, %d)", from, to)
	}
	s.Next(t0, func(i int) *Health { return hs[i] }) // every candidate ejected: the fallback hands out 0
	if from, to := s.Untried(); from != to {
		t.Fatalf("in the fallback nothing is untried, got [%d, %d)", from, to)
	}
}
