package proxytest

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"
)

// A refused address refuses, and keeps refusing: no listener, in this process or another,
// can be given its port while the test binary runs.
func TestRefusedAddrHoldsItsPort(t *testing.T) {
	addr := RefusedAddr()
	for range 3 {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			t.Fatalf("dial %s: connected, want refused", addr)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("dial %s: %v, want connection refused", addr, err)
		}
	}
	if ln, err := net.Listen("tcp", addr); err == nil {
		ln.Close()
		t.Fatalf("a listener was given the refused port %s", addr)
	}
	if a, b := RefusedAddr(), RefusedAddr(); a == b || a == addr {
		t.Errorf("refused addresses repeat: %s %s %s", addr, a, b)
	}
}
