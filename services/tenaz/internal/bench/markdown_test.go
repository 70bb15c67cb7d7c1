package bench

import (
	"bytes"
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
	Markdown(&b, figs, Full, 64, 11*time.Minute)
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
