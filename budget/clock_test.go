package budget

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestManualClock(t *testing.T) {
	tests := []struct {
		name string
		move func(*ManualClock)
		want time.Time
	}{
		{"reads what it was given", func(*ManualClock) {}, t0},
		{"advances", func(c *ManualClock) { c.Advance(1500 * time.Millisecond) }, t0.Add(1500 * time.Millisecond)},
		{"advances cumulatively", func(c *ManualClock) { c.Advance(time.Second); c.Advance(time.Second) }, t0.Add(2 * time.Second)},
		{"sets, backwards too", func(c *ManualClock) { c.Set(t0.Add(-time.Hour)) }, t0.Add(-time.Hour)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewManualClock(t0)
			tt.move(c)
			if got := c.Now(); !got.Equal(tt.want) {
				t.Errorf("Now() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestSystemClockIsNow(t *testing.T) {
	before := time.Now()
	got := SystemClock{}.Now()
	if got.Before(before) || got.After(time.Now()) {
		t.Errorf("SystemClock.Now() = %v, outside the surrounding time.Now() calls", got)
	}
}
