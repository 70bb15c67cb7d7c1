package tenaz_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/services/tenaz/internal/cli"
)

// "What happened to order o-7" from the CLI against `tenaz run`: entity
// history lists both its events and their steps, the export writes every
// step as JSON Lines (to stdout, or to a file), and a missing or bad
// --since is a usage error.
func TestCLIEntityHistoryAndAuditExport(t *testing.T) {
	t.Parallel()
	_, tz, base := running(t)
	op := newOperator(t, tz.NATSURL())
	op.env["TENAZ_URL"] = base

	_, a := post(t, base, "o7-create", `{"account":"acme","kind":"order.create","payload":{"order_id":"o-7"}}`)
	_, b := post(t, base, "o7-amend", `{"account":"acme","kind":"order.create","payload":{"order_id":"o-7","amend":true}}`)
	_, other := post(t, base, "o8-create", `{"account":"acme","kind":"order.create","payload":{"order_id":"o-8"}}`)
	for _, id := range []string{a.ID, b.ID, other.ID} {
		waitStatus(t, base, id, "done")
	}
	var rep ops.TimelineReply
	natstest.Eventually(t, 30*time.Second, func() bool {
		r := op.run("entity", "history", "acme", "o-7", "--json")
		rep = ops.TimelineReply{}
		if r.code != cli.ExitOK || json.Unmarshal([]byte(r.stdout), &rep) != nil || len(rep.Events) != 2 {
			return false
		}
		done := 0
		for _, e := range rep.Items {
			if e.Action == "succeed" {
				done++
			}
		}
		return done == 2
	}, "entity history to list o-7's two events, done: %+v", rep)
	for _, ev := range rep.Events {
		if ev.ID != a.ID && ev.ID != b.ID || !ev.Live {
			t.Fatalf("entity history: want %s and %s, kept, got %+v", a.ID, b.ID, rep.Events)
		}
	}
	if r := op.must(cli.ExitOK, "entity", "history", "acme", "o-7"); !strings.Contains(r.stdout, a.ID) || !strings.Contains(r.stdout, "succeed") || strings.Contains(r.stdout, other.ID) {
		t.Fatalf("entity history: want a table of o-7's steps only, got\n%s", r)
	}
	op.must(cli.ExitNotFound, "entity", "history", "acme", "o-404")

	r := op.must(cli.ExitOK, "audit", "export", "--since", "1h", "--account", "acme")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	seen := map[string]int{}
	for _, l := range lines {
		var e ops.AuditEntry
		if err := json.Unmarshal([]byte(l), &e); err != nil || e.Account != "acme" {
			t.Fatalf("audit export: line %q: %v", l, err)
		}
		seen[e.EventID]++
	}
	if seen[a.ID] < 3 || seen[b.ID] < 3 || seen[other.ID] < 3 {
		t.Fatalf("audit export: want each event's accept, claim and succeed, got %v in\n%s", seen, r.stdout)
	}
	file := filepath.Join(t.TempDir(), "audit.jsonl")
	r = op.must(cli.ExitOK, "audit", "export", "--event", b.ID, "-o", file)
	data, err := os.ReadFile(file)
	if err != nil || strings.Count(string(data), b.ID) < 3 || strings.Contains(string(data), a.ID) || !strings.Contains(r.stderr, "entries written to") {
		t.Fatalf("audit export --event -o: want %s's entries in the file, got %v %q / %s", b.ID, err, data, r.stderr)
	}
	op.must(cli.ExitUsage, "audit", "export")
	op.must(cli.ExitUsage, "audit", "export", "--since", "last tuesday")
}
