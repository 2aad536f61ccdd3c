package netio

import (
	"bytes"
	"errors"
)

// ErrBareLF is the read error of a connection whose request head has a bare LF; fasthttp hands
// it (wrapped) to the server's error handler, which answers 400.
var ErrBareLF = errors.New("a line of the request head ends in LF without CR")

// headScan follows a request head through the reads that deliver it, looking for a bare LF:
// a line that ends in LF without CR. fasthttp takes a bare LF as a line end within a head but
// waits for CRLFCRLF to end one, so a client that ends its lines with LF alone would get no
// answer until the read timeout (120 s) and then a 408; and a head it does end, with a bare LF
// inside, is read in a way another server on the path may not share (request smuggling
// hides in such differences). Both are refused at once, with 400, as nginx and HAProxy do.
//
// The scan starts at a request's first byte and stops at the empty line that ends the head:
// a body is not scanned. Empty lines before the request line are skipped, as fasthttp skips
// them (RFC 9112 section 2.2). Bytes are looked at in place, once, with IndexByte: no copy. A
// head that arrives pipelined behind another request is read by fasthttp from its own buffer,
// without a read here, and is not scanned. Not safe for concurrent use.
type headScan struct {
	on    bool // a head is being read: its end is not seen yet
	begun bool // a line other than an empty one was seen (the request line)
	line  int  // bytes of the current line scanned so far
	cr    bool // the last byte scanned was CR
	size  int  // bytes scanned, the empty lines before the request line included: the head's size once it ended
}

// bare scans b, the head's next bytes, and reports whether a line in it ends in a bare LF.
// It turns the scan off at the head's end.
func (h *headScan) bare(b []byte) bool {
	h.size += len(b) // less what follows the head's end, below
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			h.line += len(b)
			h.cr = b[len(b)-1] == '\r'
			return false
		}
		if i > 0 {
			h.cr = b[i-1] == '\r'
		}
		if !h.cr {
			return true
		}
		empty := h.line+i == 1 // the line was its CR alone
		b = b[i+1:]
		h.line, h.cr = 0, false
		switch {
		case !empty:
			h.begun = true
		case h.begun:
			h.on = false
			h.size -= len(b)
			return false
		}
	}
	return false
}

// maxTargetBytes bounds what a client connection keeps of a request line's target
// (ClientConn.RequestTarget): the start of a path, enough to tell an API by its prefix.
const maxTargetBytes = 64

// requestTarget returns the request target of the request line at the start of b, without
// its query, at most maxTargetBytes of it; nil when b holds no whole one.
func requestTarget(b []byte) []byte {
	sp := bytes.IndexByte(b, ' ')
	if sp < 0 {
		return nil
	}
	target := b[sp+1:]
	end := bytes.IndexAny(target, " ?\r\n")
	if end < 0 {
		return nil
	}
	return target[:min(end, maxTargetBytes)]
}
