package classify

import (
	"bytes"
	"regexp"
	"regexp/syntax"
	"unicode/utf8"
)

// A rule group holds up to 64 patterns of up to 4 KiB, matched against bodies of up to the
// peek limit. Running 64 regular expressions over every answer costs milliseconds (Go's
// engines scan the whole text once per pattern). Most patterns, though, cannot match unless
// some literal occurs in the text: "(?i)content.filter" needs "content" and "filter",
// "(a|b)c" needs "ac" or "bc"... prefilter derives, per pattern, a set of literals of which
// every match contains at least one, compiles all of them into one Aho-Corasick automaton,
// and in a single pass over the body tells which patterns can possibly match. Only those run.
//
// The automaton compares ASCII case-insensitively, which is a superset of both exact and
// (?i) matching for ASCII. Literals that (?i) could match outside ASCII (any non-ASCII folded
// rune; and k/s, which fold to U+212A KELVIN SIGN and U+017F LONG S) are handled so that the
// prefilter never hides a real match: the former give up on the literal, the latter make the
// pattern a candidate whenever the body holds one of those two signs.

// maxPrefilterCells bounds the automaton's transition table (states × byte classes), about
// 32 MiB of int32; a larger rule set runs every pattern, as without a prefilter.
const maxPrefilterCells = 8 << 20

// minLiteral is the shortest literal worth filtering on; shorter ones match too often.
const minLiteral = 3

var (
	kelvinSign = []byte("\u212a")
	longS      = []byte("\u017f")
)

// prefilter is immutable after newPrefilter and safe for concurrent use.
type prefilter struct {
	always uint64 // patterns without a literal set: always candidates
	foldKS uint64 // patterns whose folded literals contain k or s
	all    uint64 // every pattern that has a literal set

	classes [256]uint8 // byte (lower-cased) → class; 0 = a byte no literal has
	nclass  int
	next    []int32  // state*nclass + class → next state
	out     []uint64 // state → patterns with a literal ending here (fail links folded in)
}

// newPrefilter builds the automaton for up to 64 patterns (nil patterns are never candidates).
func newPrefilter(patterns []*regexp.Regexp) *prefilter {
	p := &prefilter{}
	type lit struct {
		text []byte
		rule int
	}
	var lits []lit
	for i, re := range patterns {
		if re == nil {
			continue
		}
		set, fold, ok := requiredLiterals(re)
		if !ok {
			p.always |= 1 << i
			continue
		}
		p.all |= 1 << i
		for _, s := range set {
			b := lower([]byte(s))
			lits = append(lits, lit{b, i})
			if fold && (bytes.IndexByte(b, 'k') >= 0 || bytes.IndexByte(b, 's') >= 0) {
				p.foldKS |= 1 << i
			}
		}
	}
	if len(lits) == 0 {
		return p
	}
	// Byte classes: one per distinct byte in the literals, 0 for everything else.
	for _, l := range lits {
		for _, c := range l.text {
			if p.classes[c] == 0 {
				p.nclass++
				p.classes[c] = uint8(p.nclass)
			}
		}
	}
	p.nclass++
	// The trie, then breadth-first fail links folded into a dense transition table.
	type node struct {
		child map[uint8]int32
		out   uint64
	}
	nodes := []node{{child: map[uint8]int32{}}}
	for _, l := range lits {
		s := int32(0)
		for _, c := range l.text {
			cl := p.classes[c]
			n, ok := nodes[s].child[cl]
			if !ok {
				n = int32(len(nodes))
				nodes = append(nodes, node{child: map[uint8]int32{}})
				nodes[s].child[cl] = n
			}
			s = n
		}
		nodes[s].out |= 1 << l.rule
	}
	if len(nodes)*p.nclass > maxPrefilterCells {
		p.always |= p.all
		p.all, p.foldKS = 0, 0
		return p
	}
	p.next = make([]int32, len(nodes)*p.nclass)
	p.out = make([]uint64, len(nodes))
	fail := make([]int32, len(nodes))
	queue := []int32{0}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		p.out[s] = nodes[s].out | p.out[fail[s]]
		for cl := 0; cl < p.nclass; cl++ {
			if n, ok := nodes[s].child[uint8(cl)]; ok {
				if s != 0 {
					fail[n] = p.next[int(fail[s])*p.nclass+cl]
				}
				p.next[int(s)*p.nclass+cl] = n
				queue = append(queue, n)
			} else if s != 0 {
				p.next[int(s)*p.nclass+cl] = p.next[int(fail[s])*p.nclass+cl]
			}
		}
	}
	return p
}

