package stream

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Every fast path of the package sits in one file with the slow path it shortcuts, and
// slowPaths (gate.go) turns the fast ones off. Each fast path has its own agreement test
// (chat_test.go, tail_test.go, jsonscan/objectend_test.go); the tests here hold the gate as a
// whole to its slow paths: FuzzSlowPaths feeds the same streams to a gate on each and compares
// everything a caller sees, and TestGateSuiteOnSlowPaths runs the gate's own tests again with
// the fast paths off. TestSlowPathsAreTaken shows that the switch reaches every fast path, so
// that the two cannot pass by running the fast paths twice.

// withSlowPaths runs f with every fast path off. The tests of this package do not run in
// parallel, so no other test reads slowPaths meanwhile.
func withSlowPaths(f func()) {
	slowPaths = true
	defer func() { slowPaths = false }()
	f()
}

// gateSuite is the gate's tests, which assert what the Gate and the Framer show, whichever
// path took the work: every Test function in gateSuiteFiles, and the tail's rules. The fast
// paths' own tests are not in it: they call a fast path by name, or count its allocations.
var gateSuite = map[string]func(*testing.T){
	"TestGateFixtures":                          TestGateFixtures,
	"TestGateRules":                             TestGateRules,
	"TestGateErrorUnderAnySplit":                TestGateErrorUnderAnySplit,
	"TestGateHalfAnErrorIsNotAnError":           TestGateHalfAnErrorIsNotAnError,
	"TestGateEndWithTrailingErrorRecord":        TestGateEndWithTrailingErrorRecord,
	"TestGateEndWithNothing":                    TestGateEndWithNothing,
	"TestGatePeekLimit":                         TestGatePeekLimit,
	"TestGatePeekLimitIndependentOfReads":       TestGatePeekLimitIndependentOfReads,
	"TestGateImageCommitsAtHeaders":             TestGateImageCommitsAtHeaders,
	"TestGateAfterDecision":                     TestGateAfterDecision,
	"TestGateResetReuses":                       TestGateResetReuses,
	"TestGateFinished":                          TestGateFinished,
	"TestGateFinishedRules":                     TestGateFinishedRules,
	"TestGateFailed":                            TestGateFailed,
	"TestGateFinishBeforeCommit":                TestGateFinishBeforeCommit,
	"TestGateObserveBeforeCommitIsIgnored":      TestGateObserveBeforeCommitIsIgnored,
	"TestGateObserveDoesNotBuffer":              TestGateObserveDoesNotBuffer,
	"TestNames":                                 TestNames,
	"TestGateReplaceHeld":                       TestGateReplaceHeld,
	"TestGateShed":                              TestGateShed,
	"TestGateObserveWhole":                      TestGateObserveWhole,
	"TestGateHeldWhole":                         TestGateHeldWhole,
	"TestOpenEventEnd":                          TestOpenEventEnd,
	"TestOpenEventEndAfterPeekLimit":            TestOpenEventEndAfterPeekLimit,
	"TestOpenEventEndAtEveryCut":                TestOpenEventEndAtEveryCut,
	"TestFramer":                                TestFramer,
	"TestFramerCRAtChunkBoundary":               TestFramerCRAtChunkBoundary,
	"TestFramerNextStopsAfterFirstEvent":        TestFramerNextStopsAfterFirstEvent,
	"TestFramerResetForgetsPartialRecord":       TestFramerResetForgetsPartialRecord,
	"TestFramerBuffersStayBounded":              TestFramerBuffersStayBounded,
	"TestFramerMatchesReferenceOnFixtures":      TestFramerMatchesReferenceOnFixtures,
	"TestIndexLineEnd":                          TestIndexLineEnd,
	"TestTailReadsMalformedEventsAsTheGateDoes": TestTailReadsMalformedEventsAsTheGateDoes,
}

// gateSuiteFiles are the test files whose every Test function is in gateSuite.
var gateSuiteFiles = []string{"gate_test.go", "framer_test.go"}

