//go:build !linux || failover_portable

package netio

import (
	"net"
	"testing"
)

// sendThenWait writes nothing on the portable path: Send writes all of a request, watched, and
// the answer's wait is Wait's.
func TestPortableSendThenWaitWritesNothing(t *testing.T) {
	a, _ := loopbackPair(t, nil)
	c := newConn(a, a.(*net.TCPConn), true)
	if n, sent, err := c.sendThenWait([]byte("request")); n != 0 || !sent.IsZero() || err != nil {
		t.Fatalf("sendThenWait: %d, %v, %v; want nothing written", n, sent, err)
	}
	c.ExpectLongWaits()
	if waited, err := c.waitWithoutBuffer(); waited || err != nil {
		t.Fatalf("waitWithoutBuffer: %v, %v; want no wait", waited, err)
	}
}
