package tenaz_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/services/ingest"
	"github.com/tenaz/tenaz/services/tenaz/internal/cli"
)

// events submit and events wait, on pkg/client's Submit and Wait: an
// event submitted and followed to done, the key reused with another
// payload (4, with the server's code), a rejected one waited for until
// dead, a wait that runs out (5), and bad input (2).
func TestCLISubmitAndWait(t *testing.T) {
	t.Parallel()
	p, targetURL := idempotentTarget(t)
	tz := start(t, testConfig(t.TempDir(), targetURL, ""))
	op := newOperator(t, tz.NATSURL())

	var v ingest.View
	op.must(cli.ExitOK, "events", "submit", "--account", "acme", "--kind", "order.create", "--payload", `{"order_id":"s-1"}`,
		"--key", "s-1", "--wait", "--json").decode(t, &v)
	if v.Status != state.Done || v.Attempts != 1 || v.IdempotencyKey != "s-1" || p.Effects(v.ID) != 1 {
		t.Fatalf("events submit --wait: want s-1 done after 1 attempt, got %+v", v)
	}
	r := op.must(cli.ExitConflict, "events", "submit", "--account", "acme", "--kind", "order.create", "--payload", `{"order_id":"s-1","total":5}`, "--key", "s-1")
	if !strings.Contains(r.stderr, "idempotency_key_reused") {
		t.Fatalf("a reused key: want the server's code on stderr, got\n%s", r)
	}

	file := filepath.Join(t.TempDir(), "order.json")
	if err := os.WriteFile(file, []byte(`{"order_id":"s-2","reject":true}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var sub ingest.View
	op.must(cli.ExitOK, "events", "submit", "--account", "acme", "--kind", "order.create", "--payload", "@"+file, "--json").decode(t, &sub)
	op.must(cli.ExitOK, "events", "wait", sub.ID, "--json").decode(t, &v)
	if v.ID != sub.ID || v.Status != state.Dead || v.LastError == nil || v.LastError.HTTPStatus != 422 {
		t.Fatalf("events wait on a rejected event: want it dead with the 422, got %+v", v)
	}
	r = op.must(cli.ExitOK, "events", "wait", sub.ID)
	if !strings.Contains(r.stdout, "STATUS") || !strings.Contains(r.stdout, "dead") {
		t.Fatalf("events wait: want the event's table, got\n%s", r)
	}

	due := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	op.must(cli.ExitOK, "events", "submit", "--account", "acme", "--kind", "order.create", "--payload", `{"order_id":"s-3"}`, "--not-before", due, "--json").decode(t, &sub)
	if sub.Status != state.Scheduled {
		t.Fatalf("events submit --not-before: want scheduled, got %+v", sub)
	}
	r = op.must(cli.ExitUnavailable, "events", "wait", sub.ID, "--within", "1s")
	if !strings.Contains(r.stderr, "scheduled") {
		t.Fatalf("a wait that runs out: want the last status seen, got\n%s", r)
	}

	op.must(cli.ExitUsage, "events", "submit", "--account", "acme", "--kind", "order.create", "--payload", `{not json`)
	op.must(cli.ExitUsage, "events", "submit", "--account", "acme", "--kind", "no.such", "--payload", `{}`)
	op.must(cli.ExitUsage, "events", "submit", "--account", "acme", "--kind", "order.create", "--payload", `{}`, "--not-before", "tomorrow")
	op.must(cli.ExitUsage, "events", "wait", "not-an-id")
}
