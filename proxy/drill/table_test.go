package drill

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

// sgr finds the SGR escape sequences the coloured output carries.
var sgr = regexp.MustCompile("\x1b\\[[0-9;]*m")

// checkPlainAndNarrow checks output written to something that is not a terminal: no escape
// sequence at all, and every line at most 100 columns wide.
func checkPlainAndNarrow(t *testing.T, out string) {
	t.Helper()
	if strings.Contains(out, "\x1b") {
		t.Errorf("an escape sequence in output to a non-terminal:\n%q", out)
	}
	checkNarrow(t, out)
}

// checkNarrow checks that every line of out, its escape sequences aside, is at most 100
// columns wide (a column per character).
func checkNarrow(t *testing.T, out string) {
	t.Helper()
	for i, line := range strings.Split(out, "\n") {
		if n := utf8.RuneCountInString(sgr.ReplaceAllString(line, "")); n > 100 {
			t.Errorf("line %d is %d columns wide: %q", i+1, n, line)
		}
	}
}

// sampleReport is the drill's report as target names make it: the rows' cells shaped as play
// fills them, from the scenarios' names and the longest ledgers.
func sampleReport(names []string) *report {
	a, b, c := names[0], names[1], names[2]
	rep := &report{intro: []string{
		fmt.Sprintf("failover drill: 3 simulated targets on loopback (%s)", strings.Join(names, ", ")),
		"policy: strategy failover, retries 1, max attempts 0",
	}}
	for _, sc := range scenarios() {
		rep.rows = append(rep.rows, row{scenario: sc.name, attempts: "2", status: "200", servedBy: b,
			did: a + " reset→retry, " + a + " reset→transfer, " + b + " 200→commit"})
	}
	rep.rows = append(rep.rows,
		row{scenario: "cut stream resumed (drill resume)", attempts: "2", status: "200+error", servedBy: a + "→" + b,
			did: a + " 200 interrupted→resumed, " + b + " 200→commit"},
		row{scenario: "context window exceeded (drill model on " + c + ")", attempts: "2", status: "200", servedBy: c,
			did: a + " 400 context_window→transfer, " + c + " 200→commit"},
		row{scenario: "recovering primary (simulated clock)", attempts: "1", status: "200", servedBy: a,
			did: "out after 3 requests, 1 attempt per 10s while down, back 10s after recovering: " + a + " 200→commit"},
		row{scenario: "every target failing", attempts: "6", status: "503", servedBy: c,
			did: a + " 503→retry, " + a + " 503→transfer, " + b + " 503→retry, " + b + " 503→transfer, " + c + " 503→retry, " + c + " 503→stop [exhausted]"},
		row{scenario: "client cancels", attempts: "1", status: "(left)", servedBy: "-", did: a + " cancelled→stop [cancelled]"},
	)
	rep.invariants = []invariant{{"no replay after commit", true}, {"budgets respected", false}}
	rep.failures = []string{"every target failing: [budgets respected] 3 retries on " + a + ", its limit is 1"}
	return rep
}

// The drill's output reads in a 100-column terminal whatever the target names: what the policy
// did wraps under its row, and cells too wide wrap within their columns. Coloured, it is the
// same text with escape sequences around some words; plain, it has none.
func TestReportFitsAHundredColumns(t *testing.T) {
	for _, tc := range []struct {
		name  string
		names []string
	}{
		{"the drill's own names", []string{"primary", "secondary", "tertiary"}},
		{"names of a real deployment", []string{"azure-eastus2-gpt-4o-primary", "openai-gpt-4o-secondary", "anthropic-sonnet-last"}},
		{"names longer than a column", []string{"azure-openai-eastus2-gpt-4o-primary-deployment", "openai-direct-gpt-4o-secondary-fallback-x",
			"anthropic-claude-sonnet-last-resort-target-in-eu-west-1-region-with-a-very-long-name"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := sampleReport(tc.names)
			var plain, colored strings.Builder
			rep.print(&plain, style{})
			rep.print(&colored, style{color: true})
			checkPlainAndNarrow(t, plain.String())
			checkNarrow(t, colored.String())
			if !strings.Contains(colored.String(), "\x1b[") {
				t.Error("no colour in the coloured output")
			}
			if got := sgr.ReplaceAllString(colored.String(), ""); got != plain.String() {
				t.Errorf("the coloured output's text differs from the plain one:\n%s\n---\n%s", got, plain.String())
			}
			// Nothing is lost to wrapping: each row's account follows its row, whole.
			flat := strings.Join(strings.Fields(plain.String()), "")
			for _, r := range rep.rows {
				if !strings.Contains(flat, strings.Join(strings.Fields(r.did), "")) {
					t.Errorf("%q is not in the output:\n%s", r.did, plain.String())
				}
			}
			for _, want := range []string{"  ok   no replay after commit", "  FAIL budgets respected", "\nfailures:\n  - every target failing:"} {
				if !strings.Contains(plain.String(), want) {
					t.Errorf("no %q in:\n%s", want, plain.String())
				}
			}
		})
	}
}

