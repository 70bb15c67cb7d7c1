package tenaz_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/natstest"
)

// `tenaz run` applies the config's metrics section to what /metrics
// serves: with metrics.accounts.top 1 and acme allowed, acme keeps its own
// series, the first other account takes the one place and the third is
// counted as account="other"; tenaz_build_info names the binary's build.
// A process, so that its metrics.Default is its own.
func TestMetricsSectionApplied(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	f := filepath.Join(dir, "tenaz.yaml")
	yaml := testConfig(filepath.Join(dir, "data"), "http://127.0.0.1:1", "metrics: {accounts: {top: 1, allow: [acme]}}\n")
	if err := os.WriteFile(f, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	p := runTenaz(t, f)
	base := "http://" + p.addr
	scrape := func() string {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for i, account := range []string{"acme", "beta", "gamma"} {
		body := fmt.Sprintf(`{"account":%q,"kind":"order.create","payload":{"order_id":"m-%d"}}`, account, i)
		if code, _ := post(t, base, fmt.Sprintf("metrics-%d", i), body); code != http.StatusAccepted {
			t.Fatalf("submit for %s: want 202, got %d", account, code)
		}
		// One at a time, so that beta is seen before gamma.
		natstest.Eventually(t, 10*time.Second, func() bool {
			return strings.Count(scrape(), "tenaz_events_accepted_total{") == i+1
		}, "the accepted event of %s never showed on /metrics:\n%s", account, natstest.Lazy(func() any { return grep(scrape(), "tenaz_events_accepted_total") }))
	}
	out := scrape()
	for _, want := range []string{
		`tenaz_events_accepted_total{account="acme",kind="order.create"} 1`,
		`tenaz_events_accepted_total{account="beta",kind="order.create"} 1`,
		`tenaz_events_accepted_total{account="other",kind="order.create"} 1`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("/metrics: want %s, got:\n%s", want, grep(out, "tenaz_events_accepted_total"))
		}
	}
	if strings.Contains(out, `account="gamma"`) {
		t.Errorf("/metrics: gamma has series of its own with top 1:\n%s", grep(out, `account="gamma"`))
	}
	build := regexp.MustCompile(`tenaz_build_info\{go_version="go[0-9.]+[^"]*",revision="([0-9a-f]{40}(-dirty)?)",version="([^"]+)"\} 1`)
	if !build.MatchString(out) {
		t.Errorf("/metrics: want tenaz_build_info with the Go version, the git revision and a version, got:\n%s", grep(out, "tenaz_build_info"))
	}
}

// grep returns the lines of s that contain sub.
func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
