package netio

import (
	"strings"
	"testing"
)

// The request target is taken from a request line whole, without its query, at most
// maxTargetBytes of it; none from a line cut short.
func TestRequestTarget(t *testing.T) {
	long := "/v1/chat/completions/" + strings.Repeat("x", 100)
	for line, want := range map[string]string{
		"POST /v1/messages HTTP/1.1\r\nHost: x\r\n":            "/v1/messages",
		"POST /v1/chat/completions?api-version=1 HTTP/1.1\r\n": "/v1/chat/completions",
		"GET /v1/models HTTP/1.1\r\n":                          "/v1/models",
		"GET http://x/v1/models HTTP/1.1\r\n":                  "http://x/v1/models", // an absolute URI, as sent
		"POST " + long + " HTTP/1.1\r\n":                       long[:maxTargetBytes],
		"POST /v1/messages":                                    "", // no end of the target yet
		"P":                                                    "",
	} {
		if got := requestTarget([]byte(line)); string(got) != want {
			t.Errorf("%q: %q, want %q", line, got, want)
		}
	}
}

// headScan finds a bare LF in a request head however the head is cut into reads, stops at
// the head's end (a body's LFs are not line ends), and skips empty lines before the request line.
func TestHeadScan(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		bare     bool
		ended    bool // the head's end was seen
		body     int  // bytes after the head's end (its size is the rest)
	}{
		{"CRLF head", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", false, true, 0},
		{"CRLF head, a body with bare LFs", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\n\r\n{\n\n}\n\n", false, true, 6},
		{"request line alone", "GET / HTTP/1.0\r\n\r\n", false, true, 0},
		{"empty lines before the request line", "\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n", false, true, 0},
		{"folded header", "GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n", false, true, 0},
		{"a CR before the CRLF is no empty line", "GET / HTTP/1.1\r\nX: a\r\r\n\r\n", false, true, 0},
		{"head not ended", "GET / HTTP/1.1\r\nHost: x\r\n", false, false, 0},
		{"LF only", "GET / HTTP/1.1\nHost: x\n\n", true, false, 0},
		{"CRLF request line, LF headers", "GET / HTTP/1.1\r\nHost: x\n\n", true, false, 0},
		{"LF terminator", "GET / HTTP/1.1\r\nHost: x\r\n\n", true, false, 0},
		{"LF request line", "GET / HTTP/1.1\nHost: x\r\n\r\n", true, false, 0},
		{"LF before the request line", "\nGET / HTTP/1.1\r\n\r\n", true, false, 0},
		{"bare LF after a CR that is not its own", "GET / HTTP/1.1\r\nX: a\r\r\n\n", true, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Whole, then cut in two at every byte, then one byte at a time.
			cuts := [][]string{{tc.in}}
			for i := 1; i < len(tc.in); i++ {
				cuts = append(cuts, []string{tc.in[:i], tc.in[i:]})
			}
			cuts = append(cuts, strings.Split(tc.in, ""))
			for _, parts := range cuts {
				h := headScan{on: true}
				bare := false
				for _, p := range parts {
					if h.on && h.bare([]byte(p)) {
						bare = true
						break
					}
				}
				if bare != tc.bare || !bare && h.on == tc.ended {
					t.Fatalf("read as %q: bare %v, ended %v; want bare %v, ended %v", parts, bare, !h.on, tc.bare, tc.ended)
				}
				// The head's size: to its empty line, the body not counted; all that was
				// scanned while it has not ended.
				if want := len(tc.in) - tc.body; !bare && h.size != want {
					t.Fatalf("read as %q: head size %d, want %d", parts, h.size, want)
				}
			}
		})
	}
}

// BenchmarkHeadScan is the bare-LF scan of an SDK's request head (OpenAI Python's headers).
func BenchmarkHeadScan(b *testing.B) {
	head := []byte("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:4000\r\nAccept-Encoding: gzip, deflate\r\n" +
		"Connection: keep-alive\r\nAccept: application/json\r\nContent-Type: application/json\r\nUser-Agent: OpenAI/Python 1.54.0\r\n" +
		"X-Stainless-Lang: python\r\nX-Stainless-Package-Version: 1.54.0\r\nX-Stainless-OS: Linux\r\nX-Stainless-Arch: x64\r\n" +
		"X-Stainless-Runtime: CPython\r\nX-Stainless-Runtime-Version: 3.12.7\r\nAuthorization: Bearer sk-not-a-key\r\n" +
		"X-Stainless-Async: false\r\nX-Stainless-Retry-Count: 0\r\nContent-Length: 96\r\n\r\n")
	b.SetBytes(int64(len(head)))
	b.ReportAllocs()
	for b.Loop() {
		h := headScan{on: true}
		if h.bare(head) || h.on {
			b.Fatal("misread")
		}
	}
}