// With the drill's own names a row is one line and what the policy did the line under it.
func TestReportRowAndWhatThePolicyDid(t *testing.T) {
	var out strings.Builder
	sampleReport([]string{"primary", "secondary", "tertiary"}).print(&out, style{})
	for _, want := range []string{
		"SCENARIO                                           ATTEMPTS  STATUS     SERVED BY\n  what the policy did\n",
		"\ncut stream resumed (drill resume)                  2         200+error  primary→secondary\n" +
			"  primary 200 interrupted→resumed, secondary 200→commit\n",
		// A long account breaks between attempts, never inside one.
		"\n  primary 503→retry, primary 503→transfer, secondary 503→retry, secondary 503→transfer,\n" +
			"    tertiary 503→retry, tertiary 503→stop [exhausted]\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in:\n%s", want, out.String())
		}
	}
}

// The drill colours its output on a terminal only, and not when NO_COLOR is set (to anything,
// even empty), as the logs do. A character device stands for the terminal.
func TestOutputStyle(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	dev, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if st, err := dev.Stat(); err != nil || st.Mode()&os.ModeCharDevice == 0 {
		t.Skipf("%s is not a character device here", os.DevNull)
	}
	file, err := os.Create(t.TempDir() + "/out")
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	t.Setenv("NO_COLOR", "") // restored after the test
	for _, tc := range []struct {
		name    string
		w       *os.File
		noColor string // "-" for unset
		want    bool
	}{
		{"a terminal", dev, "-", true},
		{"a terminal with NO_COLOR=1", dev, "1", false},
		{"a terminal with NO_COLOR set empty", dev, "", false},
		{"a pipe", pw, "-", false},
		{"a file", file, "-", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.noColor == "-" {
				os.Unsetenv("NO_COLOR")
			} else {
				os.Setenv("NO_COLOR", tc.noColor)
			}
			if got := outputStyle(tc.w).color; got != tc.want {
				t.Errorf("colour %v, want %v", got, tc.want)
			}
		})
	}
	if outputStyle(&strings.Builder{}).color {
		t.Error("colour for a writer that is not a file")
	}
}

func TestWrap(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lines []string
		want  []string
	}{
		{"fits", wrap("a bb ccc", "", "  ", 8), []string{"a bb ccc"}},
		{"breaks at spaces", wrap("a bb ccc", "", "  ", 6), []string{"a bb", "  ccc"}},
		{"a word too long is cut", wrap("abcdefgh", "", "", 3), []string{"abc", "def", "gh"}},
		{"empty", wrap("", "", "", 3), []string{""}},
		{"a list keeps its items whole", wrapList("a 1, bb 2, c 3", "- ", "  ", 10), []string{"- a 1,", "  bb 2,", "  c 3"}},
		{"a list item too long breaks at spaces", wrapList("a 1, bbb bbb bbb, c", "", "", 8), []string{"a 1,", "bbb bbb", "bbb, c"}},
		{"a path breaks after its arrows", wrapPath("primary→secondary", 10), []string{"primary→", "secondary"}},
		{"counts characters, not bytes", wrap("→→→ →→→", "", "", 7), []string{"→→→ →→→"}},
	} {
		if fmt.Sprint(tc.lines) != fmt.Sprint(tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, tc.lines, tc.want)
		}
	}
}
