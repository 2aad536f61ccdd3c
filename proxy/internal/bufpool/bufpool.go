// Package bufpool lends the byte buffers the request path writes and reads into, so that a
// request in the steady state allocates none: the buffer a request is assembled in, the one
// an answer's body is read into, the framing of a stream's writes, the start of an event a
// stream holds back, and a log line.
//
// Each use has a Pool of its own, with two sizes: the capacity a new buffer starts with, and
// the largest capacity the pool keeps. A buffer that grew past it (one large answer, one long
// event) is dropped when it is given back, so a single large request never pins its memory
// for the life of the process.
//
// It never holds a buffer that is lent: what a caller got with Get is the caller's until it
// gives it back with Put, and must not be used after that.
package bufpool

import "sync"

// Pool lends buffers of one use. The zero value is not usable: see New. Safe for concurrent use.
type Pool struct {
	size, keep int
	p          sync.Pool
}

// New returns a pool whose new buffers have capacity size, and which keeps buffers given back
// up to capacity keep.
func New(size, keep int) *Pool { return &Pool{size: size, keep: keep} }

// Get lends a buffer of length 0. It is a *[]byte, so that giving it back allocates nothing.
func (b *Pool) Get() *[]byte {
	if h, _ := b.p.Get().(*[]byte); h != nil {
		return h
	}
	s := make([]byte, 0, b.size)
	return &s
}

// Put gives h back: *h is the buffer as the caller last grew it. One larger than the pool's
// keep is dropped.
func (b *Pool) Put(h *[]byte) {
	if h == nil || cap(*h) > b.keep {
		return
	}
	*h = (*h)[:0]
	b.p.Put(h)
}
