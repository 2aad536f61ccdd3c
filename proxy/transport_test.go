package proxy

import (
	"errors"
	"io"
	"testing"

	"github.com/llm-failover/failover/classify"
	"github.com/llm-failover/failover/proxy/internal/netio"
)

// Every failure netio names reaches the decision function under classify's name for it.
func TestTransportOf(t *testing.T) {
	want := map[netio.Failure]classify.Transport{
		netio.FailureOther:   classify.TransportOther,
		netio.FailureTimeout: classify.TransportTimeout,
		netio.FailureDNS:     classify.TransportDNS,
		netio.FailureRefused: classify.TransportRefused,
		netio.FailureTLS:     classify.TransportTLS,
		netio.FailureReset:   classify.TransportReset,
	}
	if len(transports) != len(want) {
		t.Fatalf("%d failures named, want %d", len(transports), len(want))
	}
	for f, tr := range want {
		if transports[f] != tr {
			t.Errorf("failure %d: %v, want %v", f, transports[f], tr)
		}
	}
	for err, tr := range map[error]classify.Transport{
		netio.ErrDeadline:      classify.TransportTimeout,
		netio.ErrBrokenChunk:   classify.TransportReset,
		io.ErrUnexpectedEOF:    classify.TransportReset,
		errors.New("anything"): classify.TransportOther,
	} {
		if got := transportOf(err); got != tr {
			t.Errorf("%v: %v, want %v", err, got, tr)
		}
	}
}
