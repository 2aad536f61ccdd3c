package e2e_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// The documentation: README.md, CHANGELOG.md, BENCHMARKS.md and the pages in docs/. Its links
// must lead somewhere, and the snippets it shows of the example files must be those files.

const repoRoot = "../.."

// docFiles lists the Markdown files checked, relative to the repository root.
func docFiles(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil || len(pages) == 0 {
		t.Fatalf("no pages in docs/ (%v)", err)
	}
	files := []string{"README.md", "CHANGELOG.md", "BENCHMARKS.md"}
	for _, p := range pages {
		rel, _ := filepath.Rel(repoRoot, p)
		files = append(files, filepath.ToSlash(rel))
	}
	return files
}

// mdLine is a line of a Markdown file outside fenced code blocks, or a whole fenced block.
type mdLine struct {
	n     int    // 1-based line number
	text  string // the line; for a block, its opening fence
	block []string
	info  string // a block's info string (yaml, sh, ...)
	mark  string // a block's marker: the <!-- file: ... --> or <!-- excerpt: ... --> line before it
}

// parseMarkdown splits a file into lines outside code and fenced blocks.
func parseMarkdown(t *testing.T, path string) []mdLine {
	t.Helper()
	lines := readLines(t, filepath.Join(repoRoot, path))
	var out []mdLine
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		fence := strings.TrimLeft(l, " ")
		if !strings.HasPrefix(fence, "```") && !strings.HasPrefix(fence, "~~~") {
			out = append(out, mdLine{n: i + 1, text: l})
			continue
		}
		b := mdLine{n: i + 1, text: l, info: strings.TrimSpace(fence[3:])}
		if i > 0 && strings.HasPrefix(lines[i-1], "<!-- ") {
			b.mark = lines[i-1]
		}
		closed := false
		for i++; i < len(lines); i++ {
			if strings.TrimSpace(lines[i]) == fence[:3] {
				closed = true
				break
			}
			b.block = append(b.block, lines[i])
		}
		if !closed {
			t.Errorf("%s:%d: a code block that never closes", path, b.n)
		}
		b.block = append([]string{}, b.block...)
		out = append(out, b)
	}
	return out
}

var (
	headingRe    = regexp.MustCompile(`^(#{1,6}) +(.*?)#*\s*$`)
	inlineLinkRe = regexp.MustCompile(`\[([^\]]*)\]\(([^)\s]*)\)`)
	codeSpanRe   = regexp.MustCompile("`+[^`]*`+")
	htmlTagRe    = regexp.MustCompile(`<[^>]+>`)
)

// anchor is the id GitHub gives a heading: its text lower-cased, without punctuation but
// hyphens and underscores, spaces made hyphens.
func anchor(heading string) string {
	text := inlineLinkRe.ReplaceAllString(heading, "$1")
	text = htmlTagRe.ReplaceAllString(text, "")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors lists a file's heading ids, a repeated one numbered as GitHub numbers it.
func anchors(t *testing.T, path string) map[string]bool {
	seen := map[string]int{}
	ids := map[string]bool{}
	for _, l := range parseMarkdown(t, path) {
		m := headingRe.FindStringSubmatch(l.text)
		if l.block != nil || m == nil {
			continue
		}
		id := anchor(m[2])
		if n := seen[id]; n > 0 {
			ids[fmt.Sprintf("%s-%d", id, n)] = true
		} else {
			ids[id] = true
		}
		seen[id]++
	}
	return ids
}

func TestAnchor(t *testing.T) {
	for heading, want := range map[string]string{
		"Streams: the pre-commit peek":                      "streams-the-pre-commit-peek",
		"`failover -check`":                                 "failover--check",
		"Metrics (`/metrics` on `FAILOVER_METRICS_LISTEN`)": "metrics-metrics-on-failover_metrics_listen",
		"Docker Compose: [`testdata/deploy/compose.yaml`](testdata/deploy/compose.yaml)": "docker-compose-testdatadeploycomposeyaml",
		"Three actions, never confused": "three-actions-never-confused",
		"[0.2.0] - 2026-12-01":          "020---2026-12-01",
	} {
		if got := anchor(heading); got != want {
			t.Errorf("anchor(%q) = %q, want %q", heading, got, want)
		}
	}
}

// Every relative link leads to a file or directory of the repository, and a #fragment to a
// heading of the Markdown file it names.
func TestDocsLinks(t *testing.T) {
	ids := map[string]map[string]bool{}
	idsOf := func(path string) map[string]bool {
		if ids[path] == nil {
			ids[path] = anchors(t, path)
		}
		return ids[path]
	}
	links := 0
	for _, file := range docFiles(t) {
		for _, l := range parseMarkdown(t, file) {
			if l.block != nil {
				continue
			}
			for _, m := range inlineLinkRe.FindAllStringSubmatch(codeSpanRe.ReplaceAllString(l.text, "``"), -1) {
				target := m[2]
				if target == "" || regexp.MustCompile(`^[a-z]+:`).MatchString(target) {
					continue // an absolute URL
				}
				links++
				where := fmt.Sprintf("%s:%d: %s", file, l.n, target)
				path, frag, _ := strings.Cut(target, "#")
				dest := file
				if path != "" {
					dest = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(file), path)))
					if strings.HasPrefix(dest, "../") {
						t.Errorf("%s: leaves the repository", where)
						continue
					}
					if _, err := os.Stat(filepath.Join(repoRoot, dest)); err != nil {
						t.Errorf("%s: no such file", where)
						continue
					}
				}
				if frag == "" {
					continue
				}
				if !strings.HasSuffix(dest, ".md") {
					t.Errorf("%s: a #fragment on a file that is not Markdown", where)
				} else if !idsOf(dest)[frag] {
					t.Errorf("%s: %s has no heading #%s", where, dest, frag)
				}
			}
		}
	}
	if links < 50 {
		t.Errorf("only %d relative links found: is the parser still finding them?", links)
	}
}

