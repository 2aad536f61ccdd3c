package jsonscan

// A Cursor walks the elements of one JSON object or array in place: an object's members (the
// key, then the value) or an array's values, one at a time, each value skipped only when the
// walk moves past it, so a caller that stops at a member never pays for the rest.
//
//	var c jsonscan.Cursor
//	for ok := c.OpenObject(b, 0); ok && c.Next(); {
//		switch string(c.Key()) { ... c.Start(), c.Value() ... }
//	}
//	end := c.End() // past the closing brace, or -1
//
// The walked container counts as the outermost: its values may nest MaxDepth-1 deep. A Cursor
// keeps a view of b, never a copy, and is ready for use after OpenObject or OpenArray. It is a
// small value meant to live on its caller's stack, and is not safe for concurrent use.
type Cursor struct {
	b      []byte
	key    int  // where the current member's key starts (after its quote), -1 for none
	keyEnd int  // where it ends (at its closing quote)
	next   int  // where the element after the current one is looked for, once the value is skipped
	value  int  // where the current element's value starts
	end    int  // where the walk ended: past the closing bracket, or -1
	close  byte // '}' or ']'
	first  bool // no element was read yet
	done   bool // the walk is over (End is known)
}

// OpenObject starts a walk of the object at b[i:] (after JSON whitespace). It reports false,
// and the walk is over, when no object starts there.
func (c *Cursor) OpenObject(b []byte, i int) bool { return c.open(b, i, '{') }

// OpenArray starts a walk of the array at b[i:] (after JSON whitespace). It reports false, and
// the walk is over, when no array starts there.
func (c *Cursor) OpenArray(b []byte, i int) bool { return c.open(b, i, '[') }

func (c *Cursor) open(b []byte, i int, open byte) bool {
	i = SkipSpace(b, i)
	// Field by field: a composite literal of this many fields is built on the stack and copied
	// (golang/go#67957), and the copy stalls on its own partial writes (store forwarding).
	c.b = b
	c.key, c.keyEnd = -1, -1
	c.next, c.value, c.end = i+1, -1, -1
	c.close, c.first = open+2, true // '}' is '{'+2, ']' is '['+2
	c.done = i >= len(b) || b[i] != open
	return !c.done
}

// Next moves to the next element: past the current one's value (skipped now unless Value or
// Skipped did it), the comma, and for an object the member's key and colon. It reports true
// when the element's value begins in b (b[Start()] is its first byte, a byte a JSON value can
// start with), false when there is none: at the closing bracket, or where b stops being
// well-formed JSON or ends. End then tells which.
func (c *Cursor) Next() bool {
	if c.done {
		return false
	}
	if c.value >= 0 && c.next < 0 && !c.skip() {
		return false
	}
	b := c.b
	i := SkipSpace(b, c.next)
	if i >= len(b) {
		return c.stop(-1)
	}
	if b[i] == c.close {
		return c.stop(i + 1) // right after the opening bracket or a value ("[1,]" fails below)
	}
	if !c.first {
		if b[i] != ',' {
			return c.stop(-1)
		}
		i = SkipSpace(b, i+1)
	}
	c.first = false
	if c.close == '}' {
		if i >= len(b) || b[i] != '"' {
			return c.stop(-1)
		}
		ks := i
		if i = SkipString(b, i); i < 0 {
			return c.stop(-1)
		}
		c.key, c.keyEnd = ks+1, i-1
		if i = SkipSpace(b, i); i >= len(b) || b[i] != ':' {
			return c.stop(-1)
		}
		i = SkipSpace(b, i+1)
	}
	if i >= len(b) || !valueStart[b[i]] {
		return c.stop(-1)
	}
	c.value, c.next = i, -1
	return true
}

// stop ends the walk at end (past the closing bracket, or -1) and reports false.
func (c *Cursor) stop(end int) bool {
	c.done, c.end, c.key = true, end, -1
	return false
}

// skip skips the current value; false when it is not whole and valid (the walk is then over).
func (c *Cursor) skip() bool {
	switch c.b[c.value] { // most values are strings or numbers: no detour through skipValue
	case '"':
		c.next = SkipString(c.b, c.value)
	case '{', '[':
		c.next = skipValue(c.b, c.value, MaxDepth-1)
	default:
		c.next = skipScalar(c.b, c.value)
	}
	if c.next < 0 {
		return c.stop(-1)
	}
	return true
}

// Key returns the current member's key as sent: the contents of its string literal, without
// the quotes, escapes kept (compare it with StringIs, decode it with AppendString). It is nil
// for an array's values and once the walk is over. It is a view into b.
func (c *Cursor) Key() []byte {
	if c.key < 0 {
		return nil
	}
	return c.b[c.key:c.keyEnd]
}

// Start returns the index in b of the first byte of the current element's value (after Next
// reported true).
func (c *Cursor) Start() int { return c.value }

// Value skips the current element's value and returns it, a view into b from Start (a string
// with its quotes). It returns nil when the value is not whole and valid JSON, or b ends
// inside it; the walk is then over.
func (c *Cursor) Value() []byte {
	if c.done || c.value < 0 {
		return nil
	}
	if c.next < 0 && !c.skip() {
		return nil
	}
	return c.b[c.value:c.next]
}

// Skipped tells c that the current element's value, which the caller walked itself (with a
// Cursor of its own on the same b), ends at end, so that Next does not walk it again. An end
// of -1 means it did not end well-formed: the walk is over.
func (c *Cursor) Skipped(end int) {
	if c.done || c.value < 0 {
		return
	}
	if c.next = end; end < 0 {
		c.stop(-1)
	}
}

// End returns, once Next reported false, the index in b just past the container's closing
// bracket, or -1 when b ends inside the container or stops being well-formed JSON first. While
// the walk goes on it returns -1.
func (c *Cursor) End() int { return c.end }
