package state_test

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tenaz/tenaz/pkg/state"
)

const docPath = "../../docs/state-machine.md"

func readDoc(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatalf("want %s, got %v", docPath, err)
	}
	return string(b)
}

// tableEdges is every "from --> to : action" edge the table allows;
// creating actions start at [*], an action that keeps the state is a
// self-loop, and Note (a self-loop on every state) is left out.
func tableEdges() map[string]bool {
	edges := map[string]bool{}
	for a, rule := range state.Table {
		if a == state.Note {
			continue
		}
		if rule.From == nil {
			edges[fmt.Sprintf("[*] --> %s : %s", rule.To, a)] = true
		}
		for _, from := range rule.From {
			to := rule.To
			if to == "" { // the action keeps the state
				to = from
			}
			edges[fmt.Sprintf("%s --> %s : %s", from, to, a)] = true
		}
	}
	return edges
}

var edgeLine = regexp.MustCompile(`^(\S+)\s*-->\s*(\S+)\s*:\s*(\S+)$`)

// diagramEdges parses the edges of the one mermaid stateDiagram-v2 block
// of doc. A line with an arrow that is not a labelled edge is an error:
// an unlabelled edge could not be checked.
func diagramEdges(doc string) (map[string]bool, error) {
	_, rest, ok := strings.Cut(doc, "```mermaid\n")
	if !ok {
		return nil, fmt.Errorf("no ```mermaid block")
	}
	block, _, ok := strings.Cut(rest, "```")
	if !ok {
		return nil, fmt.Errorf("unterminated ```mermaid block")
	}
	if strings.Contains(rest[len(block):], "```mermaid") {
		return nil, fmt.Errorf("more than one ```mermaid block")
	}
	lines := strings.Split(block, "\n")
	if strings.TrimSpace(lines[0]) != "stateDiagram-v2" {
		return nil, fmt.Errorf("want the block to start with stateDiagram-v2, got %q", lines[0])
	}
	edges := map[string]bool{}
	for i, l := range lines[1:] {
		l = strings.TrimSpace(l)
		if !strings.Contains(l, "-->") {
			continue
		}
		m := edgeLine.FindStringSubmatch(l)
		if m == nil {
			return nil, fmt.Errorf("line %d: %q is not a \"from --> to : action\" edge", i+2, l)
		}
		e := fmt.Sprintf("%s --> %s : %s", m[1], m[2], m[3])
		if edges[e] {
			return nil, fmt.Errorf("line %d: edge %q listed twice", i+2, e)
		}
		edges[e] = true
	}
	return edges, nil
}

func diff(want, got map[string]bool) (missing, extra []string) {
	for e := range want {
		if !got[e] {
			missing = append(missing, e)
		}
	}
	for e := range got {
		if !want[e] {
			extra = append(extra, e)
		}
	}
	slices.Sort(missing)
	slices.Sort(extra)
	return missing, extra
}

func TestDiagramMatchesTable(t *testing.T) {
	t.Parallel()
	got, err := diagramEdges(readDoc(t))
	if err != nil {
		t.Fatalf("%s: %v", docPath, err)
	}
	missing, extra := diff(tableEdges(), got)
	if len(missing) > 0 {
		t.Errorf("%s lacks edges of state.Table:\n    %s", docPath, strings.Join(missing, "\n    "))
	}
	if len(extra) > 0 {
		t.Errorf("%s has edges state.Table does not allow:\n    %s", docPath, strings.Join(extra, "\n    "))
	}
}

func TestDiagramParser(t *testing.T) {
	t.Parallel()
	// The check above is only as good as its parser: it must see each edge,
	// refuse what it cannot read, and tell missing from extra.
	doc := "x\n```mermaid\nstateDiagram-v2\n    [*] --> pending : accept\n  pending-->running:claim\n    classDef t x\n```\n"
	got, err := diagramEdges(doc)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"[*] --> pending : accept": true, "pending --> running : claim": true}
	if m, e := diff(want, got); len(m)+len(e) > 0 {
		t.Errorf("want %v, got %v", want, got)
	}
	m, e := diff(map[string]bool{"a --> b : x": true, "b --> c : y": true}, map[string]bool{"b --> c : y": true, "c --> d : z": true})
	if !slices.Equal(m, []string{"a --> b : x"}) || !slices.Equal(e, []string{"c --> d : z"}) {
		t.Errorf("diff: want missing [a --> b : x] and extra [c --> d : z], got %v and %v", m, e)
	}
	for name, bad := range map[string]string{
		"no block":       "no diagram here",
		"unlabelled":     "```mermaid\nstateDiagram-v2\n  a --> b\n```",
		"wrong kind":     "```mermaid\nflowchart LR\n  a --> b : x\n```",
		"duplicate edge": "```mermaid\nstateDiagram-v2\n  a --> b : x\n  a --> b : x\n```",
		"two blocks":     "```mermaid\nstateDiagram-v2\n```\n```mermaid\nstateDiagram-v2\n```",
	} {
		if _, err := diagramEdges(bad); err == nil {
			t.Errorf("%s: want a parse error, got none", name)
		}
	}
}

// TestEffectsTableMatchesTable checks the "effects" column of the actions
// table in the doc against state.Table.
func TestEffectsTableMatchesTable(t *testing.T) {
	t.Parallel()
	doc := readDoc(t)
	_, section, ok := strings.Cut(doc, "## Actions and their effects")
	if !ok {
		t.Fatalf("%s: no \"## Actions and their effects\" section", docPath)
	}
	var rows []string
	for _, l := range strings.Split(section, "\n") {
		if strings.HasPrefix(l, "|") {
			rows = append(rows, l)
		} else if len(rows) > 0 {
			break // the first table only
		}
	}
	if len(rows) < 3 {
		t.Fatalf("%s: no actions table", docPath)
	}
	seen := map[state.ActionName]bool{}
	for _, row := range rows[2:] { // skip the header and the --- line
		cells := strings.Split(strings.Trim(row, "|"), "|")
		if len(cells) < 3 {
			t.Errorf("row %q: want at least 3 cells", row)
			continue
		}
		a := state.ActionName(strings.Trim(strings.TrimSpace(cells[0]), "`"))
		rule, known := state.Table[a]
		if !known {
			t.Errorf("%s documents action %q that state.Table does not have", docPath, a)
			continue
		}
		seen[a] = true
		var effects []string
		if c := strings.TrimSpace(cells[2]); c != "—" && c != "-" && c != "" {
			for _, e := range strings.Split(c, ",") {
				effects = append(effects, strings.Trim(strings.TrimSpace(e), "`"))
			}
		}
		var want []string
		for _, e := range rule.Effects {
			want = append(want, string(e))
		}
		if !slices.Equal(effects, want) {
			t.Errorf("%s: action %s: want effects %v (state.Table), the doc says %v", docPath, a, want, effects)
		}
	}
	for a := range state.Table {
		if !seen[a] {
			t.Errorf("%s: action %s of state.Table has no row", docPath, a)
		}
	}
}
