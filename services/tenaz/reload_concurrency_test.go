package tenaz_test

import (
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/provider"
)

// A reload that changes an account's concurrency applies to the account
// while it runs, with no restart: its reader is started again with the
// new slots, and its consumer with the matching max_ack_pending. acme at
// concurrency 1 against a target that takes 300 ms a call gets its calls
// one at a time; at 4, four at once.
func TestReloadGivesARunningAccountItsConcurrency(t *testing.T) {
	t.Parallel()
	p := provider.New(provider.Faults{Latency: 300 * time.Millisecond}, provider.WithIdempotent())
	target := httptest.NewServer(p)
	t.Cleanup(target.Close)
	t.Cleanup(func() { _ = p.Close() })
	dir := t.TempDir()
	file := filepath.Join(dir, "tenaz.yaml")
	y := testConfig(filepath.Join(dir, "data"), target.URL, "")
	one := strings.Replace(y, `  "*": {concurrency: 8, breaker: {failures: 100}}`+"\n",
		`  "*": {concurrency: 8, breaker: {failures: 100}}`+"\n  acme: {concurrency: 1}\n", 1)
	if one == y {
		t.Fatal("the test config has no accounts line to extend")
	}
	base, hup := startReloadable(t, file, one)

	submitN(t, base, "one", 3)
	natstest.Eventually(t, 20*time.Second, func() bool { return p.CallCount() >= 3 }, "the first 3 calls")
	if gap := minGap(p.Calls()); gap < 250*time.Millisecond {
		t.Fatalf("at concurrency 1 against 300 ms calls, want calls at least 300 ms apart (250 with slack), got %v", gap)
	}

	reloadFile(t, base, file, strings.Replace(one, "acme: {concurrency: 1}", "acme: {concurrency: 4}", 1), hup)
	at := time.Now()
	submitN(t, base, "four", 8)
	natstest.Eventually(t, 20*time.Second, func() bool { return len(callsAfter(p.Calls(), at)) >= 8 }, "the 8 calls after the reload")
	calls := callsAfter(p.Calls(), at)
	together := 0
	for _, c := range calls {
		if c.At.Sub(calls[0].At) < 150*time.Millisecond {
			together++
		}
	}
	if together != 4 {
		t.Fatalf("at concurrency 4 against 300 ms calls, want the first 4 calls within 150 ms of each other and no more, got %d", together)
	}
}
