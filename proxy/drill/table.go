package drill

import (
	"io"
	"os"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"
)

// report is what the drill prints, gathered while the scenarios play and printed once they are
// done: the columns' widths depend on every row.
type report struct {
	intro      []string // the lines above the table
	rows       []row
	elapsed    time.Duration
	invariants []invariant
	failures   []string // "scenario: [invariant] problem"
}

// row is one scenario's line in the table, and what the policy did, printed under it.
type row struct {
	scenario, attempts, status, servedBy string
	did                                  string
}

type invariant struct {
	name string
	held bool
}

// lineWidth is the widest line the drill prints, in columns: the output reads in a 100-column
// terminal without the terminal wrapping it (README, Quick start).
const lineWidth = 100

// columnGap is the room between two columns of the table.
const columnGap = 2

// narrowest is the width the scenario and served-by columns keep when long target names make
// the table too wide: their cells wrap within it.
const narrowest = 12

var tableHead = [4]string{"SCENARIO", "ATTEMPTS", "STATUS", "SERVED BY"}

// style colours the output for a terminal; the zero style prints plain text.
type style struct{ color bool }

// SGR sequences, as the logs' tint writes them.
const (
	sgrBold   = "\x1b[1m"
	sgrFaint  = "\x1b[2m"
	sgrRed    = "\x1b[31m"
	sgrGreen  = "\x1b[32m"
	sgrYellow = "\x1b[33m"
	sgrReset  = "\x1b[0m"
)

// outputStyle colours the output when w is a terminal and NO_COLOR is not set, as the logs do
// (README, Quick start): a file, a pipe or CI gets no escape sequence at all.
func outputStyle(w io.Writer) style {
	if _, set := os.LookupEnv("NO_COLOR"); set {
		return style{}
	}
	f, ok := w.(*os.File)
	if !ok {
		return style{}
	}
	st, err := f.Stat()
	return style{color: err == nil && st.Mode()&os.ModeCharDevice != 0}
}

func (s style) paint(sgr, text string) string {
	if !s.color || text == "" {
		return text
	}
	return sgr + text + sgrReset
}

// status colours what the client got: an answer green, a client error yellow, an error red.
func (s style) status(text string) string {
	switch {
	case strings.Contains(text, "+error") || strings.HasPrefix(text, "5"):
		return s.paint(sgrRed, text)
	case strings.HasPrefix(text, "2"):
		return s.paint(sgrGreen, text)
	case strings.HasPrefix(text, "4"):
		return s.paint(sgrYellow, text)
	}
	return s.paint(sgrFaint, text)
}

// actionWord finds the actions and outcomes in a line of what the policy did ("→commit",
// "[exhausted]"); wrapping breaks lines at spaces, so each stays whole on its line.
var actionWord = regexp.MustCompile(`→(commit|resumed|retry|transfer|stop)\b|\[[a-z_]+\]`)

// did colours one line of what the policy did: a commit green, a retry, transfer or resume
// yellow, a stop and a request's bad outcome red.
func (s style) did(line string) string {
	if !s.color {
		return line
	}
	return actionWord.ReplaceAllStringFunc(line, func(m string) string {
		word, arrow := strings.CutPrefix(m, "→")
		sgr := sgrRed
		switch {
		case arrow && word == "commit":
			sgr = sgrGreen
		case arrow && word != "stop":
			sgr = sgrYellow
		}
		if arrow {
			return "→" + s.paint(sgr, word)
		}
		return s.paint(sgr, m)
	})
}

// print writes the report to w: the intro, the table with what the policy did under each row,
// the invariants and the failures, every line at most lineWidth columns.
func (rep *report) print(w io.Writer, st style) {
	var b strings.Builder
	for _, l := range rep.intro {
		writeLines(&b, wrap(l, "", "  ", lineWidth), nil)
	}
	b.WriteString("\n")
	rep.writeTable(&b, st)
	b.WriteString("\ninvariants (" + rep.elapsed.Round(time.Millisecond).String() + ")\n")
	for _, inv := range rep.invariants {
		state := st.paint(sgrGreen, "ok") + "  "
		if !inv.held {
			state = st.paint(sgrBold+sgrRed, "FAIL")
		}
		b.WriteString("  " + state + " " + inv.name + "\n")
	}
	if len(rep.failures) > 0 {
		b.WriteString("\n" + st.paint(sgrBold+sgrRed, "failures:") + "\n")
		for _, f := range rep.failures {
			writeLines(&b, wrap(f, "  - ", "    ", lineWidth), nil)
		}
	}
	io.WriteString(w, b.String())
}

