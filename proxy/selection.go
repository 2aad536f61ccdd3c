package proxy

import (
	"hash/maphash"
	"sync/atomic"
	"time"
)

// A strategy picks a request's first candidate among the targets that serve it; the rest
// follow in declared order (SPEC section 3). Each strategy is a small type behind one method,
// safe for concurrent use.
type strategy interface {
	// first returns the position in eligible (target indices in declared order, never empty)
	// of the first candidate.
	first(eligible []int, ex *exchange) int
}

func newStrategy(name string, targets []*Target, stickyHeader string) strategy {
	switch name {
	case "round-robin":
		return &roundRobin{targets: targets}
	case "sticky":
		return &sticky{targets: targets, header: stickyHeader, seed: maphash.MakeSeed()}
	case "least-latency":
		return &leastLatency{targets: targets}
	}
	return declaredOrder{}
}

// declaredOrder is FAILOVER_STRATEGY=failover: the first eligible target in declared order.
type declaredOrder struct{}

func (declaredOrder) first([]int, *exchange) int { return 0 }

// roundRobin rotates the first candidate in proportion to the targets' weights.
type roundRobin struct {
	targets []*Target
	n       atomic.Uint64
}

func (r *roundRobin) first(eligible []int, _ *exchange) int {
	return weightedPick(r.targets, eligible, r.n.Add(1)-1)
}

// weightedPick maps k onto the eligible targets' weights: over any run of total consecutive
// values of k each target is picked weight times. With every weight 0 it picks the first.
func weightedPick(targets []*Target, eligible []int, k uint64) int {
	total := uint64(0)
	for _, i := range eligible {
		total += uint64(targets[i].weight)
	}
	if total == 0 {
		return 0
	}
	k %= total
	for pos, i := range eligible {
		w := uint64(targets[i].weight)
		if k < w {
			return pos
		}
		k -= w
	}
	return 0
}

// sticky hashes the session header so a session keeps its first target (and the provider's
// prompt cache) while that target is healthy; when it is skipped, the declared order takes
// over, and the session returns once the target does. No header: declared order.
type sticky struct {
	targets []*Target
	header  string
	seed    maphash.Seed
}

func (s *sticky) first(eligible []int, ex *exchange) int {
	v := ex.ctx.Request.Header.Peek(s.header)
	if len(v) == 0 {
		return 0
	}
	return weightedPick(s.targets, eligible, maphash.Bytes(s.seed, v))
}

// leastLatency picks the eligible target with the lowest recent time to first byte. One
// request in exploreEvery goes to one of the others instead, in turn, so a target that was
// slow (or ejected) is measured again and noticed once it recovers; a target never measured
// is tried first.
type leastLatency struct {
	targets []*Target
	n       atomic.Uint64
}

const exploreEvery = 16

func (l *leastLatency) first(eligible []int, _ *exchange) int {
	k := l.n.Add(1)
	best, bestNS := 0, int64(-1)
	for pos, i := range eligible {
		ns := l.targets[i].latencyNS.Load()
		if ns == 0 {
			return pos
		}
		if bestNS < 0 || ns < bestNS {
			best, bestNS = pos, ns
		}
	}
	if k%exploreEvery == 0 && len(eligible) > 1 {
		other := int(k/exploreEvery) % (len(eligible) - 1)
		if other >= best {
			other++
		}
		return other
	}
	return best
}

// observeLatency folds a time-to-first-byte sample into the target's moving average (weight
// 1/4 for the new sample: recent enough to follow a provider's bad minute).
func (t *Target) observeLatency(d time.Duration) {
	ns := max(int64(d), 1)
	for {
		old := t.latencyNS.Load()
		next := ns
		if old != 0 {
			next = old + (ns-old)/4
		}
		if t.latencyNS.CompareAndSwap(old, next) {
			return
		}
	}
}
