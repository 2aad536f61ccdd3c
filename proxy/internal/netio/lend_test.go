package netio

import (
	"testing"

	"github.com/valyala/fasthttp"
)

// takeLent empties bodyBuffers (other tests' servers put theirs there too: far fewer than
// the Gets here) and counts the buffers in it that are body, empty.
func takeLent(body []byte) int {
	n := 0
	for range 1024 {
		h := bodyBuffers.Get()
		if len(*h) == 0 && cap(*h) == cap(body) && &(*h)[:1][0] == &body[0] {
			n++
		}
	}
	return n
}

// A body lent to fasthttp (LendBody) comes back to bodyBuffers when the connection reads again
// or closes, whichever comes first, and only once.
func TestLentBodyComesBack(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops puts at random under the race detector")
	}
	for _, end := range []string{"read", "close"} {
		t.Run(end, func(t *testing.T) {
			c, peer := clientPair(t)
			var resp fasthttp.Response
			body := make([]byte, 5, 4096)
			copy(body, "hello")
			c.LendBody(&resp, body)
			if string(resp.Body()) != "hello" {
				t.Fatalf("answer body %q", resp.Body())
			}
			if end == "read" {
				peer.Write([]byte("G"))
				if _, err := c.Read(make([]byte, 1)); err != nil {
					t.Fatal(err)
				}
			} else {
				c.Close()
			}
			if n := takeLent(body); n != 1 {
				t.Fatalf("the lent buffer is in bodyBuffers %d times, want once", n)
			}
			c.Close() // after a read, or a second time: nothing more to put
			if n := takeLent(body); n != 0 {
				t.Fatalf("the lent buffer came back again (%d)", n)
			}
		})
	}
}
