package stream

import (
	"bytes"
	"strings"
	"testing"
)

// splitBy cuts in into chunks whose sizes come from cuts (each byte a size of
// 1 to 64, cycled), so the fuzzer explores chunkings as well as inputs.
func splitBy(in, cuts []byte) [][]byte {
	if len(cuts) == 0 || len(in) == 0 {
		return [][]byte{in}
	}
	var out [][]byte
	for i := 0; len(in) > 0; i++ {
		n := min(int(cuts[i%len(cuts)]%64)+1, len(in))
		out = append(out, in[:n])
		in = in[n:]
	}
	return out
}

// FuzzFramer checks that any chunking of the input yields the events of one
// whole Next loop, and that both match the naive reference framer.
func FuzzFramer(f *testing.F) {
	f.Add([]byte("data: a\r\n\r\n"), []byte{0})
	f.Add([]byte("event: x\rdata: 1\r\rdata\n:c\n\n"), []byte{1, 2})
	f.Add([]byte("\xEF\xBB\xBFdata: a\n\nerror: {}\n\n"), []byte{1, 1, 3})
	f.Fuzz(checkFramerInput)
}

// checkFramerInput is FuzzFramer's check of one input.
func checkFramerInput(t *testing.T, in, cuts []byte) {
	for _, limit := range []int{0, 5} {
		want := refFrame(in, limit)
		one := frameChunks(limit, [][]byte{in})
		if strings.Join(one, "\n") != strings.Join(want, "\n") {
			t.Fatalf("limit %d, whole input:\n got %q\nwant %q", limit, one, want)
		}
		got := frameChunks(limit, splitBy(in, cuts))
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("limit %d, chunked:\n got %q\nwant %q", limit, got, want)
		}
	}
}

type gateResult struct {
	decision Decision
	reason   CommitReason
	errData  string
	events   int
	finished bool
	failed   bool
}

func runGate(g *Gate, fam Family, peek int, chunks [][]byte) gateResult {
	g.Reset(fam, peek)
	d := feedStream(g, chunks)
	if d == Hold {
		d = g.End()
	}
	return gateResult{d, g.Reason(), string(g.ErrorData()), len(g.Events()), g.Finished(), g.Failed()}
}

// fuzzGateSeeds are FuzzGate's seeds beside its corpus (testdata/fuzz/FuzzGate).
var fuzzGateSeeds = []fuzzInput{
	{uint8(Chat), []byte("data: {\"error\":{}}\n\n"), []byte{3}},
	{uint8(Messages), []byte("event: error\ndata: x\n\n"), []byte{0}},
	{uint8(Chat), []byte(": padding padding\n\ndata: {\"error\":{}}\n\n"), []byte{7}},
	{uint8(Chat), []byte("data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\"a\"}},{\"index\":0,\"finish_reason\":\"stop\"}]}\n\ndata: {\"choices\":[{\"index\":1,\"finish_reason\":\"length\"}]}\n\ndata: {\"choices\":[],\"usage\":{}}\n\n"), []byte{5}},
	{uint8(Other), []byte("data: {\"type\":\"speech.audio.delta\",\"audio\":\"AA\"}\n\nevent: x.done\ndata: {\"type\":\"speech.audio.done\"}\n\n: ping\n"), []byte{9}},
}

// FuzzGate checks that the Gate never panics and that its decision, reason,
// ErrorData, Events, Finished and Failed do not depend on how the input is
// chunked, with a peek limit the input never reaches and with limits it does
// (only events within the limit are judged, wherever the reads were cut).
func FuzzGate(f *testing.F) {
	for _, s := range fuzzGateSeeds {
		f.Add(s.fam, s.data, s.cuts)
	}
	f.Fuzz(checkGateInput)
}

// checkGateInput is FuzzGate's check of one input.
func checkGateInput(t *testing.T, fam uint8, in, cuts []byte) {
	family := Family(fam % 5)
	var g Gate
	for _, peek := range []int{len(in) + 1, 16, len(in)/2 + 1} {
		want := runGate(&g, family, peek, [][]byte{in})
		if peek > len(in) && !bytes.Equal(g.Held(), in) {
			t.Fatal("Held() is not the input")
		}
		got := runGate(&g, family, peek, splitBy(in, cuts))
		if got != want {
			t.Fatalf("%v, peek %d: chunked %+v, whole %+v", family, peek, got, want)
		}
		if want.decision == Hold {
			t.Fatal("End left the gate holding")
		}
		if (want.decision == Error) != (want.errData != "" || g.ErrorData() != nil) {
			t.Fatalf("%v: decision %v with ErrorData %q", family, want.decision, want.errData)
		}
		if want.events > peek {
			t.Fatalf("%v: an event ending at %d past the peek limit %d was judged", family, want.events, peek)
		}
	}
	// Small peek limit: no panic, Events is a prefix of Held, and the
	// bytes held never exceed the limit by more than the last chunk.
	chunks := splitBy(in, cuts)
	g.Reset(family, 16)
	for _, c := range chunks {
		before := len(g.Held())
		d := g.Feed(c)
		if d != Commit && d != Hold {
			break
		}
		if d == Commit {
			if g.Reason() == ReasonPeekLimit && before >= 16 {
				t.Fatalf("committed for the peek limit only at %d bytes", len(g.Held()))
			}
			break
		}
		if len(g.Held()) >= 16 {
			t.Fatalf("holding %d bytes past the peek limit", len(g.Held()))
		}
	}
	if !bytes.HasPrefix(g.Held(), g.Events()) {
		t.Fatal("Events() is not a prefix of Held()")
	}
	if len(in) == 0 || in[0] != bom[0] { // openRecord knows no byte-order mark
		checkWhole(t, family, in, chunks)
	}
}

// checkWhole checks HeldWhole on commit and Observe after it against openRecord: the bytes
// that end between events, wherever the reads were cut (nothing is framed once the terminal
// event went by: all of it counts as whole).
func checkWhole(t *testing.T, family Family, in []byte, chunks [][]byte) {
	var g Gate
	open := openRecords(in)
	for _, peek := range []int{0, 16, len(in)/2 + 1} {
		g.Reset(family, peek)
		d, sent, off := Hold, 0, 0
		for _, c := range chunks {
			if d != Commit {
				if d = g.Feed(c); d == Commit {
					sent = g.HeldWhole()
				}
			} else if whole := g.Observe(c); whole > 0 {
				sent = off + whole
			}
			off += len(c)
			if d == Commit && !g.finished && sent != open[off] {
				t.Fatalf("%v, peek %d: after %d bytes, %d are whole; want %d", family, peek, off, sent, open[off])
			}
		}
	}
}
