package netio

// pace is how a client sends its requests, as far as its connection has seen: whether the
// client waits for each answer before it sends the next request. Only then may an answer wait,
// in the write that ends it, for the client's next request (ClientConn.endAnswer): the poller
// forgets, as that wait begins, a request that arrived before it, which a client that does not
// wait for its answers (pipelining) may have sent while the handler ran.
//
// It changes at each request's first byte (next), from the signs the connection saw since the
// request before:
//
//	any          --(a wait EndLongWaits ended, then the request found at once)--> pipelining
//	pipelining   --(anything)------------------------------------------------> pipelining
//	unknown,
//	sequential   --(an answer written, then the request came after it)-------> sequential
//	unknown,
//	sequential   --(otherwise)-----------------------------------------------> unknown
//
// "Came after it": the read of the request's first byte found nothing at first and waited, or
// the wait after the answer ended because the request arrived. A connection's first request has
// no answer before it, so that its read found nothing tells nothing of the client.
type pace uint8

const (
	// paceUnknown: nothing shows that the client waits for its answers; answers do not wait.
	paceUnknown pace = iota
	// paceSequential: the client sent this request only after it had the answer before it;
	// its answer may wait.
	paceSequential
	// pacePipelining: a wait missed a request the client sent before its answer; answers never
	// wait again, however long the client waits between its bursts of requests.
	pacePipelining
)

// signs are what a client connection saw of its client since the last request's first byte,
// for pace.next.
type signs uint8

const (
	signAnswered  signs = 1 << iota // an answer was written
	signFoundNone                   // the read of this request's first byte found nothing, and waited
	signWoke                        // the wait after the answer ended because this request arrived
	signPoked                       // that wait was ended by Conns.EndLongWaits
)

// next is the pace once a request's first byte arrived, after the signs s.
func (p pace) next(s signs) pace {
	switch {
	case p == pacePipelining, s&signPoked != 0 && s&signFoundNone == 0:
		// A wait that EndLongWaits ended, then a read that found the request at once: the
		// request had arrived before the wait began, and the wait missed it.
		return pacePipelining
	case s&signAnswered != 0 && s&(signFoundNone|signWoke) != 0:
		return paceSequential
	}
	return paceUnknown
}

// set sets or clears the signs s.
func (s *signs) set(t signs, on bool) {
	if on {
		*s |= t
	} else {
		*s &^= t
	}
}
