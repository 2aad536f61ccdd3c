package bufpool

import "testing"

func TestGetStartsEmptyWithSize(t *testing.T) {
	p := New(128, 1024)
	h := p.Get()
	if len(*h) != 0 || cap(*h) < 128 {
		t.Fatalf("len %d cap %d, want 0 and at least 128", len(*h), cap(*h))
	}
}

// A buffer given back is lent again emptied; one grown past keep is dropped. sync.Pool may drop
// any item (the race detector makes it drop some at random), so what is checked is that a
// buffer past keep never comes back, and that one within it does when the pool keeps it.
func TestPutKeepsUpToKeep(t *testing.T) {
	p := New(16, 64)
	small := p.Get()
	*small = append(*small, "hello"...)
	p.Put(small)
	large := p.Get()
	*large = make([]byte, 0, 65)
	p.Put(large)
	for range 100 {
		h := p.Get()
		if cap(*h) > 64 {
			t.Fatalf("a buffer of capacity %d came back: past keep, it must be dropped", cap(*h))
		}
		if len(*h) != 0 {
			t.Fatalf("a buffer came back with length %d", len(*h))
		}
	}
}

func TestPutNil(t *testing.T) {
	New(1, 1).Put(nil)
}

func TestGetPutAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items at random")
	}
	p := New(256, 1024)
	p.Put(p.Get())
	if n := testing.AllocsPerRun(1000, func() {
		h := p.Get()
		*h = append(*h, "a line"...)
		p.Put(h)
	}); n != 0 {
		t.Fatalf("%v allocations per Get and Put, want 0", n)
	}
}