// writeTable writes the table: a line per scenario (its cells wrap within their columns when
// long target names make it too wide), and under it what the policy did, wrapped.
func (rep *report) writeTable(b *strings.Builder, st style) {
	cells := func(r row) [4]string { return [4]string{r.scenario, r.attempts, r.status, r.servedBy} }
	var widths [4]int
	for i, h := range tableHead {
		widths[i] = columns(h)
	}
	for _, r := range rep.rows {
		for i, c := range cells(r) {
			widths[i] = max(widths[i], columns(c))
		}
	}
	// Too wide (long target names): the scenario and served-by columns give up room, first
	// down to their longest word, which cells then need not cut, the wider column first.
	var words [4]int
	for _, r := range rep.rows {
		for _, w := range strings.Fields(r.scenario) {
			words[0] = max(words[0], columns(w))
		}
		for _, w := range strings.SplitAfter(r.servedBy, "→") {
			words[3] = max(words[3], columns(w))
		}
	}
	for total(widths) > lineWidth {
		i := 0
		switch over0, over3 := widths[0] > words[0], widths[3] > words[3]; {
		case over0 != over3:
			i = 3 * b2i(over3)
		case widths[3] > widths[0]:
			i = 3
		}
		if widths[i] <= narrowest {
			break
		}
		widths[i]--
	}
	head := func(_ int, s string) string { return st.paint(sgrBold, s) }
	writeRow(b, widths, tableHead, head)
	b.WriteString(st.paint(sgrFaint, "  what the policy did") + "\n")
	for _, r := range rep.rows {
		writeRow(b, widths, cells(r), func(col int, s string) string {
			if col == 2 {
				return st.status(s)
			}
			return s
		})
		writeLines(b, wrapList(r.did, "  ", "    ", lineWidth), st.did)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// total is the width of a table line with columns this wide.
func total(widths [4]int) int {
	n := columnGap * (len(widths) - 1)
	for _, w := range widths {
		n += w
	}
	return n
}

// writeRow writes one table row: each cell wrapped within its column, painted by paint, padded
// to its width but the last.
func writeRow(b *strings.Builder, widths [4]int, cells [4]string, paint func(col int, s string) string) {
	var lines [4][]string
	height := 0
	for i, c := range cells {
		if i == len(cells)-1 {
			lines[i] = wrapPath(c, widths[i]) // served by
		} else {
			lines[i] = wrap(c, "", "", widths[i])
		}
		height = max(height, len(lines[i]))
	}
	for k := range height {
		var line strings.Builder
		for i := range cells {
			text := ""
			if k < len(lines[i]) {
				text = lines[i][k]
			}
			line.WriteString(paint(i, text))
			if i < len(cells)-1 {
				line.WriteString(strings.Repeat(" ", widths[i]-columns(text)+columnGap))
			}
		}
		b.WriteString(strings.TrimRight(line.String(), " ") + "\n")
	}
}

// writeLines writes lines, each through paint when it is set.
func writeLines(b *strings.Builder, lines []string, paint func(string) string) {
	for _, l := range lines {
		if paint != nil {
			l = paint(l)
		}
		b.WriteString(l + "\n")
	}
}

// wrap breaks s into lines at most width columns wide, at spaces, first before the first line
// and indent before the others. It always returns at least one line.
func wrap(s, first, indent string, width int) []string {
	return fill(strings.Fields(s), " ", first, indent, width)
}

// wrapList wraps a list written "a, b, c" as wrap does, keeping each item whole on a line where
// it fits: "tertiary 503→retry" is not cut in two.
func wrapList(s, first, indent string, width int) []string {
	var items []string
	for _, item := range strings.SplitAfter(s, ", ") {
		if item = strings.TrimSpace(item); item != "" {
			items = append(items, item)
		}
	}
	return fill(items, " ", first, indent, width)
}

// wrapPath wraps "primary→secondary" after its arrows when it is wider than width.
func wrapPath(s string, width int) []string {
	return fill(strings.SplitAfter(s, "→"), "", "", "", width)
}

// fill lays items out on lines at most width columns wide, glue between two on a line. An item
// too long for a line of its own is broken at its spaces, and a word too long is cut.
func fill(items []string, glue, first, indent string, width int) []string {
	var lines []string
	line, empty := first, true
	for len(items) > 0 {
		item := items[0]
		room := width - columns(line)
		if !empty {
			room -= columns(glue)
		}
		switch {
		case columns(item) <= room:
			if !empty {
				line += glue
			}
			line, empty, items = line+item, false, items[1:]
		case !empty:
			lines = append(lines, line)
			line, empty = indent, true
		case strings.Contains(item, " "):
			items = append(strings.Fields(item), items[1:]...)
		default:
			cut := cutColumns(item, max(room, 1))
			lines = append(lines, line+cut)
			line, empty = indent, true
			if rest := item[len(cut):]; rest != "" {
				items[0] = rest
			} else {
				items = items[1:]
			}
		}
	}
	if !empty || len(lines) == 0 {
		lines = append(lines, line)
	}
	return lines
}

// columns is the width of s in a terminal: a column per character, escape sequences none.
func columns(s string) int { return utf8.RuneCountInString(sgrSequence.ReplaceAllString(s, "")) }

var sgrSequence = regexp.MustCompile("\x1b\\[[0-9;]*m")

// cutColumns returns the longest prefix of s that is at most n columns wide.
func cutColumns(s string, n int) string {
	for k := range s {
		if n == 0 {
			return s[:k]
		}
		n--
	}
	return s
}
