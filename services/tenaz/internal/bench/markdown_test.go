package bench

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"
)

func TestGoalsInReport(t *testing.T) {
	figs := []Fig{
		{Name: "delayed_1m_service_rss_mb", Unit: "MB", Value: 150},
		{Name: "delayed_burst_max_lateness_ms", Unit: "ms", Value: 1000}, // the goal is strictly under
		{Name: "e2e_events_per_s", Unit: "events/s", Value: 1},
	}
	var b bytes.Buffer
	Markdown(&b, figs, Full, 64, 11*time.Minute, "")
	out := b.String()
	for _, want := range []string{
		"| `delayed_1m_service_rss_mb` | < 200 (issue 4) | 150.00 | yes |",
		"| `delayed_burst_max_lateness_ms` | < 1000 (issue 4) | 1000.00 | **no** |",
		"1000000 events (`delayed_1m_events`",
		"(full; this run took 11m0s)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if strings.Contains(out, "noisy_neighbour_p99_ratio` | <=") {
		t.Error("a goal of a figure not measured is listed")
	}
	if strings.Contains(out, "%!") {
		t.Errorf("report has a formatting error:\n%s", out)
	}
}

func TestFigureFlagsMissedGoal(t *testing.T) {
	var b bytes.Buffer
	r := Report{W: &b}
	r.Figure("delayed_1m_service_rss_mb", 250, "MB")
	r.Figure("delayed_burst_max_lateness_ms", 20, "ms")
	out := b.String()
	if !strings.Contains(out, "# delayed_1m_service_rss_mb misses its goal: < 200") {
		t.Errorf("missed goal not flagged:\n%s", out)
	}
	if strings.Contains(out, "delayed_burst_max_lateness_ms misses") {
		t.Errorf("met goal flagged:\n%s", out)
	}
}

// One phase's figures replace theirs in a full run's report and leave
// the rest as it was, however often it is merged.
func TestMergeMarkdownReplacesOnePhase(t *testing.T) {
	var b bytes.Buffer
	Markdown(&b, []Fig{
		{Name: "e2e_events_per_s", Unit: "events/s", Value: 7000},
		{Name: "capacity_goodput_ratio", Unit: "ratio", Value: 0.5},
		{Name: "noisy_neighbour_p99_ratio", Unit: "ratio", Value: 1},
	}, Full, 64, time.Minute, "## Where the time goes\n\nAnalysis.\n")
	path := t.TempDir() + "/performance.md"
	// A report from an older version: another entry of the phase.
	before := strings.Replace(b.String(), capacityBullet(Full), "- **Capacity** (`capacity_*`): as it was\n  written before.\n", 1)
	if err := os.WriteFile(path, []byte(before), 0o600); err != nil {
		t.Fatal(err)
	}
	figs := []Fig{{Name: "capacity_goodput_ratio", Unit: "ratio", Value: 0.95}, {Name: "capacity_429_ratio", Unit: "ratio", Value: 0.5}}
	var first string
	for range 2 {
		if err := MergeMarkdown(path, figs, Full, "capacity"); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if first == "" {
			first = string(got)
		}
		out := string(got)
		for _, want := range []string{
			"| `e2e_events_per_s` | 7000.00 | events/s |\n| `noisy_neighbour_p99_ratio` | 1.00 | ratio |\n| `capacity_goodput_ratio` | 0.95 | ratio |\n| `capacity_429_ratio` | 0.50 | ratio |\n\nThe `capacity_*` figures are from `BENCH_PHASE=capacity make bench` on",
			"| `noisy_neighbour_p99_ratio` | <= 1.2 (issue 3) | 1.00 | yes |\n| `capacity_goodput_ratio` | >= 0.9 (issue 13) | 0.95 | yes |\n| `capacity_429_ratio` | <= 0.02 (issue 13) | 0.50 | **no** |\n",
			"asks every partition.\n- **Capacity** (`capacity_*`)",
			"figures only).\n\n## Where the time goes",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("merged report lacks %q:\n%s", want, out)
			}
		}
		if strings.Contains(out, "| 0.50 | ratio |\n| `capacity_goodput_ratio` | 0.50") || strings.Count(out, "`capacity_goodput_ratio` |") != 2 {
			t.Errorf("the old capacity rows are still there:\n%s", out)
		}
		if strings.Contains(out, "as it was") {
			t.Errorf("the older entry of the phase is still there:\n%s", out)
		}
		if out != first {
			t.Errorf("a second merge changed the report:\n%s", out)
		}
	}
}

// The tracing phase's figures (named *_tracing_*) are merged alone too,
// and a report without them gets them and their goal.
func TestMergeMarkdownTracingPhase(t *testing.T) {
	var b bytes.Buffer
	Markdown(&b, []Fig{
		{Name: "e2e_events_per_s", Unit: "events/s", Value: 7000},
		{Name: "capacity_goodput_ratio", Unit: "ratio", Value: 0.95},
	}, Full, 64, time.Minute, "")
	path := t.TempDir() + "/performance.md"
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, v := range []float64{0.5, 0.97} {
		figs := []Fig{{Name: "e2e_events_per_s_tracing_on", Unit: "events/s", Value: 6800}, {Name: "e2e_ratio_tracing_on_vs_off", Unit: "ratio", Value: v}}
		if err := MergeMarkdown(path, figs, Full, "tracing"); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := string(got)
	for _, want := range []string{
		"| `e2e_events_per_s` | 7000.00 | events/s |\n| `capacity_goodput_ratio` | 0.95 | ratio |\n| `e2e_events_per_s_tracing_on` | 6800.00 | events/s |\n| `e2e_ratio_tracing_on_vs_off` | 0.97 | ratio |\n\nThe `*_tracing_*` figures are from `BENCH_PHASE=tracing make bench` on",
		"| `e2e_ratio_tracing_on_vs_off` | >= 0.9 (issue 17) | 0.97 | yes |\n",
		"- **Tracing** (`*_tracing_*`)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("merged report lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(out, "`e2e_ratio_tracing_on_vs_off` |") != 2 || strings.Count(out, "The `*_tracing_*` figures") != 1 || strings.Count(out, "- **Tracing** (") != 1 {
		t.Errorf("the first merge's rows, note or entry are still there:\n%s", out)
	}
	if strings.Count(out, "`e2e_events_per_s` |") != 1 {
		t.Errorf("a figure of another phase was touched:\n%s", out)
	}
}

// A phase's entry of "What is measured" is replaced alone: the entries
// after it in the list stay.
func TestMergeMarkdownKeepsTheNextEntry(t *testing.T) {
	var full bytes.Buffer
	Markdown(&full, []Fig{{Name: "e2e_events_per_s", Unit: "events/s", Value: 1}}, Full, 64, time.Minute, "## Where the time goes\n\nAnalysis.\n")
	text := strings.Replace(full.String(), "\n\n## Where the time goes", "\n- **Other** (`other_*`): stays.\n\n## Where the time goes", 1)
	path := t.TempDir() + "/performance.md"
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := MergeMarkdown(path, []Fig{{Name: "search_kind_p99_ms", Unit: "ms", Value: 9}}, Full, "search"); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if out := string(b); !strings.Contains(out, "- **Other** (`other_*`): stays.") || strings.Count(out, "- **Search** (") != 1 ||
		!strings.HasSuffix(out, "\n\n## Where the time goes\n\nAnalysis.\n") {
		t.Fatalf("want the other entry kept and one search entry, got:\n%s", out[strings.Index(out, "## What is measured"):])
	}
}

// A phase of the full run whose figures do not carry its name (default:
// e2e_*, naive_*, p99_ms_at_500) merges its own figures only: the fsync
// phase's e2e_*_fsync_always stay as they were.
func TestMergeMarkdownDefaultPhase(t *testing.T) {
	var b bytes.Buffer
	Markdown(&b, []Fig{
		{Name: "e2e_ratio_vs_naive", Unit: "ratio", Value: 0.4},
		{Name: "e2e_ratio_vs_naive_fsync_always", Unit: "ratio", Value: 0.5},
		{Name: "callbacks_per_s", Unit: "callbacks/s", Value: 7000},
	}, Full, 64, time.Minute, "")
	path := t.TempDir() + "/performance.md"
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := MergeMarkdown(path, []Fig{{Name: "e2e_ratio_vs_naive", Unit: "ratio", Value: 0.6}}, Full, "default"); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := string(got)
	want := "| `e2e_ratio_vs_naive_fsync_always` | 0.50 | ratio |\n| `callbacks_per_s` | 7000.00 | callbacks/s |\n| `e2e_ratio_vs_naive` | 0.60 | ratio |\n\nThe `e2e_*`, `naive_*` and `p*_ms_at_500` figures are from `BENCH_PHASE=default make bench` on"
	if !strings.Contains(out, want) {
		t.Errorf("merged report lacks %q:\n%s", want, out)
	}
	if strings.Contains(out, "| 0.40 |") {
		t.Errorf("the old default row is still there:\n%s", out)
	}
}

// A full run makes the figures and "What is measured" anew and keeps the
// analysis of the report it replaces, every section written by hand,
// however often it runs; the notes on runs of one phase alone go.
func TestFullRunKeepsTheAnalysis(t *testing.T) {
	analysis := "## Where the time goes\n\n- **Server work.** Written by hand.\n\n## Durable writes per event\n\n| path | writes |\n|---|---:|\n| sync | 5 |\n"
	var b bytes.Buffer
	Markdown(&b, []Fig{{Name: "e2e_ratio_vs_naive", Unit: "ratio", Value: 0.4}}, Full, 64, time.Minute, analysis)
	prev := strings.Replace(b.String(), "\n## Figures\n", "\nThe `e2e_*` figures are from a run alone.\n\n## Figures\n", 1)
	for range 2 {
		var next bytes.Buffer
		Markdown(&next, []Fig{{Name: "e2e_ratio_vs_naive", Unit: "ratio", Value: 0.7}}, Full, 64, time.Minute, Analysis([]byte(prev)))
		prev = next.String()
	}
	if !strings.HasSuffix(prev, "\n\n"+analysis) || strings.Count(prev, "Written by hand") != 1 {
		t.Errorf("want the analysis kept once at the end, got:\n%s", prev)
	}
	if strings.Contains(prev, "from a run alone") || !strings.Contains(prev, "| `e2e_ratio_vs_naive` | 0.70 | ratio |") ||
		strings.Count(prev, "## What is measured") != 1 || strings.Count(prev, "- **Partitions** (") != 1 {
		t.Errorf("want this run's figures and entries only, got:\n%s", prev)
	}
	if got := Analysis([]byte(prev[:strings.Index(prev, "## Where the time goes")])); got != "" {
		t.Errorf("a report without analysis has %q", got)
	}
}

// The analysis of docs/performance.md as it stands is what a full run
// would keep: every section after the generated ones.
func TestFullRunKeepsThePerformanceDocsAnalysis(t *testing.T) {
	doc, err := os.ReadFile("../../../../docs/performance.md")
	if err != nil {
		t.Fatal(err)
	}
	got := Analysis(doc)
	for _, h := range []string{"## Where the time goes\n", "\n## Durable writes per event\n"} {
		if !strings.Contains(got, h) {
			t.Errorf("the analysis kept lacks %q", h)
		}
	}
	if !strings.HasPrefix(got, "## ") || !strings.HasSuffix(string(doc), got) || strings.Contains(got, "## What is measured") {
		t.Errorf("want the doc's sections after the generated ones, got %d bytes starting %.80q", len(got), got)
	}
}
