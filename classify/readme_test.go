package classify

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/valyala/fastjson"
)

// streamsPage is the documentation page that holds the table of error statuses.
const streamsPage = "../docs/streams.md"

// readmeTable returns the cells of the first Markdown table after the heading in the page,
// without the header and separator rows.
func readmeTable(t *testing.T, page, heading string) [][]string {
	t.Helper()
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("%s has no %q", page, heading)
	}
	var rows [][]string
	for _, line := range strings.Split(after, "\n") {
		if !strings.HasPrefix(line, "|") {
			if len(rows) > 0 {
				break
			}
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		rows = append(rows, cells)
	}
	if len(rows) < 3 {
		t.Fatalf("no table under %q", heading)
	}
	return rows[2:]
}

// docs/streams.md, "The status of an error event": the table lists every name the code maps,
// with the status it maps to and the fields it is read from, and the numbered rules hold.
func TestReadmeErrorStatuses(t *testing.T) {
	var p fastjson.Parser
	status := func(body string) int { return ExtractError(&p, []byte(body)).Status }
	seenTypes, seenCodes := map[string]bool{}, map[string]bool{}
	for _, row := range readmeTable(t, streamsPage, "## The status of an error event") {
		if len(row) != 3 {
			t.Fatalf("row %q: want 3 cells", row)
		}
		name := strings.Trim(row[0], "`")
		want, err := strconv.Atoi(row[2])
		if err != nil {
			t.Fatalf("row %q: status %q", row, row[2])
		}
		var bodies []string
		switch row[1] {
		case "`type`":
			if got, ok := anthropicTypes[name]; !ok || got != want {
				t.Errorf("the docs map type %s to %d; the code: %d (listed %v)", name, want, got, ok)
			}
			seenTypes[name] = true
			bodies = []string{fmt.Sprintf(`{"type":"error","error":{"type":%q,"message":"m"}}`, name)}
		case "`code`, `type` or `status`":
			if got, ok := codeStatuses[name]; !ok || got != want {
				t.Errorf("the docs map %s to %d; the code: %d (listed %v)", name, want, got, ok)
			}
			seenCodes[name] = true
			bodies = []string{
				fmt.Sprintf(`{"error":{"code":%q,"message":"m"}}`, name),
				fmt.Sprintf(`{"error":{"type":%q,"message":"m"}}`, name),
				fmt.Sprintf(`{"error":{"status":%q,"message":"m"}}`, name),
			}
		default:
			t.Fatalf("row %q: unknown read-from cell %q", row, row[1])
		}
		for _, body := range bodies {
			if got := status(body); got != want {
				t.Errorf("%s: status %d, the docs say %d", body, got, want)
			}
		}
	}
	for name := range anthropicTypes {
		if !seenTypes[name] {
			t.Errorf("type %s is mapped but not in the docs' table (%s)", name, streamsPage)
		}
	}
	for name := range codeStatuses {
		if !seenCodes[name] {
			t.Errorf("%s is mapped but not in the docs' table (%s)", name, streamsPage)
		}
	}

	// The numbered rules, first match wins; 0 is no status, which rule 6 makes a 502.
	for _, tc := range []struct {
		rule, body string
		want       int
	}{
		{"1: a numeric code", `{"error":{"code":503,"status":429,"type":"invalid_request_error"}}`, 503},
		{"1: a three-digit code", `{"error":{"code":"503","type":"invalid_request_error"}}`, 503},
		{"1: a numeric code out of range is no status", `{"error":{"code":200,"type":"api_error"}}`, 500},
		{"2: a numeric status", `{"error":{"status":504,"type":"invalid_request_error"}}`, 504},
		{"3 before 4: type in the type rows", `{"error":{"type":"invalid_request_error","code":"rate_limit_exceeded"}}`, 400},
		{"4 before 5: code before type", `{"error":{"code":"server_error","type":"RESOURCE_EXHAUSTED"}}`, 500},
		{"5: a string status stands for a missing type", `{"error":{"status":"UNAVAILABLE"}}`, 503},
		{"5: not for a type that is there", `{"error":{"type":"upstream_error","status":"UNAVAILABLE"}}`, 0},
		{"a Responses error event", `{"type":"error","code":"server_error","message":"m","param":null}`, 500},
		{"response.failed", `{"type":"response.failed","response":{"error":{"code":"rate_limit_exceeded"}}}`, 429},
		{"Google's array", `[{"error":{"message":"m","status":"DEADLINE_EXCEEDED"}}]`, 504},
		{"names match case included", `{"error":{"code":"unavailable"}}`, 0},
	} {
		if got := status(tc.body); got != tc.want {
			t.Errorf("rule %s: %s has status %d, want %d", tc.rule, tc.body, got, tc.want)
		}
	}
}

// docs/streams.md, "`auto`: who refuses a prefill": the table lists exactly the phrases
// PrefillRefusals matches, in its order.
func TestReadmePrefillRefusals(t *testing.T) {
	rows := readmeTable(t, streamsPage, "#### `auto`: who refuses a prefill")
	var listed []string
	for _, r := range rows {
		listed = append(listed, strings.Trim(r[0], "`"))
	}
	if strings.Join(listed, "\n") != strings.Join(PrefillRefusals[:], "\n") {
		t.Errorf("the page lists %q, the code matches %q", listed, PrefillRefusals)
	}
}