// candidates returns the patterns that may match body: one pass, no allocation.
func (p *prefilter) candidates(body []byte) uint64 {
	found := p.always
	if p.all == 0 {
		return found
	}
	want := p.all
	s := int32(0)
	next, nclass, classes := p.next, p.nclass, &p.classes
	for _, c := range body {
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		s = next[int(s)*nclass+int(classes[c])]
		if o := p.out[s]; o != 0 {
			found |= o
			if found&want == want {
				return found
			}
		}
	}
	if p.foldKS&^found != 0 && (bytes.Contains(body, kelvinSign) || bytes.Contains(body, longS)) {
		found |= p.foldKS
	}
	return found
}

func lower(b []byte) []byte {
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return b
}

// requiredLiterals derives a set of strings such that every match of re contains at least
// one of them; ok is false when no useful set exists (the pattern can match without any
// literal of minLiteral bytes). fold reports that some literal came from (?i).
func requiredLiterals(re *regexp.Regexp) (set []string, fold, ok bool) {
	tree, err := syntax.Parse(re.String(), syntax.Perl)
	if err != nil {
		return nil, false, false
	}
	l := literalsOf(tree.Simplify())
	if !l.ok || len(l.set) == 0 || len(l.set) > 256 {
		return nil, false, false
	}
	for _, s := range l.set {
		if len(s) < minLiteral {
			return nil, false, false
		}
	}
	return l.set, l.fold, true
}

type literals struct {
	set  []string
	fold bool
	ok   bool
}

// literalsOf walks the syntax tree (see requiredLiterals).
func literalsOf(re *syntax.Regexp) literals {
	switch re.Op {
	case syntax.OpLiteral:
		fold := re.Flags&syntax.FoldCase != 0
		for _, r := range re.Rune {
			if fold && r >= utf8.RuneSelf {
				return literals{} // Unicode case folding is beyond an ASCII comparison
			}
		}
		return literals{set: []string{string(re.Rune)}, fold: fold, ok: true}
	case syntax.OpCapture:
		return literalsOf(re.Sub[0])
	case syntax.OpPlus:
		return literalsOf(re.Sub[0])
	case syntax.OpRepeat:
		if re.Min >= 1 {
			return literalsOf(re.Sub[0])
		}
	case syntax.OpAlternate:
		var out literals
		out.ok = true
		for _, sub := range re.Sub {
			l := literalsOf(sub)
			if !l.ok {
				return literals{}
			}
			out.set = append(out.set, l.set...)
			out.fold = out.fold || l.fold
		}
		return out
	case syntax.OpConcat:
		// Adjacent literals make longer ones; then the child whose shortest literal is the
		// longest is the best filter (any match contains one of its literals).
		var best literals
		bestScore := -1
		consider := func(l literals) {
			if !l.ok || len(l.set) == 0 {
				return
			}
			score := len(l.set[0])
			for _, s := range l.set {
				score = min(score, len(s))
			}
			score = score*8 - len(l.set) // prefer long literals, then fewer of them
			if score > bestScore {
				best, bestScore = l, score
			}
		}
		var run []rune
		runFold := false
		flush := func() {
			if len(run) > 0 {
				consider(literals{set: []string{string(run)}, fold: runFold, ok: true})
			}
			run, runFold = nil, false
		}
		for _, sub := range re.Sub {
			if sub.Op == syntax.OpLiteral {
				l := literalsOf(sub)
				if !l.ok {
					flush()
					continue
				}
				if len(run) > 0 && l.fold != runFold {
					flush()
				}
				run = append(run, sub.Rune...)
				runFold = l.fold
				continue
			}
			flush()
			consider(literalsOf(sub))
		}
		flush()
		return best
	}
	return literals{}
}