// TestGateSuiteOnSlowPaths runs the gate's tests, and FuzzGate's and FuzzFramer's checks on
// their seed corpora, with every fast path off: what they assert holds on the slow paths too.
func TestGateSuiteOnSlowPaths(t *testing.T) {
	withSlowPaths(func() {
		for _, name := range sortedKeys(gateSuite) {
			t.Run(name, gateSuite[name])
		}
		t.Run("FuzzGate's corpus", func(t *testing.T) {
			for _, in := range fuzzCorpus(t, "FuzzGate") {
				checkGateInput(t, in.fam, in.data, in.cuts)
			}
		})
		t.Run("FuzzFramer's corpus", func(t *testing.T) {
			for _, in := range fuzzCorpus(t, "FuzzFramer") {
				checkFramerInput(t, in.data, in.cuts)
			}
		})
	})
}

// TestGateSuiteIsWhole: a test added to the gate's test files runs on the slow paths too.
func TestGateSuiteIsWhole(t *testing.T) {
	for _, file := range gateSuiteFiles {
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Test") && gateSuite[fn.Name.Name] == nil {
				t.Errorf("%s: %s is not in gateSuite", file, fn.Name.Name)
			}
		}
	}
}

// FuzzSlowPaths feeds one stream, in one read and in reads cut by cuts, to a gate of each
// family on the fast paths and to one on the slow paths, with a peek limit the stream never
// reaches and with limits it does, and fails when anything a caller sees differs (gateView).
// Seeds: every fixture as each family, whole and without its last blank line, and FuzzGate's
// seeds and corpus.
func FuzzSlowPaths(f *testing.F) {
	for _, path := range fixturePaths(f) {
		in := readFile(f, path)
		open := bytes.TrimRight(in, "\r\n") // the body ends inside its last event
		for fam := range NumFamilies {
			f.Add(uint8(fam), in, []byte{byte(len(in) / 3)})
			f.Add(uint8(fam), open, []byte{byte(len(in) / 5)})
		}
	}
	for _, s := range fuzzGateSeeds {
		f.Add(s.fam, s.data, s.cuts)
	}
	for _, s := range fuzzCorpus(f, "FuzzGate") {
		f.Add(s.fam, s.data, s.cuts)
	}
	f.Fuzz(func(t *testing.T, fam uint8, in, cuts []byte) {
		family := Family(fam % uint8(NumFamilies))
		for _, peek := range []int{len(in) + 1, 16, len(in)/2 + 1} {
			for _, reads := range [][][]byte{{in}, splitByLarge(in, cuts), splitBy(in, cuts)} {
				fast := gateView(family, peek, reads)
				var slow string
				withSlowPaths(func() { slow = gateView(family, peek, reads) })
				if fast != slow {
					t.Fatalf("%v, peek %d, %d reads of %q:\nfast paths %s\nslow paths %s",
						family, peek, len(reads), in, fast, slow)
				}
			}
		}
	})
}

// gateView feeds reads to a new gate of family f, as the proxy does (Feed until a decision,
// End on a stream that ends before one, Observe after commit), and returns everything a caller
// sees, in order: each decision, Events, ErrorData, Reason, HeldWhole, each Observe's whole
// bytes, Finished, Failed and OpenEventEnd.
func gateView(f Family, peek int, reads [][]byte) string {
	var g Gate
	g.Reset(f, peek)
	var b strings.Builder
	d := Hold
	for _, r := range reads {
		if d == Commit {
			fmt.Fprintf(&b, " observe %d, finished %v, failed %v;", g.Observe(r), g.Finished(), g.Failed())
			continue
		}
		if d = g.Feed(r); d != Hold {
			fmt.Fprintf(&b, "%v: events %d, error %q, reason %v, whole %d;",
				d, len(g.Events()), g.ErrorData(), g.Reason(), g.HeldWhole())
		}
	}
	if d == Hold {
		d = g.End()
		fmt.Fprintf(&b, "end %v: events %d, error %q;", d, len(g.Events()), g.ErrorData())
	}
	fmt.Fprintf(&b, " finished %v, failed %v, open end %q", g.Finished(), g.Failed(), g.OpenEventEnd())
	return b.String()
}

