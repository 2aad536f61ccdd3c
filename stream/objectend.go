package stream

import "bytes"

// objectEnd follows the shape of an event's data past the capture limit, where the Framer keeps
// no bytes: whether it is one JSON object whose closing brace arrived, with nothing but JSON
// whitespace after it. A body that ends properly inside such an event lacks only the event's
// blank line (README, Streams: an event whose blank line the body lacks); one cut short inside it
// leaves the object open. It reads brackets and strings only (not scalars, commas or colons):
// enough to tell an object that ended from one cut short, without parsing it. Fed in pieces,
// under any split; it allocates nothing.
type objectEnd struct {
	on    bool   // following: the data outgrew the capture (the Framer feeds it every byte, in order)
	state uint8  // where the bytes fed so far stand
	depth uint8  // open brackets
	kinds uint64 // bit i: the bracket open at depth i+1 is '{' (else '[')
}

const (
	oeBefore   uint8 = iota // whitespace so far
	oeInside                // inside the object, outside strings
	oeString                // inside a string
	oeEscape                // inside a string, just past a backslash
	oeAfter                 // the object closed: only whitespace may follow
	oeNotWhole              // not one whole object (another value, a bracket mismatch, too deep, bytes after it)
)

// maxObjectDepth is how deep objectEnd follows brackets (one bit each); data nested deeper is
// taken as not whole.
const maxObjectDepth = 64

func (o *objectEnd) reset() { *o = objectEnd{on: true} }

// whole reports that the data fed is one JSON object, ended.
func (o *objectEnd) whole() bool { return o.on && o.state == oeAfter }

// feed reads the next piece of the data.
func (o *objectEnd) feed(b []byte) {
	state, depth, kinds := o.state, o.depth, o.kinds
	i, quote := 0, -2 // quote: the index of the next '"' in b at or after i, -1 none, -2 not looked for
	for i < len(b) && state != oeNotWhole {
		switch state {
		case oeBefore, oeAfter:
			c := b[i]
			i++
			switch {
			case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			case c == '{' && state == oeBefore:
				state, depth, kinds = oeInside, 1, 1
			default:
				state = oeNotWhole
			}
		case oeInside:
			for i < len(b) && state == oeInside {
				c := b[i]
				i++
				switch c {
				case '"':
					state = oeString
				case '{', '[':
					if depth == maxObjectDepth {
						state = oeNotWhole
						break
					}
					if c == '{' {
						kinds |= 1 << depth
					} else {
						kinds &^= 1 << depth
					}
					depth++
				case '}', ']':
					depth--
					if opensObject := kinds>>depth&1 == 1; opensObject != (c == '}') {
						state = oeNotWhole
					} else if depth == 0 {
						state = oeAfter
					}
				}
			}
		case oeString:
			// Most of an event's bytes are inside strings: vectorised scans find the next
			// quote (kept while it lies ahead), then any backslash before it.
			if quote < i && quote != -1 {
				quote = bytes.IndexByte(b[i:], '"')
				if quote >= 0 {
					quote += i
				}
			}
			end := len(b)
			if quote >= 0 {
				end = quote
			}
			if s := bytes.IndexByte(b[i:end], '\\'); s >= 0 {
				i, state = i+s+1, oeEscape
			} else if quote >= 0 {
				i, state = quote+1, oeInside
			} else {
				i = len(b)
			}
		case oeEscape:
			i++ // the escaped byte (\uXXXX's digits are read as string bytes)
			state = oeString
		}
	}
	o.state, o.depth, o.kinds = state, depth, kinds
}
