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
// concurrency 1 against a target that takes a second a call holds one
// call in flight at a time; at 4, four at once and never more. (A second
// a call leaves room for the test's one-by-one submissions to arrive
// while the first calls run, however loaded the machine.)
func TestReloadGivesARunningAccountItsConcurrency(t *testing.T) {
	t.Parallel()
	p := provider.New(provider.Faults{Latency: time.Second}, provider.WithIdempotent())
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
	if n := provider.MostInFlight(p.Calls()); n != 1 {
		t.Fatalf("at concurrency 1, want one call in flight at a time, got %d at once", n)
	}

	reloadFile(t, base, file, strings.Replace(one, "acme: {concurrency: 1}", "acme: {concurrency: 4}", 1), hup)
	at := time.Now()
	submitN(t, base, "four", 8)
	natstest.Eventually(t, 20*time.Second, func() bool { return len(callsAfter(p.Calls(), at)) >= 8 }, "the 8 calls after the reload")
	if n := provider.MostInFlight(callsAfter(p.Calls(), at)); n != 4 {
		t.Fatalf("at concurrency 4, want four calls in flight at once and never more, got %d", n)
	}
}
