package proxy

// W3C Trace Context (https://www.w3.org/TR/trace-context/): the client's traceparent and
// tracestate headers are forwarded unchanged on every attempt, as any other header is
// (docs/decisions.md, Headers), and the trace id of a valid traceparent goes into the request's log
// record (docs/operations.md, The request record), so that the ledger joins the application's traces.
// The sidecar makes no span of its own and invents no trace id when the client sent none.

var headerTraceparent = []byte("traceparent")

// traceparentLen is the length of a version 00 traceparent: version "-" trace-id "-"
// parent-id "-" trace-flags, 2+1+32+1+16+1+2.
const traceparentLen = 55

// traceIDOf returns the trace id of a traceparent header value (a view into v), or nil when v
// is not a valid one. As the specification's section on versioning says (Trace Context,
// 3.2.4): version 00 is exactly the four fields; a later version is read for its first four
// fields, and may go on only after a '-'; version ff is invalid. Every field is lower-case hex,
// and an all-zero trace id or parent id is invalid. It allocates nothing.
func traceIDOf(v []byte) []byte {
	if len(v) < traceparentLen || v[2] != '-' || v[35] != '-' || v[52] != '-' {
		return nil
	}
	version, traceID, parentID, flags := v[0:2], v[3:35], v[36:52], v[53:55]
	if !lowerHex(version) || !lowerHex(traceID) || !lowerHex(parentID) || !lowerHex(flags) ||
		allZero(traceID) || allZero(parentID) {
		return nil
	}
	switch {
	case version[0] == 'f' && version[1] == 'f':
		return nil
	case version[0] == '0' && version[1] == '0':
		if len(v) != traceparentLen {
			return nil
		}
	case len(v) > traceparentLen && v[traceparentLen] != '-':
		return nil
	}
	return traceID
}

// lowerHex reports whether b is made of lower-case hex digits only.
func lowerHex(b []byte) bool {
	for _, c := range b {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// allZero reports whether every byte of b is '0'.
func allZero(b []byte) bool {
	for _, c := range b {
		if c != '0' {
			return false
		}
	}
	return true
}
