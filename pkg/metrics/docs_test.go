package metrics_test

import (
	"os"
	"strings"
	"testing"

	"github.com/tenaz/tenaz/pkg/metrics"
)

// docs/metrics.md has a row for every metric of the catalog, with its type
// and labels, and no row for a metric that does not exist.
func TestDocumented(t *testing.T) {
	data, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string][]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, "| `tenaz_") {
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) < 5 {
			continue
		}
		name := strings.Trim(strings.TrimSpace(cells[1]), "`")
		if _, ok := rows[name]; ok {
			continue // the series-count table repeats names
		}
		rows[name] = []string{strings.TrimSpace(cells[2]), strings.TrimSpace(cells[3])}
	}
	for _, i := range metrics.Catalog {
		row, ok := rows[i.Name]
		if !ok {
			t.Errorf("docs/metrics.md: no row for %s", i.Name)
			continue
		}
		if row[0] != string(i.Type) {
			t.Errorf("docs/metrics.md: %s is a %q, the catalog says %s", i.Name, row[0], i.Type)
		}
		want := strings.Join(i.Labels, ", ")
		if want == "" {
			want = "—"
		}
		if row[1] != want {
			t.Errorf("docs/metrics.md: %s labels %q, the catalog says %q", i.Name, row[1], want)
		}
		delete(rows, i.Name)
	}
	for name := range rows {
		if strings.Contains(name, " ") {
			continue
		}
		if _, ok := metrics.Lookup(name); !ok {
			t.Errorf("docs/metrics.md documents %s, which pkg/metrics does not define", name)
		}
	}
}
