package budget

import (
	"math"
	"math/rand/v2"
	"time"
)

// Backoff returns the full-jitter sleep before a same-target retry: uniform in [0, min(max, base·2^n)], where n
// is the number of retries already made on this target (0 before the first retry). Full jitter rather than
// exponential-plus-jitter because many sidecars retrying one overloaded upstream must spread out, not march in step.
//
// rnd(k) returns a uniform int64 in [0, k), as math/rand/v2's Int64N does; nil means Int64N. base <= 0 gives
// 0. max <= 0 is no cap (FAILOVER_BACKOFF_MAX=0): base·2^n saturates at the longest Duration instead. Huge n
// saturates at max instead of overflowing.
func Backoff(base, max time.Duration, n int, rnd func(int64) int64) time.Duration {
	if base <= 0 {
		return 0
	}
	if max <= 0 {
		max = math.MaxInt64
	}
	ceiling := max
	// base <= max>>n is exactly "base·2^n <= max", tested without computing the product.
	if n <= 0 {
		ceiling = min(base, max)
	} else if n < 63 && base <= max>>n {
		ceiling = base << n
	}
	if rnd == nil {
		rnd = rand.Int64N
	}
	if ceiling == math.MaxInt64 {
		// [0, MaxInt64) instead of [0, MaxInt64]: one nanosecond is not worth an overflow.
		return time.Duration(rnd(math.MaxInt64))
	}
	return time.Duration(rnd(int64(ceiling) + 1))
}