// TestSlowPathsAreTaken: each fast path takes its work on an input it is made for, and none
// does with the fast paths off.
func TestSlowPathsAreTaken(t *testing.T) {
	for _, probe := range fastPathProbes {
		if probe.countsAllocs && raceEnabled {
			continue // allocation counts are not meaningful under the race detector
		}
		if !probe.taken(t) {
			t.Errorf("%s: the fast path did not take an input it is made for", probe.name)
		}
		withSlowPaths(func() {
			if probe.taken(t) {
				t.Errorf("%s: the fast path took its input with the fast paths off", probe.name)
			}
		})
	}
}

// fastPathProbes tell, each of one fast path, whether it took the work on an input made for it.
var fastPathProbes = []struct {
	name         string
	countsAllocs bool
	taken        func(t *testing.T) bool
}{
	{"scanChat: a chunk classified without a parse", true, func(t *testing.T) bool {
		// The parse takes a parser from a pool that two collections empty: it allocates one.
		g := Gate{family: Chat}
		ev := Event{Data: []byte(`{"choices":[{"delta":{"content":"Hi"}}]}`), HasData: true}
		return testing.AllocsPerRun(5, func() {
			runtime.GC()
			runtime.GC()
			g.classify(ev)
		}) == 0
	}},
	{"skipQuiet: quiet events passed over in one run", false, func(t *testing.T) bool {
		var g Gate
		g.Reset(Chat, bigPeek)
		if g.Feed([]byte(quietOpening)) != Commit {
			t.Fatal("the opening did not commit")
		}
		return g.skipQuietDry([]byte(quietChunk(`{"content":"a"}`, "null"))) > 0
	}},
	{"endsStream: a read that ends the stream", false, func(t *testing.T) bool {
		var g Gate
		g.Reset(Chat, bigPeek)
		return g.endsStream(benchChatBody())
	}},
	{"chunkChangesNothing: a chunk's walk spared", false, func(t *testing.T) bool {
		// The walk sets typedDone from each chunk it reads (false for a chat chunk, which has no
		// type); a spared walk leaves it as it was.
		g := Gate{family: Chat, choicesSeen: 1, typedDone: true}
		g.noteEnd(Event{Data: []byte(`{"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}`)})
		return g.typedDone
	}},
	{"the Framer: the shape of an event that ends in its read not fed", false, func(t *testing.T) bool {
		var f Framer
		f.Reset(8)
		if _, ok := f.Next([]byte(`data: {"text":"past the capture"}` + "\n\n")); !ok {
			t.Fatal("no event")
		}
		return !f.shape.Whole()
	}},
}

// fuzzInput is one input of FuzzGate (all three arguments) or FuzzFramer (data and cuts).
type fuzzInput struct {
	fam        uint8
	data, cuts []byte
}

// fuzzCorpus reads the seed corpus of FuzzGate or FuzzFramer (testdata/fuzz/<target>: files
// of the form "go test fuzz v1", then one Go literal an argument, a line).
func fuzzCorpus(t testing.TB, target string) []fuzzInput {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("testdata", "fuzz", target, "*"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("the corpus of %s: %v (%d files)", target, err, len(paths))
	}
	var out []fuzzInput
	for _, path := range paths {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var in fuzzInput
		var bytesArgs [][]byte
		for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n")[1:] {
			typ, lit, _ := strings.Cut(strings.TrimSuffix(line, ")"), "(")
			switch typ {
			case "byte":
				c, _, tail, err := strconv.UnquoteChar(strings.Trim(lit, "'"), '\'')
				if err != nil || tail != "" {
					t.Fatalf("%s: cannot read %q", path, line)
				}
				in.fam = byte(c)
			case "[]byte":
				s, err := strconv.Unquote(lit)
				if err != nil {
					t.Fatalf("%s: cannot read %q", path, line)
				}
				bytesArgs = append(bytesArgs, []byte(s))
			default:
				t.Fatalf("%s: an argument of type %s", path, typ)
			}
		}
		if len(bytesArgs) != 2 {
			t.Fatalf("%s: %d []byte arguments, want 2", path, len(bytesArgs))
		}
		in.data, in.cuts = bytesArgs[0], bytesArgs[1]
		out = append(out, in)
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