// A fenced block marked <!-- file: PATH --> is the whole file at PATH (from the repository
// root), byte for byte. One marked <!-- excerpt: PATH --> is made of runs of the file's lines,
// each run whole consecutive lines of it, in the file's order, separated by elision lines
// ("# ..." at any indentation, with any text after it). Every YAML block must carry a mark:
// the documentation shows the example files, not copies that drift.
func TestDocsSnippetsMatchFiles(t *testing.T) {
	markRe := regexp.MustCompile(`^<!-- (file|excerpt): (\S+) -->$`)
	marked := 0
	for _, file := range docFiles(t) {
		for _, b := range parseMarkdown(t, file) {
			if b.block == nil {
				continue
			}
			where := fmt.Sprintf("%s:%d", file, b.n)
			m := markRe.FindStringSubmatch(b.mark)
			if m == nil {
				if strings.Contains(b.mark, "file:") || strings.Contains(b.mark, "excerpt:") {
					t.Errorf("%s: a malformed mark %q", where, b.mark)
				}
				if b.info == "yaml" {
					t.Errorf("%s: a YAML block without a <!-- file: PATH --> or <!-- excerpt: PATH --> mark", where)
				}
				continue
			}
			marked++
			content, err := os.ReadFile(filepath.Join(repoRoot, m[2]))
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			if m[1] == "file" {
				if got := strings.Join(b.block, "\n") + "\n"; got != string(content) {
					t.Errorf("%s: the block is not %s as it is:\n%s", where, m[2], firstDifference(got, string(content)))
				}
				continue
			}
			if err := isExcerpt(b.block, strings.Split(string(content), "\n")); err != nil {
				t.Errorf("%s: not an excerpt of %s: %v", where, m[2], err)
			}
		}
	}
	if marked < 3 {
		t.Errorf("only %d marked blocks: the README shows the compose and Kubernetes files", marked)
	}
}

var elisionRe = regexp.MustCompile(`^\s*# \.\.\.`)

// isExcerpt reports why block is not runs of file's lines in order, separated by elisions.
func isExcerpt(block, file []string) error {
	var runs [][]string
	run := []string{}
	for _, l := range block {
		if elisionRe.MatchString(l) {
			runs, run = append(runs, run), []string{}
			continue
		}
		run = append(run, l)
	}
	runs = append(runs, run)
	from, found := 0, 0
	for _, r := range runs {
		if len(r) == 0 {
			continue
		}
		i := indexRun(file[from:], r)
		if i < 0 {
			if indexRun(file, r) >= 0 {
				return fmt.Errorf("the run that starts %q is out of order", r[0])
			}
			return fmt.Errorf("no run of the file's lines matches:\n%s", strings.Join(r, "\n"))
		}
		from += i + len(r)
		found++
	}
	if found == 0 {
		return fmt.Errorf("an empty excerpt")
	}
	return nil
}

// indexRun returns where lines holds run as consecutive lines, or -1.
func indexRun(lines, run []string) int {
	for i := 0; i+len(run) <= len(lines); i++ {
		match := true
		for j := range run {
			if lines[i+j] != run[j] {
				match = false
				break
			}
		}
		if match {
			return i
		}
	}
	return -1
}

// firstDifference shows the first line where two texts differ.
func firstDifference(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < max(len(g), len(w)); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d: shown %q, file %q", i+1, gl, wl)
		}
	}
	return "(no line differs)"
}

func TestIsExcerpt(t *testing.T) {
	file := []string{"a:", "  b: 1", "  c: 2", "  d: 3", "e: 4"}
	for _, tc := range []struct {
		block []string
		ok    bool
	}{
		{[]string{"a:", "  b: 1"}, true},
		{[]string{"a:", "  # ... c", "  d: 3", "e: 4"}, true},
		{[]string{"  # ...", "e: 4"}, true},
		{[]string{"a:", "  c: 2"}, false},            // not consecutive
		{[]string{"e: 4", "# ...", "a:"}, false},     // out of order
		{[]string{"a:", "  b: 1 # changed"}, false},  // not the file's line
		{[]string{"# ..."}, false},                   // nothing shown
		{[]string{"a:", "  b: 1", "  c: 2 "}, false}, // a trailing space
	} {
		if err := isExcerpt(tc.block, file); (err == nil) != tc.ok {
			t.Errorf("isExcerpt(%q): %v, want ok=%v", tc.block, err, tc.ok)
		}
	}
}
