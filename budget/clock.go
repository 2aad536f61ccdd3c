package budget

import (
	"sync"
	"time"
)

// Clock tells the time. Production code uses SystemClock; tests inject a ManualClock.
type Clock interface {
	Now() time.Time
}

// SystemClock is the real clock. The zero value is ready to use and safe for concurrent use.
// A caller that already holds a reading of the system clock (time.Now, or one advanced from it
// by the monotonic clock) may use it in place of calling Now: it is the same clock.
type SystemClock struct{}

// Now returns time.Now(), monotonic reading included.
func (SystemClock) Now() time.Time { return time.Now() }

// ManualClock is a clock that moves only when told to. Safe for concurrent use.
type ManualClock struct {
	mu sync.Mutex
	t  time.Time
}

// NewManualClock returns a ManualClock reading t.
func NewManualClock(t time.Time) *ManualClock { return &ManualClock{t: t} }

// Now returns the clock's current reading.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Set moves the clock to t (backwards too).
func (c *ManualClock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// Advance moves the clock forward by d.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}
