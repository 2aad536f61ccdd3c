package proxy

import (
	"sync/atomic"
	"time"
)

// A strategy picks a request's first candidate among the targets that serve it; the rest
// follow in declared order (docs/decisions.md, How it decides: Candidates). Each strategy is a small
// type behind one method, safe for concurrent use, listed with its name in strategies.
type strategy interface {
	// first returns the target index of the first candidate, one of eligible (the target
	// indices that serve the request, in declared order, never empty). usable is the part of
	// eligible whose health lets a request use it now (not ejected, not cooling down, not
	// being probed), or all of eligible when none does: a rotation or a latency ranking that
	// chose a target the sweep will skip would hand its whole share to the target declared
	// after it.
	first(eligible, usable []int, ex *exchange) int
}

// strategies are the values FAILOVER_STRATEGY accepts, in the order errors and -check list
// them, each with the constructor of its strategy: the table New builds from. Load validates
// against config.StrategyNames, which a test holds to this table.
var strategies = []struct {
	name string
	make func(targets []*Target, stickyHeader string) strategy
}{
	{"failover", func([]*Target, string) strategy { return declaredOrder{} }},
	{"round-robin", func(targets []*Target, _ string) strategy { return &roundRobin{targets: targets} }},
	{"sticky", func(targets []*Target, header string) strategy {
		return &sticky{targets: targets, header: header}
	}},
	{"least-latency", func(targets []*Target, _ string) strategy { return &leastLatency{targets: targets} }},
}

// strategyNames lists the names in strategies.
func strategyNames() []string {
	names := make([]string, len(strategies))
	for i, st := range strategies {
		names[i] = st.name
	}
	return names
}

// newStrategy builds the strategy named name, or returns nil when strategies has no such name.
func newStrategy(name string, targets []*Target, stickyHeader string) strategy {
	for _, st := range strategies {
		if st.name == name {
			return st.make(targets, stickyHeader)
		}
	}
	return nil
}

// declaredOrder is FAILOVER_STRATEGY=failover: the first eligible target in declared order.
type declaredOrder struct{}

func (declaredOrder) first(eligible, _ []int, _ *exchange) int { return eligible[0] }

// roundRobin rotates the first candidate in proportion to the weights of the targets that
// may be used now: while one is ejected, its share is spread over the others by their weights.
// Each set of candidates rotates on its own counter, found by a hash of the set: with one
// counter for all, an application that asks for a small model and then a large one on every
// turn would send every large-model request to the same target. Two sets that share a counter
// still rotate, only less evenly when their requests alternate.
type roundRobin struct {
	targets []*Target
	n       [rotations]atomic.Uint64
}

const rotations = 64

func (r *roundRobin) first(_, usable []int, _ *exchange) int {
	h := uint64(14695981039346656037) // FNV-1a over the target indices
	for _, i := range usable {
		h = (h ^ uint64(i)) * 1099511628211
	}
	return usable[weightedPick(r.targets, usable, r.n[h%rotations].Add(1)-1)]
}

// weightedPick maps k onto the weights of the targets in eligible and returns a position in
// it: over any run of total consecutive values of k each target is picked weight times. With
// every weight 0 it picks the first.
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
// over, and the session returns once the target does. No header: declared order. It hashes
// over every eligible target, usable or not, so that an ejection moves no other session. The
// hash is the same in every process (FNV-1a), so a restart or a rollout moves no session
// either: a session's prompt cache stays on the target that holds it.
type sticky struct {
	targets []*Target
	header  string
}

func (s *sticky) first(eligible, _ []int, ex *exchange) int {
	v := ex.ctx.Request.Header.Peek(s.header)
	if len(v) == 0 {
		return eligible[0]
	}
	return eligible[weightedPick(s.targets, eligible, fnv1a(v))]
}

// fnv1a is the 64-bit FNV-1a hash of b: stable across processes, and without the allocation
// of hash/fnv's interface.
func fnv1a(b []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}

// leastLatency picks the usable target with the lowest recent time to first byte. One
// request in exploreEvery goes to one of the others instead, in turn, so a target that was
// slow (or ejected) is measured again and noticed once it recovers; a target never measured
// is tried first.
type leastLatency struct {
	targets []*Target
	n       atomic.Uint64
}

const exploreEvery = 16

func (l *leastLatency) first(_, usable []int, _ *exchange) int {
	k := l.n.Add(1)
	best, bestNS := 0, int64(-1)
	for pos, i := range usable {
		ns := l.targets[i].latencyNS.Load()
		if ns == 0 {
			return i
		}
		if bestNS < 0 || ns < bestNS {
			best, bestNS = pos, ns
		}
	}
	if k%exploreEvery == 0 && len(usable) > 1 {
		other := int(k/exploreEvery) % (len(usable) - 1)
		if other >= best {
			other++
		}
		return usable[other]
	}
	return usable[best]
}

// observeLatency folds a time-to-first-byte sample into the moving average least-latency
// ranks by.
func (t *Target) observeLatency(d time.Duration) { foldLatency(&t.latencyNS, d) }

// foldLatency folds a sample into the moving average in v, in nanoseconds, 0 before the first
// (weight 1/4 for the new sample: recent enough to follow a provider's bad minute). Lock-free
// and allocation-free: it runs on the request path.
func foldLatency(v *atomic.Int64, d time.Duration) {
	ns := max(int64(d), 1)
	for {
		old := v.Load()
		next := ns
		if old != 0 {
			next = old + (ns-old)/4
		}
		if v.CompareAndSwap(old, next) {
			return
		}
	}
}
