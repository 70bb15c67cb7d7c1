package tenaz_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/services/tenaz/internal/cli"
)

// events find against `tenaz run`: events of every state found by
// account, state, idempotency key and creation time, paged with --all,
// as a table and as JSON; a bad flag is a usage error (2).
func TestCLIEventsFind(t *testing.T) {
	t.Parallel()
	_, tz, base := running(t)
	op := newOperator(t, tz.NATSURL())

	var done []string
	for i := range 3 {
		_, v := post(t, base, fmt.Sprintf("f-%d", i), fmt.Sprintf(`{"account":"acme","kind":"order.create","payload":{"order_id":"f-%d"}}`, i))
		done = append(done, v.ID)
	}
	at := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	_, later := post(t, base, "f-later", `{"account":"acme","kind":"order.create","not_before":"`+at+`","payload":{"order_id":"f-later"}}`)
	_, other := post(t, base, "g-1", `{"account":"globex","kind":"order.create","payload":{"order_id":"g-1"}}`)
	for _, id := range append(slices.Clone(done), other.ID) {
		waitStatus(t, base, id, "done")
	}
	slices.Sort(done)

	find := func(args ...string) []string {
		var rep ops.FindReply
		op.must(cli.ExitOK, append([]string{"events", "find", "--json"}, args...)...).decode(t, &rep)
		var ids []string
		for _, it := range rep.Items {
			ids = append(ids, it.ID)
		}
		slices.Sort(ids)
		return ids
	}
	// Each partition's indexer settles on its own (acme's and globex's
	// are apart): wait for both.
	var got []string
	natstest.Eventually(t, 30*time.Second, func() bool {
		got = find("--account", "acme", "--state", "done", "--all", "--limit", "1")
		return slices.Equal(got, done)
	}, "events find --account acme --state done: want %v, got %v", done, &got)
	natstest.Eventually(t, 30*time.Second, func() bool {
		got = find("--account", "globex", "--state", "done")
		return slices.Equal(got, []string{other.ID})
	}, "events find --account globex --state done: want %v, got %v", other.ID, &got)
	if got := find("--account", "acme", "--state", "scheduled"); !slices.Equal(got, []string{later.ID}) {
		t.Fatalf("events find --state scheduled: want %s, got %v", later.ID, got)
	}
	if got := find("--account", "acme", "--idempotency-key", "f-later"); !slices.Equal(got, []string{later.ID}) {
		t.Fatalf("events find --idempotency-key f-later: want %s, got %v", later.ID, got)
	}
	if got := find("--account", "globex", "--since", "1h"); !slices.Equal(got, []string{other.ID}) {
		t.Fatalf("events find --account globex --since 1h: want %s, got %v", other.ID, got)
	}
	if got := find("--account", "globex", "--until", "1h"); len(got) != 0 {
		t.Fatalf("events find --until 1h (an hour ago): want nothing, got %v", got)
	}
	r := op.must(cli.ExitOK, "events", "find", "--state", "scheduled")
	for _, want := range []string{"ID", "STATE", later.ID, "scheduled", "1 shown"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("events find (table): want %q, got\n%s", want, r)
		}
	}
	op.must(cli.ExitUsage, "events", "find", "--state", "asleep")
	op.must(cli.ExitUsage, "events", "find", "--idempotency-key", "f-1")
	op.must(cli.ExitUsage, "events", "find", "--limit", "9999")
}
